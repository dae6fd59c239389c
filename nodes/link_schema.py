"""link_schema: DIN-SQL schema linking over one schema view.

The model names the tables and columns the question needs, and the cell values it mentions
(``Schema_links: [...]``). Its list is kept as written (``schema_links``, which DIN-SQL's
generator passes on verbatim); the tables and columns read from it (``links``) drop names that
are not in the schema. With ``Settings.linking = "lexical"`` no model is called:
tables and columns are ranked by the question's words and retrieved values
(:mod:`sqlchorus.tools.schema.rank`). The node also renders the schema view that the generators
and the fixer see: the whole schema, or the linked part when ``settings.schema_level`` asks for
it and linking found something.

The few-shot examples are retrieved from the project's pool (:func:`sqlchorus.tools.examples.fewshot.pool`)
by similarity to the question and hint: DIN-SQL shows ten examples from Spider's train set; here
as many of the ten most similar as :data:`EXAMPLE_TOKENS` holds. Each example's schema is shown in
the run's schema format, as the task's is, and its answer is written in DIN-SQL's form from its
SQL: the columns, the join conditions as foreign keys, the values, then ``Schema_links``. A user's
``link_schema_examples.json`` (``Settings.examples_dir``), DIN-SQL's text format with its schema
as text, is shown instead.

Both views fit the run's schema budget (:mod:`sqlchorus.core.budget`): on a schema too large for
one prompt, the model links over the columns ranked first for the question (the retrieved values,
the question's words, foreign-key neighbours, descriptions), and the node's span and
``schema_note`` say what was left out.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from sqlchorus import prompts
from sqlchorus.core.budget import prompt_budget, schema_counter, schema_view
from sqlchorus.core.context import Context
from sqlchorus.core.llm import try_call_model
from sqlchorus.core.state import ErrorRecord, SqlchorusState
from sqlchorus.core.updates import LinkUpdate
from sqlchorus.tools.examples import fewshot
from sqlchorus.tools.models.parsing import extract_schema_links, schema_links_as_written
from sqlchorus.tools.schema.rank import rank_schema
from sqlchorus.tools.values.shown import values_by_column, values_text
from sqlchorus.tools.schema.views import render_view, resolve_links

NODE = "link_schema"
SHOTS = 10
"""Examples at most: DIN-SQL's linking prompt shows ten."""
EXAMPLE_TOKENS = 2_500
"""Tokens the examples may take together, within the prompt reserve beside the schema
(:data:`sqlchorus.core.budget.PROMPT_RESERVE`); an eighth of a smaller model's budget at most.
Examples that would go over it are left out, the most similar kept first."""


def din_answer(example: dict) -> str:
    """An example's answer in DIN-SQL's linking form, written from its SQL: the columns it
    needs, the join conditions as the foreign keys it needs, the cell values, the links."""
    schema = fewshot.schema_of(example["schema"])
    links = fewshot.links_of(example)
    joins = fewshot.join_pairs(example["sql"], schema)
    keys = {(a, b) for a, b, _, _ in joins} | {(c, d) for _, _, c, d in joins}
    columns = []
    for table, cols in links.items():
        own = [f"{table}.{c}" for c in cols if (table, c) not in keys]
        if own:
            columns.extend(own)
        elif not any(table in (a, c) for a, _, c, _ in joins):
            columns.append(f"{table}.*")  # a table counted or tested only as a whole
    foreign = [f"{a}.{b} = {c}.{d}" for a, b, c, d in joins]
    values = fewshot.sql_values(example["sql"])
    return (
        f'In the question "{example["question"]}", we are asked for these columns = [{",".join(columns)}].\n'
        f"Based on the columns and tables, we need these Foreign_keys = [{','.join(foreign)}].\n"
        f"Based on the tables, columns, and Foreign_keys, The set of possible cell values are = [{','.join(values)}].\n"
        "So the Schema_links are:\n"
        f"Schema_links: [{','.join(columns + foreign + values)}]"
    )


def _examples_text(context: Context, state: SqlchorusState) -> str:
    settings = context.settings
    own = fewshot.user_examples(NODE, settings)
    if own is not None:
        return "\n\n".join(
            f'{ex["schema"]}\nQ: "{ex["question"]}"\nA: Let\'s think step by step. {ex["answer"]}' for ex in own
        )
    budget = min(EXAMPLE_TOKENS, prompt_budget(context, "linking") // 8)
    counter = schema_counter(context)
    parts: list[str] = []
    used = 0
    for ex in fewshot.retrieve(fewshot.POOL, state["question"], SHOTS, evidence=state.get("evidence") or "",
                               settings=settings, dialect=context.db.dialect):
        schema = render_view(fewshot.schema_of(ex["schema"]), settings.schema_format, sample_values=0)
        text = (
            f"Database schema:\n{schema}\nQ: \"{ex['question']}\"\nHint: {ex.get('evidence') or '(none)'}\n"
            f"A: Let's think step by step. {din_answer(ex)}"
        )
        cost = counter.count(text)
        if used + cost <= budget:
            parts.append(text)
            used += cost
    return "\n\n".join(parts)


def _link_with_model(context: Context, prompt: str, update: LinkUpdate) -> dict[str, list[str]]:
    """DIN-SQL's linking call: its links (none when it failed); usage and errors go into ``update``."""
    errors: list[ErrorRecord] = []
    update["usage"] = []
    text = try_call_model(
        context, update["usage"], errors, node=NODE, suffix="; the whole schema is used.", role="linking",
        prompt=prompt,
    )
    if text is None:
        update["errors"] = errors
        return {}
    update["link_reasoning"] = text
    update["schema_links"] = schema_links_as_written(text) or ""
    pairs = extract_schema_links(text)
    if pairs is None:
        update["errors"] = [
            {"node": NODE, "kind": "parse", "message": "The model returned no schema links; the whole schema is used."}
        ]
        return {}
    raw: dict[str, list[str]] = {}
    for table, column in pairs:
        raw.setdefault(table, [])
        if column != "*":
            raw[table].append(column)
    return resolve_links(context.schema, raw)


def link_schema(state: SqlchorusState, runtime: Runtime[Context]) -> LinkUpdate:
    context = runtime.context
    settings = context.settings
    values = state.get("values") or {}
    shown_values = values_by_column(values)
    update: LinkUpdate = {}
    if settings.linking == "lexical":
        links = rank_schema(context.schema, f"{state['question']} {state.get('evidence') or ''}", values)
        update["link_reasoning"] = "linked lexically: tables and columns ranked by the question's words and values"
    else:
        full_view = schema_view(context, state, values=shown_values)
        prompt = prompts.render(
            NODE,
            examples=_examples_text(context, state),
            schema=full_view,
            values=values_text(values),
            question=state["question"],
            evidence=state.get("evidence") or "(none)",
        )
        links = _link_with_model(context, prompt, update)
    linked_state = {**state, "links": links}
    if links and settings.schema_level != "full":
        view = schema_view(context, linked_state, level=settings.schema_level, links=links, values=shown_values)
    else:
        view = schema_view(context, linked_state, values=shown_values)
    update["links"] = links
    update.setdefault("schema_links", "")  # none from the model: lexical linking, or the call failed
    update["schema_view"] = view
    notes = context.memo.get("notes") or []
    if notes:
        update["schema_note"] = notes[-1]
    return update
