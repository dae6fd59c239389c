"""Model limits (``--model-limit MODEL=Nrpm,Mtpm``): the parser, the reservation on a fake clock,
the wait on each model call's span, a session's limiter, the progress line, and (slow) one
limiter shared by the actors of a local Ray cluster."""

from __future__ import annotations

import doctest
import threading

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sqlchorus
from sqlchorus.config.settings import Settings, SettingsError
from sqlchorus.core import rate_limits
from sqlchorus.core.context import Context
from sqlchorus.core.deadline import Cancel, Interrupted, cancellable
from sqlchorus.core.dependencies import DatabaseResources, Dependencies
from sqlchorus.core.llm import ModelCallError, call_model, limit_name
from sqlchorus.core.models import ModelConfigError
from sqlchorus.core.rate_limits import (
    LocalModelLimiter,
    ModelLimit,
    ModelLimiter,
    Reservations,
    TooManyTokensError,
    earliest_start,
    model_limits,
    parse_model_limit,
)
from sqlchorus.interfaces.cli import cli
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import ScriptedChatModel, oracle_model
from sqlchorus.tools.tracing import attributes as attrs
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.schema.introspect import introspect

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"


class FakeTime:
    """A clock that moves only when the limiter sleeps on it."""

    def __init__(self, now: float = 0.0):
        self.now = now
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def fake_limiter(limits, start: float = 1000.0) -> tuple[LocalModelLimiter, FakeTime]:
    time = FakeTime(start)
    return LocalModelLimiter(limits, clock=time.clock, sleep=time.sleep), time


class Recording:
    """A limiter that keeps what it is asked and says it waited ``wait_s`` (without waiting)."""

    def __init__(self, wait_s: float = 0.0):
        self.wait_s = wait_s
        self.asked: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def acquire(self, model: str, tokens: int) -> float:
        with self.lock:
            self.asked.append((model, tokens))
        return self.wait_s

    def waited(self) -> dict:
        return {"seconds": self.wait_s * len(self.asked), "calls": len(self.asked), "requests": len(self.asked)}


# -- parsing ------------------------------------------------------------------------------------


def test_the_docstrings_examples_hold():
    assert doctest.testmod(rate_limits).failed == 0


def test_a_limit_is_read_from_the_command_lines_text():
    assert parse_model_limit("openai:gpt-4o=500rpm,30000tpm") == ModelLimit("openai:gpt-4o", rpm=500, tpm=30000)
    assert parse_model_limit(" anthropic:claude = 50 RPM ") == ModelLimit("anthropic:claude", rpm=50)
    assert parse_model_limit("python:tests.x:make=2000tpm") == ModelLimit("python:tests.x:make", tpm=2000)
    # The last "=" ends the name: a server's URL may hold one.
    limit = parse_model_limit("openai-compatible:m@http://h:8000/v1?key=a=10rpm")
    assert (limit.model, limit.rpm) == ("openai-compatible:m@http://h:8000/v1?key=a", 10)
    assert limit.spacing_s == 6.0
    assert parse_model_limit(limit.text) == limit


@pytest.mark.parametrize("text, message", [
    ("openai:gpt-4o", "'openai:gpt-4o' is not of the form MODEL=RATES"),
    ("=500rpm", "is not of the form MODEL=RATES"),
    ("openai:gpt-4o=", "is not of the form MODEL=RATES"),
    ("openai:gpt-4o=500", "'500' is not Nrpm or Ntpm"),
    ("openai:gpt-4o=500rps", "'500rps' is not Nrpm or Ntpm"),
    ("openai:gpt-4o=500rpm,", "'' is not Nrpm or Ntpm"),
    ("openai:gpt-4o=5rpm,6rpm", "rpm is given twice"),
    ("openai:gpt-4o=10.5tpm", "tokens per minute must be a whole number"),
    ("openai:gpt-4o=0rpm", "requests per minute must be above 0"),
    ("openai:gpt-4o=0tpm", "tokens per minute must be a whole number above 0"),
    ("openai:gpt-4o=-5rpm", "'-5rpm' is not Nrpm or Ntpm"),
])
def test_a_bad_limit_says_what_is_wrong_in_one_line(text, message):
    with pytest.raises(ValueError) as e:
        parse_model_limit(text)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_limit_must_bound_something():
    with pytest.raises(ValueError, match="bounds nothing"):
        ModelLimit("openai:gpt-4o")


def test_settings_take_limits_as_pairs_from_python_the_command_line_and_the_environment(monkeypatch):
    assert Settings(model_limits=["openai:gpt-4o=500rpm,30000tpm"]).model_limits == {"openai:gpt-4o": "500rpm,30000tpm"}
    assert Settings(model_limits={"openai:o3": "20rpm"}).model_limits == {"openai:o3": "20rpm"}
    monkeypatch.setenv("SQLCHORUS_MODEL_LIMITS", "openai:gpt-4o=500rpm, 30000tpm; anthropic:claude=50rpm")
    assert Settings().model_limits == {"openai:gpt-4o": "500rpm, 30000tpm", "anthropic:claude": "50rpm"}
    monkeypatch.setenv("SQLCHORUS_MODEL_LIMITS", '{"openai:gpt-4o": "10rpm"}')
    assert model_limits(Settings().model_limits) == {"openai:gpt-4o": ModelLimit("openai:gpt-4o", rpm=10)}
    monkeypatch.delenv("SQLCHORUS_MODEL_LIMITS")
    with pytest.raises(SettingsError, match="'openai:gpt-4o' is not of the form MODEL=Nrpm,Mtpm"):
        Settings(model_limits=["openai:gpt-4o"])


def test_the_commands_that_run_questions_offer_the_option():
    for command in ("ask", "eval", "select"):
        out = CliRunner().invoke(cli, [command, "--help"], terminal_width=200)
        assert out.exit_code == 0, out.output
        assert "--model-limit MODEL=Nrpm,Mtpm" in out.output, command


# -- the reservation ----------------------------------------------------------------------------


def book(limit: ModelLimit, requests: list[tuple[float, int]]) -> list[float]:
    """The start of each ``(now, tokens)`` request, booked in turn."""
    reservations = Reservations({limit.model: limit})
    return [reservations.reserve(limit.model, tokens, now) for now, tokens in requests]


def test_requests_per_minute_are_spread_out():
    assert book(ModelLimit("m", rpm=60), [(0.0, 1)] * 4) == [0.0, 1.0, 2.0, 3.0]
    # A request that comes after its turn goes at once.
    assert book(ModelLimit("m", rpm=60), [(0.0, 1), (5.0, 1), (5.5, 1)]) == [0.0, 5.0, 6.0]


def test_tokens_per_minute_count_the_last_minutes_requests():
    limit = ModelLimit("m", tpm=1000)
    # Two prompts of 400 fit in a minute; the third waits until the first has left it.
    assert book(limit, [(0.0, 400)] * 5) == [0.0, 0.0, 60.0, 60.0, 120.0]
    # Small prompts fill what the minute has left.
    assert book(limit, [(0.0, 900), (1.0, 100), (2.0, 1)]) == [0.0, 1.0, 60.0]


def test_requests_and_tokens_per_minute_both_bound():
    limit = ModelLimit("m", rpm=60, tpm=1000)
    assert book(limit, [(0.0, 400)] * 4) == [0.0, 1.0, 60.0, 61.0]
    assert earliest_start(limit, [(0.0, 400), (1.0, 400)], 100, now=1.0) == 2.0


def test_a_prompt_over_the_tokens_per_minute_is_refused_rather_than_waiting_forever():
    limiter, time = fake_limiter(["openai:gpt-4o=1000tpm"])
    with pytest.raises(TooManyTokensError) as e:
        limiter.acquire("openai:gpt-4o", 1001)
    assert str(e.value).startswith("A prompt of 1001 tokens is over the 1000 tokens per minute of openai:gpt-4o")
    assert time.slept == [] and limiter.waited()["requests"] == 0
    assert limiter.acquire("openai:gpt-4o", 1000) == 0.0


def test_a_limit_on_one_model_does_not_slow_another():
    limits = model_limits({"m:a": "60rpm", "m:b": "6rpm,100tpm"})
    together = Reservations(limits)
    starts = [(together.reserve("m:a", 90, 0.0), together.reserve("m:b", 90, 0.0),
               together.reserve("m:free", 10**9, 0.0)) for _ in range(3)]
    # a keeps its second between its own calls, b its minute for tokens; a model with no limit
    # goes at once, however large its prompt.
    assert starts == [(0.0, 0.0, 0.0), (1.0, 60.0, 0.0), (2.0, 120.0, 0.0)]
    alone = Reservations(limits)
    assert [alone.reserve("m:a", 90, 0.0) for _ in range(3)] == [0.0, 1.0, 2.0]
    limiter, time = fake_limiter(limits)
    assert [limiter.acquire("m:free", 10**9) for _ in range(5)] == [0.0] * 5
    assert time.slept == [] and limiter.starts("m:free") == []
    assert limiter.waited() == {"seconds": 0.0, "calls": 0, "requests": 0}


def test_reservations_out_of_the_window_are_dropped_but_a_slow_limits_spacing_is_kept():
    limit = ModelLimit("m", rpm=0.5)
    reservations = Reservations({"m": limit})
    assert reservations.reserve("m", 1, 0.0) == 0.0
    assert reservations.reserve("m", 1, 100.0) == 120.0  # two minutes apart, past the window
    limit = ModelLimit("m", rpm=600)
    reservations = Reservations({"m": limit})
    for i in range(100):
        reservations.reserve("m", 1, float(i))
    assert len(reservations.starts("m")) == 60  # only the last minute's are kept


def test_threads_share_one_local_limiter():
    limiter, _ = fake_limiter(["m:a=60rpm"], start=0.0)
    limiter._sleep = lambda s: None  # every thread asks at time 0
    threads = [threading.Thread(target=lambda: [limiter.acquire("m:a", 1) for _ in range(5)]) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert limiter.starts("m:a") == [float(i) for i in range(40)]
    assert isinstance(limiter, ModelLimiter)


def test_a_cancelled_run_stops_waiting_for_its_turn():
    cancel = Cancel()
    cancel.set()
    with cancellable(cancel), pytest.raises(Interrupted):
        rate_limits.wait_turn(600.0)


# -- model calls --------------------------------------------------------------------------------


def _context(db, model, limiter, exporter, **settings):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    guarded = GuardedDatabase(db)
    deps = Dependencies.build(Settings(model=model, trace_dir=None, **settings), model_limiter=limiter)
    return deps.context(DatabaseResources(db=guarded, schema=introspect(guarded, sample_values=0)),
                        tracer=provider.get_tracer("test"))


def _chat_spans(exporter):
    return [s for s in exporter.get_finished_spans() if s.attributes.get(attrs.GEN_AI_OPERATION) == "chat"]


def test_a_model_call_asks_the_limiter_and_its_span_shows_the_wait(demo_db):
    exporter, limiter = InMemorySpanExporter(), Recording(wait_s=1000.0)
    model = ScriptedChatModel(["SELECT 1"], name="oracle")
    context = _context(demo_db, model, limiter, exporter, cache=False)
    assert isinstance(context, Context) and context.model_limiter is limiter
    text, usage = call_model(context, role="generation", node="n", prompt="Which customers?")
    assert text == "SELECT 1"
    span, = _chat_spans(exporter)
    assert limiter.asked == [("scripted:oracle", span.attributes[attrs.SQLCHORUS_PROMPT_TOKENS])]
    assert span.attributes[attrs.SQLCHORUS_RATE_LIMIT_WAIT_S] == 1000.0
    assert usage["latency_ms"] == 0.0  # the wait is not the model's time


def test_a_model_object_made_from_a_name_is_limited_under_that_name():
    from sqlchorus.tools.models.cache import made_from

    model = ScriptedChatModel(["SELECT 1"], name="oracle")
    assert limit_name(model, model) == "scripted:oracle"
    made_from(model, "python:tests.factories:oracle")  # as a cluster's stand-in for a named model is
    assert limit_name(model, model) == "python:tests.factories:oracle"
    assert limit_name(" openai:gpt-4o ", model) == "openai:gpt-4o"


def test_a_cached_answer_asks_no_limiter(demo_db, tmp_path, named):
    exporter, limiter = InMemorySpanExporter(), Recording()
    model = ScriptedChatModel(["SELECT 1"])
    context = _context(demo_db, named(model), limiter, exporter, cache_path=str(tmp_path / "c.sqlite"))
    for _ in range(2):
        call_model(context, role="generation", node="n", prompt="same")
    assert [m for m, _ in limiter.asked] == ["scripted:oracle"]  # the name the settings give it
    sent, hit = _chat_spans(exporter)
    assert sent.attributes[attrs.SQLCHORUS_RATE_LIMIT_WAIT_S] == 0.0
    assert hit.attributes[attrs.SQLCHORUS_CACHE_HIT] and attrs.SQLCHORUS_RATE_LIMIT_WAIT_S not in hit.attributes


def test_a_prompt_no_minute_could_hold_fails_its_call_with_the_reason(demo_db):
    model = ScriptedChatModel(["SELECT 1"])
    limiter = LocalModelLimiter([f"{limit_name(model, model)}=5tpm"])
    context = _context(demo_db, model, limiter, InMemorySpanExporter(), cache=False)
    with pytest.raises(ModelCallError, match=r"The generation model \(scripted\) failed: A prompt of \d+ tokens "
                                             r"is over the 5 tokens per minute of scripted:scripted"):
        call_model(context, role="generation", node="n", prompt="Which customers bought the most?")
    assert model.calls == 0


def test_a_retry_waits_its_turn_too(demo_db):
    from sqlchorus.core.llm import TransientModelError

    answers = iter([TransientModelError("overloaded"), "SELECT 1"])

    def respond(messages):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    exporter, limiter = InMemorySpanExporter(), Recording(wait_s=0.5)
    context = _context(demo_db, ScriptedChatModel(respond), limiter, exporter, cache=False, retry_backoff_s=0.0)
    assert call_model(context, role="generation", node="n", prompt="p")[0] == "SELECT 1"
    span, = _chat_spans(exporter)
    assert len(limiter.asked) == 2 and span.attributes[attrs.SQLCHORUS_ATTEMPTS] == 2
    assert span.attributes[attrs.SQLCHORUS_RATE_LIMIT_WAIT_S] == 1.0


# -- sessions and the progress line -------------------------------------------------------------


def test_a_session_keeps_the_limits_its_settings_name(demo_db, spans):
    model = oracle_model(GOLD.get)
    name = limit_name(model, model)
    with sqlchorus.Session(Settings(model=model, trace_dir=None, cache=False,
                                    model_limits={name: "6000rpm", "openai:other": "1rpm"})) as session:
        assert isinstance(session.model_limiter, LocalModelLimiter)
        result = session.ask(QUESTION, demo_db, exporters=[spans])
        assert result.ok, result.errors
        waited = session.model_limiter.waited()
    calls = _chat_spans(spans)
    assert calls and waited["requests"] == len(calls)  # every call booked, on its own model's limit
    assert all(attrs.SQLCHORUS_RATE_LIMIT_WAIT_S in s.attributes for s in calls)
    with sqlchorus.Session(Settings(model=model, trace_dir=None)) as session:
        assert session.model_limiter is None


def test_a_session_takes_a_limiter_it_is_given(demo_db):
    limiter = Recording()
    model = oracle_model(GOLD.get)
    settings = Settings(model=model, trace_dir=None, cache=False, model_limits={"x:y": "1rpm"})
    with sqlchorus.Session(settings, model_limiter=limiter) as session:
        assert session.model_limiter is limiter  # not one of its own: the settings' limits are the giver's
        assert session.ask(QUESTION, demo_db).ok
    assert limiter.asked and {m for m, _ in limiter.asked} == {limit_name(model, model)}


def test_a_bad_limit_stops_the_session_before_any_model_is_called():
    with pytest.raises(ModelConfigError, match="^--model-limit: Model limit of openai:gpt-4o: '5rpx' is not"):
        sqlchorus.Session(Settings(model="openai:gpt-4o", trace_dir=None, model_limits={"openai:gpt-4o": "5rpx"}))


def test_the_progress_line_shows_the_seconds_waited_for_limits(demo_db):
    from sqlchorus.evaluation.progress import ExProgress
    from sqlchorus.evaluation.runs import show_rate_waits

    bar = ExProgress("eval", 3, cost=True)
    try:
        assert bar._fields()["waits"] == ""
        bar.rate_waits(12.34)
        assert bar._fields()["waits"] == "waited 12.3s for limits"
        show_rate_waits(bar, Recording(wait_s=2.0))  # a limiter asked nothing yet: nothing waited
        assert bar._fields()["waits"] == ""
        limiter, _ = fake_limiter(["m:a=60rpm"])
        for _ in range(3):
            limiter.acquire("m:a", 1)
        with sqlchorus.Session(Settings(model=oracle_model(GOLD.get), trace_dir=None), model_limiter=limiter) as s:
            show_rate_waits(bar, s.ask)  # a session's ask: its limiter
        assert bar._fields()["waits"] == "waited 2.0s for limits"  # one second before each of two
        show_rate_waits(None, limiter)
        show_rate_waits(bar, lambda *a, **k: None)  # a custom ask: no limiter, nothing changes
        assert bar._fields()["waits"] == "waited 2.0s for limits"
    finally:
        bar.close()


# -- the cluster --------------------------------------------------------------------------------


def test_the_limiter_actor_books_without_sleeping():
    from sqlchorus.cluster.limiter import LimiterActor

    actor = LimiterActor(model_limits(["m:a=0.6rpm"]))  # 100 s apart: far beyond this test's time
    delays = [actor.reserve("m:a", 1) for _ in range(3)]  # answered at once, the delays to wait
    assert delays[0] == 0.0 and 0 < delays[1] <= 100.0 and 100.0 < delays[2] <= 200.0
    first, second, third = actor.starts("m:a")
    assert (second - first, third - second) == (pytest.approx(100.0), pytest.approx(100.0))
    assert actor.reserve("m:other", 1) == 0.0
    assert actor.configure(model_limits(["m:b=1rpm"])) == ["m:a", "m:b"]
    assert actor.waited()["calls"] == 2


def test_a_shared_limiter_needs_a_cluster_and_readable_limits():
    from sqlchorus.cluster.connect import ClusterError
    from sqlchorus.cluster.limiter import shared_limiter

    with pytest.raises(ModelConfigError, match="--model-limit: 'm' is not of the form"):
        shared_limiter(["m"])
    import ray

    if not ray.is_initialized():
        with pytest.raises(ClusterError, match="needs a connected cluster"):
            shared_limiter(["m:a=60rpm"])


@pytest.mark.slow
def test_actors_sharing_one_limiter_are_spaced_together():
    """Two actors, two calls each, through one cluster-wide limit of 60 requests per minute: the
    four requests the limiter booked are a second apart or more, whichever actor sent them. The
    times checked are the ones the limiter booked, not how fast this machine ran."""
    import ray

    from sqlchorus.cluster.connect import runtime_env
    from sqlchorus.cluster.limiter import RayModelLimiter, shared_limiter

    # A cluster of this test's own ("local"), never one another process started on this machine.
    ray.init(address="local", num_cpus=2, include_dashboard=False, runtime_env=runtime_env(), log_to_driver=False)
    try:
        limiter = shared_limiter({"openai:gpt-4o": "60rpm", "openai:gpt-4o-mini": "1rpm"})
        assert isinstance(limiter, RayModelLimiter) and isinstance(limiter, ModelLimiter)

        @ray.remote(num_cpus=1)
        class Caller:
            def __init__(self, limiter):
                self.limiter = limiter

            def ready(self):
                return True

            def call(self, times):
                return [self.limiter.acquire("openai:gpt-4o", 10) for _ in range(times)]

        callers = [Caller.remote(limiter) for _ in range(2)]
        assert ray.get([c.ready.remote() for c in callers], timeout=300) == [True, True]
        waits = ray.get([c.call.remote(2) for c in callers], timeout=300)
        starts = limiter.starts("openai:gpt-4o")
        assert len(starts) == 4
        gaps = [later - earlier for earlier, later in zip(starts, starts[1:])]
        assert all(gap >= 1.0 - 1e-6 for gap in gaps), gaps
        # What the actors waited is what the limiter told them to (however soon each asked).
        totals = limiter.waited()
        assert totals["requests"] == 4 and totals["calls"] == sum(w > 0 for ws in waits for w in ws)
        assert totals["seconds"] == pytest.approx(sum(w for ws in waits for w in ws), abs=1e-3)
        # Another model's limit was never touched: its own calls go at once.
        assert limiter.acquire("openai:gpt-4o-mini", 10) == 0.0
        # Asked again in the same command, the driver gets the same actor and its bookings.
        assert len(shared_limiter({"openai:gpt-4o": "60rpm"}).starts("openai:gpt-4o")) == 4
    finally:
        ray.shutdown()
