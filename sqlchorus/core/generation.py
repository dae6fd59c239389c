"""One-call generation shared by the generators that make one model call per sample.

The divide-and-conquer, query-plan and direct generators differ only in their prompt and
examples: each shows the sample's schema view, the question and hint (and the retrieved values
where its prompt does), makes one model call at the sample's temperature, and keeps the answer's
final query (the one after its final-answer heading, see ``tools/parsing.extract_sql``) as the
candidate.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlchorus import prompts
from sqlchorus.core.candidates import new_candidate
from sqlchorus.core.context import Context
from sqlchorus.core.diversity import generation_meta, sample_temperature, sample_view
from sqlchorus.core.llm import ModelCallError, call_model, model_error
from sqlchorus.core.state import GeneratorInput
from sqlchorus.core.updates import GeneratorUpdate, ModelCallUpdate
from sqlchorus.tools.models.parsing import extract_sql
from sqlchorus.tools.values.shown import values_text


def model_error_update(node: str, error: ModelCallError) -> ModelCallUpdate:
    """The update of a node whose model call failed: its usage and an error record, no candidate."""
    return {"usage": [error.usage] if error.usage else [], "errors": [model_error(node, error)]}


def generate_once(
    state: GeneratorInput, context: Context, *, node: str, generator: str, examples: str,
    grammar_tables: Collection[str] | None = None,
) -> GeneratorUpdate:
    """Render ``node``'s prompt for this sample, call the generation model once, make the candidate.

    The prompt gets the sample's schema view, the examples, the question and hint, and the
    retrieved values when its template shows them; ``grammar_tables`` are the tables a
    FROM-scoped grammar lets the query read.
    """
    sample = state.get("sample", 0)
    view, seed = sample_view(state, context)
    temperature = sample_temperature(context, generator, sample)
    fields = {
        "examples": examples,
        "schema": view,
        "values": values_text(state.get("values")),
        "question": state["question"],
        "evidence": state.get("evidence") or "(none)",
    }
    wanted = prompts.variables(node)
    prompt = prompts.render(node, **{k: v for k, v in fields.items() if k in wanted})
    try:
        text, usage = call_model(
            context, role="generation", node=node, prompt=prompt, temperature=temperature, sample=sample,
            grammar_tables=grammar_tables,
        )
    except ModelCallError as e:
        return {**model_error_update(node, e)}
    candidate = new_candidate(generator, sample, extract_sql(text), reasoning=text)
    candidate["meta"] = generation_meta(temperature, seed)
    return {"candidates": [candidate], "usage": [usage]}
