"""select_candidate: choose the answer among the checked candidates, then run it for the result.

Clusters by execution result, confidence-aware voting and CHASE-SQL's pairwise agent are in
:mod:`sqlchorus.core.selection`, shared with standalone selection; this node runs them on the
graph's candidates and turns the winner into the answer (its rows, capped at
``Settings.answer_rows``). With no candidate that ran, the answer says why.

The winner runs once more here: ``check_candidates`` kept only a fingerprint and a row count of
each candidate's result (a run's state, checkpointed at every step, holds no rows), and the answer
needs its columns and rows. In the trace that statement is inside an ``answer.fetch_rows`` span,
which says so, not a second check of the same query.
"""

from __future__ import annotations

from langgraph.runtime import Runtime
from opentelemetry.trace import Status, StatusCode

from sqlchorus.core.context import Context
from sqlchorus.core.selection import choose
from sqlchorus.core.state import Answer, SqlchorusState
from sqlchorus.core.updates import SelectUpdate
from sqlchorus.tools.tracing import attributes as attrs
from sqlchorus.tools.engines.sqlite import SqlError

NODE = "select_candidate"


def select_candidate(state: SqlchorusState, runtime: Runtime[Context]) -> SelectUpdate:
    context = runtime.context
    candidates = list(state.get("candidates") or [])
    outcome = choose(context, question=state["question"], evidence=state.get("evidence") or "", candidates=candidates)
    selection = outcome["selection"]
    update: SelectUpdate = {"selection": selection, "usage": outcome["usage"], "errors": outcome["errors"]}
    if selection["chosen"] is None:
        if candidates:
            reasons = "; ".join(f"{c['id']}: {c['error'] or c['status']}" for c in candidates)
            message = f"No candidate query ran successfully ({reasons})."
        else:
            message = "No candidate query was produced (every generator failed)."
        selection["reason"] = message
        update["answer"] = Answer(sql=None, columns=[], rows=[], truncated=False, candidate_id=None, generator=None, error=message)
        return update
    winner = next(c for c in candidates if c["id"] == selection["chosen"])
    answer = Answer(
        sql=winner["sql"], candidate_id=winner["id"], generator=winner["generator"], error=None,
        columns=[], rows=[], truncated=False,
    )
    with context.tracer.start_as_current_span(attrs.ANSWER_ROWS_SPAN, attributes={
            attrs.OPENINFERENCE_KIND: attrs.KIND_CHAIN, attrs.SQLCHORUS_CANDIDATE_ID: winner["id"]}) as span:
        try:
            result = context.db.execute(winner["sql"], max_rows=context.settings.answer_rows)
            answer.update({"columns": result.columns, "rows": [list(r) for r in result.rows], "truncated": result.truncated})
            span.set_status(Status(StatusCode.OK))
        except SqlError as e:
            answer["error"] = f"The chosen query failed when run again: {e.message}"
            span.set_status(Status(StatusCode.ERROR, e.message[:300]))
    update["answer"] = answer
    return update
