"""list_write_step: the model writes the query of the current step.

Each step's query is the previous verified query extended by the step's one operation (LIST's
``Y_i = R_i(I, S_i, Y_{1:i-1})``), so the query of the last step answers the question. The prompt
shows the plan, the verified query so far and, after a traceback, every version of this step
that led to a dead end and why, and the step's earlier failed attempts on the same verified
query (when the rewrite of the step before repeated the version they were built on, those of the
step after it). Every write counts against ``Settings.list_max_global_attempts``; after the first
traceback, writes sample as retries (:func:`~sqlchorus.core.list_search.sampling`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.runtime import Runtime

from sqlchorus import prompts
from sqlchorus.core.context import Context
from sqlchorus.core.generation import model_error_update
from sqlchorus.core.list_search import ListState, earlier_text, sampling, shared_values, step_values
from sqlchorus.core.llm import ModelCallError, call_model
from sqlchorus.core.taught import with_taught
from sqlchorus.core.updates import WriteStepUpdate
from sqlchorus.tools.examples.fewshot import examples
from sqlchorus.tools.models.parsing import extract_sql
from sqlchorus.tools.steps.verify import same_query

NODE = "list_write_step"


def examples_text(settings: Any = None, dialect: str = "sqlite") -> str:
    """The first two back-translated examples, each step with the query that writes it (in the
    database's ``dialect``)."""
    blocks = []
    for ex in examples("list_plan", settings, dialect)[:2]:
        lines = [f"Question: {ex['question']}"]
        for n, s in enumerate(ex["steps"], 1):
            lines.append(f"Step {n}: {s['instruction']}\n```sql\n{s['sql']}\n```")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _feedback(state: Mapping[str, Any], failures: list[dict[str, Any]]) -> str:
    """Why this write is a retry: the versions of this step that led to dead ends, and the failed
    attempts at this step on the same verified query (empty on a first attempt)."""
    step = state.get("step", 0)
    dead_ends = [d for d in state.get("dead_ends") or [] if d.get("step") == step]
    text = ""
    if dead_ends:
        head = (
            "## An earlier version of this step was verified, but the next step could not be built on it\n"
            if len(dead_ends) == 1 else
            f"## {len(dead_ends)} earlier versions of this step were verified, but the next step could not be "
            "built on any of them (oldest first)\n"
        )
        text = head + "".join(
            f"```sql\n{d['sql']}\n```\nThe next step failed with: {d['error']}\n" for d in dead_ends
        ) + (
            "If this step caused the failure, write it differently; if it was right, you may write it again "
            "and the next step will be tried again.\n"
        )
    return text + earlier_text(failures, "Earlier attempts at this step, on the same verified query, that failed")


def carried_failures(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The failed attempts this write follows: those at the same step on the same verified query,
    when a traceback's rewrite of the step before repeated the version that led to them; else
    the step's own (a rewrite after a traceback), or none."""
    step = state.get("step", 0)
    dead_ends = state.get("dead_ends") or []
    own = list(state.get("failures") or [])
    if any(d["step"] == step for d in dead_ends):  # a rewrite: traceback left the step's own
        return own
    verified = state.get("verified") or []
    base = verified[-1]["sql"] if step and verified else None
    same_base = next((d for d in reversed(dead_ends) if d["step"] == step - 1 and same_query(d["sql"], base)), None)
    return list(same_base["failures"]) if same_base else own


def list_write_step(state: ListState, runtime: Runtime[Context]) -> WriteStepUpdate:
    context = runtime.context
    failures = carried_failures(state)
    prompt = prompts.render(
        NODE,
        examples=with_taught(context, state, examples_text(context.settings, context.db.dialect)),
        feedback=_feedback(state, failures),
        **shared_values(state),
        **step_values(state),
    )
    step = state.get("step", 0)
    update: WriteStepUpdate = {
        "global_attempts": (state.get("global_attempts") or 0) + 1, "local_attempts": 0, "failures": failures,
    }
    try:
        text, usage = call_model(context, role="generation", node=NODE, prompt=prompt, **sampling(context, state, retry=bool(state.get("tracebacks"))))
    except ModelCallError as e:
        return {**update, "halt": f"generation failed: {e}", **model_error_update(NODE, e)}
    update["attempt"] = {"step": step, "kind": "write", "sql": extract_sql(text)}
    update["usage"] = [usage]
    return update
