"""The persistent response cache: keys, storage, and a repeated run that costs nothing."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from langchain_core.messages import HumanMessage, SystemMessage
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sqlchorus
from sqlchorus.config.settings import Settings
from sqlchorus.interfaces.cli import cli
from sqlchorus.testing import ScriptedChatModel, oracle_model
from sqlchorus.tools.models.cache import ResponseCache, default_cache_dir, model_identity, request_key
from sqlchorus.tools.models.pricing import Price


def demo_oracle(name="oracle"):
    from sqlchorus.runs.demo import load_demo_questions

    gold = {q["question"]: q["sql"] for q in load_demo_questions()}
    return oracle_model(gold.get, name=name), next(iter(gold))


def test_store_persists_across_opens(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    assert cache.get("k") is None
    cache.put("k", "m", "SELECT 1", 10, 2)
    cache.close()
    again = ResponseCache(path)
    hit = again.get("k")
    assert (hit.text, hit.input_tokens, hit.output_tokens) == ("SELECT 1", 10, 2)
    assert len(again) == 1
    assert again.clear() == 1 and len(again) == 0


def test_default_location_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SQLCHORUS_CACHE", str(tmp_path / "mine"))
    assert default_cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("SQLCHORUS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "sqlchorus"


def test_keys_depend_on_model_messages_and_parameters():
    a = ScriptedChatModel(["x"], name="model-a")
    b = ScriptedChatModel(["x"], name="model-b")
    msgs = [SystemMessage("be brief"), HumanMessage("How many singers?")]
    base = request_key(a, msgs, {"temperature": 0})
    assert base == request_key(ScriptedChatModel(["x"], name="model-a"), list(msgs), {"temperature": 0})
    # Another script under the same name is another model: it must not be answered from this one's.
    assert base != request_key(ScriptedChatModel(["y"], name="model-a"), list(msgs), {"temperature": 0})
    assert base != request_key(b, msgs, {"temperature": 0})
    assert base != request_key(a, msgs[1:], {"temperature": 0})
    assert base != request_key(a, [SystemMessage("be brief"), HumanMessage("How many songs?")], {"temperature": 0})
    assert base != request_key(a, msgs, {"temperature": 0.7})
    assert base != request_key(a, msgs, {"temperature": 0, "grammar": "abc"})


def test_identity_holds_endpoint_but_no_secret():
    from langchain_openai import ChatOpenAI

    one = ChatOpenAI(model="m", base_url="http://127.0.0.1:1/v1", api_key="sk-secret-1")
    two = ChatOpenAI(model="m", base_url="http://127.0.0.1:2/v1", api_key="sk-secret-1")
    assert "sk-secret" not in json.dumps(model_identity(one))
    assert model_identity(one) != model_identity(two)


def test_repeated_run_costs_nothing_and_keeps_the_tokens_of_the_calls_it_replays(demo_db, tmp_path, spans, named,
                                                                                  monkeypatch):
    model, question = demo_oracle()
    settings = Settings(model=named(model), cache_path=str(tmp_path / "c.sqlite"), trace_dir=None)
    # Priced, so that "costs nothing" is the cache's doing and not a missing price.
    monkeypatch.setattr("sqlchorus.tools.models.pricing.BUILTIN_PRICES", {"oracle": Price(1.0, 1.0)})
    first_run = InMemorySpanExporter()  # a run shuts its exporters down: each run has its own
    first = sqlchorus.ask(question, db=demo_db, settings=settings, exporters=[first_run])
    calls = model.calls
    assert first.ok and first.cost["cached_calls"] == 0 and first.cost["input_tokens"] > 0
    assert first.cost["cost_usd"] > 0 and first.cost["unpriced_calls"] == 0
    first_spans = _chat_spans(first_run)
    second = sqlchorus.ask(question, db=demo_db, settings=settings, exporters=[spans])
    assert model.calls == calls
    assert second.sql == first.sql and second.rows == first.rows
    assert second.cost["cached_calls"] == second.cost["calls"] == first.cost["calls"]
    # Each cached call counts the tokens of the call it replays, marked cached, at no cost.
    assert [(u["node"], u["input_tokens"], u["output_tokens"]) for u in second.usage] == [
        (u["node"], u["input_tokens"], u["output_tokens"]) for u in first.usage]
    assert all(u["cached"] and u["cost_usd"] == 0 for u in second.usage)
    assert (second.cost["input_tokens"], second.cost["output_tokens"]) == (first.cost["input_tokens"],
                                                                           first.cost["output_tokens"])
    assert (second.cost["cached_input_tokens"], second.cost["cached_output_tokens"]) == (
        second.cost["input_tokens"], second.cost["output_tokens"])
    assert second.cost["cost_usd"] == 0
    llm = _chat_spans(spans)
    assert llm and all(s.attributes["sqlchorus.cache_hit"] for s in llm)
    tokens = ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")
    assert [[s.attributes[k] for k in tokens] for s in llm] == [[s.attributes[k] for k in tokens] for s in first_spans]


def _chat_spans(spans):
    return [s for s in spans.get_finished_spans() if s.attributes.get("gen_ai.operation.name") == "chat"]


def test_a_cached_rerun_says_its_tokens_came_from_the_cache_on_the_command_line(demo_db, monkeypatch, tmp_path):
    model, question = demo_oracle()
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)
    base = ["ask", question, "--db", str(demo_db), "--model", "openai:x", "--no-trace",
            "--cache-path", str(tmp_path / "c.sqlite")]
    first = json.loads(CliRunner().invoke(cli, [*base, "--json"]).output)
    printed = CliRunner().invoke(cli, base, env={"COLUMNS": "400"}).output
    cost = first["cost"]
    said = f"{cost['input_tokens']} tokens in, {cost['output_tokens']} out"
    assert f"({cost['calls']} from cache), {said} ({cost['input_tokens']} in, {cost['output_tokens']} out from cache)" \
        in printed
    assert " 0 tokens in" not in printed


def test_cache_off_and_model_objects_are_not_cached(demo_db, tmp_path, named):
    model, question = demo_oracle()
    path = tmp_path / "c.sqlite"
    sqlchorus.ask(question, db=demo_db, settings=Settings(model=model, cache_path=str(path), trace_dir=None))
    assert not path.exists() or len(ResponseCache(path)) == 0  # a model object passed in is the caller's to cache
    off = Settings(model=named(model), cache=False, cache_path=str(path), trace_dir=None)
    before = model.calls
    sqlchorus.ask(question, db=demo_db, settings=off)
    sqlchorus.ask(question, db=demo_db, settings=off)
    assert model.calls == before + 6
    assert len(ResponseCache(path)) == 0


def test_no_cache_flag(monkeypatch, tmp_path):
    model, question = demo_oracle()
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)
    base = ["ask", question, "--model", "openai:x", "--json", "--no-trace", "--cache-path", str(tmp_path / "c.sqlite")]
    runs = [json.loads(CliRunner().invoke(cli, base + extra).output) for extra in ([], [], ["--no-cache"])]
    assert [r["cost"]["cached_calls"] for r in runs] == [0, 3, 0]
    assert all(r["ok"] for r in runs)


def _context(demo_db, model, **settings):
    """A run's context over the demo database, with ``model`` for every role, built as an entry
    point builds it (models, cache and prices from the settings)."""
    from sqlchorus.core.dependencies import DatabaseResources, Dependencies
    from sqlchorus.tools.engines.sqlite import GuardedDatabase
    from sqlchorus.tools.schema.introspect import introspect

    db = GuardedDatabase(demo_db)
    deps = Dependencies.build(Settings(model=model, **settings))
    return deps.context(DatabaseResources(db=db, schema=introspect(db, sample_values=0)))


def test_samples_at_a_temperature_are_cached_apart(demo_db, tmp_path, named):
    from sqlchorus.core.llm import call_model

    counter = iter(range(1000))
    model = named(ScriptedChatModel(lambda m: f"answer {next(counter)}"))
    ctx = _context(demo_db, model, cache_path=str(tmp_path / "c.sqlite"))
    draw = lambda **kw: call_model(ctx, role="generation", node="n", prompt="same", temperature=0.8, **kw)[0]
    assert [draw(), draw()] == ["answer 0", "answer 1"]  # no sample number: never cached
    assert [draw(sample=0), draw(sample=1), draw(sample=0), draw(sample=1)] == ["answer 2", "answer 3", "answer 2", "answer 3"]
    greedy = [call_model(ctx, role="generation", node="n", prompt="same")[0] for _ in range(2)]
    assert greedy == ["answer 4", "answer 4"]


def test_unwritable_cache_does_not_fail_the_call(demo_db, tmp_path, monkeypatch, named):
    import sqlite3

    from sqlchorus.core.llm import call_model

    model = named(ScriptedChatModel(["SELECT 1"]))
    ctx = _context(demo_db, model, cache_path=str(tmp_path / "c.sqlite"))

    def broken(*a, **k):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(ResponseCache, "get", broken)
    monkeypatch.setattr(ResponseCache, "put", broken)
    assert call_model(ctx, role="generation", node="n", prompt="p")[0] == "SELECT 1"


@pytest.fixture(autouse=True)
def _private_cache_dir(monkeypatch, tmp_path):
    # Nothing here may touch the user's own cache folder.
    monkeypatch.setenv("SQLCHORUS_CACHE", str(tmp_path / "user-cache"))


def test_unopenable_cache_means_no_cache(demo_db, tmp_path, named):
    from sqlchorus.core.llm import call_model

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    model = ScriptedChatModel(["SELECT 1"])
    ctx = _context(demo_db, named(model), cache_path=str(blocker / "c.sqlite"))
    assert call_model(ctx, role="generation", node="n", prompt="p")[0] == "SELECT 1"
    assert model.calls == 1


TWIN_FACTORIES = '''
from sqlchorus.testing import ScriptedChatModel


def right():
    return ScriptedChatModel(lambda messages: "SELECT COUNT(*) FROM customers", name="twin")


def wrong():
    return ScriptedChatModel(lambda messages: "SELECT 1 FROM nowhere", name="twin")
'''


def test_models_from_code_with_one_name_keep_their_own_answers(tmp_path, monkeypatch, demo_db):
    (tmp_path / "twin_factories.py").write_text(TWIN_FACTORIES, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    cache = str(tmp_path / "responses.sqlite")
    answers = {}
    for factory in ("right", "wrong", "right"):
        settings = Settings(model=f"python:twin_factories:{factory}", cache_path=cache, trace_dir=None,
                            checkpoints=None, fix_rounds=0, keywords="question", linking="lexical")
        result = sqlchorus.ask("How many customers do we have?", db=demo_db, settings=settings)
        answers.setdefault(factory, []).append((result.sql, result.cost["cached_calls"]))
    assert answers["right"][0] == ("SELECT COUNT(*) FROM customers", 0)
    # The second factory is not served the first one's answer, though its model has the same name.
    assert answers["wrong"][0][1] == 0 and answers["wrong"][0][0] != "SELECT COUNT(*) FROM customers"
    assert answers["right"][1] == ("SELECT COUNT(*) FROM customers", 1)


def test_two_python_factories_of_one_name_do_not_answer_for_each_other(demo_db, tmp_path, monkeypatch):
    # Two factories whose models share a class and a name, answering differently.
    for module, sql in (("factory_a", "SELECT 1"), ("factory_b", "SELECT 2")):
        (tmp_path / f"{module}.py").write_text(
            "from sqlchorus.testing import ScriptedChatModel\n\n"
            f"def make():\n    return ScriptedChatModel(lambda messages: {sql!r}, name='same-name')\n",
            encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    cache = str(tmp_path / "c.sqlite")
    answers = {}
    for module in ("factory_a", "factory_b", "factory_a"):
        settings = Settings(model=f"python:{module}:make", cache_path=cache, trace_dir=None, preset="tiny")
        answers.setdefault(module, []).append(sqlchorus.ask("How many customers?", db=demo_db, settings=settings))
    (a, again), (b,) = answers["factory_a"], answers["factory_b"]
    assert (a.sql, b.sql) == ("SELECT 1", "SELECT 2")
    assert again.sql == "SELECT 1" and again.cost["cached_calls"] == again.cost["calls"] > 0  # its own, cached
    assert b.cost["cached_calls"] == 0
