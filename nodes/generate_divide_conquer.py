"""generate_divide_conquer: CHASE-SQL's divide-and-conquer chain-of-thought generator.

One model call runs the whole of the paper's Algorithm 1: divide the question into sub-questions
with pseudo SQL (recursively), conquer each with real SQL (innermost first, each using the ones
before it), assemble the pieces into one query, then simplify and optimise it. The answer's last
well-formed query is the candidate; an answer with no SQL becomes a candidate in error, so the
fixer and the user can see it. Samples differ in temperature and schema order
(:mod:`sqlchorus.core.diversity`).
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from sqlchorus.core.context import Context
from sqlchorus.core.generation import generate_once
from sqlchorus.core.state import GeneratorInput
from sqlchorus.tools import fewshot

NODE = "generate_divide_conquer"
GENERATOR = "divide_conquer"


def _examples_text(settings) -> str:
    return "\n\n".join(
        f"**************************\nDatabase Info\n{ex['schema']}\n**************************\n"
        f"Question: {ex['question']}\nHint: {ex['evidence']}\n**************************\n{ex['answer']}"
        for ex in fewshot.examples(NODE, settings)
    )


def generate_divide_conquer(state: GeneratorInput, runtime: Runtime[Context]) -> dict:
    return generate_once(state, runtime.context, node=NODE, generator=GENERATOR, examples=_examples_text(runtime.context.settings))
