"""check_candidates: run every unchecked candidate through the guarded executor.

Each candidate ends ``ok`` (rows), ``empty`` (no rows) or ``error`` (with the guard's typed error),
and gets a fingerprint of its result so that selection can cluster equal answers.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from sqlchorus.core.candidates import updated
from sqlchorus.core.context import Context
from sqlchorus.core.state import SqlchorusState
from sqlchorus.core.updates import CheckUpdate
from sqlchorus.tools.candidates.results import check_sql

NODE = "check_candidates"


def check_candidates(state: SqlchorusState, runtime: Runtime[Context]) -> CheckUpdate:
    db = runtime.context.db
    changed = [
        updated(candidate, **check_sql(db, candidate["sql"]))
        for candidate in state.get("candidates") or []
        if candidate["status"] == "unchecked"
    ]
    return {"candidates": changed}
