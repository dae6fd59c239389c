"""Calling a chat model for a node: one span per call, one usage record per call.

:func:`call_model` is the one path from a node to a model. Around the model's ``invoke`` it
adds, in this order:

0. the prompt budget (:mod:`sqlchorus.core.budget`): a prompt over its budget is not sent, and
   the span records the prompt's tokens, the budget and the tokenizer that counted them;
1. the response cache (:mod:`sqlchorus.tools.models.cache`, handed in through the context): a hit
   returns at once at zero cost, with the tokens the provider reported for the call it replays,
   marked ``cached`` in its usage record and ``sqlchorus.cache_hit`` on its span;
2. for local models that accept one, the schema grammar (:mod:`sqlchorus.tools.models.grammar`) on
   calls whose whole answer is SQL (the generation and fixing roles by default);
3. the model's requests and tokens per minute (``--model-limit``, the context's
   :class:`~sqlchorus.core.rate_limits.ModelLimiter`, shared by a session's runs or a cluster's
   workers): each attempt, a retry's too, waits its turn before its time limit starts, and the
   wait shows on the span (``sqlchorus.rate_limit.wait_s``), not in the call's latency;
4. a time limit on every attempt (``Settings.model_timeout_s``: an attempt ends, answered or
   not, within the limit of its start) and retries with exponential backoff on transient errors
   (a timeout among them); models built from a name leave both to sqlchorus (see
   :mod:`sqlchorus.core.models`), and an in-process model keeps the limit itself;
5. cost from the context's price table (:mod:`sqlchorus.tools.models.pricing`), on the model span
   (``sqlchorus.cost_usd`` and OpenInference's ``llm.cost.*``) and added up on the node's span.

The span carries the call's messages and answer whole up to ``Settings.trace_content_limit``
characters, once, in ``Settings.trace_conventions`` (:mod:`sqlchorus.tools.tracing.content`); its
tokens as the provider reported them (a cached call's, the replayed call's, marked cached; a
failed call's prompt only as sqlchorus's estimate, ``sqlchorus.usage.estimated_input_tokens``,
never as billed usage); and one exception event per failure.

Every call carries, in its LangChain run metadata, which prompt it sends (the template's name,
:data:`PROMPT_KEY`), for which role and node, so callbacks, LangSmith and scripted test models can
tell calls apart without reading the prompt's wording.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Collection
from typing import Any, Literal

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.config import ensure_config, merge_configs
from langgraph.errors import GraphBubbleUp
from opentelemetry import trace

from sqlchorus import prompts
from sqlchorus.core.budget import PromptBudgetError, check_prompt
from sqlchorus.core.context import Context
from sqlchorus.core.deadline import Overran, run_within
from sqlchorus.core.models import model_name, provider_name
from sqlchorus.core.state import ErrorRecord, UsageRecord
from sqlchorus.tools.tracing import attributes as attrs
from sqlchorus.tools.models.cache import model_identity, request_key
from sqlchorus.tools.errors import EXIT_NO_ANSWER, SqlchorusError
from sqlchorus.tools.models.grammar import schema_grammar, scoped_grammar
from sqlchorus.tools.models.pricing import PriceTable
from sqlchorus.tools.tracing.content import (
    DEFAULT_CONTENT_LIMIT,
    NONE,
    OPENINFERENCE,
    content_mode,
    message_role,
    add_llm_cost,
    llm_cost,
    set_answer,
    set_llm_cost,
    set_messages,
    set_token_counts,
)

PROMPT_KEY = "sqlchorus_prompt"
ROLE_KEY = "sqlchorus_role"
NODE_KEY = "sqlchorus_node"
"""Keys of a model call's run metadata: the prompt template's name, the role and the node."""

SQL_ROLES = frozenset({"generation", "fixing"})
"""Roles whose answer is a SQL query, constrained by the schema grammar by default."""

_LOCAL_CLASSES = frozenset({"ChatLlamaCpp", "ChatOllama"})
_TRANSIENT_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
_TRANSIENT_NAMES = (
    "ratelimit", "timeout", "connection", "serviceunavailable", "internalserver", "overloaded",
    "apiconnection", "temporarily",
)


class ModelCallError(SqlchorusError, RuntimeError):
    """A model call that raised or returned nothing usable."""

    kind = "model_failed"
    exit_code = EXIT_NO_ANSWER
    http_status = 502

    def __init__(self, message: str, usage: UsageRecord | None = None):
        super().__init__(message)
        self.usage = usage


class ModelAuthError(SqlchorusError, RuntimeError):
    """A provider refused the credentials (401, 403): a configuration error, not a failed
    answer. It is not caught by the nodes, so the run stops at the first such call instead of
    every node meeting it in turn."""

    kind = "model_auth"
    http_status = 502


_AUTH_STATUS = frozenset({401, 403})
_AUTH_NAMES = ("authentication", "permissiondenied", "unauthorized", "forbidden")


def is_auth_error(error: BaseException) -> bool:
    """Whether a provider error says the credentials were refused."""
    return _says(error, _AUTH_STATUS, _AUTH_NAMES)


def _says(error: BaseException, statuses: frozenset[int], names: tuple[str, ...]) -> bool:
    """Whether a provider error has one of ``statuses`` as its HTTP status, or a class name
    with one of ``names`` in it (providers' SDKs name their errors, not all give a status)."""
    status = getattr(error, "status_code", None) or getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(status, int) and status in statuses:
        return True
    name = type(error).__name__.lower()
    return any(part in name for part in names)


class TransientModelError(SqlchorusError, RuntimeError):
    """A failure worth retrying (raise it from a custom model to get retries)."""

    kind = "model_transient"
    http_status = 502


class ModelTimeoutError(SqlchorusError, TimeoutError):
    """A model call that took longer than its time budget."""

    kind = "model_timeout"
    http_status = 504


def is_transient(error: BaseException) -> bool:
    """Whether a provider error is worth retrying: rate limits, timeouts, lost connections,
    server errors."""
    if isinstance(error, (TimeoutError, ConnectionError, TransientModelError)):
        return True
    return _says(error, _TRANSIENT_STATUS, _TRANSIENT_NAMES)


def call_model(
    context: Context,
    *,
    role: str,
    node: str,
    prompt: str | list[BaseMessage],
    system: str | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    sample: int | None = None,
    constrain_sql: bool | None = None,
    grammar_tables: Collection[str] | None = None,
) -> tuple[str, UsageRecord]:
    """Send ``prompt`` to the model for ``role`` and return its text and a usage record.

    Args:
        context: the run's context (models, settings, schema, tracer).
        role: the model role (see ``sqlchorus.config.settings.ROLES``).
        node: the calling node, for the usage record and the span.
        prompt: the prompt text, or a list of messages.
        system: a system message put first.
        temperature: this call's temperature, when not the run's.
        top_p: this call's nucleus-sampling bound, sent to models whose API takes it per call
            (:func:`takes_top_p`); None leaves the model's own.
        sample: which of several draws of the same prompt this is. At a temperature above 0,
            only calls that give it are cached (as separate entries), so that repeated samples
            are not collapsed into one.
        constrain_sql: constrain a grammar-capable model to one SELECT over the schema; None
            does so for the roles in :data:`SQL_ROLES`.
        grammar_tables: with ``Settings.grammar_scope = "from"``, the tables the query may read
            (the linked ones); every table when None.

    Raises:
        ModelCallError: the model raised (after retries); the message says which model and why.
    """
    settings = context.settings
    model = context.models[role]
    name = model_name(model)
    metadata = {PROMPT_KEY: getattr(prompt, "name", None), ROLE_KEY: role, NODE_KEY: node}
    messages: list[BaseMessage]
    if isinstance(prompt, str):
        messages = [HumanMessage(prompt)]
    else:
        messages = list(prompt)
    if system:
        messages.insert(0, SystemMessage(system))
    dialect = getattr(context.db, "dialect", "sqlite")
    if dialect != "sqlite":  # the templates speak SQLite: another engine's calls name it instead
        messages = [m.model_copy(update={"content": prompts.for_dialect(m.content, dialect)})
                    if isinstance(m.content, str) else m for m in messages]
    kwargs: dict[str, Any] = {}
    fixed = fixed_sampling(model)
    if temperature is not None and temperature != settings.temperature and not fixed:
        kwargs["temperature"] = temperature
    effective_temperature = settings.temperature if temperature is None else temperature
    if top_p is not None and takes_top_p(model) and not fixed:
        kwargs["top_p"] = top_p
    grammar = _grammar_for(context, model, role, constrain_sql, grammar_tables)
    if grammar:
        kwargs["grammar"] = grammar
    # A schema's grammar can be long: its digest, which both keys carry, is worked out once.
    digest = hashlib.sha256(grammar.encode()).hexdigest() if grammar else None
    cache, key = _cache_entry(context, role, model, messages, effective_temperature, sample, digest, top_p)
    log = context.calls
    # What the call log keeps of this request (read only where there is a log).
    recorded: dict[str, Any] = (
        {} if log is None else
        _recorded_request(role, node, messages, context.settings, effective_temperature, sample, digest, top_p)
    )
    node_span = trace.get_current_span()
    provider = provider_name(settings.model_for(role), model)
    content = content_mode(context.tracer)
    limit = int(getattr(settings, "trace_content_limit", DEFAULT_CONTENT_LIMIT))
    conventions = str(getattr(settings, "trace_conventions", OPENINFERENCE))
    # The GenAI conventions' name and kind for a call to a model: "chat {model}", a client span.
    # Its exceptions are recorded where they are met, once each: the provider's error, not the
    # ModelCallError that wraps it as well.
    with context.tracer.start_as_current_span(f"chat {name}", kind=trace.SpanKind.CLIENT,
                                              record_exception=False) as span:
        try:
            span.set_attribute(attrs.GEN_AI_OPERATION, "chat")
            span.set_attribute(attrs.GEN_AI_PROVIDER, provider)
            span.set_attribute(attrs.LLM_PROVIDER, _openinference_provider(provider))
            span.set_attribute(attrs.OPENINFERENCE_KIND, attrs.KIND_LLM)
            span.set_attribute(attrs.GEN_AI_REQUEST_MODEL, name)
            if not fixed:
                span.set_attribute(attrs.GEN_AI_REQUEST_TEMPERATURE, float(effective_temperature))
            if "top_p" in kwargs:
                span.set_attribute(attrs.GEN_AI_REQUEST_TOP_P, float(kwargs["top_p"]))
            if settings.max_tokens is not None:
                span.set_attribute(attrs.GEN_AI_REQUEST_MAX_TOKENS, int(settings.max_tokens))
            span.set_attribute(attrs.SQLCHORUS_ROLE, role)
            span.set_attribute(attrs.SQLCHORUS_NODE, node)
            span.set_attribute(attrs.SQLCHORUS_GRAMMAR, bool(grammar))
            if content != NONE:
                span.set_attribute(attrs.LLM_MODEL_NAME, name)
                span.set_attribute(attrs.LLM_INVOCATION_PARAMETERS, json.dumps(_invocation_parameters(
                    settings, None if fixed else effective_temperature, kwargs.get("top_p"), bool(grammar), sample)))
            set_messages(span, content, [(message_role(m.type), _text_of(m)) for m in messages],
                         limit=limit, conventions=conventions)
            try:
                tokens, budget, tokenizer = check_prompt(context, role, [str(m.content) for m in messages])
            except PromptBudgetError as e:
                span.record_exception(e)
                span.set_attribute(attrs.SQLCHORUS_ERROR, str(e))
                raise ModelCallError(str(e)) from e
            span.set_attribute(attrs.SQLCHORUS_PROMPT_TOKENS, tokens)
            span.set_attribute(attrs.SQLCHORUS_PROMPT_BUDGET, budget)
            span.set_attribute(attrs.SQLCHORUS_PROMPT_TOKENIZER, tokenizer)
            start = time.perf_counter()
            if log is not None:
                kept = log.answer(recorded["key"])
                if kept is not None:  # a replay (the answer this request had), or one typed by hand
                    served, how, was = kept
                    # A replayed answer carries the tokens the call it replays took (nothing was
                    # sent now: it costs nothing); a typed one has none.
                    took = ({"input_tokens": int(was.get("input_tokens") or 0),
                             "output_tokens": int(was.get("output_tokens") or 0)} if was else None)
                    usage = _usage(node, role, name, took, (time.perf_counter() - start) * 1000.0)
                    came: Literal["replayed", "typed"] = "replayed" if how == "replayed" else "typed"
                    usage[came] = True
                    usage.update({"cost_usd": 0.0, "priced": True})
                    _annotate(span, node_span, usage, cached=False, attempts=0)
                    span.set_attribute(attrs.SQLCHORUS_REPLAYED if how == "replayed" else attrs.SQLCHORUS_TYPED, True)
                    set_token_counts(span, content, usage["input_tokens"], usage["output_tokens"])
                    set_answer(span, content, served, limit=limit, conventions=conventions)
                    log.record({**recorded, "answer": served, "usage": usage})
                    return served, usage
                if log.live:  # a fresh sample was asked for: the response cache would give the old one
                    cache = None
            hit = _cache_get(cache, key, span)
            if hit is not None:
                latency = (time.perf_counter() - start) * 1000.0
                # The tokens are the replayed call's, so that a cached re-run counts what its
                # answers took; ``cached`` says none of them was sent again (the prompt's are
                # marked read from a cache), and the cost is nil.
                usage = _usage(node, role, name,
                               {"input_tokens": hit.input_tokens, "output_tokens": hit.output_tokens}, latency)
                usage["cached"] = True
                usage["cost_usd"] = 0.0
                usage["priced"] = True
                _annotate(span, node_span, usage, cached=True, attempts=0)
                span.set_attribute(attrs.GEN_AI_USAGE_CACHE_READ, usage["input_tokens"])
                span.set_attribute(attrs.SQLCHORUS_OUTPUT_CHARS, len(hit.text))
                set_token_counts(span, content, usage["input_tokens"], usage["output_tokens"], cached=True)
                set_answer(span, content, hit.text, limit=limit, conventions=conventions)
                if log is not None:
                    log.record({**recorded, "answer": hit.text, "usage": usage})
                return hit.text, usage
            attempts = [0]
            limiter, waited = context.model_limiter, [0.0]
            before_attempt = None
            if limiter is not None:
                limited = limit_name(settings.model_for(role), model)

                def before_attempt() -> None:
                    # Every attempt is a request the provider counts, a retry's too.
                    waited[0] += limiter.acquire(limited, tokens)

            try:
                runnable = model.bind(**kwargs) if kwargs else model
                reply = _invoke(runnable, messages, settings, metadata, own_retries=_has_own_retries(model),
                                keeps_time=bool(getattr(model, "keeps_time", False)), attempts=attempts,
                                before_attempt=before_attempt)
            except Exception as e:  # any provider failure: network, auth, rate limit, bad output
                latency = max(0.0, time.perf_counter() - start - waited[0]) * 1000.0
                if limiter is not None:
                    span.set_attribute(attrs.SQLCHORUS_RATE_LIMIT_WAIT_S, round(waited[0], 6))
                usage = _usage(node, role, name, None, latency)
                span.record_exception(e)
                span.set_attribute(attrs.SQLCHORUS_ERROR, str(e)[:500])
                span.set_attribute(attrs.ERROR_TYPE, type(e).__name__)
                span.set_attribute(attrs.SQLCHORUS_ATTEMPTS, attempts[0])
                # What is known of a call that got no answer: its prompt, as sqlchorus counted it.
                # An estimate, not what a provider billed: it stays out of the usage a dashboard
                # adds up (gen_ai.usage.*, llm.token_count.*), as it does of the run's usage.
                span.set_attribute(attrs.SQLCHORUS_USAGE_ESTIMATED, True)
                span.set_attribute(attrs.SQLCHORUS_USAGE_ESTIMATED_INPUT, tokens)
                set_llm_cost(span, usage)
                if is_auth_error(e):
                    raise ModelAuthError(
                        f"The {role} model ({name}) refused the credentials: {_describe(e)}. "
                        "Check the provider's API key."
                    ) from e
                raise ModelCallError(f"The {role} model ({name}) failed: {_describe(e)}", usage) from e
            latency = max(0.0, time.perf_counter() - start - waited[0]) * 1000.0
            if limiter is not None:
                span.set_attribute(attrs.SQLCHORUS_RATE_LIMIT_WAIT_S, round(waited[0], 6))
            usage = _usage(node, role, name, getattr(reply, "usage_metadata", None), latency)
            cost, priced = _cost(context.prices, model, name, usage)
            usage["cost_usd"] = cost
            usage["priced"] = priced
            text = _text_of(reply)
            _annotate(span, node_span, usage, cached=False, attempts=attempts[0], prices=context.prices)
            finish_reasons = _response_attributes(span, reply)
            span.set_attribute(attrs.SQLCHORUS_LATENCY_MS, round(latency, 3))
            span.set_attribute(attrs.SQLCHORUS_OUTPUT_CHARS, len(text))
            set_token_counts(span, content, usage["input_tokens"], usage["output_tokens"])
            set_answer(span, content, text, limit=limit, conventions=conventions,
                       finish_reason=finish_reasons[0] if finish_reasons else None)
            if cache is not None:
                try:
                    cache.put(key, name, text, usage["input_tokens"], usage["output_tokens"])
                except sqlite3.Error as e:  # a cache that cannot be written never fails a run
                    span.add_event("cache_error", {"message": str(e)[:300]})
            if log is not None:
                log.record({**recorded, "answer": text, "usage": usage})
            return text, usage
        except (ModelCallError, ModelAuthError):
            raise  # its cause is recorded on the span already
        except BaseException as e:
            # Anything else that ends the call (a bug, an interrupt): recorded once, here.
            if not isinstance(e, (GeneratorExit, GraphBubbleUp)):
                span.record_exception(e)
            raise


_OPENINFERENCE_PROVIDERS = {
    "azure.ai.openai": "azure", "azure.ai.inference": "azure", "aws.bedrock": "aws", "gcp.gemini": "google",
    "gcp.vertex_ai": "google", "gcp.gen_ai": "google", "mistral_ai": "mistralai", "x_ai": "xai",
}
"""GenAI provider names OpenInference's ``llm.provider`` spells otherwise; the rest are alike."""


def _openinference_provider(provider: str) -> str:
    return _OPENINFERENCE_PROVIDERS.get(provider, provider)


_LANGCHAIN_RUN_IDS = ("run-", "lc_run-", "lc_")
"""How LangChain names a message it made an id for (its run's), when the provider gave none."""


def _response_attributes(span: Any, reply: Any) -> list[str]:
    """The GenAI conventions' response attributes, from what the reply carries: the model that
    answered (``gen_ai.response.model``), the provider's response id and why generation stopped
    (``gen_ai.response.finish_reasons``). Returns the finish reasons."""
    meta = getattr(reply, "response_metadata", None) or {}
    if not isinstance(meta, dict):
        return []
    model = meta.get("model_name") or meta.get("model")
    if isinstance(model, str) and model:
        span.set_attribute(attrs.GEN_AI_RESPONSE_MODEL, model)
    response_id = meta.get("id") or getattr(reply, "id", None)
    if isinstance(response_id, str) and response_id and not response_id.startswith(_LANGCHAIN_RUN_IDS):
        span.set_attribute(attrs.GEN_AI_RESPONSE_ID, response_id)
    # OpenAI and llama.cpp say finish_reason, Anthropic stop_reason, Ollama done_reason.
    reason = meta.get("finish_reason") or meta.get("stop_reason") or meta.get("done_reason")
    reasons = [str(r) for r in reason if r] if isinstance(reason, (list, tuple)) else ([str(reason)] if reason else [])
    if reasons:
        span.set_attribute(attrs.GEN_AI_RESPONSE_FINISH_REASONS, reasons)
    return reasons


def limit_name(spec: Any, model: Any) -> str:
    """The name a model's limit is given under (``--model-limit NAME=...``): the ``provider:model``
    name the settings give it (``openai:gpt-4o``, ``python:package.module:factory``); for a model
    object, the name it was made from when it stands for a named one (a cluster's model on a node
    of its own, :mod:`sqlchorus.tools.models.cache`'s ``made_from``), else its provider's and its own
    name (a scripted model: ``scripted:<name>``)."""
    if isinstance(spec, str) and spec.strip():
        return spec.strip()
    made = model_identity(model).get("made_from")
    if isinstance(made, str) and made:
        return made
    return f"{provider_name(spec, model)}:{model_name(model)}"


def model_error(node: str, error: ModelCallError, *, prefix: str = "", suffix: str = "") -> ErrorRecord:
    """The error record of ``node``'s failed model call: ``prefix`` says which of its calls it
    was, ``suffix`` what the node does without the answer."""
    return {"node": node, "kind": "model", "message": f"{prefix}{error}{suffix}"}


def try_call_model(
    context: Context, usage: list[UsageRecord], errors: list[ErrorRecord], *, node: str,
    prefix: str = "", suffix: str = "", **call: Any,
) -> str | None:
    """:func:`call_model` for a node that goes on without the answer: the call's usage record
    goes into ``usage`` (a failed call's too, when it has one) and a failure into ``errors``
    (:func:`model_error`); the answer's text, or None when the call failed. ``call`` holds the
    other arguments of :func:`call_model`."""
    try:
        text, record = call_model(context, node=node, **call)
    except ModelCallError as e:
        usage.extend([e.usage] if e.usage else [])
        errors.append(model_error(node, e, prefix=prefix, suffix=suffix))
        return None
    usage.append(record)
    return text


def _recorded_request(
    role: str, node: str, messages: list[BaseMessage], settings: Any, temperature: float,
    sample: int | None, grammar_digest: str | None, top_p: float | None = None,
) -> dict[str, Any]:
    """A call as the run's call log keeps it. Its key leaves the model out, so that a replay
    with another model (or one that must not be called) still finds the answers."""
    params = {
        "temperature": temperature, "max_tokens": settings.max_tokens, "sample": sample, "grammar": grammar_digest,
    }
    if top_p is not None:  # only when asked for, so that the keys of earlier runs still match
        params["top_p"] = top_p
    return {
        "key": request_key(None, [*messages, HumanMessage(f"role={role}")], params),
        "role": role, "node": node, "messages": [[m.type, m.content] for m in messages], "params": params,
    }


def _invocation_parameters(settings: Any, temperature: float | None, top_p: float | None, grammar: bool,
                           sample: int | None) -> dict[str, Any]:
    """A call's parameters as OpenInference's ``llm.invocation_parameters`` shows them."""
    params: dict[str, Any] = {"max_tokens": settings.max_tokens}
    if temperature is not None:
        params["temperature"] = float(temperature)
    if top_p is not None:
        params["top_p"] = float(top_p)
    if grammar:
        params["grammar"] = True
    if sample is not None:
        params["sample"] = sample
    return params


def _cache_get(cache: Any, key: str, span: Any) -> Any:
    if cache is None:
        return None
    try:
        return cache.get(key)
    except sqlite3.Error as e:
        span.add_event("cache_error", {"message": str(e)[:300]})
        return None


def _annotate(span: Any, node_span: Any, usage: UsageRecord, *, cached: bool, attempts: int,
              prices: PriceTable | None = None) -> None:
    span.set_status(trace.Status(trace.StatusCode.OK))
    span.set_attribute(attrs.GEN_AI_USAGE_INPUT, usage["input_tokens"])
    span.set_attribute(attrs.GEN_AI_USAGE_OUTPUT, usage["output_tokens"])
    span.set_attribute(attrs.SQLCHORUS_COST_USD, usage["cost_usd"])
    span.set_attribute(attrs.SQLCHORUS_PRICED, usage["priced"])
    # What every OpenInference reader takes for the call's cost (nothing for an unpriced call:
    # an unknown cost is not $0); Phoenix 20.x prices the span itself, from its token counts.
    set_llm_cost(span, usage, prices)
    _langfuse_generation(span, usage, cached, prices)
    span.set_attribute(attrs.SQLCHORUS_CACHE_HIT, cached)
    span.set_attribute(attrs.SQLCHORUS_ATTEMPTS, attempts)
    span.set_attribute(attrs.SQLCHORUS_CALL_ID, usage["call"])  # its entry in the call log
    # The node's span adds up the cost of its model calls (a node may call several times).
    if node_span is not None and node_span.is_recording():
        before = (getattr(node_span, "attributes", None) or {}).get(attrs.SQLCHORUS_COST_USD, 0.0)
        node_span.set_attribute(attrs.SQLCHORUS_COST_USD, round(float(before) + usage["cost_usd"], 10))
        add_llm_cost(node_span, usage, prices)


def _langfuse_generation(span: Any, usage: UsageRecord, cached: bool, prices: PriceTable | None) -> None:
    """The call as Langfuse's OTLP endpoint reads a generation: its type, model, token and cost
    details (Langfuse prices nothing itself for a model it does not know; these are sqlchorus's)."""
    span.set_attribute(attrs.LANGFUSE_OBSERVATION_TYPE, "generation")
    span.set_attribute(attrs.LANGFUSE_MODEL_NAME, str(usage.get("model") or ""))
    tokens = {"input": int(usage["input_tokens"]), "output": int(usage["output_tokens"])}
    if cached:
        tokens["cache_read"] = tokens["input"]
    span.set_attribute(attrs.LANGFUSE_USAGE_DETAILS, json.dumps(tokens))
    cost = llm_cost(usage, prices)
    if cost is not None:
        named = {"prompt": "input", "completion": "output", "total": "total"}
        span.set_attribute(attrs.LANGFUSE_COST_DETAILS, json.dumps({named[k]: v for k, v in cost.items()}))


# -- cache --------------------------------------------------------------------------------------


def _cache_entry(
    context: Context, role: str, model: Any, messages: list[BaseMessage], temperature: float,
    sample: int | None, grammar_digest: str | None, top_p: float | None = None,
) -> tuple[Any, str]:
    settings = context.settings
    # Only models named by the settings are cached: a model object passed in may be scripted or
    # stateful, and is the caller's to cache.
    if context.cache is None or not isinstance(settings.model_for(role), str):
        return None, ""
    if temperature > 0 and sample is None:
        return None, ""
    params = {
        "temperature": temperature,
        "max_tokens": settings.max_tokens,
        "grammar": grammar_digest,
        "sample": sample if temperature > 0 else None,
    }
    if top_p is not None:
        params["top_p"] = top_p
    spec = settings.model_for(role)
    if spec.startswith("python:"):
        # Code's models are told apart by the code that makes them, not by the name they give
        # themselves: two factories may name their models alike and answer differently.
        params["model_spec"] = spec
    return context.cache, request_key(model, messages, params)


# -- sampling -------------------------------------------------------------------------------------

_TOP_P_CLASSES = frozenset({"ChatOpenAI", "AzureChatOpenAI"})
"""Provider chat models that pass a ``top_p`` given at call time on to their API."""


_FIXED_SAMPLING_PREFIXES = ("o1", "o3", "o4", "gpt-5")
"""OpenAI reasoning models: they refuse a temperature other than 1 and a top-p (``-chat``
variants excepted)."""


def takes_top_p(model: Any) -> bool:
    """Whether ``model`` takes a per-call ``top_p``: the OpenAI classes (and so OpenAI-compatible
    servers), or a model that says so with ``accepts_top_p``. Other providers keep their own
    (some refuse a temperature and a top-p in one request)."""
    return bool(getattr(model, "accepts_top_p", False)) or type(model).__name__ in _TOP_P_CLASSES


def fixed_sampling(model: Any) -> bool:
    """Whether ``model`` samples only with its own settings (an OpenAI reasoning model), so a
    call sends it no temperature or top-p of its own."""
    if type(model).__name__ not in _TOP_P_CLASSES:
        return False
    name = model_name(model).lower().rsplit("/", 1)[-1]
    return name.startswith(_FIXED_SAMPLING_PREFIXES) and "chat" not in name


# -- grammar ------------------------------------------------------------------------------------


def _grammar_for(
    context: Context, model: Any, role: str, constrain_sql: bool | None, tables: Collection[str] | None,
) -> str | None:
    if not context.settings.grammar or not getattr(model, "accepts_grammar", False):
        return None
    if not (role in SQL_ROLES if constrain_sql is None else constrain_sql):
        return None
    if context.schema is None or not context.schema.tables:
        return None
    if context.settings.grammar_scope == "from":
        known = {t.name.lower() for t in context.schema.tables}
        return scoped_grammar(context.schema, [t for t in tables or () if t.lower() in known] or None,
                              dialect=getattr(context.db, "dialect", "sqlite"))
    return schema_grammar(context.schema, dialect=getattr(context.db, "dialect", "sqlite"))


# -- retries and time budget ---------------------------------------------------------------------


def _has_own_retries(model: Any) -> bool:
    # A model object handed in with retries of its own keeps them; the ones sqlchorus builds
    # from a name have none in their SDK (see sqlchorus.core.models), so retries happen here.
    retries = getattr(model, "max_retries", None)
    return isinstance(retries, int) and retries > 0


def _invoke(
    runnable: Any, messages: list[BaseMessage], settings: Any, metadata: dict[str, Any], *, own_retries: bool,
    keeps_time: bool, attempts: list[int], before_attempt: Callable[[], None] | None = None,
) -> Any:
    """One model call under the time limit: every attempt ends, with an answer or an error, within
    ``settings.model_timeout_s`` of its start; a transient failure (a timeout among them) is
    tried again, up to ``settings.model_retries`` times, unless the model retries itself.
    ``before_attempt`` is called before each attempt, outside its time limit (it waits for the
    model's rate limits)."""
    # The call's own metadata joins what the caller's run already carries (LangGraph's node).
    config = merge_configs(ensure_config(), {"metadata": metadata})
    if keeps_time:
        # An in-process model that keeps the limit itself (see sqlchorus.core.local_model): not
        # retried, since it has no transient failures and a retry would only repeat the work.
        if before_attempt is not None:
            before_attempt()
        attempts[0] = 1
        return runnable.invoke(messages, config, timeout_s=settings.model_timeout_s)

    def once(msgs: list[BaseMessage]) -> Any:
        if before_attempt is not None:
            before_attempt()
        attempts[0] += 1
        return _with_timeout(lambda m: runnable.invoke(m, config), msgs, settings.model_timeout_s)

    call: Any = RunnableLambda(once)
    if settings.model_retries > 0 and not own_retries:
        call = call.with_retry(
            retry_if_exception_type=is_transient,
            stop_after_attempt=settings.model_retries + 1,
            wait_exponential_jitter=True,
            exponential_jitter_params={
                "initial": settings.retry_backoff_s,
                "max": max(30.0, settings.retry_backoff_s),
                "jitter": settings.retry_backoff_s / 2,
            },
        )
    return call.invoke(messages)


def _with_timeout(fn: Any, arg: Any, timeout_s: float) -> Any:
    """``fn(arg)``, given up after ``timeout_s``.

    For models that talk to a provider over the network: a call that overruns finishes in a
    daemon thread and its result is dropped (the provider's own timeout, set to the same limit,
    ends its request). In-process models keep their own time instead.
    """
    try:
        return run_within(lambda: fn(arg), timeout_s, name="sqlchorus-model-call")
    except Overran as e:
        raise ModelTimeoutError(str(e)) from None


# -- cost -----------------------------------------------------------------------------------------


def _cost(prices: PriceTable, model: Any, name: str, usage: UsageRecord) -> tuple[float, bool]:
    if type(model).__name__ in _LOCAL_CLASSES:
        return 0.0, True
    cost = prices.cost(name, usage["input_tokens"], usage["output_tokens"])
    return (0.0, False) if cost is None else (round(cost, 10), True)


# -- replies ---------------------------------------------------------------------------------------


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
        # Names the call in the run's call log, where its prompt and answer are kept.
        call=uuid.uuid4().hex[:12],
    )
