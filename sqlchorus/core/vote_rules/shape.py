"""``shape``: only results with the column count most votes give can win.

Counted (weighed) over every candidate that ran, set aside or not (every failed one too when
``errors`` is off), so a shape most systems agree on keeps a differently shaped result from
winning by a split vote among the others.
"""

from __future__ import annotations

from typing import Any

NAME = "shape"
WHY = "what most systems think the answer's columns are is more often right than any one result"


def apply(ballot) -> None:
    counts: dict[Any, float] = {}
    counted = ballot.ran if "errors" in ballot.applied else range(len(ballot.candidates))
    for k in counted:
        columns = ballot.candidates[k].get("columns")
        counts[columns] = counts.get(columns, 0.0) + ballot.weights[k]
    if not counts:
        return
    top = max(counts.values())
    modal = {n for n, v in counts.items() if v == top}
    kept = [k for k in ballot.voters if ballot.candidates[k].get("columns") in modal]
    if kept and len(kept) < len(ballot.voters):
        ballot.voters = kept
        ballot.notes.append(f"only results with {' or '.join(str(n) for n in sorted(modal, key=str))} column(s), "
                            "the count most votes give, could win (shape)")
