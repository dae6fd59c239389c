"""``agreed_degenerate``: one result of one row of zeros or NULLs that holds at least
:data:`SHARE` of the votes is an answer.

``degenerate`` sets such results aside (a count of 0, a NULL sum) because they are empty results
in disguise, which agree for the same many wrong reasons. When nearly all of the systems count
nothing, the 0 is their answer rather than a scattering of filters that matched nothing, and it
stands as any other result: "How many pets are owned by students older than 20?" is 0 in
Spider's pets_1, and eight systems of nine said so.
"""

from __future__ import annotations

NAME = "agreed_degenerate"
WHY = "when nearly all systems count nothing, nothing is their answer"
SHARE = 0.8
"""The weighted share of the votes of the candidates that ran that such results must hold.
Chosen on the selection benchmark's development pools of nine systems as ``agreed_empty``'s
was: the highest mean, among 0.7, 0.75, 0.8, 0.85, 0.9 and no such rule, of the shares never
below majority on any of those pools (every share but 0.8 and 0.85 leaves one below it, as the
vote without the rule does); then reported on pools drawn after it was fixed. Higher than
``agreed_empty``'s: a wrong filter under an aggregate makes the same 0 in many systems at once
(seven of nine agreed on a NULL sum that was wrong)."""


def apply(ballot) -> None:
    cast = sum(ballot.weights[k] for k in ballot.ran)
    # The votes of one answer: a 0 and a NULL (or a 0 in another shape) are different answers,
    # and zeros that disagree are the scattering of wrong filters ``degenerate`` is for.
    answers: dict[object, float] = {}
    for k in ballot.voters:
        candidate = ballot.candidates[k]
        if candidate.get("degenerate"):
            answer = candidate.get(ballot.key)
            answers[answer] = answers.get(answer, 0.0) + ballot.weights[k]
    held = max(answers.values(), default=0.0)
    if held and cast and held / cast >= SHARE:
        ballot.degenerate_stands = True
        ballot.notes.append(f"results of one row of zeros or NULLs hold {round(held / cast, 3)} of "
                            f"the votes, at least {SHARE}: they are an answer like any other "
                            "(agreed_degenerate)")
