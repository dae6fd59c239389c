"""generate_direct: one short prompt straight to the query, for small local models.

The prompt holds the schema view of the linked tables, a few examples over the demo database
(questions none of the demo's own), the question and its hint; the answer is the query itself.
With ``Settings.grammar_scope = "from"`` (the ``tiny`` preset), a local model writes under a
grammar that admits only columns of the linked tables in FROM, so a 135M-parameter model's query
runs far more often than under the chain-of-thought prompts, which it cannot follow. Samples
differ in temperature and schema order as for every generator.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from sqlchorus import prompts
from sqlchorus.core.candidates import new_candidate
from sqlchorus.core.context import Context
from sqlchorus.core.diversity import generation_meta, sample_temperature, sample_view
from sqlchorus.core.generation import model_error_update
from sqlchorus.core.llm import ModelCallError, call_model
from sqlchorus.core.state import GeneratorInput
from sqlchorus.tools import fewshot
from sqlchorus.tools.parsing import extract_sql

NODE = "generate_direct"
GENERATOR = "direct"


def _examples_text(settings) -> str:
    return "\n".join(f"Question: {ex['question']}\nSQL: {ex['sql']}" for ex in fewshot.examples(NODE, settings))


def generate_direct(state: GeneratorInput, runtime: Runtime[Context]) -> dict:
    context = runtime.context
    sample = state.get("sample", 0)
    view, seed = sample_view(state, context)
    temperature = sample_temperature(context, GENERATOR, sample)
    prompt = prompts.render(
        NODE,
        schema=view,
        examples=_examples_text(context.settings),
        question=state["question"],
        evidence=state.get("evidence") or "(none)",
    )
    try:
        text, usage = call_model(
            context, role="generation", node=NODE, prompt=prompt, temperature=temperature, sample=sample,
            grammar_tables=list(state.get("links") or {}),
        )
    except ModelCallError as e:
        return model_error_update(NODE, e)
    candidate = new_candidate(GENERATOR, sample, extract_sql(text), reasoning=text)
    candidate["meta"] = generation_meta(temperature, seed)
    return {"candidates": [candidate], "usage": [usage]}
