"""What text a run's spans carry, so that a dashboard (Arize Phoenix, Langfuse...) can show it.

``Settings.trace_content`` chooses, per run:

- ``all`` (the default): the run's question and answer, each node's input and update, each
  model call's messages and answer, each statement with a preview of its rows, each value
  retrieved;
- ``metadata``: the structure without user data or prompt text: names, counts, SQL text, token
  counts, models; no rows, no retrieved values, no question or hint text, no messages;
- ``none``: no content attributes at all beyond what spans carried before there was a choice.

Every value is bounded to :data:`MAX_VALUE_CHARS` characters, a cut one ending in
:data:`TRUNCATION_MARK`, except a model call's messages and answer: each of those is whole up to
``Settings.trace_content_limit`` characters (:data:`DEFAULT_CONTENT_LIMIT`), written once, in the
conventions ``Settings.trace_conventions`` names (:data:`TRACE_CONVENTIONS`), and a cut one is
said so on its span (``sqlchorus.content.truncated``, with each message's whole length in
``sqlchorus.prompt.message_chars``). The run's tracer carries its mode (:func:`content_mode`),
so each place that makes a span asks it, whatever layer it is in.

:func:`set_llm_cost` puts OpenInference's ``llm.cost.*`` on any span, from a usage record or a
cost record (:func:`llm_cost`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sqlchorus.tools.tracing import attributes as attrs
from sqlchorus.tools.json_values import json_value

TRACE_CONTENTS: tuple[str, ...] = ("all", "metadata", "none")
ALL, METADATA, NONE = TRACE_CONTENTS

TRACE_CONVENTIONS: tuple[str, ...] = ("openinference", "genai", "both", "langfuse")
"""Where a model call's messages go: OpenInference's ``llm.input_messages`` /
``llm.output_messages`` (what Arize Phoenix reads first), the GenAI conventions'
``gen_ai.input.messages`` / ``gen_ai.output.messages`` (JSON; Phoenix turns these into its own
when a span has none), or both (each message twice)."""
OPENINFERENCE, GENAI, BOTH, LANGFUSE = TRACE_CONVENTIONS

MAX_VALUE_CHARS = 8192
"""Characters one content attribute holds at most (a model call's messages excepted: see
:data:`DEFAULT_CONTENT_LIMIT`)."""

DEFAULT_CONTENT_LIMIT = 262_144
"""Characters of one model message (a prompt's message, or an answer) a span keeps by default:
the longest prompt the ``paper`` preset sends on BIRD's largest schema is about 30,000 characters,
and one narrowed to the default prompt budget (32,000 tokens) about 81,000 (the eleven BIRD dev
schemas in one database), so every prompt within the budget arrives whole."""

PREVIEW_CHARS = 1000
"""Characters of a model call's last user message, and of its answer, that ``input.value`` and
``output.value`` show (the whole text is in the messages)."""

TRUNCATION_MARK = "...[truncated]"
"""How a cut value ends (a cut JSON value is no longer JSON, so its mime type becomes text)."""

MAX_ITEMS = 50
"""Items kept of a list, and rows of a preview, before a value is serialised."""

PREVIEW_ROWS = 10
"""Rows of a result shown in a span's output."""

_MODE_ATTRIBUTE = "sqlchorus_trace_content"


def set_content_mode(tracer: Any, mode: str) -> None:
    """Say on ``tracer`` (a run's OpenTelemetry tracer) what its spans carry."""
    try:
        setattr(tracer, _MODE_ATTRIBUTE, mode)
    except AttributeError:  # a tracer that takes no attributes keeps the default
        pass


def content_mode(tracer: Any) -> str:
    """The content mode of ``tracer``'s run; ``all`` for a tracer no run made."""
    mode = getattr(tracer, _MODE_ATTRIBUTE, ALL)
    return mode if mode in TRACE_CONTENTS else ALL


def bounded(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, the mark included, when longer."""
    text = str(text)
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(TRUNCATION_MARK))] + TRUNCATION_MARK


def _shrink(value: Any, depth: int = 0) -> Any:
    """``value`` made plain for JSON, with long lists and deep nesting cut before serialising."""
    if isinstance(value, str):
        return bounded(value)
    if depth > 6:
        return "..."
    if isinstance(value, (list, tuple)):
        items = [_shrink(v, depth + 1) for v in list(value)[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            items.append(f"... {len(value) - MAX_ITEMS} more")
        return items
    if isinstance(value, dict):
        out = {}
        for i, (k, v) in enumerate(value.items()):
            if i >= MAX_ITEMS:
                out["..."] = f"{len(value) - MAX_ITEMS} more keys"
                break
            out[str(k)] = _shrink(v, depth + 1)
        return out
    return json_value(value)


def as_json(value: Any) -> tuple[str, str]:
    """``value`` as bounded JSON text, and its mime type (text once cut)."""
    text = json.dumps(_shrink(value), ensure_ascii=False, default=str)
    if len(text) > MAX_VALUE_CHARS:
        return bounded(text), attrs.MIME_TEXT
    return text, attrs.MIME_JSON


def set_value(span: Any, which: str, value: Any) -> None:
    """Put ``value`` on ``span`` as its OpenInference ``input`` or ``output`` (``which``): text as
    text, anything else as JSON."""
    if isinstance(value, str):
        text, mime = bounded(value), attrs.MIME_TEXT
    else:
        text, mime = as_json(value)
    key, mime_key = ((attrs.INPUT_VALUE, attrs.INPUT_MIME_TYPE) if which == "input"
                     else (attrs.OUTPUT_VALUE, attrs.OUTPUT_MIME_TYPE))
    span.set_attribute(key, text)
    span.set_attribute(mime_key, mime)


def rows_preview(columns: Any, rows: Any, limit: int = PREVIEW_ROWS) -> dict[str, Any]:
    """A result as a span shows it: its columns, its first rows and how many there were."""
    rows = list(rows or ())
    return {"columns": list(columns or ()), "rows": [list(r) for r in rows[:limit]], "row_count": len(rows)}


_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "tool"}


def message_role(kind: str) -> str:
    """A LangChain message type (``human``, ``ai``...) as the conventions name its role."""
    return _ROLES.get(kind, kind)


def _conventions(conventions: str) -> tuple[bool, bool]:
    """Whether ``conventions`` writes OpenInference's messages, and the GenAI ones."""
    return conventions in (OPENINFERENCE, BOTH), conventions in (GENAI, BOTH)


def message_preview(text: str, where: str, limit: int = PREVIEW_CHARS) -> str:
    """``text`` as ``input.value`` / ``output.value`` show it beside the whole messages: whole
    when short, else its last ``limit`` characters after a line saying how many came before and
    where the whole text is (``where``, an attribute name)."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"[...{len(text) - limit} characters before; the whole text is in {where}]\n{text[-limit:]}"


def set_messages(span: Any, mode: str, messages: list[tuple[str, str]], *, limit: int = DEFAULT_CONTENT_LIMIT,
                 conventions: str = OPENINFERENCE) -> None:
    """Put a model call's messages, ``(role, text)`` pairs, on ``span``, once each, in the
    conventions ``conventions`` names: OpenInference's ``llm.input_messages.{i}.message.role`` /
    ``.content``, the GenAI conventions' ``gen_ai.input.messages`` (JSON), or both.

    Each message is whole up to ``limit`` characters; a longer one is cut there, ending in
    :data:`TRUNCATION_MARK`, and the span says so (``sqlchorus.content.truncated``,
    ``sqlchorus.content.limit``). ``sqlchorus.prompt.chars`` and ``sqlchorus.prompt.message_chars``
    give the prompt's whole length and each message's, in every mode. ``input.value`` is a short
    form (:func:`message_preview` of the last user message), not the messages again. With
    ``metadata`` only the roles are written."""
    sizes = [len(str(text)) for _, text in messages]
    span.set_attribute(attrs.SQLCHORUS_PROMPT_CHARS, sum(sizes))
    span.set_attribute(attrs.SQLCHORUS_PROMPT_MESSAGE_CHARS, sizes)
    if mode == NONE:
        return
    openinference, genai = _conventions(conventions)
    roles = [role for role, _ in messages]
    prefix = attrs.LLM_INPUT_MESSAGES
    if mode != ALL:
        if openinference:
            for i, role in enumerate(roles):
                span.set_attribute(f"{prefix}.{i}.{attrs.MESSAGE_ROLE}", role)
        if genai:
            span.set_attribute(attrs.GEN_AI_INPUT_MESSAGES, json.dumps([{"role": r, "parts": []} for r in roles]))
        return
    texts = [bounded(str(text), limit) for _, text in messages]
    if any(size > limit for size in sizes):
        _mark_cut(span, limit)
    if conventions == LANGFUSE:  # Langfuse's own input attribute, which it reads before any other
        span.set_attribute(attrs.LANGFUSE_OBSERVATION_INPUT, json.dumps(
            [{"role": r, "content": c} for r, c in zip(roles, texts)], ensure_ascii=False))
    if openinference:
        for i, (role, text) in enumerate(zip(roles, texts)):
            span.set_attribute(f"{prefix}.{i}.{attrs.MESSAGE_ROLE}", role)
            span.set_attribute(f"{prefix}.{i}.{attrs.MESSAGE_CONTENT}", text)
    if genai:
        # Each content is cut alone, so the JSON stays JSON whatever is cut.
        span.set_attribute(attrs.GEN_AI_INPUT_MESSAGES, json.dumps(
            [{"role": r, "parts": [{"type": "text", "content": c}]} for r, c in zip(roles, texts)], ensure_ascii=False))
    # input.value is what a dashboard lists a span by (Phoenix's table shows it; its LLM view shows
    # the messages): the messages again would double what the span holds, so it is the last user
    # message's end, where the templates put the question, the hint and the task (the schema,
    # which makes a prompt long, comes first).
    last = next((str(t) for r, t in reversed(messages) if r == "user"), str(messages[-1][1]) if messages else "")
    where = prefix if openinference else attrs.GEN_AI_INPUT_MESSAGES if genai else attrs.LANGFUSE_OBSERVATION_INPUT
    span.set_attribute(attrs.INPUT_VALUE, message_preview(last, where))
    span.set_attribute(attrs.INPUT_MIME_TYPE, attrs.MIME_TEXT)


def set_answer(span: Any, mode: str, text: str, *, limit: int = DEFAULT_CONTENT_LIMIT,
               conventions: str = OPENINFERENCE, finish_reason: str | None = None) -> None:
    """Put a model's answer on ``span``, once, in the conventions ``conventions`` names:
    ``llm.output_messages.0``, ``gen_ai.output.messages`` (JSON, with ``finish_reason``: ``stop``
    unless given), or both; whole up to ``limit`` characters (cut as :func:`set_messages` cuts).
    ``output.value`` is a short form of it (:func:`message_preview`). With ``metadata`` only its
    role."""
    if mode == NONE:
        return
    openinference, genai = _conventions(conventions)
    if mode != ALL:
        if openinference:
            span.set_attribute(f"{attrs.LLM_OUTPUT_MESSAGES}.0.{attrs.MESSAGE_ROLE}", "assistant")
        if genai:
            span.set_attribute(attrs.GEN_AI_OUTPUT_MESSAGES, json.dumps(
                [{"role": "assistant", "parts": [], "finish_reason": finish_reason or "stop"}]))
        return
    text = str(text)
    kept = bounded(text, limit)
    if len(text) > limit:
        _mark_cut(span, limit)
    if conventions == LANGFUSE:
        span.set_attribute(attrs.LANGFUSE_OBSERVATION_OUTPUT, kept)
    if openinference:
        span.set_attribute(f"{attrs.LLM_OUTPUT_MESSAGES}.0.{attrs.MESSAGE_ROLE}", "assistant")
        span.set_attribute(f"{attrs.LLM_OUTPUT_MESSAGES}.0.{attrs.MESSAGE_CONTENT}", kept)
    if genai:
        span.set_attribute(attrs.GEN_AI_OUTPUT_MESSAGES, json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": kept}],
              "finish_reason": finish_reason or "stop"}], ensure_ascii=False))
    # Answers are mostly a query or a verdict, shown whole; a long one (reasoning, then the query)
    # shows its end.
    span.set_attribute(attrs.OUTPUT_VALUE, message_preview(
        text, f"{attrs.LLM_OUTPUT_MESSAGES}.0" if openinference else attrs.GEN_AI_OUTPUT_MESSAGES if genai
        else attrs.LANGFUSE_OBSERVATION_OUTPUT))
    span.set_attribute(attrs.OUTPUT_MIME_TYPE, attrs.MIME_TEXT)


def _mark_cut(span: Any, limit: int) -> None:
    span.set_attribute(attrs.SQLCHORUS_CONTENT_TRUNCATED, True)
    span.set_attribute(attrs.SQLCHORUS_CONTENT_LIMIT, int(limit))


def set_token_counts(span: Any, mode: str, prompt: int, completion: int, *, cached: bool = False) -> None:
    """OpenInference's token counts of a model call (the GenAI ones are always there). A call
    answered from sqlchorus's response cache keeps the tokens of the call it replays, its prompt's
    marked as read from a cache (``llm.token_count.prompt_details.cache_read``)."""
    if mode == NONE:
        return
    span.set_attribute(attrs.LLM_TOKENS_PROMPT, int(prompt))
    span.set_attribute(attrs.LLM_TOKENS_COMPLETION, int(completion))
    span.set_attribute(attrs.LLM_TOKENS_TOTAL, int(prompt) + int(completion))
    if cached:
        span.set_attribute(attrs.LLM_TOKENS_PROMPT_CACHE_READ, int(prompt))


# -- cost ---------------------------------------------------------------------------------------


def llm_cost(record: Mapping[str, Any] | Iterable[Mapping[str, Any]], prices: Any = None) -> dict[str, float] | None:
    """OpenInference's ``llm.cost.*`` (US dollars) of a usage or cost record, or None when
    nothing in it had a price (an unpriced cost is not $0).

    ``record`` is one model call's usage record (``cost_usd``, ``priced``, ``model``,
    ``input_tokens``, ``output_tokens``, ``cached``...), a list of them (a node's, a run's: their
    costs added up), or a cost record such as :func:`sqlchorus.tools.models.pricing.usage_cost` gives
    (``cost_usd``, ``calls``, ``unpriced_calls``). The total is the record's ``cost_usd``, so it
    adds up to what ``ask --json`` says. The prompt and completion parts come from the record's
    ``input_cost_usd`` / ``output_cost_usd`` when it has them, else from ``prices`` (a
    :class:`~sqlchorus.tools.models.pricing.PriceTable`) and the call's tokens; a cost record alone gives
    the total only. A call answered from the cache or a call log costs 0; a failed call (no
    ``cost_usd``) too.

    Returns:
        ``{"prompt": ..., "completion": ..., "total": ...}``, prompt and completion only when known.
    """
    if not isinstance(record, Mapping):
        parts = [c for c in (llm_cost(r, prices) for r in record) if c is not None]
        if not parts:
            return None
        out = {"total": round(sum(p["total"] for p in parts), 10)}
        if all("prompt" in p for p in parts):
            out["prompt"] = round(sum(p["prompt"] for p in parts), 10)
            out["completion"] = round(sum(p["completion"] for p in parts), 10)
        return out
    if "calls" in record and "input_tokens" in record and "node" not in record:  # usage_cost()'s summary
        calls, unpriced = int(record.get("calls") or 0), int(record.get("unpriced_calls") or 0)
        if calls and unpriced >= calls:
            return None
        return {"total": round(float(record.get("cost_usd") or 0.0), 10)}
    if record.get("priced") is False:
        return None
    total = round(float(record.get("cost_usd") or 0.0), 10)
    if "input_cost_usd" in record or "output_cost_usd" in record:
        prompt = round(float(record.get("input_cost_usd") or 0.0), 10)
        return {"prompt": prompt, "completion": round(total - prompt, 10), "total": total}
    if not total or record.get("cached") or record.get("replayed") or record.get("typed"):
        return {"prompt": 0.0, "completion": 0.0, "total": total}
    price = prices.price_for(str(record.get("model") or "")) if prices is not None else None
    if price is None:
        return {"total": total}
    prompt = round(int(record.get("input_tokens") or 0) * price.input / 1_000_000, 10)
    return {"prompt": prompt, "completion": round(total - prompt, 10), "total": total}


def set_llm_cost(span: Any, record: Mapping[str, Any] | Iterable[Mapping[str, Any]], prices: Any = None) -> None:
    """Put ``llm.cost.prompt``, ``llm.cost.completion`` and ``llm.cost.total`` on ``span`` (any
    span: a model call's, a node's, a run's) from a usage or cost record (see :func:`llm_cost`);
    nothing when nothing in it had a price. The GenAI conventions name no cost attribute."""
    cost = llm_cost(record, prices)
    if cost is None:
        return
    for part, key in (("prompt", attrs.LLM_COST_PROMPT), ("completion", attrs.LLM_COST_COMPLETION),
                      ("total", attrs.LLM_COST_TOTAL)):
        if part in cost:
            span.set_attribute(key, float(cost[part]))


def add_llm_cost(span: Any, record: Mapping[str, Any], prices: Any = None) -> None:
    """Add one call's ``llm.cost.*`` to those already on ``span`` (a node's, which may call a
    model several times); a part unknown for any call is left off, the total always kept."""
    cost = llm_cost(record, prices)
    if cost is None:
        return
    held = getattr(span, "attributes", None) or {}
    had_total = attrs.LLM_COST_TOTAL in held
    for part, key in (("prompt", attrs.LLM_COST_PROMPT), ("completion", attrs.LLM_COST_COMPLETION),
                      ("total", attrs.LLM_COST_TOTAL)):
        if part not in cost or (had_total and key not in held and part != "total"):
            continue  # a part an earlier call could not split stays unknown
        span.set_attribute(key, round(float(held.get(key, 0.0)) + float(cost[part]), 10))


def set_documents(span: Any, mode: str, documents: list[tuple[str, float | None, dict[str, Any]]]) -> None:
    """A retriever's hits, ``(content, score, metadata)``, as OpenInference's
    ``retrieval.documents.{i}.document.content`` / ``.score`` / ``.metadata``; with ``metadata``
    content, the scores and metadata without the values."""
    if mode == NONE:
        return
    prefix = attrs.RETRIEVAL_DOCUMENTS
    for i, (text, score, meta) in enumerate(documents[:MAX_ITEMS]):
        if mode == ALL:
            span.set_attribute(f"{prefix}.{i}.{attrs.DOCUMENT_CONTENT}", bounded(str(text)))
        if score is not None:
            span.set_attribute(f"{prefix}.{i}.{attrs.DOCUMENT_SCORE}", float(score))
        if meta:
            span.set_attribute(f"{prefix}.{i}.{attrs.DOCUMENT_METADATA}", as_json(meta)[0])
