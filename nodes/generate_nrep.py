"""generate_nrep: N-rep's candidate generator, one greedy candidate per schema view.

A view is a schema representation at a filter level (``Settings.nrep_views``, default the
paper's final five: MAC-Schema unfiltered and column-filtered, M-Schema table- and
column-filtered, DDL column-filtered). Filtered views need schema links, and N-rep links once
per representation: one linking call over that representation serves every filtered view of
it. ``link_schema`` has already linked over ``Settings.schema_format`` (M-Schema by default), so
views of that format reuse its links instead of paying for the same call again; a view may also
borrow another format's links (``ddl:columns@m-schema``), which the ``balanced`` preset uses to
stay within N-rep's 8-call budget.

The node runs as one branch rather than one ``Send`` per view because parallel branches cannot
share a linking result; the generation calls of the views still run concurrently, each a child
span of this node. Few-shot examples are the three examples of the project's pool most similar to
the question and hint (:func:`sqlchorus.tools.examples.fewshot.retrieve`: by a local embedding model's
similarity when ``Settings.value_embedder`` names one, lexically otherwise), where N-rep retrieves
three from the train set by embeddings; no train set is available here, so the pool is the
project's own questions over Spider's train schemas. Each is rendered in the candidate's
representation and filtered the same way by the tables and columns its own SQL uses. A sample beyond the first
shuffles table and column order (its number is the seed), the only diversity greedy decoding
leaves.

The system prompt is the paper's; ``Settings.nrep_conditions = "question"`` swaps its rule that
adds default conditions for invalid data for one that adds only the conditions asked for.

Candidate ids are ``nrep-<n>`` with ``n = sample * len(views) + view index``; each candidate's
``meta`` names its view and where its links came from.
"""

from __future__ import annotations

import contextvars
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from langgraph.runtime import Runtime
from opentelemetry import trace

from sqlchorus import prompts
from sqlchorus.config.settings import Settings, View, linking_formats, parse_view
from sqlchorus.core.budget import schema_view
from sqlchorus.core.candidates import new_candidate, updated
from sqlchorus.core.context import Context
from sqlchorus.core.generator import Generator
from sqlchorus.core.llm import ModelCallError, call_model, model_error, try_call_model
from sqlchorus.core.state import Candidate, ErrorRecord, GeneratorInput, UsageRecord
from sqlchorus.core.taught import with_taught
from sqlchorus.core.updates import GeneratorUpdate
from sqlchorus.tools.examples import fewshot
from sqlchorus.tools.models.parsing import extract_sql, parse_links
from sqlchorus.tools.values.shown import values_by_column
from sqlchorus.tools.schema.views import render_view, resolve_links

NODE = "generate_nrep"
KEY = "nrep"
LINK_PROMPT = "nrep_link"
GENERATE_PROMPT = "nrep_generate"
SYSTEM_PROMPT = {"paper": "nrep_system", "question": "nrep_system_question"}
"""The system prompt for each ``Settings.nrep_conditions``: the paper's (its Figure 6), or the
same with its conditions rule (add default filters such as ``deleted_at IS NULL``) replaced by
one that adds only the conditions the question or hint asks for."""
SHOTS = 3

ATTR_VIEWS = "sqlchorus.nrep.views"
ATTR_LINKED = "sqlchorus.nrep.linked_formats"


def _example_schema(example: dict[str, Any], view: View) -> str:
    return render_view(
        fewshot.schema_of(example["schema"]),
        view.format,
        level=view.level,
        links=fewshot.links_of(example),
        sample_values=0,
    )


def _shots(prompt: str, question: str, evidence: str, settings: Any, dialect: str = "sqlite") -> list[dict[str, Any]]:
    return fewshot.retrieve(prompt, question, SHOTS, evidence=evidence, settings=settings, dialect=dialect)


def _link_examples(fmt: str, question: str, evidence: str, settings: Any) -> str:
    parts = []
    for ex in _shots(LINK_PROMPT, question, evidence, settings):
        schema = _example_schema(ex, View(fmt, "full", fmt))
        answer = json.dumps(fewshot.links_of(ex))
        parts.append(f"Database schema:\n{schema}\nQuestion: {ex['question']}\nHint: {ex.get('evidence') or '(none)'}\nAnswer: {answer}")
    return "\n\n".join(parts)


def _generation_examples(question: str, evidence: str, view: View, settings: Any, dialect: str = "sqlite") -> str:
    parts = []
    for ex in _shots(GENERATE_PROMPT, question, evidence, settings, dialect):
        schema = _example_schema(ex, view)
        parts.append(
            f"Database schema:\n{schema}\nQuestion: {ex['question']}\nHint: {ex.get('evidence') or '(none)'}\n"
            f"```sql\n{ex['sql']}\n```"
        )
    return "\n\n".join(parts)


def _in_context(fn, *args):
    """Run ``fn`` in a copy of this thread's context, so spans nest under the node's span."""
    ctx = contextvars.copy_context()
    return lambda: ctx.run(fn, *args)


def generate_nrep(state: GeneratorInput, runtime: Runtime[Context]) -> GeneratorUpdate:
    context = runtime.context
    settings = context.settings
    sample = state.get("sample", 0)
    question = state["question"]
    evidence = state.get("evidence") or "(none)"
    views = [parse_view(v) for v in settings.nrep_views]
    shown_values = values_by_column(state.get("values"))
    usage: list[UsageRecord] = []
    errors: list[ErrorRecord] = []
    span = trace.get_current_span()
    span.set_attribute(ATTR_VIEWS, [v.spec for v in views])

    links_by_format: dict[str, dict[str, list[str]]] = {}
    source: dict[str, str] = {}
    if state.get("links"):
        links_by_format[settings.schema_format] = dict(state["links"])
        source[settings.schema_format] = "link_schema"
    own = linking_formats(settings.nrep_views, settings.schema_format)
    span.set_attribute(ATTR_LINKED, own)
    for fmt in own:
        prompt = prompts.render(
            LINK_PROMPT,
            examples=_link_examples(fmt, question, state.get("evidence") or "", settings),
            schema=schema_view(context, state, fmt, values=shown_values),
            question=question,
            evidence=evidence,
        )
        text = try_call_model(
            context, usage, errors, node=NODE, prefix=f"{fmt} linking: ", suffix="; its views show the whole schema.",
            role="linking", prompt=prompt,
        )
        if text is None:
            continue
        raw = parse_links(text)
        if raw is None:
            errors.append({"node": NODE, "kind": "parse", "message": f"{fmt} linking returned no links; its views show the whole schema."})
            continue
        links_by_format[fmt] = resolve_links(context.schema, raw)
        source[fmt] = f"{fmt} linking"

    system = prompts.render(SYSTEM_PROMPT[settings.nrep_conditions])
    jobs = []
    for view in views:
        links = links_by_format.get(view.link_format) if view.level != "full" else None
        schema = schema_view(
            context, state, view.format, level=view.level if links else "full", links=links,
            values=shown_values, shuffle_seed=sample or None,
        )
        prompt = prompts.render(
            GENERATE_PROMPT,
            examples=with_taught(context, state, _generation_examples(question, state.get("evidence") or "", view, settings,
                                                                      context.db.dialect), fenced=True),
            schema=schema,
            question=question,
            evidence=evidence,
        )
        jobs.append((view, links, prompt))

    def generate(prompt: str):
        try:
            return call_model(context, role="generation", node=NODE, prompt=prompt, system=system), None
        except ModelCallError as e:
            return None, e

    # The contexts are copied here, in the node's thread, where its span is the current one.
    tasks = [_in_context(generate, job[2]) for job in jobs]
    with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), 8))) as pool:
        outcomes = list(pool.map(lambda task: task(), tasks))

    candidates: list[Candidate] = []
    for i, ((view, links, _), (reply, failure)) in enumerate(zip(jobs, outcomes)):
        if failure is not None:
            usage.extend([failure.usage] if failure.usage else [])
            errors.append(model_error(NODE, failure, prefix=f"view {view.spec}: "))
            continue
        text, record = reply
        usage.append(record)
        candidate = new_candidate(KEY, sample * len(views) + i, extract_sql(text), reasoning=text)
        meta = {
            "view": view.spec,
            "format": view.format,
            "level": view.level if links else "full",
            "links_from": source.get(view.link_format) if links else None,
            "links": links or {},
        }
        candidates.append(updated(candidate, meta=meta))
    return {"candidates": candidates, "usage": usage, "errors": errors}


def _calls(settings: Settings) -> int:
    """Its own linking calls plus one generation per view."""
    return len(settings.nrep_views) + len(linking_formats(settings.nrep_views, settings.schema_format))


def _schema_views(settings: Settings) -> int:
    """Its own linking calls and the views at the full level see the full schema; the others
    see the linked part."""
    full = sum(parse_view(v).level == "full" for v in settings.nrep_views)
    return full + len(linking_formats(settings.nrep_views, settings.schema_format))


GENERATOR = Generator(
    key=KEY,
    node=NODE,
    fn=generate_nrep,
    calls=_calls,
    schema_views=_schema_views,
    candidates=lambda settings: len(settings.nrep_views),  # one per view
    paper="N-rep",
    differs=(
        "no train set is available, so the three examples per candidate are retrieved from the project's "
        "own pool of questions over Spider's train schemas, by a local embedding model where one is set "
        "(value_embedder) and lexical similarity otherwise; views in the run's schema format "
        "reuse link_schema's links instead of a linking call of their own"
    ),
    detail=lambda settings: f"views: {', '.join(settings.nrep_views)}",
    oracle={LINK_PROMPT: "nrep:linking", GENERATE_PROMPT: "nrep:generation"},
    presets={"balanced": 1, "full": 1},
    order=50,
)
