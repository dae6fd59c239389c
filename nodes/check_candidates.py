"""check_candidates: run every unchecked candidate through the guarded executor.

Each candidate ends ``ok`` (rows), ``empty`` (no rows) or ``error`` (with the guard's typed error),
and gets a fingerprint of its result so that selection can cluster equal answers.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from sqlchorus.graph.candidates import updated
from sqlchorus.graph.context import Context
from sqlchorus.graph.state import SqlchorusState
from sqlchorus.tools.database import SqlError
from sqlchorus.tools.results import fingerprint

NODE = "check_candidates"


def check_candidates(state: SqlchorusState, runtime: Runtime[Context]) -> dict:
    db = runtime.context.db
    changed = []
    for candidate in state.get("candidates") or []:
        if candidate["status"] != "unchecked":
            continue
        try:
            result = db.execute(candidate["sql"])
        except SqlError as e:
            changed.append(
                updated(candidate, status="error", error=e.message, error_kind=e.kind, fingerprint=None, row_count=None)
            )
            continue
        changed.append(
            updated(
                candidate,
                status="ok" if result.rows else "empty",
                error=None,
                error_kind=None,
                fingerprint=fingerprint(result.rows),
                row_count=result.row_count,
            )
        )
    return {"candidates": changed}
