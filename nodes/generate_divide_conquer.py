"""generate_divide_conquer: CHASE-SQL's divide-and-conquer chain-of-thought generator.

One model call runs the whole of the paper's Algorithm 1: divide the question into sub-questions
with pseudo SQL (recursively), conquer each with real SQL (innermost first, each using the ones
before it), assemble the pieces into one query, then simplify and optimise it. The answer's last
well-formed query is the candidate; an answer with no SQL becomes a candidate in error, so the
fixer and the user can see it.

Diversity across samples (CHASE-SQL draws several per generator) comes from two knobs that every
generator of the method shares, defined here: the second and later samples run at a higher
temperature, and see the schema with tables and columns shuffled, seeded by the sample number so
a run can be repeated. The first sample sees the schema view ``link_schema`` rendered, greedily.
"""

from __future__ import annotations


from langgraph.runtime import Runtime

from sqlchorus import prompts
from sqlchorus.graph.candidates import new_candidate
from sqlchorus.graph.context import Context
from sqlchorus.graph.diversity import generation_meta, sample_temperature, sample_view
from sqlchorus.graph.llm import ModelCallError, call_model
from sqlchorus.graph.state import GeneratorInput
from sqlchorus.tools.parsing import extract_sql
from sqlchorus.tools.values import values_text

NODE = "generate_divide_conquer"
GENERATOR = "divide_conquer"


def _examples_text() -> str:
    return "\n\n".join(
        f"**************************\nDatabase Info\n{ex['schema']}\n**************************\n"
        f"Question: {ex['question']}\nHint: {ex['evidence']}\n**************************\n{ex['answer']}"
        for ex in prompts.examples(NODE)
    )


def generate_divide_conquer(state: GeneratorInput, runtime: Runtime[Context]) -> dict:
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
    sql = extract_sql(text)
    candidate = new_candidate(GENERATOR, sample, sql, reasoning=text)
    candidate["meta"] = generation_meta(temperature, seed)
    return {"candidates": [candidate], "usage": [usage]}
