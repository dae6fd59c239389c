"""generate_din: DIN-SQL's decomposed generation, its four modules in order.

1. Schema linking: ``link_schema`` already runs DIN-SQL's chain-of-thought linking prompt over
   the schema view, so this branch reuses its answer rather than paying for the same call again.
   The model's ``Schema_links`` list goes to classification and generation verbatim, as in the
   paper, with the cell values the model named (``50``, ``'Alabama'``, ``2010``). Without one
   (lexical linking, a failed call) the list is written from the resolved links: ``table.column``
   and the foreign-key equalities between linked tables, no values. Values found by value
   retrieval are shown beside it in their own, labelled block, never merged into the links.
2. Classification and decomposition: EASY (one table, no nesting), NON-NESTED (joins, no
   sub-queries) or NESTED (sub-queries or set operations), with the tables to join and, for a
   nested query, the sub-questions whose answers it needs. An answer without a label counts as
   NON-NESTED, whose join-aware prompt suits the most questions, and the run records why.
3. Generation with the class's own prompt: simple few-shot for EASY; a NatSQL intermediate
   representation for NON-NESTED; sub-questions first, then the intermediate representation,
   for NESTED.
4. Self-correction, zero-shot: ``gentle`` (asks to check the query against hints, assumes
   nothing is wrong; the paper's choice for GPT-4), ``generic`` (says the query is buggy; the
   paper's choice for CodeX), or ``none`` (``Settings.din_correction``). An answer without SQL
   keeps the generated query.

Three model calls per sample (two with ``none``). Samples after the first are diversified as
the CHASE-SQL generators' are (:mod:`sqlchorus.core.diversity`): every call of the sample at
``sample_temperature`` (or the ``din`` entry of ``generator_temperatures``), over the linked
schema shuffled with the sample number, so that several DIN samples are independent draws
rather than one greedy answer repeated, whose copies would inflate its vote. The first sample
stays greedy over ``link_schema``'s view. The class, tables, sub-questions and both
queries are in the candidate's ``meta`` and on the node's span. Examples are DIN-SQL's own,
from the Spider train database ``college_2``, and are rendered in the same representation as
the question's schema.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime
from opentelemetry import trace

from sqlchorus import prompts
from sqlchorus.config.settings import Settings
from sqlchorus.core.budget import schema_view
from sqlchorus.core.candidates import new_candidate, updated
from sqlchorus.core.context import Context
from sqlchorus.core.diversity import generation_meta, sample_temperature, sample_view
from sqlchorus.core.generator import Generator
from sqlchorus.core.llm import try_call_model
from sqlchorus.core.state import ErrorRecord, GeneratorInput, UsageRecord
from sqlchorus.core.taught import with_taught
from sqlchorus.core.updates import GeneratorUpdate
from sqlchorus.tools.examples import fewshot
from sqlchorus.tools.sql.classify import FALLBACK_CLASS
from sqlchorus.tools.models.parsing import extract_sql, parse_classification
from sqlchorus.tools.schema.links import schema_links_text
from sqlchorus.tools.values.shown import values_text
from sqlchorus.tools.schema.views import render_view

NODE = "generate_din"
KEY = "din"
CLASSIFY_PROMPT = "din_classify"
PROMPT_OF_CLASS = {"EASY": "din_easy", "NON-NESTED": "din_medium", "NESTED": "din_hard"}
CORRECTION_PROMPT = {"gentle": "din_correct_gentle", "generic": "din_correct_generic"}

ATTR_CLASS = "sqlchorus.din.class"
ATTR_SUB_QUESTIONS = "sqlchorus.din.sub_questions"
ATTR_TABLES = "sqlchorus.din.tables"
ATTR_CORRECTED = "sqlchorus.din.corrected"


# -- prompt parts ----------------------------------------------------------------------------


def _quoted(items: list[str]) -> str:
    return "[" + ",".join(f'"{s}"' for s in items) + "]"


def _shot(kind: str, ex: dict[str, Any]) -> str:
    q = ex["question"]
    head = f'Q: "{q}"\n'
    if kind == CLASSIFY_PROMPT:
        tables = ex.get("tables") or []
        join = "need" if len(tables) > 1 else "don't need"
        nested = "need" if ex["label"] == "NESTED" else "don't need"
        requires = "requires" if ex["label"] == "NESTED" else "doesn't need"
        return (
            f"{head}schema_links: {ex['schema_links']}\n"
            f'A: Let\'s think step by step. The SQL query for the question "{q}" needs these tables = '
            f"[{','.join(tables)}], so we {join} JOIN.\n"
            f"Plus, it {requires} nested queries with (INTERSECT, UNION, EXCEPT, IN, NOT IN), "
            f"and we need the answer to the questions = {_quoted(ex.get('sub_questions') or [''])}.\n"
            f"So, we {join} JOIN and {nested} nested queries, "
            f'then the SQL query can be classified as "{ex["label"]}".\n'
            f'Label: "{ex["label"]}"'
        )
    if kind == "din_easy":
        return f"{head}Schema_links: {ex['schema_links']}\nSQL: {ex['sql']}"
    if kind == "din_medium":
        return (
            f"{head}Schema_links: {ex['schema_links']}\n"
            f"A: Let's think step by step. For creating the SQL for the given question, we need to join these tables = "
            f"[{','.join(ex.get('tables') or [])}].\n"
            "First, create an intermediate representation, then use it to construct the SQL query.\n"
            f"Intermediate_representation: {ex['intermediate']}\nSQL: {ex['sql']}"
        )
    subs = ex.get("sub_questions") or []
    lines = [
        f"{head}Schema_links: {ex['schema_links']}",
        f"A: Let's think step by step. \"{q}\" can be solved by knowing the answer to the following sub-question(s) {_quoted(subs)}.",
    ]
    for sub, sub_sql in zip(subs, ex.get("sub_sql") or []):
        lines.append(f'The SQL query for the sub-question "{sub}" is {sub_sql}')
    lines += [f'So, the answer to the question "{q}" is =', f"Intermediate_representation: {ex['intermediate']}", f"SQL: {ex['sql']}"]
    return "\n".join(lines)


def _examples_text(kind: str, settings: Any, dialect: str = "sqlite") -> str:
    """Examples grouped by database, each database's schema shown once in the run's format; their
    SQL in the database's ``dialect``."""
    blocks: list[str] = []
    current = None
    for ex in fewshot.examples(kind, settings, dialect):
        if ex.get("schema") and ex.get("db_id") != current:
            current = ex.get("db_id")
            blocks.append("Database schema:\n" + render_view(fewshot.schema_of(ex["schema"]), settings.schema_format, sample_values=0))
        blocks.append(_shot(kind, ex))
    return "\n\n".join(blocks)


# -- the node --------------------------------------------------------------------------------


def generate_din(state: GeneratorInput, runtime: Runtime[Context]) -> GeneratorUpdate:
    context = runtime.context
    settings = context.settings
    sample = state.get("sample", 0)
    question = state["question"]
    evidence = state.get("evidence") or "(none)"
    view, seed = sample_view(state, context)
    view = view or schema_view(context, state)
    temperature = sample_temperature(context, KEY, sample)
    links = state.get("schema_links") or schema_links_text(context.schema, state.get("links"))
    links_source = "model" if state.get("schema_links") else "resolved links"
    retrieved = values_text(state.get("values"))
    usage: list[UsageRecord] = []
    errors: list[ErrorRecord] = []
    span = trace.get_current_span()

    def ask(prompt: str, role: str, *, answer_is_sql: bool = True) -> str | None:
        return try_call_model(
            context, usage, errors, node=NODE, role=role, prompt=prompt,
            constrain_sql=None if answer_is_sql else False, temperature=temperature,
            # The first sample's calls keep the keys earlier runs recorded them under.
            sample=sample or None,
        )

    classify_text = ask(
        prompts.render(
            CLASSIFY_PROMPT, examples=_examples_text(CLASSIFY_PROMPT, settings, context.db.dialect), schema=view,
            values=retrieved, schema_links=links, question=question, evidence=evidence,
        ),
        "generation",
        answer_is_sql=False,  # a class label and sub-questions, not a query
    )
    parsed = parse_classification(classify_text)
    if parsed is None:
        if classify_text is not None:
            errors.append({"node": NODE, "kind": "parse", "message": f"The classifier gave no class; using {FALLBACK_CLASS}."})
        parsed = {"label": FALLBACK_CLASS, "tables": [], "sub_questions": []}
    label = parsed["label"]
    span.set_attribute(ATTR_CLASS, label)
    span.set_attribute(ATTR_TABLES, parsed["tables"])
    span.set_attribute(ATTR_SUB_QUESTIONS, parsed["sub_questions"])

    kind = PROMPT_OF_CLASS[label]
    values: dict[str, Any] = {
        "examples": with_taught(context, state, _examples_text(kind, settings, context.db.dialect),
                                question_label="Q", quoted=True),
        "schema": view, "values": retrieved,
        "schema_links": links,
        "question": question, "evidence": evidence,
    }
    if kind == "din_hard":
        values["sub_questions"] = _quoted(parsed["sub_questions"] or [question])
    generate_text = ask(prompts.render(kind, **values), "generation")
    if generate_text is None:
        return {"usage": usage, "errors": errors}
    generated = extract_sql(generate_text)
    final = generated
    correct_text = None
    if generated and settings.din_correction != "none":
        correct_text = ask(
            prompts.render(
                CORRECTION_PROMPT[settings.din_correction], schema=view, question=question,
                evidence=evidence, sql=generated,
            ),
            "fixing",
        )
        corrected = extract_sql(correct_text)
        if corrected:
            final = corrected
        elif correct_text is not None:
            errors.append({"node": NODE, "kind": "parse", "message": "Self-correction gave no SQL; keeping the generated query."})
    span.set_attribute(ATTR_CORRECTED, bool(final and generated and final != generated))

    reasoning = "\n\n".join(
        part for part in (
            f"[classification]\n{classify_text}" if classify_text else "",
            f"[generation: {kind}]\n{generate_text}",
            f"[self-correction: {settings.din_correction}]\n{correct_text}" if correct_text else "",
        ) if part
    )
    candidate = new_candidate(KEY, sample, final, reasoning=reasoning)
    meta = {
        **generation_meta(temperature, seed),
        "class": label,
        "tables": parsed["tables"],
        "sub_questions": parsed["sub_questions"],
        "schema_links": links,
        "schema_links_from": links_source,
        "generated_sql": generated,
        "correction": settings.din_correction,
        "corrected": bool(final and generated and final != generated),
    }
    return {"candidates": [updated(candidate, meta=meta)], "usage": usage, "errors": errors}


def _calls(settings: Settings) -> int:
    """Classification, generation and (unless "none") self-correction."""
    return 2 + (settings.din_correction != "none")


GENERATOR = Generator(
    key=KEY,
    node=NODE,
    fn=generate_din,
    calls=_calls,
    paper="DIN-SQL",
    differs=(
        "the links come from link_schema's call, whose prompt has three examples and shows the "
        "retrieved values and the hint; retrieved values go in beside the links as a separate hint; "
        "schemas are shown in the run's schema format"
    ),
    detail=lambda settings: f"self-correction: {settings.din_correction}",
    oracle={
        CLASSIFY_PROMPT: "din:classification",
        **{prompt: "din:generation" for prompt in PROMPT_OF_CLASS.values()},
        **{prompt: "din:correction" for prompt in CORRECTION_PROMPT.values()},
    },
    presets={"full": 1},
    order=40,
)
