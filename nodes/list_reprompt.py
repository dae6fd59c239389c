"""list_reprompt: the model repairs the current step, told exactly where its query failed.

As in the paper's reprompt, the prompt carries the schema, the question, the plan and the
verified query so far, the query that failed, the sub-queries of it that ran ("SQLs that run
well"), the one that did not and its error. Before them come the earlier failed attempts at the
same step with what happened to each, so every reprompt of a step sends a longer prompt than the
last; and every reprompt samples as a retry (LIST's temperature 0.8 and top-p 0.95 by default,
:func:`~sqlchorus.core.list_search.sampling`). An empty result or a join without a condition is
a warning: the model may keep its query by answering with it again (see
:mod:`sqlchorus.nodes.list_verify_step`).
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from sqlchorus import prompts
from sqlchorus.core.context import Context
from sqlchorus.core.generation import model_error_update
from sqlchorus.core.list_search import ListState, earlier_text, sampling, shared_values, step_values
from sqlchorus.core.llm import ModelCallError, call_model
from sqlchorus.core.updates import RepromptUpdate
from sqlchorus.tools.models.parsing import extract_sql

NODE = "list_reprompt"
MAX_RUNNABLE = 6  # the last sub-queries that ran; earlier ones add length, not information

_CROSS_NOTE = (
    "Add the join condition; if pairing every row is intended because a later step relates the "
    "tables in WHERE, answer with the same query again and it will be accepted."
)
_EMPTY_NOTE = (
    "If no rows is the right answer to this step, answer with the same query again and it will "
    "be accepted."
)


def error_text(check: dict[str, Any]) -> str:
    """The verifier's complaint, as the model reads it."""
    if check.get("kind") == "empty":
        return f"{check.get('error') or 'the query returned no rows'}. {_EMPTY_NOTE}"
    if check.get("kind") == "cross_join":
        return f"{check.get('error')}. {_CROSS_NOTE}"
    kind = check.get("kind") or "error"
    return f"{kind}: {check.get('error') or 'the query failed'}"


def list_reprompt(state: ListState, runtime: Runtime[Context]) -> RepromptUpdate:
    context = runtime.context
    check = state.get("check") or {}
    runnable = (check.get("runnable") or [])[-MAX_RUNNABLE:]
    prompt = prompts.render(
        NODE,
        sql=check.get("sql") or "-- (no SQL in the answer)",
        runnable="\n".join(f"{q};" for q in runnable) or "-- (none)",
        failing=check.get("failing") or check.get("sql") or "-- (no SQL in the answer)",
        error=error_text(check),
        earlier=earlier_text(list(state.get("failures") or [])[:-1]),
        **shared_values(state),
        **step_values(state),
    )
    update: RepromptUpdate = {
        "global_attempts": (state.get("global_attempts") or 0) + 1,
        "local_attempts": (state.get("local_attempts") or 0) + 1,
    }
    try:
        text, usage = call_model(context, role="generation", node=NODE, prompt=prompt, **sampling(context, state, retry=True))
    except ModelCallError as e:
        return {**update, "halt": f"generation failed: {e}", **model_error_update(NODE, e)}
    update["attempt"] = {"step": state.get("step", 0), "kind": "reprompt", "sql": extract_sql(text)}
    update["usage"] = [usage]
    return update
