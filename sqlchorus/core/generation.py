"""One-call generation shared by the CHASE-SQL chain-of-thought generators.

The divide-and-conquer and query-plan generators differ only in their prompt and examples: both
show the sample's schema view, the retrieved values, the question and hint, make one model call
at the sample's temperature, and keep the answer's last query as the candidate.
"""

from __future__ import annotations

from typing import Any

from sqlchorus import prompts
from sqlchorus.core.candidates import new_candidate
from sqlchorus.core.context import Context
from sqlchorus.core.diversity import generation_meta, sample_temperature, sample_view
from sqlchorus.core.llm import ModelCallError, call_model
from sqlchorus.core.state import GeneratorInput
from sqlchorus.tools.parsing import extract_sql
from sqlchorus.tools.values import values_text


def model_error_update(node: str, error: ModelCallError) -> dict[str, Any]:
    """The update of a node whose model call failed: its usage and an error record, no candidate."""
    return {
        "usage": [error.usage] if error.usage else [],
        "errors": [{"node": node, "kind": "model", "message": str(error)}],
    }


def generate_once(
    state: GeneratorInput, context: Context, *, node: str, generator: str, examples: str
) -> dict[str, Any]:
    """Render ``node``'s prompt for this sample, call the generation model once, make the candidate."""
    sample = state.get("sample", 0)
    view, seed = sample_view(state, context)
    temperature = sample_temperature(context, generator, sample)
    prompt = prompts.render(
        node,
        examples=examples,
        schema=view,
        values=values_text(state.get("values")),
        question=state["question"],
        evidence=state.get("evidence") or "(none)",
    )
    try:
        text, usage = call_model(
            context, role="generation", node=node, prompt=prompt, temperature=temperature, sample=sample
        )
    except ModelCallError as e:
        return model_error_update(node, e)
    candidate = new_candidate(generator, sample, extract_sql(text), reasoning=text)
    candidate["meta"] = generation_meta(temperature, seed)
    return {"candidates": [candidate], "usage": [usage]}
