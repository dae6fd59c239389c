"""Every node execution is a span; every routing decision is a route event with its reason."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from click.testing import CliRunner

import sqlchorus
from conftest import spider_examples
from sqlchorus.config.settings import Settings
from sqlchorus.interfaces.cli import cli
from sqlchorus.testing import oracle_model


def fixer_run(spider, spans, tmp_path):
    examples = spider_examples("concert_singer")[:1]
    gold = {ex["question"]: ex["query"] for ex in examples}
    model = oracle_model(gold.get, first_answer=lambda q: "SELECT nme FROM singer")
    return sqlchorus.ask(examples[0]["question"], db=spider("concert_singer"), model=model,
                         settings=Settings(trace_dir=str(tmp_path / "traces")), exporters=[spans])


def summarize(finished):
    """Node spans in start order, and the route events as (from, to, reason) triples."""
    nodes = [s for s in sorted(finished, key=lambda s: s.start_time) if s.name.startswith("node:")]
    routes = [(dict(e.attributes)["from"], dict(e.attributes)["to"], dict(e.attributes)["reason"])
              for s in nodes for e in s.events if e.name == "route"]
    return [s.name for s in nodes], routes


def test_one_span_per_node_execution_and_fixer_routes(spider, spans, tmp_path):
    result = fixer_run(spider, spans, tmp_path)
    assert result.ok
    names, routes = summarize(spans.get_finished_spans())
    assert names == [
        "node:extract_keywords", "node:retrieve_values", "node:link_schema",
        "node:generate_divide_conquer", "node:check_candidates", "node:fix_candidates",
        "node:check_candidates", "node:select_candidate",
    ]
    assert [(f, t) for f, t, _ in routes] == [
        ("extract_keywords", "retrieve_values"), ("retrieve_values", "link_schema"),
        ("link_schema", "generate_divide_conquer"), ("generate_divide_conquer", "check_candidates"),
        ("check_candidates", "fix_candidates"), ("fix_candidates", "check_candidates"),
        ("check_candidates", "select_candidate"), ("select_candidate", "__end__"),
    ]
    fix_reason = routes[4][2]
    assert "round 1 of 3" in fix_reason and "no such column: nme" in fix_reason
    assert routes[6][2].startswith("all 1 candidate")


def test_model_and_sql_spans_are_children_of_their_node(spider, spans, tmp_path):
    fixer_run(spider, spans, tmp_path)
    finished = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}
    llm = [s for s in finished if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert Counter(s.attributes["sqlchorus.role"] for s in llm) == Counter(
        {"keywords": 1, "linking": 1, "generation": 1, "fixing": 1})
    for span in llm:
        # The GenAI conventions' name, kind and provider; OpenInference's kind.
        assert span.name == "chat scripted-oracle" and span.kind.name == "CLIENT"
        assert span.attributes["gen_ai.provider.name"] == "scripted"
        assert span.attributes["openinference.span.kind"] == "LLM" and span.status.status_code.name == "OK"
        assert by_id[span.parent.span_id].name.startswith("node:")
        assert span.attributes["gen_ai.usage.input_tokens"] > 0
        assert span.attributes["gen_ai.request.model"] == "scripted-oracle"
    failed = [s for s in finished if s.name == "sql" and "sql.error" in s.attributes]
    assert failed and by_id[failed[0].parent.span_id].name == "node:check_candidates"
    assert failed[0].attributes["db.query.text"] == "SELECT nme FROM singer"
    assert failed[0].attributes["openinference.span.kind"] == "TOOL" and failed[0].attributes["error.type"] == "execution"
    assert failed[0].status.status_code.name == "ERROR"
    ran = [s for s in finished if s.name == "sql" and "sql.error" not in s.attributes]
    assert all(s.attributes["db.response.returned_rows"] == s.attributes["sql.rows"] for s in ran)
    kinds = {s.name: s.attributes["openinference.span.kind"] for s in finished if s.name.startswith("node:")}
    assert kinds["node:retrieve_values"] == "RETRIEVER" and kinds["node:check_candidates"] == "CHAIN"
    assert all(s.status.status_code.name == "OK" for s in finished if s.name.startswith("node:"))
    run = [s for s in finished if s.name == "ask"]
    assert len(run) == 1 and all(s.context.trace_id == run[0].context.trace_id for s in finished)
    assert run[0].attributes["openinference.span.kind"] == "AGENT" and run[0].status.status_code.name == "OK"


def test_trace_file_and_trace_show(spider, spans, tmp_path):
    result = fixer_run(spider, spans, tmp_path)
    lines = open(result.trace_path).read().splitlines()
    assert len(lines) == len(spans.get_finished_spans())
    assert all(json.loads(line)["context"]["trace_id"] for line in lines)
    out = CliRunner().invoke(cli, ["trace", "show", result.run_id[:20], "--trace-dir", str(tmp_path / "traces")])
    assert out.exit_code == 0, out.output
    text = out.output
    assert text.startswith("ask ")
    assert "  node:fix_candidates" in text and "    chat scripted-oracle" in text and "fixing model" in text
    assert "-> fix_candidates  (round 1 of 3" in text
    assert "error: no such column: nme" in text


def test_trace_show_unknown_run(tmp_path):
    out = CliRunner().invoke(cli, ["trace", "show", "nope", "--trace-dir", str(tmp_path)])
    assert out.exit_code == 2
    assert "No trace for run 'nope'" in out.output


def test_every_model_call_of_every_generator_is_inside_its_node(spider, spans, tmp_path):
    """Generators that call models from worker threads (N-rep) still nest them under their node."""
    examples = spider_examples("concert_singer")[:1]
    gold = {ex["question"]: ex["query"] for ex in examples}
    result = sqlchorus.ask(examples[0]["question"], db=spider("concert_singer"), model=oracle_model(gold.get),
                           settings=Settings(preset="full", trace_dir=None), exporters=[spans])
    assert result.ok, result.error
    finished = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}
    llm = [s for s in finished if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(llm) == result.cost["calls"]
    parents = {by_id[s.parent.span_id].name for s in llm if s.parent is not None}
    assert all(s.parent is not None for s in llm)
    assert all(name.startswith("node:") for name in parents)
    assert "node:generate_nrep" in parents


@pytest.mark.parametrize(
    "line",
    [
        '{"name": "run", "context": {"span_id": "a"}, "start_time": "2026-01-01T00:00:00Z", "end_time": "2026-01-01T00:00:01Z", "status": "x"}',
        '{"name": "run", "context": {"span_id": "a"}, "start_time": "2026-01-01T00:00:00Z", "end_time": "2026-01-01T00:00:01Z", "attributes": [1]}',
        '{"name": "run", "context": {"span_id": "a"}, "start_time": "2026-01-01T00:00:00Z", "end_time": "2026-01-01T00:00:01Z", "events": [1]}',
        '{"name": 5, "context": {"span_id": "a"}, "start_time": "2026-01-01T00:00:00Z", "end_time": "2026-01-01T00:00:01Z"}',
        '{"name": "run", "context": {"span_id": ["a"]}, "start_time": "2026-01-01T00:00:00Z", "end_time": "2026-01-01T00:00:01Z"}',
        '{"name": "run", "context": {"span_id": "a"}, "start_time": "2026-01-01T00:00:00", "end_time": "2026-01-01T00:00:01Z"}',
        'not json at all',
    ],
)
def test_trace_show_damaged_file(tmp_path, line):
    path = tmp_path / "damaged.jsonl"
    path.write_text(line + "\n")
    out = CliRunner().invoke(cli, ["trace", "show", str(path)])
    assert out.exit_code == 2 and "is not a span" in out.output, out.output


def test_trace_show_missing_absolute_path_and_parent_cycle(tmp_path):
    out = CliRunner().invoke(cli, ["trace", "show", str(tmp_path / "none.jsonl")])
    assert out.exit_code == 2 and "No trace file at" in out.output
    path = tmp_path / "cycle.jsonl"
    span = '{{"name": "{n}", "context": {{"span_id": "{i}"}}, "parent_id": "{p}", "start_time": "2026-01-01T00:00:00Z", "end_time": "2026-01-01T00:00:01Z"}}'
    path.write_text(span.format(n="a", i="1", p="2") + "\n" + span.format(n="b", i="2", p="1") + "\n")
    out = CliRunner().invoke(cli, ["trace", "show", str(path)])
    assert out.exit_code == 0 and "a  1000.0 ms" in out.output and "b  1000.0 ms" in out.output


def test_a_run_that_raises_ends_its_span_as_an_error(demo_db):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    from sqlchorus.core.models import ModelConfigError
    from sqlchorus.testing import ScriptedChatModel

    class AuthenticationError(Exception):  # as providers' SDKs name a refused key
        status_code = 401

    def refuse(messages):
        raise AuthenticationError("Incorrect API key provided.")

    exporter = InMemorySpanExporter()
    with pytest.raises(ModelConfigError, match="Incorrect API key"):
        sqlchorus.ask("How many customers do we have?", db=demo_db, model=ScriptedChatModel(refuse),
                      settings=sqlchorus.Settings(trace_dir=None, checkpoints=None, model_retries=0),
                      exporters=[exporter])
    (run,) = [s for s in exporter.get_finished_spans() if s.name == "ask"]
    assert run.status.status_code == StatusCode.ERROR
    assert any(e.name == "exception" for e in run.events)
