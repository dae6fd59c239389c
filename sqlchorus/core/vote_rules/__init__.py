"""The vote without a selection model, as rules composed as data.

Each rule is one module of this package with a ``NAME``, a ``WHY`` (what it reads and why that
is evidence) and ``apply(ballot)``, which narrows or reweighs a :class:`Ballot` and says what it
did in ``ballot.notes``. :data:`RULES` lists them in the order they apply; a vote runs the ones
named in its ``rules`` (the rest are skipped, so each can be measured by leaving it out) and
then :func:`tally` counts. This is sqlglot's optimizer's shape: rules as a tuple of modules, one
rule per module, the composition itself data.

Everything a rule reads is what a run has: each candidate's status, its result (through
:func:`evidence.describe`), the question's words, the schema's keys, and its system's record of
agreement with the other systems. No gold answer is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlchorus.core.vote_rules import (
    agreed_degenerate,
    agreed_empty,
    column_order,
    degenerate,
    empty,
    errors,
    evidence,
    key_only,
    shape,
    weights,
)

RULES = (weights, errors, agreed_empty, empty, agreed_degenerate, degenerate, key_only, shape, column_order)
"""Every rule, in the order it applies: weights first (every later count reads them), then the
rules that set candidates aside (``agreed_empty`` and ``agreed_degenerate`` before the ``empty``
and ``degenerate`` they overrule), then the one that limits which can win, then how answers are
told apart."""
NAMES = tuple(rule.NAME for rule in RULES)
BASE = frozenset({"errors", "empty", "shape", "weights"})
"""The rules the vote had first; the selection benchmark scores them as ``old_rules`` beside
all of :data:`NAMES`."""


@dataclass
class Ballot:
    """One question's vote while the rules work on it.

    ``candidates`` are checked candidates (:func:`sqlchorus.runs.standalone_selection.check`'s
    records); ``weights`` one per candidate; ``voters`` the positions whose votes count, in
    candidate order; ``key`` the field that tells two answers apart; ``system_weights`` the
    run's per-system weights, None without a record; ``empty_stands`` whether empty results
    vote as any other (``agreed_empty``), ``degenerate_stands`` whether results of one row of
    zeros or NULLs do (``agreed_degenerate``); ``applied`` the rules that changed how votes are
    counted (the reason says "weighted votes" only when ``weights`` did).
    """

    candidates: Sequence[Mapping[str, Any]]
    question: str = ""
    key_columns: frozenset[str] = frozenset()
    system_weights: Sequence[float] | None = None
    weights: list[float] = field(default_factory=list)
    voters: list[int] = field(default_factory=list)
    key: str = "fingerprint"
    empty_stands: bool = False
    degenerate_stands: bool = False
    notes: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.weights:
            self.weights = [1.0] * len(self.candidates)
        if not self.voters:
            self.voters = list(range(len(self.candidates)))

    @property
    def ran(self) -> list[int]:
        """The positions of the candidates that ran (whatever they returned)."""
        return [k for k, c in enumerate(self.candidates) if c.get("status") != "error"]

    def set_aside(self, rule: str, unwanted: Iterable[int], what: str) -> None:
        """Stop ``unwanted`` voting, unless no voter would be left (then the vote is theirs)."""
        unwanted = set(unwanted)
        kept = [k for k in self.voters if k not in unwanted]
        dropped = len(self.voters) - len(kept)
        if kept and dropped:
            self.voters = kept
            self.notes.append(f"{dropped} {what} set aside ({rule})")


def decide(
    checked: Sequence[Mapping[str, Any]],
    system_weights: Sequence[float] | None = None,
    rules: Iterable[str] = NAMES,
    *,
    question: str = "",
    key_columns: Iterable[str] = (),
) -> dict[str, Any] | None:
    """The vote over ``checked`` with the named rules in force (a subset of :data:`NAMES`).

    Returns:
        ``{"chosen", "members", "score", "total", "columns", "reason", "rules"}``: the index of
        the chosen candidate, the indices sharing its answer, its weighted votes, all votes
        cast, and ``rules``, what each rule in force did (``{"rule", "why", "effect"}``);
        None when no candidate can be chosen.
    """
    names = frozenset(rules)
    unknown = names - set(NAMES)
    if unknown:
        raise ValueError(f"unknown vote rule(s) {', '.join(sorted(unknown))}; known: {', '.join(NAMES)}")
    if system_weights is not None and len(system_weights) != len(checked):
        raise ValueError("one weight per candidate")
    ballot = Ballot(checked, question=question, key_columns=frozenset(k.lower() for k in key_columns),
                    system_weights=system_weights)
    done = []
    for rule in RULES:
        if rule.NAME in names:
            before = len(ballot.notes)
            rule.apply(ballot)
            done.append({"rule": rule.NAME, "why": rule.WHY,
                         "effect": "; ".join(ballot.notes[before:]) or "no change"})
    outcome = tally(ballot)
    if outcome is not None:
        outcome["rules"] = done
    return outcome


def tally(ballot: Ballot) -> dict[str, Any] | None:
    """Count the ballot: the answer with the most weighted votes, ties going to the answer with
    more candidates, then to the earliest candidate."""
    if not ballot.voters:
        return None
    score: dict[Any, float] = {}
    members: dict[Any, list[int]] = {}
    for k in ballot.voters:
        c = ballot.candidates[k]
        answer = c.get(ballot.key) if c.get("status") != "error" else "error"
        score[answer] = score.get(answer, 0.0) + ballot.weights[k]
        members.setdefault(answer, []).append(k)
    best = max(score, key=lambda a: (round(score[a], 9), len(members[a]), -members[a][0]))
    total = sum(ballot.weights[k] for k in ballot.voters)
    chosen = members[best][0]
    weighed = "weighted votes" if "weights" in ballot.applied else "votes"
    reason = (f"c{chosen}'s result has {round(score[best], 3)} of {round(total, 3)} {weighed}"
              f" ({len(members[best])} candidate(s))")
    if ballot.notes:
        reason += "; " + "; ".join(ballot.notes)
    return {"chosen": chosen, "members": members[best], "score": round(score[best], 4), "total": round(total, 4),
            "columns": ballot.candidates[chosen].get("columns"), "reason": reason}


__all__ = ["BASE", "NAMES", "RULES", "Ballot", "decide", "evidence", "tally"]
