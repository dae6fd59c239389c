"""generate_divide_conquer: CHASE-SQL's divide-and-conquer chain-of-thought generator.

One model call runs the whole of the paper's Algorithm 1: divide the question into sub-questions
with pseudo SQL (recursively), conquer each with real SQL (innermost first, each using the ones
before it), assemble the pieces into one query, then simplify and optimise it. The query after
the answer's ``Final Optimized SQL Query:`` heading is the candidate, not a sub-question's SQL
written before it (:func:`~sqlchorus.tools.models.parsing.extract_sql`); an answer with no SQL becomes a
candidate in error, so the fixer and the user can see it. Samples differ in temperature and
schema order (:mod:`sqlchorus.core.diversity`).
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from sqlchorus.config.presets import PAPER_SAMPLES
from sqlchorus.core.context import Context
from sqlchorus.core.generation import generate_once
from sqlchorus.core.generator import Generator
from sqlchorus.core.state import GeneratorInput
from sqlchorus.core.taught import with_taught
from sqlchorus.core.updates import GeneratorUpdate
from sqlchorus.tools.examples import fewshot

NODE = "generate_divide_conquer"
KEY = "divide_conquer"


def _examples_text(settings, dialect: str = "sqlite") -> str:
    return "\n\n".join(
        f"**************************\nDatabase Info\n{ex['schema']}\n**************************\n"
        f"Question: {ex['question']}\nHint: {ex['evidence']}\n**************************\n{ex['answer']}"
        for ex in fewshot.examples(NODE, settings, dialect)
    )


def generate_divide_conquer(state: GeneratorInput, runtime: Runtime[Context]) -> GeneratorUpdate:
    context = runtime.context
    return generate_once(state, context, node=NODE, generator=KEY,
                         examples=with_taught(context, state, _examples_text(context.settings, context.db.dialect)))


GENERATOR = Generator(
    key=KEY,
    node=NODE,
    fn=generate_divide_conquer,
    paper="CHASE-SQL",
    differs=(
        "the few-shot examples are the project's own two, over small databases of its own "
        "(the paper shows one of its demonstrations, not the set)"
    ),
    sampled=True,
    oracle={NODE: "generation"},
    presets={"fast": 1, "full": 1, "paper": PAPER_SAMPLES},
    order=10,
)
