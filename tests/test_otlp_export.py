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
