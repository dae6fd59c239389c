"""generate_query_plan: CHASE-SQL's query-plan chain-of-thought generator.

The model writes a query plan in plain words (tables opened, rows matched and filtered, the
result delivered) and then the query, as a database engine would execute it. Its few-shot
examples carry plans derived from SQLite's ``EXPLAIN QUERY PLAN`` of their gold SQL over their
schema (:func:`sqlchorus.tools.engines.query_plan.plan_for_schema`); :func:`derive_examples` re-derives
them, and a test checks that the shipped plans are what the derivation gives. Samples differ in
temperature and schema order as for every CHASE-SQL generator.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from sqlchorus.config.presets import PAPER_SAMPLES
from sqlchorus.core.context import Context
from sqlchorus.core.generation import generate_once
from sqlchorus.core.generator import Generator
from sqlchorus.core.state import GeneratorInput
from sqlchorus.core.taught import with_taught
from sqlchorus.core.updates import GeneratorUpdate
from sqlchorus.tools.examples import fewshot
from sqlchorus.tools.engines.query_plan import plan_for_schema

NODE = "generate_query_plan"
KEY = "query_plan"


def derive_examples(examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The examples with each ``plan`` derived afresh from its ``schema`` and ``sql``."""
    return [{**ex, "plan": plan_for_schema(ex["schema"], ex["sql"])} for ex in examples]


def _examples_text(settings, dialect: str = "sqlite") -> str:
    return "\n\n".join(
        f"**************************\nDatabase Info\n{ex['schema']}\n**************************\n"
        f"Answer Repeating the question and evidence, and generating the SQL with a query plan.\n"
        f"Question: {ex['question']}\nEvidence: {ex['evidence']}\n**Query Plan**:\n{ex['plan']}\n\n"
        f"**Final Optimized SQL Query:**\n{ex['sql']}"
        for ex in fewshot.examples(NODE, settings, dialect)
    )


def generate_query_plan(state: GeneratorInput, runtime: Runtime[Context]) -> GeneratorUpdate:
    context = runtime.context
    return generate_once(state, context, node=NODE, generator=KEY,
                         examples=with_taught(context, state, _examples_text(context.settings, context.db.dialect)))


GENERATOR = Generator(
    key=KEY,
    node=NODE,
    fn=generate_query_plan,
    paper="CHASE-SQL",
    differs=(
        "the few-shot examples are the project's own three, their plans worded by rule from "
        "SQLite's EXPLAIN QUERY PLAN of their SQL (the paper turns EXPLAIN output into readable steps "
        "without publishing how)"
    ),
    sampled=True,
    oracle={NODE: "generation:query_plan"},
    presets={"full": 1, "paper": PAPER_SAMPLES},
    order=20,
)
