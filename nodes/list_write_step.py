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
from sqlchorus.graph.context import Context
from sqlchorus.graph.generation import model_error_update
from sqlchorus.graph.llm import ModelCallError, call_model
from sqlchorus.tools.parsing import extract_sql
from sqlchorus.tools.values import values_text

NODE = "list_write_step"
GENERATOR = "list"
NOTHING_VERIFIED = "-- nothing is verified yet: this step starts the query"


def shared_values(state: dict) -> dict[str, str]:
    """The prompt values every LIST prompt shares."""
    return {
        "schema": state.get("schema_view") or "",
        "values": values_text(state.get("values")),
        "question": state["question"],
        "evidence": state.get("evidence") or "(none)",
    }


def numbered(plan: list[str]) -> str:
    return "\n".join(f"Step {n}: {s}" for n, s in enumerate(plan, 1))


def step_values(state: dict) -> dict[str, Any]:
    """The plan, the current step and the verified queries before it, for the write and reprompt prompts."""
    plan = state.get("plan") or []
    step = state.get("step", 0)
    verified = state.get("verified") or []
    return {
        "steps": numbered(plan),
        "step_number": step + 1,
        "step_count": len(plan),
        "step": plan[step] if step < len(plan) else "",
        "verified": "\n".join(f"-- step {v['step'] + 1}\n{v['sql']};" for v in verified) or NOTHING_VERIFIED,
    }


def temperature_for(state: dict, settings: Any) -> float | None:
    """The first sample uses the run's temperature; later samples the generator's sampling one."""
    if not state.get("sample"):
        return None
    per_generator = getattr(settings, "generator_temperatures", None) or {}
    return per_generator.get(GENERATOR, getattr(settings, "sample_temperature", None))


def examples_text(settings: Any = None) -> str:
    """The first two back-translated examples, each step with the query that writes it."""
    from sqlchorus.fewshot import examples

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
            temperature=temperature_for(state, context.settings),
        )
    except ModelCallError as e:
        return {**update, "halt": f"generation failed: {e}", **model_error_update(NODE, e)}
    update["attempt"] = {"step": step, "kind": "write", "sql": extract_sql(text)}
    update["usage"] = [usage]
    return update
