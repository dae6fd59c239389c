"""Model-call spans that are whole, stored once, priced and true: each message whole up to
``trace_content_limit`` and said so when cut, written once in ``trace_conventions``; OpenInference's
``llm.cost.*`` from sqlchorus's price table; a cached call's tokens marked cached, a failed call's
only as an estimate, one exception event per failure; the response's own attributes; and the
service name the OpenTelemetry variables give."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sqlchorus
from sqlchorus.core.tracing import RunTracer
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import ScriptedChatModel, oracle_model
from sqlchorus.tools.tracing.content import (
    DEFAULT_CONTENT_LIMIT,
    MAX_VALUE_CHARS,
    PREVIEW_CHARS,
    TRUNCATION_MARK,
    llm_cost,
    set_llm_cost,
)

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"
LONG_HINT = "The hint says " + "customers are the people and companies who bought something from us; " * 105
"""About 7,500 characters (a hint may have 8,000): with it, every prompt is past the former 8 KB cut."""
PRICE = {"input": 3.0, "output": 15.0}


def llm_spans(exporter):
    return [s for s in exporter.get_finished_spans() if s.attributes.get("openinference.span.kind") == "LLM"]


def ask(exporter, *, model=None, evidence="", **settings):
    settings.setdefault("trace_dir", None)
    settings.setdefault("checkpoints", None)
    return sqlchorus.ask(QUESTION, model=model or oracle_model(GOLD.get), evidence=evidence, exporters=[exporter],
                         settings=sqlchorus.Settings(**settings))


def prices_file(tmp_path, name="scripted-oracle"):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"models": {name: PRICE}}), encoding="utf-8")
    return str(path)


# -- whole, once, and said so when cut ------------------------------------------------------------


def test_a_prompt_past_8kb_is_whole_once_and_input_value_is_short(spans):
    assert DEFAULT_CONTENT_LIMIT >= 256 * 1024
    result = ask(spans, evidence=LONG_HINT)
    assert result.ok
    hinted = [s for s in llm_spans(spans) if LONG_HINT in s.attributes["llm.input_messages.0.message.content"]]
    assert hinted
    for span in hinted:
        a = span.attributes
        prompt = a["llm.input_messages.0.message.content"]
        assert len(prompt) == a["sqlchorus.prompt.chars"] > MAX_VALUE_CHARS and not prompt.endswith(TRUNCATION_MARK)
        assert "sqlchorus.content.truncated" not in a
        # Stored once: no GenAI copy by default, and input.value a short form, not the prompt again.
        assert not [k for k in a if k.startswith("gen_ai.input") or k.startswith("gen_ai.output")]
        assert len(a["input.value"]) <= PREVIEW_CHARS + 100 and prompt.endswith(a["input.value"].split("]\n", 1)[1])
        total = sum(len(str(v)) for v in a.values())
        assert total < len(prompt) + 3 * PREVIEW_CHARS, total


def test_a_message_past_the_limit_is_cut_and_the_span_says_so(spans):
    result = ask(spans, evidence=LONG_HINT, trace_content_limit=4000)
    assert result.ok
    cut = [s for s in llm_spans(spans) if s.attributes.get("sqlchorus.content.truncated")]
    assert cut
    for span in cut:
        a = span.attributes
        content = a["llm.input_messages.0.message.content"]
        assert len(content) == 4000 and content.endswith(TRUNCATION_MARK)
        assert a["sqlchorus.content.limit"] == 4000
        assert a["sqlchorus.prompt.message_chars"] == (a["sqlchorus.prompt.chars"],)
        assert a["sqlchorus.prompt.chars"] > 4000
    whole = [s for s in llm_spans(spans) if not s.attributes.get("sqlchorus.content.truncated")]
    assert all(len(s.attributes["llm.input_messages.0.message.content"]) == s.attributes["sqlchorus.prompt.chars"]
               for s in whole)


@pytest.mark.parametrize("conventions", ["openinference", "genai", "both"])
def test_messages_are_written_in_the_conventions_asked_for(spans, conventions):
    result = ask(spans, trace_conventions=conventions)
    assert result.ok
    for span in llm_spans(spans):
        a = span.attributes
        oi = [k for k in a if k.startswith(("llm.input_messages.", "llm.output_messages."))]
        genai = [k for k in a if k in ("gen_ai.input.messages", "gen_ai.output.messages")]
        assert bool(oi) == (conventions != "genai") and bool(genai) == (conventions != "openinference")
        if genai:
            sent = json.loads(a["gen_ai.input.messages"])
            assert sent[0]["role"] == "user" and sent[0]["parts"][0]["content"]
            answered = json.loads(a["gen_ai.output.messages"])
            assert answered[0]["role"] == "assistant" and answered[0]["parts"][0]["content"]
            if oi:
                assert sent[0]["parts"][0]["content"] == a["llm.input_messages.0.message.content"]
        assert a["input.mime_type"] == "text/plain" and a["input.value"]


def test_the_limit_and_the_conventions_are_settings_options_and_variables(monkeypatch):
    from click.testing import CliRunner

    from sqlchorus.interfaces.cli import cli

    monkeypatch.setenv("SQLCHORUS_TRACE_CONTENT_LIMIT", "5000")
    monkeypatch.setenv("SQLCHORUS_TRACE_CONVENTIONS", "genai")
    settings = sqlchorus.Settings()
    assert (settings.trace_content_limit, settings.trace_conventions) == (5000, "genai")
    with pytest.raises(ValueError, match="trace conventions"):
        sqlchorus.Settings(trace_conventions="zipkin")
    out = CliRunner().invoke(cli, ["ask", "--help"], terminal_width=200).output
    assert "--trace-content-limit" in out and "--trace-conventions" in out


# -- cost -------------------------------------------------------------------------------------------


def test_every_priced_call_carries_llm_cost_that_adds_up_to_the_runs(spans, tmp_path):
    result = ask(spans, prices_file=prices_file(tmp_path))
    assert result.ok and result.cost["cost_usd"] > 0
    llm = llm_spans(spans)
    for span in llm:
        a = span.attributes
        assert a["llm.cost.total"] == pytest.approx(a["sqlchorus.cost_usd"], abs=1e-12)
        assert a["llm.cost.prompt"] == pytest.approx(a["gen_ai.usage.input_tokens"] * PRICE["input"] / 1e6)
        assert a["llm.cost.completion"] == pytest.approx(a["gen_ai.usage.output_tokens"] * PRICE["output"] / 1e6)
        assert a["llm.cost.prompt"] + a["llm.cost.completion"] == pytest.approx(a["llm.cost.total"], abs=1e-12)
    assert sum(s.attributes["llm.cost.total"] for s in llm) == pytest.approx(result.cost["cost_usd"], abs=1e-9)


def test_an_unpriced_call_claims_no_cost(spans):
    result = ask(spans)
    assert result.cost["unpriced_calls"] > 0
    for span in llm_spans(spans):
        assert span.attributes["sqlchorus.priced"] is False
        assert not [k for k in span.attributes if k.startswith("llm.cost.")]


class FakeSpan:
    def __init__(self):
        self.attributes = {}

    def set_attribute(self, key, value):
        self.attributes[key] = value


def test_the_cost_helper_takes_a_call_a_list_or_a_runs_cost_record():
    from sqlchorus.tools.models.pricing import PriceTable, usage_cost

    prices = PriceTable({"m": PRICE})
    call = {"node": "n", "model": "m", "input_tokens": 1000, "output_tokens": 100, "latency_ms": 1.0,
            "cost_usd": 0.0045, "priced": True}
    assert llm_cost(call, prices) == {"prompt": 0.003, "completion": 0.0015, "total": 0.0045}
    assert llm_cost(call) == {"total": 0.0045}  # no price table: the total alone
    cached = {**call, "cost_usd": 0.0, "cached": True}
    unpriced = {**call, "model": "x", "cost_usd": 0.0, "priced": False}
    assert llm_cost(cached, prices) == {"prompt": 0.0, "completion": 0.0, "total": 0.0}
    assert llm_cost(unpriced, prices) is None
    assert llm_cost([call, call, unpriced], prices) == {"prompt": 0.006, "completion": 0.003, "total": 0.009}
    assert llm_cost(usage_cost([call, unpriced])) == {"total": 0.0045}
    assert llm_cost(usage_cost([unpriced])) is None
    span = FakeSpan()
    set_llm_cost(span, [call, cached], prices)
    assert span.attributes == {"llm.cost.prompt": 0.003, "llm.cost.completion": 0.0015, "llm.cost.total": 0.0045}
    span = FakeSpan()
    set_llm_cost(span, usage_cost([unpriced]))
    assert span.attributes == {}


# -- tokens that are true ---------------------------------------------------------------------------


def test_a_cached_call_carries_the_replayed_tokens_marked_cached_at_no_cost(tmp_path, named, monkeypatch):
    from sqlchorus.tools.models.pricing import Price

    monkeypatch.setattr("sqlchorus.tools.models.pricing.BUILTIN_PRICES", {"oracle": Price(1.0, 1.0)})
    model = oracle_model(GOLD.get, name="oracle")
    settings = {"model": named(model), "cache_path": str(tmp_path / "responses.sqlite")}
    first_spans, second_spans = InMemorySpanExporter(), InMemorySpanExporter()
    first = ask(first_spans, **settings)
    second = ask(second_spans, **settings)
    assert first.ok and second.ok and second.cost["cached_calls"] == second.cost["calls"] > 0
    tokens = ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "llm.token_count.prompt",
              "llm.token_count.completion")
    before, after = llm_spans(first_spans), llm_spans(second_spans)
    assert [[s.attributes[k] for k in tokens] for s in after] == [[s.attributes[k] for k in tokens] for s in before]
    for span in after:
        a = span.attributes
        assert a["sqlchorus.cache_hit"] is True and a["gen_ai.usage.input_tokens"] > 0
        assert a["gen_ai.usage.cache_read.input_tokens"] == a["gen_ai.usage.input_tokens"]
        assert a["llm.token_count.prompt_details.cache_read"] == a["llm.token_count.prompt"]
        assert (a["llm.cost.prompt"], a["llm.cost.completion"], a["llm.cost.total"]) == (0.0, 0.0, 0.0)
    for span in before:
        assert "llm.token_count.prompt_details.cache_read" not in span.attributes
        assert span.attributes["llm.cost.total"] > 0


def refusing_model():
    def refuse(messages):
        raise RuntimeError("the provider is down")

    return ScriptedChatModel(refuse)


def test_a_failed_call_keeps_its_estimate_out_of_billed_usage_and_records_one_exception(spans):
    result = ask(spans, model=refusing_model(), model_retries=0)
    assert not result.ok
    failed = llm_spans(spans)
    assert failed
    for span in failed:
        a = span.attributes
        assert span.status.status_code.name == "ERROR"
        assert a["sqlchorus.usage.estimated"] is True and a["sqlchorus.usage.estimated_input_tokens"] > 0
        assert not [k for k in a if k.startswith(("gen_ai.usage.", "llm.token_count."))]
        assert a["llm.cost.total"] == 0.0
        (event,) = span.events
        assert event.name == "exception" and event.attributes["exception.type"] == "RuntimeError"
        assert "the provider is down" in event.attributes["exception.message"]
    # The trace's usage, read back, counts no tokens for calls that got no answer, as the run does.
    assert result.cost["input_tokens"] == 0


def test_a_prompt_over_its_budget_records_one_exception(spans):
    result = ask(spans, evidence=LONG_HINT, max_prompt_tokens=600)
    assert not result.ok
    refused = [s for s in llm_spans(spans) if s.status.status_code.name == "ERROR"]
    assert refused
    for span in refused:
        assert [e.name for e in span.events] == ["exception"]


# -- the response, and who answered -----------------------------------------------------------------


class ProviderLike(ScriptedChatModel):
    """A scripted model whose replies carry what a provider's do: an id, the model that answered
    and why it stopped."""

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        result = super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
        message = result.generations[0].message
        reply = AIMessage(content=message.content, usage_metadata=message.usage_metadata, id="chatcmpl-42",
                          response_metadata={"model_name": "oracle-2025-01-01", "finish_reason": "stop"})
        return ChatResult(generations=[ChatGeneration(message=reply)])


def test_a_reply_names_its_model_id_and_finish_reason_and_the_request_its_max_tokens(spans):
    model = ProviderLike(oracle_model(GOLD.get).responses, name="oracle")
    result = ask(spans, model=model, max_tokens=333)
    assert result.ok
    for span in llm_spans(spans):
        a = span.attributes
        assert a["gen_ai.request.max_tokens"] == 333
        assert a["gen_ai.response.model"] == "oracle-2025-01-01" and a["gen_ai.request.model"] == "oracle"
        assert a["gen_ai.response.id"] == "chatcmpl-42"
        assert a["gen_ai.response.finish_reasons"] == ("stop",)


def test_a_scripted_reply_has_no_made_up_id(spans):
    assert ask(spans).ok
    for span in llm_spans(spans):
        assert "gen_ai.response.id" not in span.attributes  # LangChain's run ids are not a provider's
        assert span.attributes["gen_ai.response.model"] == "scripted-oracle"


FACTORY = '''
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}


def oracle():
    return oracle_model(GOLD.get, name="oracle")
'''


def test_a_model_made_by_code_names_its_own_provider(spans, tmp_path, monkeypatch):
    (tmp_path / "made_by_code.py").write_text(FACTORY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = sqlchorus.ask(QUESTION, exporters=[spans], settings=sqlchorus.Settings(
        model="python:made_by_code:oracle", trace_dir=None, checkpoints=None, cache=False))
    assert result.ok
    for span in llm_spans(spans):
        assert span.attributes["gen_ai.provider.name"] == span.attributes["llm.provider"] == "scripted"


def test_provider_names_follow_the_conventions():
    from langchain_openai import ChatOpenAI

    from sqlchorus.core.llm import _openinference_provider
    from sqlchorus.core.models import provider_name

    openai = ChatOpenAI(model="gpt-4o", api_key="k")
    assert provider_name(openai, openai) == "openai"
    assert provider_name("python:pkg.models:make", openai) == "openai"
    assert provider_name("anthropic:claude-haiku-4-5", None) == "anthropic"
    assert provider_name("python:pkg.models:make", object()) == "make"
    assert _openinference_provider("aws.bedrock") == "aws" and _openinference_provider("openai") == "openai"


# -- the resource -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("service", "attributes", "expected"), [
    (None, None, "sqlchorus"),
    (None, "service.name=from-attributes,deployment.environment=prod", "from-attributes"),
    ("from-service-name", "service.name=from-attributes", "from-service-name"),
    (None, "deployment.environment=prod", "sqlchorus"),
])
def test_the_service_name_follows_the_opentelemetry_variables(monkeypatch, service, attributes, expected):
    for name, value in (("OTEL_SERVICE_NAME", service), ("OTEL_RESOURCE_ATTRIBUTES", attributes)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    tracer = RunTracer(trace_dir=None)
    try:
        resource = tracer.provider.resource.attributes
        assert resource["service.name"] == expected
        assert resource["sqlchorus.run_id"] == tracer.run_id
        if attributes and "deployment.environment" in attributes:
            assert resource["deployment.environment"] == "prod"
    finally:
        tracer.provider.shutdown()


def test_node_and_run_spans_add_up_their_calls_llm_cost():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from sqlchorus.tools.tracing import attributes as attrs
    from sqlchorus.tools.tracing.content import add_llm_cost, set_llm_cost

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    calls = [{"cost_usd": 0.25, "priced": True, "input_cost_usd": 0.2, "output_cost_usd": 0.05},
             {"cost_usd": 0.5, "priced": True, "input_cost_usd": 0.3, "output_cost_usd": 0.2},
             {"cost_usd": 0.0, "priced": False}]
    with tracer.start_as_current_span("run") as run:
        with tracer.start_as_current_span("node") as node:
            for call in calls:
                add_llm_cost(node, call)
        set_llm_cost(run, calls)
    spans = {s.name: dict(s.attributes) for s in exporter.get_finished_spans()}
    for name in ("node", "run"):
        assert spans[name][attrs.LLM_COST_TOTAL] == pytest.approx(0.75)
        assert spans[name][attrs.LLM_COST_PROMPT] == pytest.approx(0.5)
        assert spans[name][attrs.LLM_COST_COMPLETION] == pytest.approx(0.25)
