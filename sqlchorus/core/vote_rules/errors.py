"""``errors``: a candidate that fails votes for no answer.

Without it, the failed candidates count as one answer of their own, which can win.
"""

from __future__ import annotations

NAME = "errors"
WHY = "a query that fails answers nothing, however many fail"


def apply(ballot) -> None:
    ballot.applied.append(NAME)
    ran = set(ballot.ran)
    failed = len(ballot.voters) - len([k for k in ballot.voters if k in ran])
    ballot.voters = [k for k in ballot.voters if k in ran]
    if failed:
        ballot.notes.append(f"{failed} failed candidate(s) vote for no answer (errors)")
