"""list_plan: LIST's step instructions, one operation per step, from the generation model.

The prompt shows back-translated examples: real queries split by the LIST decomposer, each
sub-query described by a natural-language instruction with no SQL in it, as the paper's are and
as its prompt asks of the model (``prompts/list_plan_examples.json``, built by
``scripts/build_list_examples.py``). The model answers with ``[[Step 1: ...]]`` items. An
answer without them falls back to its numbered lines, and an answer with neither to a single
step (write the whole query), so a model that ignores the format still gets one verified try.

A re-plan (after the first step failed every local attempt) shows the model every plan that
failed and why, so that the new plan can take another route, and samples as a retry
(:func:`~sqlchorus.core.list_search.sampling`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.runtime import Runtime

from sqlchorus import prompts
from sqlchorus.core.context import Context
from sqlchorus.core.generation import model_error_update
from sqlchorus.core.list_search import ListState, numbered, sampling, shared_values
from sqlchorus.core.llm import ModelCallError, call_model
from sqlchorus.core.taught import with_taught
from sqlchorus.core.updates import PlanUpdate
from sqlchorus.tools.examples.fewshot import examples
from sqlchorus.tools.models.parsing import parse_plan

NODE = "list_plan"
WHOLE_QUERY = "Write the whole query that answers the question."

def examples_text(settings: Any = None) -> str:
    """The back-translated plan examples, as the prompt shows them."""
    blocks = []
    for i, ex in enumerate(examples(NODE, settings), 1):
        steps = "\n".join(f"[[Step {n}: {s['instruction']}]]" for n, s in enumerate(ex["steps"], 1))
        blocks.append(
            f"### Example {i}\nDatabase schema:\n{ex['schema']}\nQuestion: {ex['question']}\n"
            f"Hint: {ex.get('evidence') or '(none)'}\nSteps:\n{steps}"
        )
    return "\n\n".join(blocks)


def _feedback(state: Mapping[str, Any]) -> str:
    failed = state.get("failed_plans") or []
    if not failed:
        return ""
    head = "## A previous plan failed at its first step, so do not repeat it:\n" if len(failed) == 1 else (
        f"## {len(failed)} previous plans failed at their first step, so do not repeat them (oldest first):\n"
    )
    return head + "".join(
        f"{numbered(plan['plan'])}\nIts first step could not be written: {plan['error']}\n" for plan in failed
    )


def list_plan(state: ListState, runtime: Runtime[Context]) -> PlanUpdate:
    context = runtime.context
    round_ = (state.get("plan_round") or 0) + 1
    prompt = prompts.render(
        NODE,
        examples=with_taught(context, state, examples_text(context.settings)),
        feedback=_feedback(state),
        **shared_values(state),
    )
    base: PlanUpdate = {"plan_round": round_, "step": 0, "verified": [], "local_attempts": 0, "attempt": {}, "check": {},
            "failures": [], "dead_ends": []}
    try:
        text, usage = call_model(
            context, role="generation", node=NODE, prompt=prompt, **sampling(context, state, retry=bool(state.get("plan_round"))),
            constrain_sql=False,  # a plan in words, not a query
        )
    except ModelCallError as e:
        return {**base, "halt": f"planning failed: {e}", **model_error_update(NODE, e)}
    plan = parse_plan(text)
    fallback = not plan
    return {**base, "plan": plan or [WHOLE_QUERY], "plan_fallback": fallback, "usage": [usage]}
