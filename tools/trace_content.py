"""What text a run's spans carry, so that a dashboard (Arize Phoenix, Langfuse...) can show it.

``Settings.trace_content`` chooses, per run:

- ``all`` (the default): the run's question and answer, each node's input and update, each
  model call's messages and answer, each statement with a preview of its rows, each value
  retrieved;
- ``metadata``: the structure without user data or prompt text: names, counts, SQL text, token
  counts, models; no rows, no retrieved values, no question or hint text, no messages;
- ``none``: no content attributes at all beyond what spans carried before there was a choice.

Every value is bounded to :data:`MAX_VALUE_CHARS` characters, a cut one ending in
:data:`TRUNCATION_MARK`. The run's tracer carries its mode (:func:`content_mode`), so each
place that makes a span asks it, whatever layer it is in.
"""

from __future__ import annotations

import json
from typing import Any

from sqlchorus.tools import attributes as attrs
from sqlchorus.tools.json_values import json_value

TRACE_CONTENTS: tuple[str, ...] = ("all", "metadata", "none")
ALL, METADATA, NONE = TRACE_CONTENTS

MAX_VALUE_CHARS = 8192
"""Characters one content attribute holds at most."""

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


def fitted_json(build: Any, contents: list[str]) -> str:
    """``json.dumps(build(contents))`` within one value: when too long, the contents are cut
    alike (each ending in the mark) until the JSON fits, so that it stays JSON."""
    text = json.dumps(build(contents), ensure_ascii=False)
    budget = max((len(c) for c in contents), default=0)
    while len(text) > MAX_VALUE_CHARS and budget > len(TRUNCATION_MARK) + 16:
        # Escaping makes the JSON longer than its texts: shrink by what is over, and at least a tenth.
        over = len(text) - MAX_VALUE_CHARS
        budget = max(len(TRUNCATION_MARK) + 16, min(budget - over // max(1, len(contents)) - 1, budget * 9 // 10))
        text = json.dumps(build([bounded(c, budget) for c in contents]), ensure_ascii=False)
    return bounded(text)


def set_messages(span: Any, mode: str, messages: list[tuple[str, str]]) -> None:
    """Put a model call's messages, ``(role, text)`` pairs, on ``span``: OpenInference's
    ``llm.input_messages.{i}.message.role`` and ``.content`` and the GenAI conventions'
    ``gen_ai.input.messages`` (JSON), plus ``input.value``; with ``metadata`` only the roles."""
    if mode == NONE:
        return
    prefix = attrs.LLM_INPUT_MESSAGES
    for i, (role, _) in enumerate(messages):
        span.set_attribute(f"{prefix}.{i}.{attrs.MESSAGE_ROLE}", role)
    if mode != ALL:
        return
    texts = [str(text) for _, text in messages]
    for i, text in enumerate(texts):
        span.set_attribute(f"{prefix}.{i}.{attrs.MESSAGE_CONTENT}", bounded(text))
    roles = [role for role, _ in messages]
    span.set_attribute(attrs.GEN_AI_INPUT_MESSAGES, fitted_json(
        lambda cut: [{"role": r, "parts": [{"type": "text", "content": c}]} for r, c in zip(roles, cut)], texts))
    if len(messages) == 1:
        set_value(span, "input", texts[0])
    else:
        text = fitted_json(lambda cut: [{"role": r, "content": c} for r, c in zip(roles, cut)], texts)
        span.set_attribute(attrs.INPUT_VALUE, text)
        # Cut to fit, the messages are still JSON; only a value cut as a whole is text.
        span.set_attribute(attrs.INPUT_MIME_TYPE, attrs.MIME_TEXT if text.endswith(TRUNCATION_MARK) else attrs.MIME_JSON)


def set_answer(span: Any, mode: str, text: str) -> None:
    """Put a model's answer on ``span``: ``llm.output_messages.0``, ``gen_ai.output.messages``
    and ``output.value``; with ``metadata`` only its role."""
    if mode == NONE:
        return
    span.set_attribute(f"{attrs.LLM_OUTPUT_MESSAGES}.0.{attrs.MESSAGE_ROLE}", "assistant")
    if mode != ALL:
        return
    text = str(text)
    span.set_attribute(f"{attrs.LLM_OUTPUT_MESSAGES}.0.{attrs.MESSAGE_CONTENT}", bounded(text))
    span.set_attribute(attrs.GEN_AI_OUTPUT_MESSAGES, fitted_json(
        lambda cut: [{"role": "assistant", "parts": [{"type": "text", "content": cut[0]}], "finish_reason": "stop"}],
        [text]))
    set_value(span, "output", text)


def set_token_counts(span: Any, mode: str, prompt: int, completion: int) -> None:
    """OpenInference's token counts of a model call (the GenAI ones are always there)."""
    if mode == NONE:
        return
    span.set_attribute(attrs.LLM_TOKENS_PROMPT, int(prompt))
    span.set_attribute(attrs.LLM_TOKENS_COMPLETION, int(completion))
    span.set_attribute(attrs.LLM_TOKENS_TOTAL, int(prompt) + int(completion))


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
