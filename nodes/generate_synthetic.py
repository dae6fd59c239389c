"""generate_synthetic: CHASE-SQL's online synthetic example generation (Algorithm 2).

For each question, before generating, the model writes examples for this very database:

1. ``n_f`` examples over the whole schema, by common SQL features (guideline R_f, the paper's
   Figure 26: single-table queries, equality and non-equality predicates, aggregates,
   GROUP BY/HAVING, ORDER BY/LIMIT, joins and nested joins);
2. ``n_t`` examples over the linked columns only (guideline R_t, Figure 27), shown the kind of
   examples another database gets, so that they highlight the right use of the schema the
   question needs (the whole schema when linking found nothing).

The examples then serve as few-shot demonstrations of a third call that writes the candidate.
An example whose SQL does not parse as one query, or fails on the database (run through the guard
with a short time budget and one row), is dropped: a wrong demonstration teaches the wrong
schema. ``n_f`` and ``n_t`` come from settings; the defaults, 12 and 12, sit at the paper's
Table 9 point of 25 examples, where accuracy is within 0.4 points of its best (75) at a third of
the tokens. Samples differ in temperature and schema order as for every CHASE-SQL generator.
"""

from __future__ import annotations

import json

from langgraph.runtime import Runtime

from sqlchorus import prompts
from sqlchorus.config.presets import PAPER_SAMPLES
from sqlchorus.config.settings import Settings
from sqlchorus.core.budget import schema_view
from sqlchorus.core.context import Context
from sqlchorus.core.diversity import sample_temperature, shuffle_seed
from sqlchorus.core.generation import generate_once
from sqlchorus.core.generator import Generator
from sqlchorus.core.llm import try_call_model
from sqlchorus.core.state import ErrorRecord, GeneratorInput, UsageRecord
from sqlchorus.core.updates import GeneratorUpdate
from sqlchorus.tools.examples import fewshot
from sqlchorus.tools.engines.sqlite import SqlError
from sqlchorus.tools.models.parsing import parse_examples

NODE = "generate_synthetic"
KEY = "synthetic"
FEATURES_PROMPT = "generate_synthetic_features"
SCHEMA_PROMPT = "generate_synthetic_schema"
CHECK_TIMEOUT_S = 1.0

def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _other_database(settings: Settings, dialect: str = "sqlite") -> tuple[str, str, str]:
    shots = fewshot.examples(SCHEMA_PROMPT, settings, dialect)
    lines = []
    for i, ex in enumerate(shots, 1):
        hint = f" (Hints: {ex['evidence']})" if ex.get("evidence") else ""
        lines.append(f"Example {i}) \"input\": {_quote(ex['question'] + hint)}\n\"output\": {_quote(ex['sql'])}")
    return shots[0]["db"], shots[0]["schema"], "\n".join(lines)


def _examples_text(examples: list[dict[str, str]]) -> str:
    if not examples:
        return "(no examples)"
    return "\n".join(
        f"Example {i}) \"input\": {_quote(ex['question'])}\n\"output\": {_quote(ex['sql'])}"
        for i, ex in enumerate(examples, 1)
    )


def _runs(context: Context, sql: str) -> bool:
    timeout = min(CHECK_TIMEOUT_S, context.settings.sql_timeout_s)
    try:
        context.db.execute(sql, timeout_s=timeout, max_rows=1)
    except SqlError:
        return False
    return True


def _ask(context, prompt, temperature, sample, usage, errors, what) -> str:
    # The answer is a list of question/SQL examples, not one query: no SQL grammar.
    text = try_call_model(
        context, usage, errors, node=NODE, prefix=f"{what}: ", role="generation", prompt=prompt,
        temperature=temperature, sample=sample, constrain_sql=False,
    )
    return text or ""


def generate_synthetic(state: GeneratorInput, runtime: Runtime[Context]) -> GeneratorUpdate:
    context = runtime.context
    settings = context.settings
    sample = state.get("sample", 0)
    temperature = sample_temperature(context, KEY, sample)
    seed = shuffle_seed(context, sample)
    usage: list[UsageRecord] = []
    errors: list[ErrorRecord] = []
    proposed: list[dict[str, str]] = []

    n_f, n_t = settings.synthetic_feature_examples, settings.synthetic_schema_examples
    if n_f > 0:
        whole = schema_view(context, state, shuffle_seed=seed)
        text = _ask(context, prompts.render(FEATURES_PROMPT, k=n_f, schema=whole), temperature, sample,
                    usage, errors, "examples by SQL features")
        proposed += parse_examples(text, n_f)
    if n_t > 0:
        links = state.get("links") or {}
        filtered = schema_view(
            context, state, level="columns" if links else "full", links=links or None, shuffle_seed=seed,
        )
        other_db, other_schema, other_examples = _other_database(settings, context.db.dialect)
        prompt = prompts.render(SCHEMA_PROMPT, k=n_t, schema=filtered, other_db=other_db,
                                other_schema=other_schema, other_examples=other_examples)
        proposed += parse_examples(_ask(context, prompt, temperature, sample, usage, errors, "examples over the linked columns"), n_t)

    kept = [ex for ex in proposed if _runs(context, ex["sql"])]
    update = generate_once(state, context, node=NODE, generator=KEY, examples=_examples_text(kept))
    for candidate in update.get("candidates", []):
        candidate["meta"].update(examples_proposed=len(proposed), examples_kept=len(kept), examples=kept)
    return {**update, "usage": usage + update["usage"], "errors": errors + update.get("errors", [])}


def _calls(settings: Settings) -> int:
    """One call per example set asked for, plus the generation."""
    return 1 + (settings.synthetic_feature_examples > 0) + (settings.synthetic_schema_examples > 0)


GENERATOR = Generator(
    key=KEY,
    node=NODE,
    fn=generate_synthetic,
    calls=_calls,
    paper="CHASE-SQL",
    differs=(
        "12 examples by SQL feature and 12 over the linked columns (synthetic_feature_examples, "
        "synthetic_schema_examples; the paper's ablations generate 75 per set, and its Table 9 is within "
        "0.4 points of its best at 25); every sample writes its own examples, three calls a sample; "
        "examples whose SQL does not run on the database are dropped (the paper does not say it checks them)"
    ),
    sampled=True,
    oracle={NODE: "generation:synthetic", FEATURES_PROMPT: "synthesis:features", SCHEMA_PROMPT: "synthesis:schema"},
    presets={"full": 1, "paper": PAPER_SAMPLES},
    order=30,
)
