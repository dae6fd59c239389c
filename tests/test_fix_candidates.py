"""CHASE-SQL's query fixer: its few-shot examples, true on the demo database, shown to the model
before the task, and small enough to leave the schema its share of the prompt; and its retries,
each with a new prompt, sampled, never answered from the response cache, counted only when they
produce a new query."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sqlchorus
from conftest import Recorder, chat_calls, sampled_model
from sqlchorus import prompts
from sqlchorus.config.settings import Settings
from sqlchorus.core.budget import PROMPT_RESERVE
from sqlchorus.nodes.fix_candidates import NODE, examples_text, result_text
from sqlchorus.testing import ScriptedChatModel, role_of_call, sql_of
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.models.parsing import extract_sql
from sqlchorus.tools.candidates.results import check_sql
from sqlchorus.tools.schema.introspect import introspect
from sqlchorus.tools.models.tokens import APPROXIMATE

EXAMPLES = prompts.examples(NODE)
QUESTION = "How many suppliers are there?"
GOLD = "SELECT COUNT(*) FROM suppliers"
BROKEN = "SELECT COUNT(*) FROM supplier"


@pytest.mark.parametrize("example", EXAMPLES, ids=[ex["question"] for ex in EXAMPLES])
def test_each_example_is_true_on_the_demo_database(demo_db, example):
    """The failed query fails as the example says, the answer's query runs and returns rows, and
    the example's schema is the demo database's own."""
    with GuardedDatabase(demo_db) as db:
        failed = check_sql(db, example["sql"])
        fixed = extract_sql(example["answer"])
        assert failed["status"] in ("error", "empty")
        assert result_text(failed) == example["result"]
        assert fixed and fixed != example["sql"]
        assert check_sql(db, fixed)["status"] == "ok"
        schema = introspect(db, sample_values=0)
    final = example["answer"].rsplit("Final Answer:", 1)[1]
    assert final.strip() == fixed and "\n" not in final.strip()  # one line, as the prompt asks
    for table in example["schema"]["tables"]:
        real = schema.table(table["name"])
        assert [[c.name, c.type] for c in real.columns] == table["columns"]
        assert [c.name for c in real.columns if c.primary_key] == table["primary_key"]


def test_examples_cover_an_error_and_an_empty_result():
    assert {ex["result"].startswith("Error:") for ex in EXAMPLES} == {True, False}


def _fixer_prompts(demo_db, **settings):
    recorder = Recorder({QUESTION: GOLD}, first_answer=lambda q: BROKEN)
    result = sqlchorus.ask(
        QUESTION, db=demo_db,
        settings=Settings(model=ScriptedChatModel(recorder), trace_dir=None, **settings),
    )
    assert result.ok and result.sql == GOLD
    return recorder.of("fixing"), result


def test_the_fixer_prompt_shows_the_examples_before_the_task(demo_db):
    (prompt,), _ = _fixer_prompts(demo_db)
    shown, task = prompt.split("======= Your task =======")
    assert "Here are some examples:" in shown
    for ex in EXAMPLES:
        assert f"Question:\n{ex['question']}\n" in shown and ex["answer"] in shown
        assert ex["question"] not in task
    assert sql_of(prompt) == BROKEN
    assert "Error: no such table: supplier" in task


def test_examples_are_rendered_in_the_runs_schema_format():
    assert "CREATE TABLE suppliers" in examples_text(Settings(schema_format="ddl"))
    assert "# Table: suppliers" in examples_text(Settings(schema_format="m-schema"))


def test_the_examples_leave_the_schema_its_share_of_the_prompt(demo_db):
    """A schema view may take all of the prompt budget but PROMPT_RESERVE; the rest of the fixer's
    prompt, its examples included, fits in that reserve."""
    (prompt,), _ = _fixer_prompts(demo_db)
    task = prompt.split("======= Your task =======")[1]
    view = task.split("Table creation statements\n", 1)[1].split("\n**************************\n", 1)[0]
    assert view.startswith("【DB_ID】") and "# Table: order_items" in view
    rest = prompt.replace(view, "")
    assert APPROXIMATE.count(rest) <= PROMPT_RESERVE


def test_a_users_examples_file_replaces_the_shipped_one(tmp_path):
    mine = {**EXAMPLES[0], "question": "Which suppliers are in France?", "answer": "Final Answer: SELECT name FROM suppliers"}
    (tmp_path / f"{NODE}_examples.json").write_text(json.dumps([mine]), encoding="utf-8")
    text = examples_text(Settings(examples_dir=str(tmp_path)))
    assert "Which suppliers are in France?" in text and "Example 2" not in text
    assert EXAMPLES[1]["question"] not in text


# -- retries that differ ---------------------------------------------------------------------

X = "SELECT COUNT(*) FROM supplier"  # the generator's broken query
Y = "SELECT COUNT(*) FROM supplier_list"  # the fixer's broken answers
Z = "SELECT COUNT(*) FROM all_suppliers"
W = "SELECT COUNT(*) FROM suppliers_all"


def _fixer_answers(*fixes):
    """The oracle's answers with ``X`` from the generator and ``fixes`` in turn from the fixer
    (the last one again once they run out)."""
    queue = list(fixes)

    def answer(question):
        if role_of_call() != "fixing":
            return fixes[0]
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return SimpleNamespace(get=answer)


def _fixer_calls(spans):
    return [call[1:] for call in chat_calls(spans, NODE)]


def _ask(demo_db, tmp_path, named, spans, model, **settings):
    return sqlchorus.ask(
        QUESTION, db=demo_db, exporters=[spans],
        settings=Settings(model=named(model), cache_path=str(tmp_path / "responses.sqlite"), trace_dir=None, **settings),
    )


def test_a_model_that_repeats_itself_gets_distinct_prompts_and_counts_one_fix(demo_db, tmp_path, named, spans):
    """The fixer answers with the same broken query every time. Round 2 shows round 1's query
    and its error, samples at the retry temperature and top-p, does not come from the response
    cache, and, answered with the same query again, stops the fixer: one fix, not three."""
    recorder = Recorder(_fixer_answers(Y), first_answer=lambda q: X)
    model = sampled_model(recorder)
    result = _ask(demo_db, tmp_path, named, spans, model, fix_rounds=3)
    assert not result.ok
    first, second = recorder.of("fixing")
    assert first != second
    assert sql_of(first) == X and "Earlier attempts" not in first
    assert sql_of(second) == Y
    assert f"Attempt 1:\n{X}\nIts result: Error: no such table: supplier\n" in second.split("======= Your task =======")[1]
    (candidate,) = result.candidates
    assert candidate["fix_attempts"] == 1 and candidate["sql"] == Y
    assert candidate["meta"]["fix"] == {"rounds": 2, "no_sql": 0, "stopped": "round 2 answered with a query already tried"}
    # Round 1 samples as the run does (greedy); round 2 as LIST's self-correction does.
    assert _fixer_calls(spans) == [(0.0, None, False), (0.8, 0.95, False)]
    assert [s[1:] for s in model.sampling if s[0] == NODE] == [(None, None), (0.8, 0.95)]
    assert [bool(u.get("cached")) for u in result.usage if u["node"] == NODE] == [False, False]

    # The same question again, with the same cache: greedy calls come from the cache, the retry
    # goes to the model again.
    calls, spans = model.calls, InMemorySpanExporter()
    again = _ask(demo_db, tmp_path, named, spans, model, fix_rounds=3)
    assert [bool(u.get("cached")) for u in again.usage if u["node"] == NODE] == [True, False]
    assert _fixer_calls(spans) == [(0.0, None, True), (0.8, 0.95, False)]
    assert model.calls == calls + 1
    assert again.candidates[0]["fix_attempts"] == 1


def test_each_round_shows_every_earlier_attempt_and_its_error(demo_db, tmp_path, named, spans):
    """Three rounds, each with a new broken query: every prompt is new, round 3 lists the two
    queries before the one it fixes, and every new query counts."""
    recorder = Recorder(_fixer_answers(Y, Z, W), first_answer=lambda q: X)
    result = _ask(demo_db, tmp_path, named, spans, sampled_model(recorder), fix_rounds=3)
    prompts_sent = recorder.of("fixing")
    assert len(prompts_sent) == len(set(prompts_sent)) == 3
    assert [sql_of(p) for p in prompts_sent] == [X, Y, Z]
    third = prompts_sent[2].split("======= Your task =======")[1]
    assert third.index(f"Attempt 1:\n{X}\n") < third.index(f"Attempt 2:\n{Y}\nIts result: Error: no such table: supplier_list") < third.index(f"The SQL query executed was:\n{Z}")
    assert "Attempt 3" not in third
    (candidate,) = result.candidates
    assert candidate["fix_attempts"] == 3
    assert candidate["meta"]["fix"] == {"rounds": 3, "no_sql": 0, "stopped": None}
    assert [t for t, _, _ in _fixer_calls(spans)] == [0.0, 0.8, 0.8]


@pytest.mark.parametrize("fixes", [(Y, Z, Y), (Y, Z, W, Y)],
                         ids=["round 3 repeats round 1", "round 4 repeats round 1"])
def test_a_round_repeating_an_older_round_stops_the_fixer(demo_db, tmp_path, named, spans, fixes):
    """The last round answers with round 1's query, not with the one it was asked to fix: that
    query already failed, so the fixer stops there, keeping the new queries it got before, and
    does not play the round it has left."""
    recorder = Recorder(_fixer_answers(*fixes), first_answer=lambda q: X)
    rounds = len(fixes)
    result = _ask(demo_db, tmp_path, named, spans, sampled_model(recorder), fix_rounds=rounds + 1)
    assert [sql_of(p) for p in recorder.of("fixing")] == [X, *fixes[:-1]]
    (candidate,) = result.candidates
    assert candidate["sql"] == fixes[-2] and candidate["fix_attempts"] == rounds - 1
    assert [h["sql"] for h in candidate["history"]] == [X, *fixes[:-2]]
    assert candidate["meta"]["fix"] == {
        "rounds": rounds, "no_sql": 0, "stopped": f"round {rounds} answered with a query already tried",
    }


def test_the_first_round_repeating_the_generators_query_counts_no_fix(demo_db, tmp_path, named, spans):
    recorder = Recorder(_fixer_answers(X), first_answer=lambda q: X)
    result = _ask(demo_db, tmp_path, named, spans, sampled_model(recorder), fix_rounds=3)
    assert len(recorder.of("fixing")) == 1
    assert result.candidates[0]["fix_attempts"] == 0
    assert result.candidates[0]["meta"]["fix"]["stopped"] == "round 1 answered with a query already tried"


def test_retry_settings_reach_the_fixer(demo_db, tmp_path, named, spans):
    recorder = Recorder(_fixer_answers(Y), first_answer=lambda q: X)
    result = _ask(demo_db, tmp_path, named, spans, sampled_model(recorder), fix_rounds=3,
                  retry_temperature=0.5, retry_top_p=0.9)
    assert _fixer_calls(spans) == [(0.0, None, False), (0.5, 0.9, False)]
    assert result.candidates[0]["fix_attempts"] == 1


def test_a_run_with_retries_replays_its_recorded_answers(demo_db, tmp_path):
    """The call log serves a replay each round's answer in order, with no model call."""
    recorder = Recorder(_fixer_answers(Y, Z), first_answer=lambda q: X)
    session = sqlchorus.Session(Settings(model=ScriptedChatModel(recorder), trace_dir=str(tmp_path), fix_rounds=3))
    first = session.ask(QUESTION, db=demo_db)
    session.close()

    def refuse(messages):
        raise AssertionError("a replay must not call the model")

    again = sqlchorus.Session(Settings(model=ScriptedChatModel(refuse), trace_dir=str(tmp_path), fix_rounds=3))
    replayed = again.replay(first.run_id)
    again.close()
    assert replayed.cost["replayed_calls"] == replayed.cost["calls"] == len(first.usage)
    assert [u["node"] for u in replayed.usage].count(NODE) == 3
    assert replayed.candidates == first.candidates
    assert replayed.candidates[0]["fix_attempts"] == 2  # Y and Z; round 3 repeated Z
