"""list_write_step: the model writes the query of the current step.

Each step's query is the previous verified query extended by the step's one operation (LIST's
``Y_i = R_i(I, S_i, Y_{1:i-1})``), so the query of the last step answers the question. The prompt
shows the plan, the verified query so far and, after a traceback, why the previous version of
this step led to a dead end. Every write counts against ``Settings.list_max_global_attempts``.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from sqlchorus import prompts
from sqlchorus.core.context import Context
from sqlchorus.core.diversity import sample_temperature
from sqlchorus.core.generation import model_error_update
from sqlchorus.core.list_search import GENERATOR, shared_values, step_values
from sqlchorus.core.llm import ModelCallError, call_model
from sqlchorus.tools.fewshot import examples
from sqlchorus.tools.parsing import extract_sql

NODE = "list_write_step"


def examples_text(settings: Any = None) -> str:
    """The first two back-translated examples, each step with the query that writes it."""
    blocks = []
    for ex in examples("list_plan", settings)[:2]:
        lines = [f"Question: {ex['question']}"]
        for n, s in enumerate(ex["steps"], 1):
            lines.append(f"Step {n}: {s['instruction']}\n```sql\n{s['sql']}\n```")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _feedback(state: dict) -> str:
    dead_end = state.get("dead_end")
    if not dead_end or dead_end.get("step") != state.get("step", 0):
        return ""
    return (
        "## An earlier version of this step was verified, but the next step could not be built on it\n"
        f"```sql\n{dead_end['sql']}\n```\nThe next step failed with: {dead_end['error']}\n"
        "Write this step differently.\n"
    )


def list_write_step(state: dict, runtime: Runtime[Context]) -> dict:
    context = runtime.context
    prompt = prompts.render(
        NODE,
        examples=examples_text(context.settings),
        feedback=_feedback(state),
        **shared_values(state),
        **step_values(state),
    )
    step = state.get("step", 0)
    update: dict[str, Any] = {"global_attempts": (state.get("global_attempts") or 0) + 1, "local_attempts": 0}
    try:
        text, usage = call_model(
            context, role="generation", node=NODE, prompt=prompt,
            temperature=sample_temperature(context, GENERATOR, state.get("sample", 0)),
        )
    except ModelCallError as e:
        return {**update, "halt": f"generation failed: {e}", **model_error_update(NODE, e)}
    update["attempt"] = {"step": step, "kind": "write", "sql": extract_sql(text)}
    update["usage"] = [usage]
    return update
