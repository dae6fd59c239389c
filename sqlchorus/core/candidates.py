"""Making and updating candidates, shared by every generator and by the checker and fixer."""

from __future__ import annotations

from typing import Any

from sqlchorus.core.state import Candidate
from sqlchorus.tools.steps.verify import same_query

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


def fix_record(candidate: Candidate) -> dict[str, Any]:
    """What the fixer did to a candidate (``meta["fix"]``): ``rounds`` it spent on it, answers
    with ``no_sql`` in them, and why it ``stopped`` before its rounds ran out (None while it may
    go on). ``fix_attempts`` counts only the rounds that produced a new query."""
    fix = (candidate.get("meta") or {}).get("fix") or {}
    return {
        "rounds": int(fix.get("rounds", candidate["fix_attempts"])),
        "no_sql": int(fix.get("no_sql", 0)),
        "stopped": fix.get("stopped"),
    }


def can_fix(candidate: Candidate, beta: int) -> bool:
    """Whether the fixer takes ``candidate`` in its next round: broken, with rounds left of
    ``beta``, and not stopped (an answer that repeated an earlier query stops it)."""
    record = fix_record(candidate)
    return is_broken(candidate) and record["rounds"] < beta and not record["stopped"]


def tried(candidate: Candidate, sql: str | None, dialect: str = "sqlite") -> bool:
    """Whether ``sql`` is the candidate's query or one of its earlier ones (up to spacing, case
    of keywords and a semicolon, as sqlglot's ``dialect`` reads them)."""
    return any(same_query(sql, q, dialect) for q in [candidate["sql"], *(h.get("sql") for h in candidate["history"])])
