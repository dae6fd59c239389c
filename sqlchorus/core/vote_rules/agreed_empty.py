"""``agreed_empty``: empty results that hold at least :data:`SHARE` of the votes are an answer.

``empty`` sets empty results aside because a few of them agree for many different wrong
reasons. When most of the systems find no rows, the emptiness is their answer rather than a
scattering of wrong filters, and it stands as any other result (Spider's flight_2, whose airport
codes carry a leading space, has 48 questions whose right answer is empty).
"""

from __future__ import annotations

NAME = "agreed_empty"
WHY = "when most systems find no rows, no rows is their answer"
SHARE = 0.75
"""The weighted share of the votes of the candidates that ran that empty results must hold.
Chosen on the selection benchmark's development pools of nine systems, as the highest mean of
0.5, 0.6, 0.67, 0.75 and no such rule (0.6 is never below majority there, but costs 0.4 points
on pools of three), and then reported on pools drawn after it was fixed. With three candidates
it takes all three, so small pools keep ``empty`` as it is."""


def apply(ballot) -> None:
    cast = sum(ballot.weights[k] for k in ballot.ran)
    held = sum(ballot.weights[k] for k in ballot.voters if ballot.candidates[k].get("status") == "empty")
    if held and cast and held / cast >= SHARE:
        ballot.empty_stands = True
        ballot.notes.append(f"empty results hold {round(held / cast, 3)} of the votes, at least {SHARE}: "
                            "they are an answer like any other (agreed_empty)")
