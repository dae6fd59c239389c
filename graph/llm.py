"""Calling a chat model for a node: one span per call, one usage record per call."""

from __future__ import annotations

import time
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from sqlchorus.graph.context import Context
from sqlchorus.graph.state import UsageRecord
from sqlchorus.graph import attributes as attrs
from sqlchorus.models import model_name


class ModelCallError(RuntimeError):
    """A model call that raised or returned nothing usable."""

    def __init__(self, message: str, usage: UsageRecord | None = None):
        super().__init__(message)
        self.usage = usage


def call_model(
    context: Context,
    *,
    role: str,
    node: str,
    prompt: str | list[BaseMessage],
    system: str | None = None,
    temperature: float | None = None,
) -> tuple[str, UsageRecord]:
    """Send ``prompt`` to the model for ``role`` and return its text and a usage record.

    Raises:
        ModelCallError: the model raised; the message says which model and why.
    """
    model = context.models[role]
    name = model_name(model)
    messages: list[BaseMessage]
    if isinstance(prompt, str):
        messages = [HumanMessage(prompt)]
    else:
        messages = list(prompt)
    if system:
        messages.insert(0, SystemMessage(system))
    kwargs: dict[str, Any] = {}
    if temperature is not None and temperature != context.settings.temperature:
        kwargs["temperature"] = temperature
    with context.tracer.start_as_current_span(f"llm:{role}") as span:
        span.set_attribute(attrs.GEN_AI_OPERATION, "chat")
        span.set_attribute(attrs.GEN_AI_REQUEST_MODEL, name)
        span.set_attribute(attrs.SQLCHORUS_ROLE, role)
        span.set_attribute(attrs.SQLCHORUS_NODE, node)
        start = time.perf_counter()
        try:
            runnable = model.bind(**kwargs) if kwargs else model
            reply = runnable.invoke(messages)
        except Exception as e:  # any provider failure: network, auth, rate limit, bad output
            latency = (time.perf_counter() - start) * 1000.0
            usage = _usage(node, role, name, None, latency)
            span.record_exception(e)
            span.set_attribute(attrs.SQLCHORUS_ERROR, str(e)[:500])
            raise ModelCallError(f"The {role} model ({name}) failed: {_describe(e)}", usage) from e
        latency = (time.perf_counter() - start) * 1000.0
        usage = _usage(node, role, name, getattr(reply, "usage_metadata", None), latency)
        span.set_attribute(attrs.GEN_AI_USAGE_INPUT, usage["input_tokens"])
        span.set_attribute(attrs.GEN_AI_USAGE_OUTPUT, usage["output_tokens"])
        span.set_attribute(attrs.SQLCHORUS_LATENCY_MS, round(latency, 3))
        text = _text_of(reply)
        span.set_attribute(attrs.SQLCHORUS_OUTPUT_CHARS, len(text))
        return text, usage


def _describe(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]


def _text_of(reply: Any) -> str:
    content = getattr(reply, "content", reply)
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks (Anthropic and others)
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        return "".join(parts)
    return str(content or "")


def _usage(node: str, role: str, name: str, meta: Any, latency: float) -> UsageRecord:
    meta = meta or {}
    return UsageRecord(
        node=node,
        role=role,
        model=name,
        input_tokens=int(meta.get("input_tokens") or 0),
        output_tokens=int(meta.get("output_tokens") or 0),
        latency_ms=round(latency, 3),
    )
