"""Shared fixtures: benchmark data, databases, scripted models, an in-memory span exporter, and
the loader of input/expected fixture files."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


WAIT_S = 120.0
"""Room for anything a test waits on (a run to end, a model to be called, a server to answer)
on a busy machine; a test never depends on how soon it comes."""


def wait_for(condition: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    """Poll ``condition`` until it gives something true, and return that; fail, saying ``what``
    was awaited, after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s:g} s for {what}")
        time.sleep(0.05)


def interruptible() -> None:
    """For a child process a test sends Ctrl-C: SIGINT back to its default, which Python turns
    into KeyboardInterrupt. A shell without job control starts background work with SIGINT
    ignored, and a child would inherit that; a terminal user's sqlchorus never has it so."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def data_dir() -> Path:
    return Path(os.environ.get("SQLCHORUS_DATA", REPO.parent / "shared" / "data")).resolve()


def repo_module(relative: str) -> Any:
    """A script of the repository (``scripts/load_spider_engines.py``, a benchmark) as a module,
    loaded once; scripts are not part of the package."""
    path = REPO / relative
    if path.stem not in sys.modules:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
    return sys.modules[path.stem]


def spider_loader() -> Any:
    """``scripts/load_spider_engines.py``: loads Spider databases into PostgreSQL and DuckDB."""
    return repo_module("scripts/load_spider_engines.py")


def spider_db(name: str) -> Path:
    return data_dir() / "spider" / "database" / name / f"{name}.sqlite"


def spider_examples(db_id: str) -> list[dict]:
    """Spider dev questions on one database, with their gold SQL."""
    with open(data_dir() / "spider" / "dev.json", encoding="utf-8") as f:
        return [ex for ex in json.load(f) if ex["db_id"] == db_id]


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass
class Pair:
    """One case of a fixture file: its name, its meta lines, its input and its expected text."""

    name: str
    meta: dict[str, str] = field(default_factory=dict)
    input: str = ""
    expected: str | None = None


_CASE = "-- case:"
_EXPECTED = "-- expected"
_META = re.compile(r"-- (?P<key>[a-z0-9_]+): ?(?P<value>.*)")


def _without_trailing_blank_lines(lines: list[str]) -> str:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return "\n".join(lines)


def load_pairs(path: str | Path) -> list[Pair]:
    """The cases of one fixture file, in file order.

    Every input/expected fixture of the test suite uses this one format::

        -- A free comment about the file: every line before the first case starts with "--"
        -- (blank lines there are ignored).

        -- case: <name>
        -- <key>: <value>
        <input, on one or more lines>
        -- expected
        <expected text, on one or more lines>

    * A case starts with a line ``-- case: <name>``; the name may be empty.
    * Right after it come optional meta lines ``-- <key>: <value>`` (the key is lowercase letters,
      digits and underscores), gathered in ``Pair.meta``; the first line that is not such a meta
      line starts the input.
    * The input runs until a line that is exactly ``-- expected``, or until the next ``-- case:``
      line or the end of the file; in that last case the case has no expected part and
      ``Pair.expected`` is None.
    * After ``-- expected``, the expected text runs until the next ``-- case:`` line or the end of
      the file.
    * Input and expected lose their trailing blank lines; every other line is kept as it is. An
      ``-- expected`` section with nothing in it gives the empty string.

    Raises ValueError, naming the file and line, for a malformed file: a line before the first
    case that is neither a ``--`` comment nor blank, a second ``-- expected`` in one case, a meta
    key given twice in one case, or a file without any case.
    """
    path = Path(path)
    pairs: list[Pair] = []
    section = None  # None before the first case, then "meta", "input" or "expected"
    input_lines: list[str] = []
    expected_lines: list[str] | None = None

    def close() -> None:
        if pairs:
            pairs[-1].input = _without_trailing_blank_lines(input_lines)
            if expected_lines is not None:
                pairs[-1].expected = _without_trailing_blank_lines(expected_lines)

    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        where = f"{path}:{number}"
        if line.startswith(_CASE):
            close()
            pairs.append(Pair(name=line[len(_CASE):].strip()))
            section, input_lines, expected_lines = "meta", [], None
            continue
        if section is None:
            if line.strip() and not line.startswith("--"):
                raise ValueError(
                    f"{where}: text before the first '-- case:' line must be a '--' comment, "
                    f"got {line!r}"
                )
            continue
        if section == "meta":
            meta = _META.fullmatch(line)
            if meta:
                key = meta["key"]
                if key in pairs[-1].meta:
                    raise ValueError(
                        f"{where}: meta key {key!r} given twice in case {pairs[-1].name!r}"
                    )
                pairs[-1].meta[key] = meta["value"].strip()
                continue
            section = "input"
        if line == _EXPECTED:
            if section == "expected":
                raise ValueError(f"{where}: a second '-- expected' line in case {pairs[-1].name!r}")
            section, expected_lines = "expected", []
        elif section == "input":
            input_lines.append(line)
        else:
            expected_lines.append(line)
    close()
    if not pairs:
        raise ValueError(f"{path}: no '-- case:' line, so no case")
    return pairs


@pytest.fixture(scope="session")
def spider():
    """A function from a Spider dev database name to its path; skips when the data is absent."""

    def get(name: str) -> Path:
        path = spider_db(name)
        if not path.exists():
            pytest.skip(f"Spider database {name} not found under {data_dir()}")
        return path

    return get


@pytest.fixture
def demo_db() -> Path:
    from sqlchorus.runs.demo import demo_db_path

    return demo_db_path()


SCRIPTED_FACTORIES = '''
"""Model factories for `--model python:scripted_factories:NAME` in tests that run the CLI."""
import os
import time
from pathlib import Path

from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import ScriptedChatModel, oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}


def oracle():
    return oracle_model(GOLD.get, name="oracle")


def refuse():
    def no(messages):
        raise AssertionError("this model must not be called")
    return ScriptedChatModel(no, name="refuses")


HOLD_LIMIT_S = 600.0


def held():
    """A model that never answers while the test runs: each call adds a line to $MODEL_CALLED,
    then waits for $MODEL_RELEASED, which the test's end creates (or HOLD_LIMIT_S, far beyond
    the 120 s model time limit, so that a call left behind still ends)."""
    def answer(messages):
        with open(os.environ["MODEL_CALLED"], "a", encoding="utf-8") as f:
            f.write("called\\n")
        released = Path(os.environ["MODEL_RELEASED"])
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not released.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return "never"
    return ScriptedChatModel(answer, name="held")
'''


@pytest.fixture
def factories_env(tmp_path) -> Iterator[dict[str, str]]:
    """An environment in which ``python:scripted_factories:oracle`` (or ``refuse``, ``held``)
    names a scripted model over the demo database's questions. A call of ``held`` shows in
    ``model_called(env)``; it is let go when the test ends."""
    (tmp_path / "scripted_factories.py").write_text(SCRIPTED_FACTORIES, encoding="utf-8")
    released = tmp_path / "model-released"
    yield {**os.environ, "PYTHONPATH": str(tmp_path), "COLUMNS": "200", "NO_COLOR": "1",
           "PROMPT_TOOLKIT_NO_CPR": "1", "MODEL_CALLED": str(tmp_path / "model-called"),
           "MODEL_RELEASED": str(released)}
    released.touch()


def model_called(env: dict[str, str]) -> bool:
    """Whether a model of ``factories_env`` (``held``) has been called."""
    return Path(env["MODEL_CALLED"]).exists()


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


NAMED_MODEL = "scripted:oracle"


def sampled_model(responses, **kw):
    """A scripted model whose API takes a per-call top-p, and that keeps each call's sampling
    arguments in ``sampling``: ``(node, temperature, top_p)``, None where the call left the
    model's own."""
    from pydantic import Field

    from sqlchorus.core.llm import NODE_KEY
    from sqlchorus.testing import ScriptedChatModel

    class Sampled(ScriptedChatModel):
        accepts_top_p: bool = True
        sampling: list = Field(default_factory=list)

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            node = (getattr(run_manager, "metadata", None) or {}).get(NODE_KEY)
            self.sampling.append((node, kwargs.get("temperature"), kwargs.get("top_p")))
            return super()._generate(messages, stop, run_manager, **kwargs)

    return Sampled(responses, **kw)


def chat_calls(spans, node=None):
    """Each model call's span, in order (of ``node`` only, when given), as ``(node,
    temperature, top_p, cache hit)``."""
    calls = [s for s in sorted(spans.get_finished_spans(), key=lambda s: s.start_time)
             if s.attributes.get("gen_ai.operation.name") == "chat"]
    return [
        (s.attributes.get("sqlchorus.node"), s.attributes["gen_ai.request.temperature"],
         s.attributes.get("gen_ai.request.top_p"), s.attributes["sqlchorus.cache_hit"])
        for s in calls if node is None or s.attributes.get("sqlchorus.node") == node
    ]


@pytest.fixture
def named(monkeypatch):
    """Give a scripted model a provider:model name (the kind the response cache keeps): settings
    name it, and resolving that name gives the scripted model."""
    from sqlchorus.core import models

    real = models.resolve_model

    def name(model):
        monkeypatch.setattr(models, "resolve_model", lambda spec, **kw: model if spec == NAMED_MODEL else real(spec, **kw))
        return NAMED_MODEL

    return name


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    # Value indexes go to a cache folder; tests must not write into the user's own.
    folder = tmp_path_factory.mktemp("cache")
    previous = os.environ.get("SQLCHORUS_CACHE")
    os.environ["SQLCHORUS_CACHE"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("SQLCHORUS_CACHE", None)
    else:
        os.environ["SQLCHORUS_CACHE"] = previous


@pytest.fixture(autouse=True)
def _fresh_response_cache(tmp_path, monkeypatch):
    # Every model the settings name is cached; each test starts with an empty response cache,
    # so that no answer leaks from one test into another (value indexes stay shared).
    monkeypatch.setattr("sqlchorus.tools.models.cache.default_cache_dir", lambda: tmp_path / "response-cache")


@pytest.fixture(autouse=True)
def _private_data_folder(tmp_path, monkeypatch):
    # A program's traces and checkpoints go to the per-user data folder: each test gets its own,
    # never the user's (subprocesses inherit it through the environment).
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "user-data"))


@pytest.fixture(autouse=True)
def _isolated_cwd(tmp_path, monkeypatch):
    # Runs write traces/ into the working directory by default; keep the repository clean.
    monkeypatch.chdir(tmp_path)


class Recorder:
    """A scripted responder around the oracle: records every prompt by role, and ``override``
    replaces the answer of a role (an exception in its place is raised, as a failing model)."""

    def __init__(self, gold, override=None, **oracle_kw):
        from sqlchorus.testing import oracle_model

        self.inner = oracle_model(gold.get, **oracle_kw).responses
        self.override = override or {}
        self.prompts: list[tuple[str | None, str]] = []

    def __call__(self, messages):
        from sqlchorus.testing import prompt_text, role_of_call

        text = prompt_text(messages)
        role = role_of_call()
        self.prompts.append((role, text))
        if role in self.override:
            answer = self.override[role]
            if isinstance(answer, Exception):
                raise answer
            return answer
        return self.inner(messages)

    def of(self, role):
        return [p for r, p in self.prompts if r == role]


def run_generator(fn, db_path, model, *, question, sample=0, links=None, inputs=None, **settings):
    """Run one generator node directly over a database, as its Send branch would; returns its
    update and the schema view it was given. ``inputs`` sets other keys of the branch's input
    (``values``, ``schema_links``)."""
    from types import SimpleNamespace

    from sqlchorus.config.settings import ROLES, Settings
    from sqlchorus.core.context import Context
    from sqlchorus.core.state import GeneratorInput
    from sqlchorus.tools.engines.sqlite import GuardedDatabase
    from sqlchorus.tools.schema.introspect import introspect
    from sqlchorus.tools.schema.views import render_view

    settings = Settings(trace_dir=None, cache=False, **settings)
    with GuardedDatabase(db_path) as db:
        schema = introspect(db, sample_values=settings.sample_values)
        context = Context(db=db, models={r: model for r in ROLES}, settings=settings, schema=schema)
        view = render_view(schema, settings.schema_format, sample_values=settings.sample_values)
        state = GeneratorInput(
            question=question, evidence="", keywords=[], values={}, links=links or {},
            schema_view=view, generator="", sample=sample,
        )
        state.update(inputs or {})
        return fn(state, SimpleNamespace(context=context)), view


@pytest.fixture
def offline_model():
    """Skips unless the local runtime and SmolLM2's weights are installed."""
    from sqlchorus.core.local_model import LocalModelError, find_smollm2, local_runtime

    if local_runtime() is None:
        pytest.skip("no local runtime is installed (pip install 'sqlchorus[local]')")
    try:
        find_smollm2()
    except LocalModelError as e:
        pytest.skip(str(e))


# -- a real headless Chromium, for the pages' tests ------------------------------------------

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--no-first-run", "--disable-sync", "--disable-quic"]


@pytest.fixture(scope="module")
def chromium() -> str:
    """The browser, checked before anything starts it: without it the browser tests skip, unless
    the run requires them (SQLCHORUS_REQUIRE_CHROMIUM), and then they fail."""
    require_slow("a headless Chromium")
    missing = None
    if not Path(CHROMIUM).exists():
        missing = "Chromium is not installed: apt-get install chromium"
    elif importlib.util.find_spec("playwright") is None:
        missing = "Playwright is not installed (the dev extra)"
    if missing:
        if os.environ.get("SQLCHORUS_REQUIRE_CHROMIUM"):
            pytest.fail(f"{missing}; this run requires the browser tests.")
        pytest.skip(missing)
    return CHROMIUM


@pytest.fixture(scope="module")
def browser(chromium):
    from playwright.sync_api import sync_playwright

    require_slow("a headless Chromium (Playwright)")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=chromium, args=BROWSER_ARGS)
        yield launched
        launched.close()


@contextlib.contextmanager
def watched_page(browser: Any, base: str, height: int = 800) -> Iterator[Any]:
    """A page of a 1280 px wide context that keeps every request it makes and every error its
    scripts raise; when the block ends, it must have asked for nothing outside ``base``'s origin,
    run no markup from a value, and logged no error."""
    from urllib.parse import urlsplit

    context = browser.new_context(viewport={"width": 1280, "height": height})
    opened = context.new_page()
    opened.requests, opened.problems = [], []
    opened.on("request", lambda r: opened.requests.append(r.url))
    opened.on("pageerror", lambda e: opened.problems.append(str(e)))
    opened.on("console", lambda m: opened.problems.append(m.text) if m.type == "error" else None)
    yield opened
    origin = urlsplit(base).netloc
    outside = [u for u in opened.requests if urlsplit(u).scheme not in ("data", "blob") and urlsplit(u).netloc != origin]
    assert outside == [], "the page asked for something outside its origin"
    assert opened.evaluate("window.__pwned === undefined"), "markup from a value ran"
    assert opened.problems == []
    context.close()


def screenshot(page: Any, name: str, tmp_path: Path) -> None:
    """A full-page screenshot ``name``.png in the test's folder (or $SQLCHORUS_SCREENSHOTS)."""
    folder = Path(os.environ.get("SQLCHORUS_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def area_tables(conn: Any, areas: tuple[str, ...], nouns: tuple[str, ...], attributes: tuple[str, ...]) -> list[str]:
    """A wide schema in ``conn``: a table ``<area>_<noun>`` for every area and noun, with an id,
    a ``<noun>_<attribute>`` text column per attribute, and (but the first of an area) a foreign
    key to its area's first table. Returns the tables' names."""
    names = []
    for area in areas:
        for i, noun in enumerate(nouns):
            parent = f", {area}_{nouns[0]}_id INTEGER REFERENCES {area}_{nouns[0]}(id)" if i else ""
            columns = ", ".join(f"{noun}_{a} TEXT" for a in attributes)
            conn.execute(f"CREATE TABLE {area}_{noun} (id INTEGER PRIMARY KEY, {columns}{parent})")
            names.append(f"{area}_{noun}")
    return names


# -- the quick tier starts no server -----------------------------------------------------------
#
# `make test-quick` (pytest -m "not slow") must start no server process and no browser: anything
# that does is marked slow and runs in `make test` and CI. This guard enforces it. Every process a
# test starts goes through subprocess.Popen's _execute_child (subprocess.run, asyncio's and
# anyio's subprocesses, Ray's and Playwright's launchers included); one whose command line is a
# server's (a database server, `sqlchorus serve|ui|mcp`, `ray start`, Ray's own daemons,
# `langgraph dev`, Phoenix, uvicorn, Chromium or Playwright's driver) fails a test that is not
# marked slow, as do servers.py's helpers, the `browser` and `chromium` fixtures and an
# in-process uvicorn. A fixture that started a server (under a slow test) fails any test not
# marked slow that uses it later, and a test whose code caught the guard's error still fails.
# A test's setup and call are watched, not its teardown (where servers are stopped). An HTTP
# fake served from a thread of the test process is no server process and is allowed.


class StartsAServer(Exception):
    """A test not marked slow started (or was about to start) a server or a browser."""


_STARTED = pytest.StashKey[str]()
_current: dict[str, Any] = {"item": None}
_fixtures_being_set_up: list[Any] = []
_server_fixtures: dict[Any, str] = {}
_to_completion = threading.local()

_SERVER_PROGRAMS = {
    "postgres", "pg_ctl", "pg_ctlcluster", "initdb", "mariadbd", "mysqld", "mysqld_safe",
    "mariadb-install-db", "mysql_install_db", "gcs_server", "raylet", "uvicorn", "gunicorn",
    "chromium", "chromium-browser", "chrome", "google-chrome", "headless_shell",
    "phoenix_launcher.py",
}
"""Programs that are (or set up, then start) a server or a browser, wherever they come in a
command line (``runuser -u postgres -- initdb``)."""
_SERVER_SUBCOMMANDS = {"ray": {"start"}, "langgraph": {"dev", "up"}, "phoenix": {"serve"}}
_SQLCHORUS_SERVERS = {"serve", "ui", "mcp"}


def _is_slow(item: Any) -> bool:
    return item.get_closest_marker("slow") is not None


def require_slow(what: str) -> None:
    """Fail the current test with a clear error unless it is marked slow: it starts ``what``.
    Called by everything that starts a server or a browser for a test."""
    if _fixtures_being_set_up:
        _server_fixtures.setdefault(_fixtures_being_set_up[-1], what)
    item = _current["item"]
    if item is None or _is_slow(item):
        return
    message = (f"this test starts a server: mark it slow ({item.nodeid} starts {what}; the quick "
               "tier, -m 'not slow', starts no server process and no browser)")
    item.stash[_STARTED] = message
    raise StartsAServer(message)


def _words(args: Any) -> list[str]:
    if isinstance(args, (str, bytes, os.PathLike)):
        text = os.fsdecode(args)
        try:
            return shlex.split(text)
        except ValueError:
            return text.split()
    return [os.fsdecode(a) for a in args]


def _server_of(args: Any) -> str | None:
    """What the command line ``args`` starts, if it is a server or a browser, else None."""
    words = _words(args)
    names = [os.path.basename(w) for w in words]
    for i, name in enumerate(names):
        if name in _SERVER_PROGRAMS:
            return f"{name} ({' '.join(words)[:200]})"
        if name == "run-driver":
            return "Playwright's driver (a browser)"
        if name in _SERVER_SUBCOMMANDS and set(names[i + 1:i + 2]) & _SERVER_SUBCOMMANDS[name]:
            return f"`{name} {names[i + 1]}`"
        # `sqlchorus serve|ui|mcp` (or `--ray local`, a cluster) run to its end by subprocess.run
        # is a command-line check, such as a server refusing bad input before it starts; one
        # left running, or talked to over its pipes, is a server.
        if name == "sqlchorus" and not getattr(_to_completion, "depth", 0):
            rest = words[i + 1:]
            command = next((w for w in rest if not w.startswith("-")), None)
            if command in _SQLCHORUS_SERVERS:
                return f"`sqlchorus {command}`"
            if any(a == "--ray" and b == "local" for a, b in zip(rest, rest[1:])):
                return "a local Ray cluster (`--ray local`)"
    return None


_real_execute_child = subprocess.Popen._execute_child
_real_run = subprocess.run


def _guarded_execute_child(self: subprocess.Popen, args: Any, *rest: Any, **kw: Any) -> Any:
    what = _server_of(args)
    if what:
        require_slow(what)
    return _real_execute_child(self, args, *rest, **kw)


def _guarded_run(*args: Any, **kw: Any) -> Any:
    _to_completion.depth = getattr(_to_completion, "depth", 0) + 1
    try:
        return _real_run(*args, **kw)
    finally:
        _to_completion.depth -= 1


def pytest_configure(config: pytest.Config) -> None:
    subprocess.Popen._execute_child = _guarded_execute_child
    subprocess.run = _guarded_run
    try:
        from uvicorn.server import Server
    except ImportError:
        return
    if not getattr(Server.serve, "_requires_slow", False):
        real_serve = Server.serve

        async def serve(self: Any, *args: Any, **kw: Any) -> Any:
            require_slow("uvicorn, in this process")
            return await real_serve(self, *args, **kw)

        serve._requires_slow = True
        Server.serve = serve


def pytest_unconfigure(config: pytest.Config) -> None:
    subprocess.Popen._execute_child = _real_execute_child
    subprocess.run = _real_run


@contextlib.contextmanager
def _watching(item: pytest.Item) -> Iterator[None]:
    # The setup and the call of a test are watched; its teardown, which stops what it started
    # (a module's server stopped after the module's last test, which may be a quick one), is not.
    _current["item"] = item
    try:
        yield
    finally:
        _current["item"] = None


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Any:
    _fixtures_being_set_up.append(fixturedef)
    try:
        return (yield)
    finally:
        _fixtures_being_set_up.pop()


def _server_fixture_of(item: pytest.Item) -> tuple[str, str] | None:
    """A fixture of ``item`` that started a server (under an earlier test), and what it started."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for name in item.fixturenames:
        definitions = info.name2fixturedefs.get(name) or ()
        if definitions and definitions[-1] in _server_fixtures:
            return name, _server_fixtures[definitions[-1]]
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    with _watching(item):
        result = yield
    found = None if _is_slow(item) else _server_fixture_of(item)
    if found:
        pytest.fail(f"this test starts a server: mark it slow ({item.nodeid} uses the fixture "
                    f"{found[0]!r}, which started {found[1]})", pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    with _watching(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    # A test whose code caught the guard's error still fails.
    message = item.stash.get(_STARTED, None)
    if message and report.when == "call" and report.passed:
        report.outcome = "failed"
        report.longrepr = message
    return report
