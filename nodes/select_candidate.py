"""select_candidate: cluster candidates by execution result and take the largest cluster.

Candidates that ran and returned rows are grouped by result fingerprint; the largest group wins,
and ties go to the group holding the earliest candidate in generator order, so the choice is
deterministic. With no candidate that returned rows, an empty result is the answer; with no
candidate that ran at all, the answer is an error that says what went wrong.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from sqlchorus.graph.context import Context
from sqlchorus.graph.state import Answer, Candidate, SqlchorusState
from sqlchorus.tools.database import SqlError

NODE = "select_candidate"


def cluster(candidates: list[Candidate]) -> list[list[Candidate]]:
    """Candidates grouped by fingerprint, largest group first, ties by earliest member."""
    groups: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        groups.setdefault(candidate["fingerprint"] or candidate["id"], []).append(candidate)
    order = {c["id"]: i for i, c in enumerate(candidates)}
    return sorted(groups.values(), key=lambda g: (-len(g), min(order[c["id"]] for c in g)))


def select_candidate(state: SqlchorusState, runtime: Runtime[Context]) -> dict:
    context = runtime.context
    candidates = list(state.get("candidates") or [])
    pool = [c for c in candidates if c["status"] == "ok"] or [c for c in candidates if c["status"] == "empty"]
    if not pool:
        if candidates:
            reasons = "; ".join(f"{c['id']}: {c['error'] or c['status']}" for c in candidates)
            message = f"No candidate query ran successfully ({reasons})."
        else:
            message = "No candidate query was produced (every generator failed)."
        return {
            "selection": {"clusters": [], "chosen": None, "confidence": 0.0, "method": "consistency", "reason": message},
            "answer": Answer(sql=None, columns=[], rows=[], truncated=False, candidate_id=None, generator=None, error=message),
        }
    groups = cluster(pool)
    winner = groups[0][0]
    clusters = [
        {"fingerprint": g[0]["fingerprint"], "members": [c["id"] for c in g], "size": len(g)} for g in groups
    ]
    confidence = len(groups[0]) / len(pool)
    reason = (
        f"largest of {len(groups)} result cluster(s): {len(groups[0])} of {len(pool)} candidates agree"
        if len(groups) > 1 or len(pool) > 1
        else "the only candidate that ran"
    )
    answer = Answer(
        sql=winner["sql"], candidate_id=winner["id"], generator=winner["generator"], error=None,
        columns=[], rows=[], truncated=False,
    )
    try:
        result = context.db.execute(winner["sql"], max_rows=context.settings.answer_rows)
        answer.update(columns=result.columns, rows=[list(r) for r in result.rows], truncated=result.truncated)
    except SqlError as e:
        answer.update(error=f"The chosen query failed when run again: {e.message}")
    return {
        "selection": {"clusters": clusters, "chosen": winner["id"], "confidence": round(confidence, 4), "method": "consistency", "reason": reason},
        "answer": answer,
    }
