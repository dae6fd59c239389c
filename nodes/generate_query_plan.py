"""generate_query_plan: CHASE-SQL's query-plan chain-of-thought generator.

The model writes a query plan in plain words (tables opened, rows matched and filtered, the
result delivered) and then the query, as a database engine would execute it. Its few-shot
examples carry plans derived from SQLite's ``EXPLAIN QUERY PLAN`` of their gold SQL over their
schema (:func:`sqlchorus.tools.query_plan.plan_for_schema`); :func:`derive_examples` re-derives
them, and a test checks that the shipped plans are what the derivation gives. Samples differ in
temperature and schema order as for every CHASE-SQL generator.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from sqlchorus import prompts
from sqlchorus.graph.candidates import new_candidate
from sqlchorus.graph.context import Context
from sqlchorus.graph.llm import ModelCallError, call_model
from sqlchorus.graph.state import GeneratorInput
from sqlchorus.graph.diversity import generation_meta, sample_temperature, sample_view
from sqlchorus.tools.parsing import extract_sql
from sqlchorus.tools.query_plan import plan_for_schema
from sqlchorus.tools.values import values_text

NODE = "generate_query_plan"
GENERATOR = "query_plan"


def derive_examples(examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The examples with each ``plan`` derived afresh from its ``schema`` and ``sql``."""
    return [{**ex, "plan": plan_for_schema(ex["schema"], ex["sql"])} for ex in examples]


def _examples_text() -> str:
    return "\n\n".join(
        f"**************************\nDatabase Info\n{ex['schema']}\n**************************\n"
        f"Answer Repeating the question and evidence, and generating the SQL with a query plan.\n"
        f"Question: {ex['question']}\nEvidence: {ex['evidence']}\n**Query Plan**:\n{ex['plan']}\n\n"
        f"**Final Optimized SQL Query:**\n{ex['sql']}"
        for ex in prompts.examples(NODE)
    )


def generate_query_plan(state: GeneratorInput, runtime: Runtime[Context]) -> dict:
    context = runtime.context
    sample = state.get("sample", 0)
    view, seed = sample_view(state, context)
    temperature = sample_temperature(context, GENERATOR, sample)
    prompt = prompts.render(
        NODE,
        examples=_examples_text(),
        schema=view,
        values=values_text(state.get("values")),
        question=state["question"],
        evidence=state.get("evidence") or "(none)",
    )
    try:
        text, usage = call_model(
            context, role="generation", node=NODE, prompt=prompt, temperature=temperature, sample=sample
        )
    except ModelCallError as e:
        return {
            "usage": [e.usage] if e.usage else [],
            "errors": [{"node": NODE, "kind": "model", "message": str(e)}],
        }
    candidate = new_candidate(GENERATOR, sample, extract_sql(text), reasoning=text)
    candidate["meta"] = generation_meta(temperature, seed)
    return {"candidates": [candidate], "usage": [usage]}
