"""Making and updating candidates, shared by every generator and by the checker and fixer."""

from __future__ import annotations

from typing import Any

from sqlchorus.core.state import Candidate

NO_SQL = "The model's answer contained no SQL query."


def new_candidate(generator: str, sample: int, sql: str | None, *, reasoning: str = "") -> Candidate:
    """A fresh candidate; one whose answer had no SQL starts in error so the fixer sees it."""
    return Candidate(
        id=f"{generator}-{sample}",
        generator=generator,
        sql=sql or "",
        reasoning=reasoning,
        status="unchecked" if sql else "error",
        error=None if sql else NO_SQL,
        error_kind=None if sql else "no_sql",
        fingerprint=None,
        row_count=None,
        fix_attempts=0,
        history=[],
    )


def updated(candidate: Candidate, **changes: Any) -> Candidate:
    new = dict(candidate)
    new.update(changes)
    return Candidate(**new)  # type: ignore[typeddict-item]


UNFIXABLE_KINDS = frozenset({"database_open"})
"""Error kinds no rewrite of the query can mend (a damaged database file): such a candidate
is not sent to the fixer."""


def is_broken(candidate: Candidate) -> bool:
    """CHASE-SQL fixes a candidate that failed to run or returned nothing, unless what failed
    was the database itself."""
    return candidate["status"] in ("error", "empty") and candidate.get("error_kind") not in UNFIXABLE_KINDS
