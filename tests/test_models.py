"""Model names to chat models, and the resilience of a model call: retries, timeout, rate limit."""

from __future__ import annotations

import threading
import time

import pytest

import sqlchorus
from sqlchorus.config.settings import ROLES, Settings
from sqlchorus.core.llm import ModelCallError, TransientModelError, call_model, is_transient
from sqlchorus.core.models import (
    NO_MODEL_HELP,
    ModelConfigError,
    rate_limiter,
    resolve_model,
    resolve_roles,
)
from sqlchorus.testing import ScriptedChatModel


@pytest.mark.parametrize(
    "spec,message",
    [
        (None, "No model is configured"),
        ("", "No model is configured"),
        ("gpt-4o", "not of the form 'provider:model'"),
        ("openai:", "not of the form 'provider:model'"),
        ("openai-compatible:model-without-url", "openai-compatible:<model>@<base_url>"),
        ("no-such-provider:m", "Cannot use model"),
        (42, "not int"),
    ],
)
def test_bad_names_say_what_to_do(spec, message):
    with pytest.raises(ModelConfigError, match=message):
        resolve_model(spec)


@pytest.mark.parametrize("provider,extra", [("anthropic", "anthropic"), ("ollama", "ollama")])
def test_missing_provider_package_names_the_extra(provider, extra):
    import importlib.util

    package = {"anthropic": "langchain_anthropic", "ollama": "langchain_ollama"}[provider]
    if importlib.util.find_spec(package):
        pytest.skip(f"{package} is installed")
    with pytest.raises(ModelConfigError, match=rf"pip install -e '\.\[{extra}\]'"):  # hints from a checkout
        resolve_model(f"{provider}:some-model")


def test_missing_llama_cpp_names_the_local_extra(monkeypatch):
    monkeypatch.setattr("sqlchorus.core.local_model.local_runtime", lambda: None)
    with pytest.raises(ModelConfigError, match=r"\.\[local\]"):
        resolve_model("local:smollm2")


def test_missing_gguf_file(tmp_path):
    from sqlchorus.core.local_model import local_runtime

    if local_runtime() is None:
        pytest.skip("no local runtime is installed")
    with pytest.raises(ModelConfigError, match="No GGUF model file"):
        resolve_model(f"local:{tmp_path / 'none.gguf'}")


def test_no_model_help_lists_every_provider():
    for provider in ("openai:", "anthropic:", "ollama:", "openai-compatible:", "local:smollm2"):
        assert provider in NO_MODEL_HELP


def test_openai_compatible_gets_timeout_retries_and_limiter(monkeypatch):
    from langchain_core.rate_limiters import InMemoryRateLimiter

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    limiter = InMemoryRateLimiter(requests_per_second=3)
    model = resolve_model(
        "openai-compatible:qwen@http://127.0.0.1:9/v1", max_tokens=64, timeout_s=7.5, max_retries=4,
        rate_limiter=limiter,
    )
    assert (model.model_name, model.openai_api_base, model.max_tokens) == ("qwen", "http://127.0.0.1:9/v1", 64)
    assert (model.request_timeout, model.max_retries, model.rate_limiter) == (7.5, 4, limiter)


def test_openai_by_name_takes_key_from_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = resolve_model("openai:gpt-4o-mini", timeout_s=30, max_retries=1)
    assert model.model_name == "gpt-4o-mini" and model.max_retries == 1
    assert model.openai_api_key.get_secret_value() == "sk-test"


def test_roles_share_models_and_one_rate_limiter(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    settings = Settings(model="openai:gpt-4o-mini", models={"fixing": "openai:gpt-4o"}, rate_limit=2.0)
    roles = resolve_roles(settings)
    assert roles["keywords"] is roles["generation"] is not roles["fixing"]
    assert roles["fixing"].model_name == "gpt-4o"
    assert roles["keywords"].rate_limiter is roles["fixing"].rate_limiter
    assert roles["keywords"].rate_limiter.requests_per_second == 2.0
    passed_in = ScriptedChatModel(["x"])
    assert resolve_roles(Settings(model=passed_in))["linking"] is passed_in


@pytest.mark.parametrize(
    "error,transient",
    [
        (TimeoutError("slow"), True),
        (ConnectionError("refused"), True),
        (TransientModelError("busy"), True),
        (type("RateLimitError", (Exception,), {})("429"), True),
        (type("APIStatusError", (Exception,), {"status_code": 503})("unavailable"), True),
        (type("APIStatusError", (Exception,), {"status_code": 401})("bad key"), False),
        (ValueError("bad request"), False),
        (KeyError("x"), False),
    ],
    ids=lambda v: v if isinstance(v, bool) else type(v).__name__ + ":" + str(v),
)
def test_which_errors_are_transient(error, transient):
    assert is_transient(error) is transient


def _context(demo_db, model, **settings):
    from sqlchorus.core.context import Context
    from sqlchorus.tools.engines.sqlite import GuardedDatabase
    from sqlchorus.tools.schema.introspect import introspect

    db = GuardedDatabase(demo_db)
    return Context(
        db=db, models={r: model for r in ROLES},
        settings=Settings(model=model, retry_backoff_s=0.01, **settings),
        schema=introspect(db, sample_values=0),
    )


def flaky(failures: int, error: type[Exception] = ConnectionError):
    state = {"calls": 0}

    def respond(messages):
        state["calls"] += 1
        if state["calls"] <= failures:
            raise error(f"failure {state['calls']}")
        return "SELECT 1"

    return respond, state


def test_transient_failures_are_retried(demo_db):
    respond, state = flaky(2)
    ctx = _context(demo_db, ScriptedChatModel(respond), model_retries=2)
    text, usage = call_model(ctx, role="generation", node="n", prompt="p")
    assert text == "SELECT 1" and state["calls"] == 3 and usage["input_tokens"] > 0


def test_retries_run_out(demo_db):
    respond, state = flaky(5)
    ctx = _context(demo_db, ScriptedChatModel(respond), model_retries=2)
    with pytest.raises(ModelCallError, match="failure 3") as info:
        call_model(ctx, role="generation", node="n", prompt="p")
    assert state["calls"] == 3
    assert info.value.usage["node"] == "n"


def test_permanent_errors_are_not_retried(demo_db):
    respond, state = flaky(5, ValueError)
    ctx = _context(demo_db, ScriptedChatModel(respond), model_retries=3)
    with pytest.raises(ModelCallError, match="failure 1"):
        call_model(ctx, role="generation", node="n", prompt="p")
    assert state["calls"] == 1


def _blocks_until(released: threading.Event, answer: str = "late"):
    """A model call that does not end by itself: it waits for the test, ten minutes at most."""
    def respond(messages):
        released.wait(600)
        return answer
    return respond


@pytest.mark.slow
def test_a_call_past_its_limit_is_stopped_and_retried(demo_db):
    """The first attempt never answers by itself, so it certainly runs past the limit; the retry
    answers at once, and the limit is generous for that."""
    released = threading.Event()
    state = {"calls": 0}
    first = _blocks_until(released)

    def stuck_then_fast(messages):
        state["calls"] += 1
        return first(messages) if state["calls"] == 1 else "SELECT 2"

    try:
        ctx = _context(demo_db, ScriptedChatModel(stuck_then_fast), model_timeout_s=2, model_retries=1)
        assert call_model(ctx, role="generation", node="n", prompt="p")[0] == "SELECT 2"
        assert state["calls"] == 2
        ctx = _context(demo_db, ScriptedChatModel(_blocks_until(released)), model_timeout_s=0.2, model_retries=0)
        with pytest.raises(ModelCallError, match=r"no answer within 0\.2 s"):
            call_model(ctx, role="generation", node="n", prompt="p")
    finally:
        released.set()


def test_models_built_from_names_leave_time_and_retries_to_sqlchorus(monkeypatch):
    """A provider's SDK gets the time limit and no retries of its own: each of its retries would
    get the whole limit again."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = resolve_roles(Settings(model="openai:gpt-4o-mini", model_timeout_s=7.5, model_retries=3))["generation"]
    assert (model.request_timeout, model.max_retries) == (7.5, 0)


class _SilentProvider:
    """An OpenAI-compatible server on loopback that takes each request and never answers it (until
    the test ends): a provider that hangs."""

    def __init__(self):
        import http.server

        self.requests = 0
        self.released = threading.Event()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.requests += 1
                owner.released.wait(600)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.slow
def test_an_http_provider_that_never_answers_is_left_at_the_limit_and_tried_again(demo_db, monkeypatch):
    """Every attempt at a hanging provider ends at the limit; sqlchorus makes the retries, so the
    provider sees exactly one request per attempt."""
    monkeypatch.setenv("OPENAI_COMPATIBLE_API_KEY", "none")
    provider = _SilentProvider()
    try:
        settings = Settings(model=f"openai-compatible:m@{provider.url}", model_timeout_s=1, model_retries=1,
                            retry_backoff_s=0.01)
        ctx = _context(demo_db, resolve_roles(settings)["generation"], model_timeout_s=1, model_retries=1)
        with pytest.raises(ModelCallError, match=r"no answer within 1 s"):
            call_model(ctx, role="generation", node="n", prompt="p")
        deadline = time.monotonic() + 60  # a busy machine may send the second after the call gave up on it
        while provider.requests < 2 and time.monotonic() < deadline:
            provider.released.wait(0.05)
        assert provider.requests == 2
    finally:
        provider.close()


def test_rate_limit_is_applied_to_every_call_of_named_models(monkeypatch, demo_db):
    import langchain.chat_models
    from langchain_core.rate_limiters import InMemoryRateLimiter

    model = ScriptedChatModel(["SELECT 1"])

    def fake_init(name, model_provider, **kw):
        model.rate_limiter = kw.get("rate_limiter")
        return model

    monkeypatch.setattr(langchain.chat_models, "init_chat_model", fake_init)
    acquired = []
    real_acquire = InMemoryRateLimiter.acquire
    monkeypatch.setattr(InMemoryRateLimiter, "acquire", lambda self, **kw: acquired.append(self) or real_acquire(self, **kw))
    roles = resolve_roles(Settings(model="fake:m", rate_limit=50.0))
    limiter = roles["generation"].rate_limiter
    assert isinstance(limiter, InMemoryRateLimiter) and limiter.requests_per_second == 50.0
    ctx = _context(demo_db, roles["generation"], cache=False)
    for _ in range(3):
        call_model(ctx, role="generation", node="n", prompt="p")
    assert model.calls == 3 and acquired == [limiter] * 3


def test_missing_provider_key_is_a_clear_configuration_error(monkeypatch):
    """A provider SDK's own error (here: no API key) becomes a message, not a traceback."""
    from click.testing import CliRunner

    from sqlchorus.core.models import ModelConfigError, resolve_model
    from sqlchorus.interfaces.cli import cli

    pytest.importorskip("langchain_openai")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_ADMIN_KEY", raising=False)
    with pytest.raises(ModelConfigError, match="Cannot use model 'openai:gpt-4o-mini'.*OPENAI_API_KEY"):
        resolve_model("openai:gpt-4o-mini")
    out = CliRunner().invoke(cli, ["ask", "How many customers?", "--model", "openai:gpt-4o-mini", "--no-trace"])
    assert out.exit_code == 2
    assert "Traceback" not in out.output and "OPENAI_API_KEY" in out.output


def test_one_rate_limiter_is_shared_by_every_question_of_a_session(demo_db):
    """Every question a session answers, from every worker thread, goes through one limiter."""
    settings = Settings(model=ScriptedChatModel(["x"]), models={"generation": "openai-compatible:m@http://127.0.0.1:9/v1"},
                        rate_limit=5.0, trace_dir=None)
    with sqlchorus.Session(settings) as session:
        one = session.dependencies.context(session.database(demo_db)).models["generation"]
        two = session.dependencies.context(session.database(demo_db)).models["generation"]
        assert one is two and one.rate_limiter.requests_per_second == 5.0
    limiter = rate_limiter(5.0)
    shared = resolve_roles(settings, limiter=limiter)
    assert shared["generation"].rate_limiter is limiter
    assert resolve_roles(settings)["generation"].rate_limiter is not limiter  # another entry point, its own


def test_install_hints_fit_where_sqlchorus_runs_from(monkeypatch):
    from sqlchorus.config import install

    assert install.install_hint("local").startswith("pip install -e '.[local]'")  # this checkout
    monkeypatch.setattr(install, "in_checkout", lambda: False)
    assert install.install_hint("local") == "pip install 'sqlchorus[local]'"


FACTORY_MODULE = '''
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}


def make_model():
    return oracle_model(GOLD.get, name="in-house")


def broken():
    raise RuntimeError("no credentials file")


def not_a_model():
    return "gpt"
'''


@pytest.fixture
def factory_module(tmp_path, monkeypatch):
    (tmp_path / "inhouse_models.py").write_text(FACTORY_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "inhouse_models"


def test_a_model_from_python_code_drives_the_cli(factory_module, demo_db):
    from click.testing import CliRunner

    from sqlchorus.interfaces.cli import cli

    out = CliRunner().invoke(cli, ["ask", "How many customers do we have?", "--db", str(demo_db), "--json",
                                   "--model", f"python:{factory_module}:make_model", "--no-trace", "--no-cache"])
    assert out.exit_code == 0, out.output
    result = __import__("json").loads(out.output)
    assert result["rows"] == [[62]] and {u["model"] for u in result["usage"]} == {"in-house"}


@pytest.mark.parametrize("spec,message", [
    ("python:inhouse_models", "is named 'python:package.module:factory'"),
    ("python:no_such_module_xyz:make", "Cannot import 'no_such_module_xyz'"),
    ("python:inhouse_models:missing", "has no callable 'missing'"),
    ("python:inhouse_models:broken", r"inhouse_models.broken\(\) failed: RuntimeError: no credentials file"),
    ("python:inhouse_models:not_a_model", "returned str, not a LangChain BaseChatModel"),
])
def test_a_model_from_python_code_that_cannot_be_used_says_why(factory_module, spec, message):
    with pytest.raises(ModelConfigError, match=message):
        resolve_model(spec)


def test_retry_sampling_reaches_openai_models_but_not_reasoning_ones(monkeypatch, demo_db):
    """A retry's temperature and top-p go to an OpenAI chat model with the request; an OpenAI
    reasoning model, which refuses both, gets neither; a scripted model, whose API takes no
    top-p, gets only the temperature."""
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_openai import ChatOpenAI

    sent = []

    def fake_generate(self, messages, stop=None, run_manager=None, **kwargs):
        sent.append({k: kwargs[k] for k in ("temperature", "top_p") if k in kwargs})
        return ChatResult(generations=[ChatGeneration(message=AIMessage("SELECT 1"))])

    monkeypatch.setattr(ChatOpenAI, "_generate", fake_generate)
    for name in ("gpt-4o-mini", "gpt-5", "o3-mini"):
        ctx = _context(demo_db, ChatOpenAI(model=name, api_key="sk-test", max_retries=0))
        assert call_model(ctx, role="fixing", node="n", prompt="p", temperature=0.8, top_p=0.95)[0] == "SELECT 1"
    assert sent == [{"temperature": 0.8, "top_p": 0.95}, {}, {}]

    class Keeps(ScriptedChatModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            sent.append({k: kwargs[k] for k in ("temperature", "top_p") if k in kwargs})
            return super()._generate(messages, stop, run_manager, **kwargs)

    call_model(_context(demo_db, Keeps(["SELECT 1"])), role="fixing", node="n", prompt="p", temperature=0.8, top_p=0.95)
    assert sent[-1] == {"temperature": 0.8}
