"""Spans carry what a dashboard shows (OpenInference and GenAI content attributes), as much as
``trace_content`` allows: all, metadata (no rows, values or prompt text) or none."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import sqlchorus
from sqlchorus.interfaces.cli import cli
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import ScriptedChatModel, oracle_model
from sqlchorus.tools.tracing.content import MAX_VALUE_CHARS, TRUNCATION_MARK, as_json, bounded

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers live in New York?"

CONTENT_KEYS = ("input.value", "output.value", "input.mime_type", "output.mime_type", "llm.model_name",
                "llm.invocation_parameters", "llm.token_count.prompt", "gen_ai.input.messages",
                "gen_ai.output.messages", "sqlchorus.values")
CONTENT_PREFIXES = ("llm.input_messages.", "llm.output_messages.", "retrieval.documents.")


def run(tmp_path, mode: str, spans, **settings):
    """One run of the demo question (its value index built afresh, so that its build is traced)."""
    result = sqlchorus.ask(QUESTION, model=oracle_model(GOLD.get), exporters=[spans],
                           settings=sqlchorus.Settings(trace_dir=None, trace_content=mode,
                                                       value_cache_dir=str(tmp_path / f"values-{mode}"), **settings))
    assert result.ok and result.rows == [[20]]
    return result, spans.get_finished_spans()


def of_kind(spans, kind: str):
    return [s for s in spans if s.attributes.get("openinference.span.kind") == kind]


def message_texts(spans) -> list[str]:
    """Every message and answer text the model spans carry."""
    return [str(v) for s in of_kind(spans, "LLM") for k, v in s.attributes.items()
            if k.endswith(".message.content")]


def test_all_content_for_every_span_kind(tmp_path, spans):
    result, finished = run(tmp_path, "all", spans)
    names = {s.name for s in finished}
    assert "value_index.build" in names
    for span in finished:  # every span has a kind and the run's session
        assert span.attributes.get("openinference.span.kind"), span.name
        assert span.attributes["session.id"] == result.run_id, span.name

    (root,) = [s for s in finished if s.name == "ask"]
    a = root.attributes
    assert a["openinference.span.kind"] == "AGENT"
    assert a["input.value"] == QUESTION and a["input.mime_type"] == "text/plain"
    assert a["output.mime_type"] == "application/json"
    output = json.loads(a["output.value"])
    assert output["sql"] == result.sql and output["rows"] == [[20]] and output["row_count"] == 1

    nodes = [s for s in finished if s.name.startswith("node:")]
    assert nodes
    for node in nodes:
        shown = json.loads(node.attributes["input.value"])
        assert shown["question"] == QUESTION and "question" in shown["state_keys"]
        assert node.attributes["input.mime_type"] == "application/json"
        update = json.loads(node.attributes["output.value"])
        assert sorted(update) == sorted(node.attributes["sqlchorus.update_keys"])

    llm = of_kind(finished, "LLM")
    assert {s.attributes["sqlchorus.role"] for s in llm} >= {"keywords", "linking", "generation"}
    for span in llm:
        a = span.attributes
        assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == a["llm.model_name"]
        assert a["llm.input_messages.0.message.role"] == "user"
        assert a["llm.input_messages.0.message.content"]
        assert a["llm.output_messages.0.message.role"] == "assistant"
        assert a["llm.output_messages.0.message.content"] == a["output.value"]  # a short answer, shown whole
        assert a["llm.token_count.total"] == a["llm.token_count.prompt"] + a["llm.token_count.completion"]
        assert a["llm.token_count.prompt"] == a["gen_ai.usage.input_tokens"]
        assert a["llm.token_count.completion"] == a["gen_ai.usage.output_tokens"]
        assert "max_tokens" in json.loads(a["llm.invocation_parameters"])
        # The messages once, in OpenInference's convention (the default); input.value a short form.
        assert "gen_ai.input.messages" not in a and "gen_ai.output.messages" not in a
        prompt = a["llm.input_messages.0.message.content"]
        assert a["sqlchorus.prompt.chars"] == len(prompt) and a["sqlchorus.prompt.message_chars"] == (len(prompt),)
        shown = a["input.value"]  # the prompt when short, else its end after a line saying so
        assert shown == prompt or (len(shown) < len(prompt) and prompt.endswith(shown.split("]\n", 1)[1]))

    sql = [s for s in of_kind(finished, "TOOL") if s.name == "sql"]
    assert sql
    chosen = [s for s in sql if s.attributes["db.query.text"] == result.sql]
    assert chosen
    for span in chosen:
        a = span.attributes
        assert a["input.value"] == a["db.query.text"] and a["db.response.returned_rows"] == 1
        assert json.loads(a["output.value"])["rows"] == [[20]]

    (retriever,) = [s for s in finished if s.name == "node:retrieve_values"]
    assert retriever.attributes["openinference.span.kind"] == "RETRIEVER"
    assert retriever.attributes["retrieval.documents.0.document.content"].lower() == "new york"
    assert retriever.attributes["retrieval.documents.0.document.score"] > 0
    assert json.loads(retriever.attributes["retrieval.documents.0.document.metadata"])["column"].endswith("city")

    (build,) = [s for s in finished if s.name == "value_index.build"]
    assert build.attributes["openinference.span.kind"] == "CHAIN"
    assert build.status.status_code.name == "OK"


def test_metadata_keeps_structure_without_rows_values_or_prompt_text(tmp_path, spans):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    full = InMemorySpanExporter()
    run(tmp_path, "all", full)
    texts = [t for t in message_texts(full.get_finished_spans()) if len(t) > 30]
    assert texts
    _, finished = run(tmp_path, "metadata", spans)
    for span in finished:
        for key, value in span.attributes.items():
            assert not key.endswith((".message.content", ".document.content")), (span.name, key)
            assert key not in ("gen_ai.input.messages", "gen_ai.output.messages", "sqlchorus.values"), key
            assert not any(text in str(value) for text in texts), (span.name, key)
    (root,) = [s for s in finished if s.name == "ask"]
    output = json.loads(root.attributes["output.value"])
    assert "rows" not in output and output["row_count"] == 1 and output["sql"]
    for span in of_kind(finished, "LLM"):
        a = span.attributes
        assert a["llm.input_messages.0.message.role"] == "user" and a["llm.model_name"]
        assert a["llm.token_count.prompt"] > 0 and "llm.invocation_parameters" in a
        assert "input.value" not in a and "output.value" not in a
    for span in [s for s in finished if s.name == "sql"]:
        a = span.attributes
        assert a["input.value"] == a["db.query.text"]
        if "output.value" in a:
            assert "rows" not in json.loads(a["output.value"])
    for span in [s for s in finished if s.name.startswith("node:")]:
        assert set(json.loads(span.attributes["output.value"])) == {"keys"}
    (retriever,) = [s for s in finished if s.name == "node:retrieve_values"]
    assert retriever.attributes["retrieval.documents.0.document.score"] > 0


def test_none_adds_no_content_attribute(tmp_path, spans):
    result, finished = run(tmp_path, "none", spans)
    for span in finished:
        keys = set(span.attributes)
        assert not keys & set(CONTENT_KEYS), (span.name, keys & set(CONTENT_KEYS))
        assert not [k for k in keys if k.startswith(CONTENT_PREFIXES)], span.name
        assert span.attributes["session.id"] == result.run_id
        assert span.attributes.get("openinference.span.kind")
    # What spans carried before the choice existed is still there.
    llm = of_kind(finished, "LLM")
    assert all(s.attributes["gen_ai.usage.input_tokens"] > 0 for s in llm)
    assert any(s.attributes.get("db.query.text") == result.sql for s in finished if s.name == "sql")


def test_values_are_bounded_with_a_visible_mark():
    text = bounded("x" * (MAX_VALUE_CHARS * 3))
    assert len(text) == MAX_VALUE_CHARS and text.endswith(TRUNCATION_MARK)
    assert bounded("short") == "short"
    value, mime = as_json({"rows": [["y" * 1000]] * 500})
    assert len(value) <= MAX_VALUE_CHARS and value.endswith(TRUNCATION_MARK) and mime == "text/plain"
    value, mime = as_json({"rows": [[1, 2]]})
    assert json.loads(value) == {"rows": [[1, 2]]} and mime == "application/json"


def test_a_long_prompt_arrives_whole_on_the_model_span(tmp_path, spans):
    evidence = "The hint says " + "customers are people who bought something; " * 180  # about 8 KB
    sqlchorus.ask(QUESTION, model=oracle_model(GOLD.get), evidence=evidence, exporters=[spans],
                  settings=sqlchorus.Settings(trace_dir=None))
    finished = spans.get_finished_spans()
    (root,) = [s for s in finished if s.parent is None]  # the run's span
    assert json.loads(root.attributes["input.value"]) == {"question": QUESTION, "evidence": evidence}
    assert root.attributes["input.mime_type"] == "application/json"
    with_hint = [s for s in of_kind(finished, "LLM") if evidence in s.attributes["llm.input_messages.0.message.content"]]
    assert with_hint
    for span in with_hint:
        a = span.attributes
        assert len(a["llm.input_messages.0.message.content"]) == a["sqlchorus.prompt.chars"] > MAX_VALUE_CHARS
        assert "sqlchorus.content.truncated" not in a
        assert len(a["input.value"]) < 1200  # a short form, not the prompt again


def test_a_failed_model_call_records_its_prompt_tokens_as_an_estimate(spans):
    def refuse(messages):
        raise RuntimeError("the provider is down")

    result = sqlchorus.ask(QUESTION, model=ScriptedChatModel(refuse), exporters=[spans],
                           settings=sqlchorus.Settings(trace_dir=None, model_retries=0))
    assert not result.ok
    failed = of_kind(spans.get_finished_spans(), "LLM")
    assert failed
    for span in failed:
        a = span.attributes
        assert a["error.type"] == "RuntimeError"
        assert a["sqlchorus.usage.estimated_input_tokens"] == a["sqlchorus.prompt.tokens"] > 0
        assert a["sqlchorus.usage.estimated"] is True
        # An estimate is not billed usage: no dashboard adds it up.
        assert not [k for k in a if k.startswith(("gen_ai.usage.", "llm.token_count."))]
        assert a["llm.input_messages.0.message.content"]  # the prompt that got no answer
        assert [e.name for e in span.events] == ["exception"]
        assert span.events[0].attributes["exception.type"] == "RuntimeError"


def test_trace_content_is_a_setting_an_option_and_a_variable(monkeypatch):
    monkeypatch.setenv("SQLCHORUS_TRACE_CONTENT", "metadata")
    assert sqlchorus.Settings().trace_content == "metadata"
    assert sqlchorus.Settings(trace_content="none").trace_content == "none"
    with pytest.raises(ValueError, match="trace content"):
        sqlchorus.Settings(trace_content="everything")
    out = CliRunner().invoke(cli, ["ask", "--help"]).output
    assert "--trace-content" in out


class FakeSpan:
    def __init__(self):
        self.attributes = {}

    def set_attribute(self, key, value):
        self.attributes[key] = value


def test_long_messages_stay_json_when_cut():
    from sqlchorus.tools.tracing.content import set_answer, set_messages

    span = FakeSpan()
    escaped = 'a "quoted"\nline\t' * 2000  # escaping makes the JSON longer than the text
    set_messages(span, "all", [("system", escaped), ("user", "é" * 20_000), ("assistant", "short")],
                 limit=MAX_VALUE_CHARS, conventions="both")
    a = span.attributes
    parsed = json.loads(a["gen_ai.input.messages"])
    assert len(parsed) == 3 and parsed[2]["parts"][0]["content"] == "short"
    assert all(len(m["parts"][0]["content"]) <= MAX_VALUE_CHARS for m in parsed)
    assert a["input.mime_type"] == "text/plain" and len(a["input.value"]) < 1200
    assert a["llm.input_messages.1.message.role"] == "user"
    assert a["llm.input_messages.1.message.content"].endswith(TRUNCATION_MARK)
    assert a["sqlchorus.content.truncated"] is True and a["sqlchorus.content.limit"] == MAX_VALUE_CHARS
    assert a["sqlchorus.prompt.message_chars"] == [len(escaped), 20_000, 5]
    set_answer(span, "all", escaped, limit=MAX_VALUE_CHARS, conventions="both")
    assert json.loads(a["gen_ai.output.messages"])[0]["parts"][0]["content"].endswith(TRUNCATION_MARK)
    assert len(a["llm.output_messages.0.message.content"]) == MAX_VALUE_CHARS
    assert len(a["output.value"]) < 1200
