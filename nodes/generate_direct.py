"""generate_direct: one short prompt straight to the query, for small local models.

The prompt holds the schema view (the linked columns, in the tiny preset), a few examples over
the demo database (questions none of the demo's own), the question and its hint; the answer is
the query itself.
With ``Settings.grammar_scope = "from"`` (the ``tiny`` preset), a local model writes under a
grammar that admits only columns of the linked tables in FROM, so a 135M-parameter model's query
runs far more often than under the chain-of-thought prompts, which it cannot follow. Samples
differ in temperature and schema order as for every generator.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from sqlchorus.core.context import Context
from sqlchorus.core.generation import generate_once
from sqlchorus.core.generator import Generator
from sqlchorus.core.state import GeneratorInput
from sqlchorus.core.taught import with_taught
from sqlchorus.core.updates import GeneratorUpdate
from sqlchorus.tools.examples import fewshot

NODE = "generate_direct"
KEY = "direct"


def _examples_text(settings, dialect: str = "sqlite") -> str:
    return "\n".join(f"Question: {ex['question']}\nSQL: {ex['sql']}" for ex in fewshot.examples(NODE, settings, dialect))


def generate_direct(state: GeneratorInput, runtime: Runtime[Context]) -> GeneratorUpdate:
    return generate_once(
        state, runtime.context, node=NODE, generator=KEY,
        examples=with_taught(runtime.context, state, _examples_text(runtime.context.settings, runtime.context.db.dialect)),
        grammar_tables=list(state.get("links") or {}),
    )


GENERATOR = Generator(
    key=KEY,
    node=NODE,
    fn=generate_direct,
    differs="the project's own short prompt for small local models",
    oracle={NODE: "generation:direct"},
    presets={"tiny": 1},
    order=70,
)
