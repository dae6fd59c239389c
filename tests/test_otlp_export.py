"""Spans reach an OTLP/HTTP endpoint when asked: a real collector stand-in on loopback."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

import sqlchorus
from conftest import WAIT_S
from sqlchorus.config.settings import Settings
from sqlchorus.testing import ScriptedChatModel

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")


class Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]] = []

    def do_POST(self):  # noqa: N802 - the http.server API
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Collector.received.append((self.path, self.headers.get("Content-Type", ""), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def collector():
    Collector.received = []
    server = HTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    server.shutdown()
    server.server_close()


def test_spans_are_exported_over_otlp_http(collector, demo_db, monkeypatch):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    # The collector answers from a thread of this process, which a busy machine may keep waiting
    # past sqlchorus's own 2 s limit on an export; that limit is not what this test is about.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", str(WAIT_S))
    model = ScriptedChatModel(["['customers']", "Schema_links: [customers.*]",
                               "**Final Optimized SQL Query:**\nSELECT count(*) FROM customers"])
    result = sqlchorus.ask("How many customers do we have?", db=demo_db, model=model,
                           settings=Settings(otlp_endpoint=collector, trace_dir=None))
    assert result.ok
    assert Collector.received, "no export reached the collector"
    names = set()
    for path, content_type, body in Collector.received:
        assert path == "/v1/traces" and content_type == "application/x-protobuf"
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                names |= {span.name for span in scope_spans.spans}
    assert {"ask", "node:extract_keywords", "node:select_candidate", "sql"} <= names
    assert any(name.startswith("chat ") for name in names)


def test_spans_carry_what_langfuse_reads(collector, demo_db, monkeypatch, tmp_path):
    """Langfuse's OTLP endpoint cannot run here: the collector stand-in receives what would reach it,
    read for the attributes Langfuse documents (trace name, session, tags and metadata; each model
    call a generation with its model, whole messages, token and cost details)."""
    import json

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from sqlchorus.tools.tracing import attributes as attrs

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", str(WAIT_S))
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"models": {"lf-model": {"input": 1.0, "output": 2.0}}}))
    model = ScriptedChatModel(["['customers']", "Schema_links: [customers.*]",
                               "**Final Optimized SQL Query:**\nSELECT count(*) FROM customers"], name="lf-model")
    result = sqlchorus.ask("How many customers do we have?", db=demo_db, model=model,
                           settings=Settings(otlp_endpoint=collector, trace_dir=None, trace_conventions="langfuse",
                                             prices_file=str(prices), cache=False),
                           run_metadata={"eval": "nightly"})
    assert result.ok
    spans = []
    for _, _, body in Collector.received:
        for resource_spans in ExportTraceServiceRequest.FromString(body).resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    values = {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in span.attributes}
                    spans.append((span.name, values))
    root = next(values for name, values in spans if name == "ask")
    assert root[attrs.LANGFUSE_TRACE_NAME] == "ask"
    assert root[attrs.SESSION_ID]
    assert root[attrs.LANGFUSE_TRACE_TAGS].values[0].string_value == "ask"  # the origin first
    assert root[f"{attrs.LANGFUSE_TRACE_METADATA}.eval"] == "nightly"
    generations = [values for name, values in spans if values.get(attrs.LANGFUSE_OBSERVATION_TYPE) == "generation"]
    assert len(generations) == 3
    total = 0.0
    for values in generations:
        assert values[attrs.LANGFUSE_MODEL_NAME] == "lf-model"
        messages = json.loads(values[attrs.LANGFUSE_OBSERVATION_INPUT])
        assert messages and all(m["content"] for m in messages)
        assert values[attrs.LANGFUSE_OBSERVATION_OUTPUT]
        usage = json.loads(values[attrs.LANGFUSE_USAGE_DETAILS])
        cost = json.loads(values[attrs.LANGFUSE_COST_DETAILS])
        assert usage["input"] > 0 and usage["output"] > 0
        assert cost["total"] == pytest.approx((usage["input"] * 1.0 + usage["output"] * 2.0) / 1e6)
        total += cost["total"]
        assert attrs.LLM_INPUT_MESSAGES + ".0.message.content" not in values  # stored once
    assert total == pytest.approx(result.cost["cost_usd"])
