"""Every span of a run carries ``session.id``, the run's thread: a replay and a debugging session
of a run share its id, so a dashboard groups them; the debugger sends its spans over OTLP when
asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sqlchorus
from conftest import WAIT_S
from sqlchorus.runs.debugger import Debugger
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"


def file_spans(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def session(tmp_path):
    with sqlchorus.Session(sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path))) as s:
        yield s


def test_a_run_and_its_replay_share_a_session(session, demo_db, spans):
    first = session.ask(QUESTION, demo_db, exporters=[spans])
    assert first.ok
    finished = spans.get_finished_spans()
    assert finished and {s.attributes["session.id"] for s in finished} == {first.run_id}
    replayed = session.replay(first.run_id)
    assert replayed.ok and replayed.run_id != first.run_id
    replay_spans = file_spans(replayed.trace_path)
    assert replay_spans
    assert {s["attributes"]["session.id"] for s in replay_spans} == {first.run_id}
    (root,) = [s for s in replay_spans if s["name"] == "replay"]
    assert root["attributes"]["sqlchorus.replay_of"] == first.run_id
    assert root["attributes"]["sqlchorus.run_id"] == replayed.run_id


def test_a_debugging_session_of_a_run_shares_its_session(session, demo_db):
    first = session.ask(QUESTION, demo_db)
    debugger = Debugger.open(first.run_id, session=session)
    path = debugger.tracer.path
    assert debugger.tracer.session_id == first.run_id
    debugger.fork(debugger.history()[1]["id"])
    debugger.step()  # a session that runs nothing has no spans (see test_run_spans)
    debugger.close()
    spans = file_spans(path)
    assert spans and {s["attributes"]["session.id"] for s in spans} == {first.run_id}


def test_the_debugger_exports_over_otlp(tmp_path, demo_db, monkeypatch):
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from test_otel_environment import OTEL_VARIABLES, start_collector

    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", str(WAIT_S))
    base, received, stop = start_collector()
    try:
        settings = sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path),
                                      otlp_endpoint=base + "/v1/traces")
        with sqlchorus.Session(settings) as s:
            debugger = Debugger.start(QUESTION, demo_db, session=s)
            assert debugger.step() == ["extract_keywords"]
            run_id = debugger.run_id
            debugger.close()
            assert not debugger.tracer.problems
    finally:
        stop()
    assert received, "the debugger sent no spans"
    names, sessions = set(), set()
    for path, _, body in received:
        assert path == "/v1/traces"
        for resource_spans in ExportTraceServiceRequest.FromString(body).resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    names.add(span.name)
                    sessions |= {a.value.string_value for a in span.attributes if a.key == "session.id"}
    assert {"debug", "debug.start", "debug.step", "node:extract_keywords"} <= names
    assert sessions == {run_id}


def test_a_hosted_run_joins_the_host_thread(demo_db, tmp_path):
    graph = sqlchorus.graph_for(demo_db, model=oracle_model(GOLD.get),
                                settings=sqlchorus.Settings(trace_dir=str(tmp_path), checkpoints=None))
    out = graph.invoke({"question": QUESTION}, {"configurable": {"thread_id": "conversation-7"}})
    assert out["answer"]["sql"]
    (path,) = tmp_path.glob("*.jsonl")
    spans = file_spans(path)
    assert spans and {s["attributes"]["session.id"] for s in spans} == {"conversation-7"}


def test_a_debugging_session_run_to_its_end_shows_its_outcome(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session)
    assert debugger.cont() is None and debugger.finished
    path = debugger.tracer.path
    debugger.close()
    (root,) = [s for s in file_spans(path) if s["name"] == "debug"]
    output = json.loads(root["attributes"]["output.value"])
    assert output["sql"] == GOLD[QUESTION] and output["rows"] == [[debugger.result().rows[0][0]]]
    assert root["attributes"]["input.value"] == QUESTION and root["status"]["status_code"] == "OK"


def test_a_paused_debugging_session_claims_no_outcome(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session)
    debugger.step()
    path = debugger.tracer.path
    debugger.close()
    (root,) = [s for s in file_spans(path) if s["name"] == "debug"]
    assert "output.value" not in root["attributes"] and root["status"]["status_code"] == "OK"


def test_a_cancel_before_the_first_node_ends_the_run_with_its_result(session, demo_db):
    # Asked while the database was being prepared: the run stops at its first node, and says so.
    asked = session.ask(QUESTION, demo_db, cancelled=lambda: True)
    assert asked.error == "The run was cancelled." and asked.usage == []
    first = session.ask(QUESTION, demo_db)
    resumed = session.replay(first.run_id, cancelled=lambda: True)
    assert resumed.error == "The run was cancelled." and resumed.run_id != first.run_id


def test_a_replay_links_to_the_run_it_goes_on_with(session, demo_db, spans):
    first = session.ask(QUESTION, demo_db, exporters=[spans])
    (root,) = [s for s in spans.get_finished_spans() if s.name == "ask"]
    assert root.links == ()  # a new run comes from nowhere
    replayed_root = next(s for s in file_spans(session.replay(first.run_id).trace_path) if s["name"] == "replay")
    (link,) = replayed_root["links"]
    assert link["context"]["trace_id"] == f"0x{root.context.trace_id:032x}"
    assert link["context"]["span_id"] == f"0x{root.context.span_id:016x}"
