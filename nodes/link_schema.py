"""link_schema: DIN-SQL schema linking over one schema view.

The model names the tables and columns the question needs, and the cell values it mentions
(``Schema_links: [...]``). Its list is kept as written (``schema_links``, which DIN-SQL's
generator passes on verbatim); the tables and columns read from it (``links``) drop names that
are not in the schema. With ``Settings.linking = "lexical"`` no model is called:
tables and columns are ranked by the question's words and retrieved values
(:mod:`sqlchorus.tools.schema_rank`). The node also renders the schema view that the generators
and the fixer see: the whole schema, or the linked part when ``settings.schema_level`` asks for
it and linking found something.

Both views fit the run's schema budget (:mod:`sqlchorus.core.budget`): on a schema too large for
one prompt, the model links over the columns ranked first for the question (the retrieved values,
the question's words, foreign-key neighbours, descriptions), and the node's span and
``schema_note`` say what was left out.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from sqlchorus import prompts
from sqlchorus.core.budget import schema_view
from sqlchorus.core.context import Context
from sqlchorus.core.llm import try_call_model
from sqlchorus.core.state import SqlchorusState
from sqlchorus.tools import fewshot
from sqlchorus.tools.parsing import extract_schema_links, schema_links_as_written
from sqlchorus.tools.schema_rank import rank_schema
from sqlchorus.tools.values import values_by_column, values_text
from sqlchorus.tools.views import resolve_links

NODE = "link_schema"


def _examples_text(settings) -> str:
    return "\n\n".join(
        f'{ex["schema"]}\nQ: "{ex["question"]}"\nA: Let\'s think step by step. {ex["answer"]}'
        for ex in fewshot.examples(NODE, settings)
    )


def _link_with_model(context: Context, prompt: str, update: dict) -> dict[str, list[str]]:
    """DIN-SQL's linking call: its links (none when it failed); usage and errors go into ``update``."""
    errors: list = []
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


def link_schema(state: SqlchorusState, runtime: Runtime[Context]) -> dict:
    context = runtime.context
    settings = context.settings
    values = state.get("values") or {}
    shown_values = values_by_column(values)
    update: dict = {}
    if settings.linking == "lexical":
        links = rank_schema(context.schema, f"{state['question']} {state.get('evidence') or ''}", values)
        update["link_reasoning"] = "linked lexically: tables and columns ranked by the question's words and values"
    else:
        full_view = schema_view(context, state, values=shown_values)
        prompt = prompts.render(
            NODE,
            examples=_examples_text(settings),
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
