"""Traces in Arize Phoenix: a real Phoenix server on loopback receives sqlchorus's spans over
OTLP/HTTP from the three front doors that run a graph (``sqlchorus.ask``, the debugger forking a
run, ``Session.replay``), and shows them for what they are.

Phoenix (~900 MB of dependencies) never enters the project's venv: the test installs
``arize-phoenix`` into a venv of its own in the user's cache folder (once; reused while it
imports), runs Phoenix's server with that venv's Python through ``phoenix_launcher.py`` (which
keeps Phoenix's gRPC receiver on loopback), and reads the spans back through ``phoenix.client``
in a subprocess of that Python that prints JSON. Without network the install fails and the test
skips, unless the run requires it (SQLCHORUS_REQUIRE_PHOENIX, as CI does), and then it fails.

Content attributes (``input.value``, ``output.value``, ``llm.input_messages``, ``session.id``)
come from ``Settings.trace_content`` (its default, ``all``): see the assertions marked CONTENT.

Phoenix prices a model call itself, from its token counts and a price table of its own (it does not
read ``llm.cost.*``): the second test gives Phoenix the price sqlchorus's table has for its model
and checks that Phoenix's cost of a run is ``sqlchorus ask --json``'s, and that a prompt past 8 KB
arrives whole.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import sqlchorus
from conftest import BROWSER_ARGS, WAIT_S, wait_for
from servers import START_TIMEOUT_S, free_port, stop
from sqlchorus.runs.debugger import Debugger
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import oracle_model

pytestmark = pytest.mark.slow

PHOENIX_VERSION = "20.26.1"
LAUNCHER = Path(__file__).resolve().parent / "phoenix_launcher.py"
INSTALL_TIMEOUT_S = 1800.0
"""Room for pip to fetch and install Phoenix (about a minute on a good connection)."""
READ_TIMEOUT_S = 300.0
"""Room for one read of the spans through Phoenix's client (imports pandas, one HTTP call)."""

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"
DEBUG_QUESTION = "What are the five most expensive products?"
KINDS = {"AGENT", "CHAIN", "LLM", "TOOL", "RETRIEVER"}

# What pip says when it cannot reach an index: then the test skips (unless required).
NO_NETWORK = ("NewConnectionError", "Temporary failure in name resolution", "Network is unreachable",
              "Name or service not known", "No route to host", "Connection refused", "ConnectionError",
              "ReadTimeoutError", "ConnectTimeoutError", "ProxyError", "Max retries exceeded",
              "No matching distribution found", "Could not find a version that satisfies")


# -- Phoenix: installed, started, read ----------------------------------------------------------


def _unavailable(reason: str) -> None:
    """Skip for lack of Phoenix, or fail when the run requires it."""
    if os.environ.get("SQLCHORUS_REQUIRE_PHOENIX"):
        pytest.fail(f"{reason}; this run requires the Phoenix test (SQLCHORUS_REQUIRE_PHOENIX).")
    pytest.skip(reason)


def phoenix_venv() -> Path:
    """Where Phoenix's own venv lives: $SQLCHORUS_PHOENIX_VENV, or a folder of the user's cache
    named after Phoenix's version and this Python's."""
    if os.environ.get("SQLCHORUS_PHOENIX_VENV"):
        return Path(os.environ["SQLCHORUS_PHOENIX_VENV"]).expanduser()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    tag = f"arize-phoenix-{PHOENIX_VERSION}-py{sys.version_info.major}{sys.version_info.minor}"
    return cache / "sqlchorus-test-phoenix" / tag


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _usable(venv: Path) -> bool:
    """Whether ``venv`` holds a finished install that imports Phoenix's server and client."""
    if not (venv / ".installed").exists() or not _python(venv).exists():
        return False
    check = subprocess.run([str(_python(venv)), "-c", "import phoenix.server.main, phoenix.client, grpc"],
                           check=False, capture_output=True, timeout=READ_TIMEOUT_S, env=_clean_env())
    return check.returncode == 0


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment for Phoenix's Python: nothing of the project's venv or of another Phoenix."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith("PHOENIX_")}
    env.update(extra)
    return env


def install_phoenix() -> Path:
    """Phoenix's Python, installing ``arize-phoenix`` into its venv first unless it is there."""
    venv = phoenix_venv()
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time; the others wait and reuse it
        if _usable(venv):
            return _python(venv)
        shutil.rmtree(venv, ignore_errors=True)  # a half-done or broken install
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True,
                       timeout=READ_TIMEOUT_S, env=_clean_env())
        try:
            pip = subprocess.run(
                [str(_python(venv)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                 f"arize-phoenix=={PHOENIX_VERSION}"],
                check=False, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, env=_clean_env())
        except subprocess.TimeoutExpired:
            shutil.rmtree(venv, ignore_errors=True)
            _unavailable(f"installing arize-phoenix=={PHOENIX_VERSION} took over {INSTALL_TIMEOUT_S:g} s")
        if pip.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            output = (pip.stdout + pip.stderr).strip()
            if any(sign in output for sign in NO_NETWORK):
                _unavailable(f"arize-phoenix=={PHOENIX_VERSION} could not be installed (no network?): "
                             f"{output[-800:]}")
            pytest.fail(f"pip could not install arize-phoenix=={PHOENIX_VERSION}: {output[-2000:]}")
        (venv / ".installed").write_text(PHOENIX_VERSION, encoding="utf-8")
        if not _usable(venv):
            pytest.fail(f"arize-phoenix=={PHOENIX_VERSION} installed in {venv} but does not import")
        return _python(venv)


class Phoenix:
    """A Phoenix server of the test's own: HTTP (UI, REST, OTLP/HTTP) and gRPC on loopback."""

    def __init__(self, python: Path, folder: Path):
        self.python = python
        self.folder = folder
        self.port, self.grpc_port = free_port(), free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.otlp = f"{self.base}/v1/traces"
        self.log_path = folder / "phoenix.log"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-4000:]

    @contextlib.contextmanager
    def running(self) -> Iterator[Phoenix]:
        env = _clean_env(
            PHOENIX_HOST="127.0.0.1", PHOENIX_PORT=str(self.port), PHOENIX_GRPC_PORT=str(self.grpc_port),
            PHOENIX_WORKING_DIR=str(self.folder / "working"), PHOENIX_TELEMETRY_ENABLED="false",
            PHOENIX_ALLOW_EXTERNAL_RESOURCES="false")
        with open(self.log_path, "w", encoding="utf-8") as log:
            process = subprocess.Popen([str(self.python), str(LAUNCHER), "serve"], cwd=self.folder, env=env,
                                       stdout=log, stderr=subprocess.STDOUT)
            try:
                deadline = time.monotonic() + START_TIMEOUT_S
                while True:
                    if process.poll() is not None:
                        raise RuntimeError(f"Phoenix exited ({process.returncode}): {self.log()}")
                    try:
                        if httpx.get(self.base + "/healthz", timeout=10).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"no Phoenix within {START_TIMEOUT_S:g} s: {self.log()}")
                    time.sleep(0.2)
                yield self
            finally:
                stop(process)

    def _ask(self, *args: str, project: str = "default") -> Any:
        out = subprocess.run([str(self.python), str(LAUNCHER), *args, self.base, project], check=False,
                             capture_output=True, text=True, timeout=READ_TIMEOUT_S, env=_clean_env())
        if out.returncode != 0:
            raise AssertionError(f"reading Phoenix failed: {out.stderr[-3000:]}")
        return json.loads(out.stdout)

    def spans(self, project: str = "default") -> list[dict[str, Any]]:
        """Every span of a project, as Phoenix's client gives them (one dict each)."""
        return self._ask("spans", project=project)

    def project_id(self, project: str = "default") -> str:
        return self._ask("project-id", project=project)

    def graphql(self, query: str, **variables: Any) -> dict[str, Any]:
        """Phoenix's GraphQL API (what its UI uses), answered or failed."""
        answer = httpx.post(f"{self.base}/graphql", json={"query": query, "variables": variables},
                            timeout=WAIT_S).json()
        if answer.get("errors"):
            raise AssertionError(f"Phoenix's GraphQL refused {query.split('(')[0]}: {answer['errors']}")
        return answer["data"]


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory) -> Iterator[Phoenix]:
    python = install_phoenix()
    with Phoenix(python, tmp_path_factory.mktemp("phoenix")).running() as server:
        yield server


# -- reading the spans --------------------------------------------------------------------------


def attribute(span: dict[str, Any], name: str) -> Any:
    """Attribute ``name`` of a span as Phoenix's dataframe gives it: a column
    ``attributes.<name>``, or a key inside a column of a prefix (``attributes.sqlchorus`` holds
    ``{"run_id": ...}``)."""
    if f"attributes.{name}" in span:
        return span[f"attributes.{name}"]
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        value = span.get("attributes." + ".".join(parts[:cut]))
        if isinstance(value, dict):
            for key in parts[cut:]:
                value = value.get(key) if isinstance(value, dict) else None
            return value
    return None


def runs_of(spans: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The spans of each run (its root span's ``sqlchorus.run_id``; a root span says what started
    the run in ``sqlchorus.origin``), found through parents."""
    by_id = {s["context.span_id"]: s for s in spans}

    def root(span):
        seen = set()
        while span.get("parent_id") in by_id and span["context.span_id"] not in seen:
            seen.add(span["context.span_id"])
            span = by_id[span["parent_id"]]
        return span

    runs: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        top = root(span)
        if attribute(top, "sqlchorus.origin"):
            runs.setdefault(attribute(top, "sqlchorus.run_id"), []).append(span)
    return runs


def orphans(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Spans whose parent is not among the spans."""
    ids = {s["context.span_id"] for s in spans}
    return [s for s in spans if s.get("parent_id") is not None and s["parent_id"] not in ids]


def describe(spans: list[dict[str, Any]]) -> str:
    return "\n".join(f"{s['name']} {s['span_kind']} {s['context.span_id']} <- {s.get('parent_id')}" for s in spans)


# -- the test -------------------------------------------------------------------------------------


def test_runs_replays_and_debugging_sessions_show_in_phoenix(phoenix, chromium, demo_db, tmp_path, monkeypatch):
    # Phoenix answers from another process, which a busy machine may keep waiting past
    # sqlchorus's own short limit on an export; that limit is not what this test is about.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", str(WAIT_S))
    settings = sqlchorus.Settings(model=oracle_model(GOLD.get), otlp_endpoint=phoenix.otlp,
                                  trace_dir=str(tmp_path / "traces"), checkpoints=str(tmp_path / "checkpoints.sqlite"))

    # 1. A run through the Python front door.
    asked = sqlchorus.ask(QUESTION, demo_db, settings=settings,
                          run_metadata={"evaluation": "phoenix-test", "question": 1})
    assert asked.ok and asked.sql == GOLD[QUESTION], asked.error

    # 2. A debugging session: step, break, edit a candidate, then fork an earlier checkpoint.
    with sqlchorus.Session(settings) as session:
        debugger = Debugger.start(DEBUG_QUESTION, demo_db, session=session, breakpoints=["check_candidates"])
        try:
            assert debugger.step() == ["extract_keywords"]
            early = debugger.checkpoint_id
            assert debugger.cont() == "check_candidates"
            (candidate,) = debugger.state("candidates")
            debugger.set("candidates", [{**candidate, "sql": "SELECT COUNT(*) FROM products", "status": "unchecked",
                                         "error": None, "row_count": None}])
            assert debugger.cont() is None and debugger.result().sql == "SELECT COUNT(*) FROM products"
            debugger.goto(early)
            debugger.clear()
            assert debugger.cont() is None and debugger.result().sql == GOLD[DEBUG_QUESTION]
            debug_id = debugger.run_id
        finally:
            debugger.close()

        # 3. A replay of the first run, from its call log.
        replayed = session.replay(asked.run_id)
    assert replayed.ok and replayed.sql == asked.sql and replayed.run_id != asked.run_id, replayed.error
    expected = {asked.run_id, debug_id, replayed.run_id}

    # Phoenix takes spans in asynchronously: wait until every run is there, each span's parent too.
    seen: dict[str, Any] = {}

    def arrived():
        spans = phoenix.spans()
        seen["spans"] = spans
        return spans if expected <= set(runs_of(spans)) and not orphans(spans) else None

    try:
        spans = wait_for(arrived, "the spans of the three runs in Phoenix", timeout_s=2 * WAIT_S)
    except AssertionError:
        spans = seen.get("spans", [])
        raise AssertionError(f"runs {sorted(expected)}, found {sorted(runs_of(spans))}; "
                             f"orphans:\n{describe(orphans(spans))}\nPhoenix's log:\n{phoenix.log()}") from None
    runs = runs_of(spans)

    # Nothing orphaned: each span's parent is among the spans (or it is a root), and every span
    # belongs to a run.
    assert not orphans(spans)
    assert sum(len(v) for v in runs.values()) == len(spans), describe(spans)

    # Each span is shown for what it is: the run an AGENT, nodes CHAINs, value retrieval a
    # RETRIEVER, model calls LLMs, statements TOOLs; no span without a kind or a status.
    for run_id in expected:
        run_spans = runs[run_id]
        kinds = {s["span_kind"] for s in run_spans}
        assert {"AGENT", "CHAIN"} <= kinds, (run_id, kinds)
        (top,) = [s for s in run_spans if s["parent_id"] is None]
        assert top["span_kind"] == "AGENT" and top["status_code"] == "OK"
    assert {s["span_kind"] for s in runs[asked.run_id]} == KINDS
    assert {s["span_kind"] for s in runs[debug_id]} == KINDS
    unknown = [s for s in spans if s["span_kind"] == "UNKNOWN" or s["status_code"] not in ("OK", "ERROR")]
    assert not unknown, [(s["name"], s["span_kind"], s["status_code"]) for s in unknown]
    for s in spans:
        name, kind = s["name"], s["span_kind"]
        if name.startswith("node:"):
            assert kind == ("RETRIEVER" if name == "node:retrieve_values" else "CHAIN"), (name, kind)
        elif name.startswith("chat "):
            assert kind == "LLM"
        elif name == "sql":
            assert kind == "TOOL" and attribute(s, "db.query.text")
    # Token counts on the model calls of the first run (the replay serves them from its log).
    llm = [s for s in runs[asked.run_id] if s["span_kind"] == "LLM"]
    assert llm and all(attribute(s, "gen_ai.usage.input_tokens") > 0 for s in llm)
    assert all(attribute(s, "gen_ai.usage.output_tokens") > 0 for s in llm)
    # The replay says what it replays.
    (replay_top,) = [s for s in runs[replayed.run_id] if s["parent_id"] is None]
    assert attribute(replay_top, "sqlchorus.replay_of") == asked.run_id

    # Each run is named for what started it, with the metadata and tags Phoenix shows and filters
    # by (OpenInference's ``metadata`` and ``tag.tags``).
    tops = {run_id: next(s for s in runs[run_id] if s["parent_id"] is None) for run_id in expected}
    for run_id, origin in ((asked.run_id, "ask"), (debug_id, "debug"), (replayed.run_id, "replay")):
        top = tops[run_id]
        assert top["name"] == origin and attribute(top, "sqlchorus.origin") == origin, (run_id, top["name"])
        metadata = attribute(top, "metadata")
        metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
        assert metadata["origin"] == origin and metadata["engine"] == "sqlite" and metadata["database"] == "demo"
        assert metadata["models"]["generation"] == "scripted-oracle", metadata
        tags = attribute(top, "tag.tags")
        assert list(tags)[:2] == [origin, "engine:sqlite"], tags
    asked_meta = attribute(tops[asked.run_id], "metadata")
    asked_meta = json.loads(asked_meta) if isinstance(asked_meta, str) else asked_meta
    assert asked_meta["question"] == 1 and asked_meta["evaluation"] == "phoenix-test"
    # The debugging session's commands, and the fetch of the answer's rows, say what they are.
    names = {s["name"] for s in runs[debug_id]}
    assert {"debug.start", "debug.step", "debug.continue"} <= names, names
    assert "answer.fetch_rows" in {s["name"] for s in runs[asked.run_id]}

    # CONTENT (Settings.trace_content): what a dashboard reads as a span's content.
    for run_id, question in ((asked.run_id, QUESTION), (replayed.run_id, QUESTION), (debug_id, DEBUG_QUESTION)):
        assert question in (attribute(tops[run_id], "input.value") or ""), (run_id, attribute(tops[run_id], "input.value"))
    for run_id, sql in ((asked.run_id, asked.sql), (replayed.run_id, replayed.sql)):
        assert sql in (attribute(tops[run_id], "output.value") or ""), (run_id, attribute(tops[run_id], "output.value"))
    # A debugging session stepped to its end says what it chose when it closes.
    assert GOLD[DEBUG_QUESTION] in (attribute(tops[debug_id], "output.value") or "")
    for s in (s for v in runs.values() for s in v if s["span_kind"] == "LLM"):
        messages = attribute(s, "llm.input_messages")
        assert messages and all(m.get("message.role") and m.get("message.content") for m in messages), s["name"]
    # One session: a run and its replay (one LangGraph thread), and each debugging session.
    for group, session_id in ((runs[asked.run_id] + runs[replayed.run_id], asked.run_id),
                              (runs[debug_id], debug_id)):
        assert {attribute(s, "session.id") for s in group} == {session_id}

    # Phoenix's trace view, in headless Chromium.
    from playwright.sync_api import sync_playwright

    shot, tree = tmp_path / "phoenix-traces.png", tmp_path / "phoenix-trace.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=BROWSER_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
            page.goto(f"{phoenix.base}/projects/{phoenix.project_id()}/traces", timeout=WAIT_S * 1000)
            page.get_by_text(DEBUG_QUESTION).first.wait_for(timeout=WAIT_S * 1000)
            page.screenshot(path=str(shot), full_page=True)
            # One trace opened: the debugging session's tree of spans.
            page.get_by_text(DEBUG_QUESTION).first.click()
            page.get_by_text("node:check_candidates").first.wait_for(timeout=WAIT_S * 1000)
            page.screenshot(path=str(tree))
        finally:
            browser.close()
    for path in (shot, tree):
        data = path.read_bytes()
        assert len(data) > 1000 and data.startswith(b"\x89PNG\r\n\x1a\n"), path


# -- whole prompts, and the run's cost as Phoenix computes it -------------------------------------

PRICED_MODEL = "phoenix-priced-oracle"
PRICE = {"input": 3.0, "output": 15.0}
"""US dollars per million tokens, in sqlchorus's price table (``--prices``) and in Phoenix's."""
COST_PROJECT = "sqlchorus-cost"
PROBE_PROJECT = "sqlchorus-price-probe"
LONG_HINT = "The hint says " + "customers are the people and companies who bought something from us; " * 105
"""About 7,500 characters: each prompt of the run is past the former 8 KB cut."""
FACTORY = f'''
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import oracle_model

GOLD = {{q["question"]: q["sql"] for q in load_demo_questions()}}


def oracle():
    return oracle_model(GOLD.get, name="{PRICED_MODEL}")
'''


def price_in_phoenix(phoenix: Phoenix, model: str, price: dict[str, float]) -> None:
    """Give Phoenix a price for ``model`` (as its Settings > Models page does), and wait until it
    prices spans with it (it reads its models every few seconds): a probe span of a project of
    its own, sent until Phoenix gives its trace a cost."""
    phoenix.graphql(
        "mutation($input: CreateModelMutationInput!) { createModel(input: $input) { model { id } } }",
        input={"name": model, "namePattern": f"^{model}$", "costs": [
            {"tokenType": "input", "costPerMillionTokens": price["input"], "kind": "PROMPT"},
            {"tokenType": "output", "costPerMillionTokens": price["output"], "kind": "COMPLETION"}]})
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    def probe() -> bool:
        provider = TracerProvider(resource=Resource.create({"openinference.project.name": PROBE_PROJECT}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=phoenix.otlp, timeout=WAIT_S)))
        with provider.get_tracer("probe").start_as_current_span("price probe") as span:
            span.set_attributes({"openinference.span.kind": "LLM", "llm.model_name": model,
                                 "llm.token_count.prompt": 1000, "llm.token_count.completion": 0})
            trace_id = format(span.get_span_context().trace_id, "032x")
        provider.shutdown()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the span is taken in asynchronously
            try:
                cost = trace_cost(phoenix, trace_id, PROBE_PROJECT)
            except AssertionError:  # the probe's project is not made yet
                cost = None
            if cost is not None:
                return cost > 0
            time.sleep(0.5)
        return False

    wait_for(probe, f"Phoenix to price {model}")


def trace_cost(phoenix: Phoenix, trace_id: str, project: str) -> float | None:
    """The total cost Phoenix computed for a trace, or None when it has none (not yet)."""
    data = phoenix.graphql(
        "query($id: ID!, $trace: ID!) { node(id: $id) { ... on Project { trace(traceId: $trace) {"
        " costSummary { total { cost } } } } } }", id=phoenix.project_id(project), trace=trace_id)
    found = (data.get("node") or {}).get("trace")
    return None if found is None else found["costSummary"]["total"]["cost"]


def spans_of_run(spans: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    """The spans of the trace whose root names ``run_id``."""
    roots = [s for s in spans if s.get("parent_id") is None and attribute(s, "sqlchorus.run_id") == run_id]
    return [s for s in spans if roots and s["context.trace_id"] == roots[0]["context.trace_id"]]


def test_a_long_prompt_arrives_whole_and_the_cost_is_asks(phoenix, demo_db, tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", str(WAIT_S))
    # The standard variable files the run's spans under a Phoenix project of their own.
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", f"openinference.project.name={COST_PROJECT}")
    (tmp_path / "priced_models.py").write_text(FACTORY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"models": {PRICED_MODEL: PRICE}}), encoding="utf-8")
    price_in_phoenix(phoenix, PRICED_MODEL, PRICE)

    from click.testing import CliRunner

    from sqlchorus.interfaces.cli import cli

    out = CliRunner().invoke(cli, [
        "ask", QUESTION, "--db", str(demo_db), "--evidence", LONG_HINT, "--model", "python:priced_models:oracle",
        "--prices", str(prices), "--otlp-endpoint", phoenix.otlp, "--no-trace", "--no-checkpoints", "--no-cache",
        "--json"])
    assert out.exit_code == 0, out.output
    asked = json.loads(out.output)
    assert asked["sql"] == GOLD[QUESTION] and asked["cost"]["cost_usd"] > 0 and not asked["cost"]["unpriced_calls"]

    def arrived():
        run = spans_of_run(phoenix.spans(COST_PROJECT), asked["run_id"])
        llm = [s for s in run if s["span_kind"] == "LLM"]
        return llm if len(llm) == asked["cost"]["calls"] else None

    llm = wait_for(arrived, "the run's model calls in Phoenix", timeout_s=2 * WAIT_S)
    # Every prompt, past 8 KB with the hint, arrives whole, once, and the model names its own provider.
    for span in llm:
        (message,) = attribute(span, "llm.input_messages")
        content = message["message.content"]
        assert len(content) == attribute(span, "sqlchorus.prompt.chars") > 8192, span["name"]
        assert LONG_HINT in content and not attribute(span, "sqlchorus.content.truncated")
        assert attribute(span, "llm.provider") == attribute(span, "gen_ai.provider.name") == "scripted"
        assert len(attribute(span, "input.value")) < 1200
    # Phoenix's cost of the run is ask's.
    assert trace_cost(phoenix, llm[0]["context.trace_id"], COST_PROJECT) == pytest.approx(
        asked["cost"]["cost_usd"], rel=1e-9, abs=1e-12)
    assert sum(attribute(s, "llm.cost.total") for s in llm) == pytest.approx(asked["cost"]["cost_usd"], abs=1e-12)
