"""The standard OpenTelemetry environment reaches the OTLP exporter: OTEL_EXPORTER_OTLP_ENDPOINT
(with /v1/traces), OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS and
OTEL_SERVICE_NAME; an explicit endpoint wins. Real collector stand-ins on loopback."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

import sqlchorus
from conftest import WAIT_S
from sqlchorus.config.settings import Settings
from sqlchorus.core.tracing import otlp_endpoint_from_env
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import oracle_model

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"
OTEL_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_HEADERS",
                  "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_SERVICE_NAME")


def start_collector():
    """A loopback OTLP/HTTP collector: its base URL, what it received (path, headers, body), and
    a function that stops it."""
    received: list[tuple[str, dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # the http.server API
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            received.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop():
        server.shutdown()
        server.server_close()

    return f"http://127.0.0.1:{server.server_address[1]}", received, stop


@pytest.fixture
def collectors(monkeypatch):
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    # A busy machine may keep the collector's thread waiting past sqlchorus's own 2 s limit.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", str(WAIT_S))
    started = []

    def start():
        started.append(start_collector())
        return started[-1][:2]

    yield start
    for _, _, stop in started:
        stop()


def spans_of(received):
    """(service name, span name, attributes) of every span the collector received."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    out = []
    for _, _, body in received:
        for resource_spans in ExportTraceServiceRequest.FromString(body).resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = {a.key: a.value for a in span.attributes}
                    out.append((resource.get("service.name"), span.name, attributes))
    return out


def ask(**settings):
    result = sqlchorus.ask(QUESTION, model=oracle_model(GOLD.get), settings=Settings(trace_dir=None, **settings))
    assert result.ok
    assert not [e for e in result.errors if e["kind"] == "trace"], result.errors
    return result


def test_otlp_endpoint_headers_and_service_name_from_the_environment(collectors, monkeypatch):
    base, received = collectors()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", base + "/")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20secret-key,x-team=data")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "text2sql-prod")
    result = ask()
    assert received, "no export reached the collector"
    for path, headers, _ in received:
        assert path == "/v1/traces"
        assert headers["authorization"] == "Bearer secret-key" and headers["x-team"] == "data"
    spans = spans_of(received)
    assert {service for service, _, _ in spans} == {"text2sql-prod"}
    assert {"ask", "node:extract_keywords", "sql"} <= {name for _, name, _ in spans}
    assert {a["session.id"].string_value for _, _, a in spans} == {result.run_id}


def test_the_traces_endpoint_variable_is_used_as_it_is(collectors, monkeypatch):
    base, received = collectors()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", base + "/custom/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # the traces one wins
    ask()
    assert received and {path for path, _, _ in received} == {"/custom/traces"}
    assert {service for service, _, _ in spans_of(received)} == {"sqlchorus"}


def test_an_explicit_endpoint_wins_over_the_environment(collectors, monkeypatch):
    chosen, received = collectors()
    ignored, not_received = collectors()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", ignored)
    ask(otlp_endpoint=chosen + "/v1/traces")
    assert received and not not_received


def test_endpoint_from_the_environment(monkeypatch):
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert otlp_endpoint_from_env() is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otlp.example.com:4318/")
    assert otlp_endpoint_from_env() == "https://otlp.example.com:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://otlp.example.com/api/traces")
    assert otlp_endpoint_from_env() == "https://otlp.example.com/api/traces"
