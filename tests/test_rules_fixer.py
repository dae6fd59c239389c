"""The fixer's stopping rules: which candidates it takes (broken, rounds left, not stopped, not a
damaged database), what one round does to each (a new query, an answer without one, a query
already tried, a failing model), how rounds sample and share calls, and where the graph goes
after checking (tests/fixtures/rules/fixer_routing.txt). Each case changes its outcome when its
rule changes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from conftest import FIXTURES, load_pairs, sampled_model
from sqlchorus.config.settings import ROLES, Settings
from sqlchorus.core.candidates import can_fix, fix_record, is_broken, new_candidate, tried, updated
from sqlchorus.core.context import Context
from sqlchorus.graph.routing import after_check
from sqlchorus.nodes.fix_candidates import NODE, examples_text, fix_candidates
from sqlchorus.runs.demo import demo_db_path
from sqlchorus.testing import prompt_text, sql_of
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.schema.introspect import introspect

ROUTES = load_pairs(FIXTURES / "rules" / "fixer_routing.txt")
QUESTION = "How many suppliers are there?"
BROKEN = "SELECT COUNT(*) FROM supplier"
FIXED = "SELECT COUNT(*) FROM suppliers"


def candidate(cid: str = "c0", status: str = "error", sql: str = BROKEN, *, rounds: int | None = None,
              stopped: str | None = None, no_sql: int = 0, kind: str | None = None, fix_attempts: int = 0,
              history: list[dict[str, Any]] | None = None, **meta: Any) -> dict[str, Any]:
    made = updated(new_candidate("gen", 0, sql), id=cid, status=status, fix_attempts=fix_attempts,
                   error="no such table: t" if status == "error" else None, error_kind=kind,
                   history=list(history or []))
    if rounds is not None or stopped or no_sql:
        meta["fix"] = {"rounds": rounds or 0, "no_sql": no_sql, "stopped": stopped}
    return updated(made, meta=meta) if meta else made


# -- which candidates the fixer takes ---------------------------------------------------------


@pytest.mark.parametrize("status, kind, broken", [
    ("error", None, True), ("empty", None, True), ("ok", None, False), ("unchecked", None, False),
    ("error", "database_open", False), ("error", "timeout", True), ("empty", "database_open", False),
])
def test_broken_means_failed_or_empty_on_a_database_that_opened(status, kind, broken):
    assert is_broken(candidate(status=status, kind=kind)) is broken


@pytest.mark.parametrize("made, beta, fixable", [
    (candidate(), 3, True),
    (candidate(), 0, False),
    (candidate(rounds=2), 3, True),
    (candidate(rounds=3), 3, False),
    (candidate(fix_attempts=2), 3, True),          # without a record, the fixes count as rounds
    (candidate(fix_attempts=3), 3, False),
    (candidate(fix_attempts=3, rounds=1), 3, True),  # the record wins over the fixes
    (candidate(rounds=1, stopped="round 1 answered with a query already tried"), 3, False),
    (candidate(status="ok"), 3, False),
    (candidate(kind="database_open"), 3, False),
])
def test_the_fixer_takes_broken_candidates_with_rounds_left_that_have_not_stopped(made, beta, fixable):
    assert can_fix(made, beta) is fixable


def test_the_fix_record_reads_the_meta_else_the_fixes():
    assert fix_record(candidate(fix_attempts=2)) == {"rounds": 2, "no_sql": 0, "stopped": None}
    assert fix_record(candidate(rounds=3, no_sql=2, stopped="why")) == {"rounds": 3, "no_sql": 2, "stopped": "why"}
    assert fix_record(candidate(fix_attempts=1, other="kept")) == {"rounds": 1, "no_sql": 0, "stopped": None}


def test_a_query_tried_is_the_candidates_or_an_earlier_one_up_to_spelling():
    made = candidate(sql=BROKEN, history=[{"sql": "SELECT name FROM supplier", "status": "error", "error": "x"}])
    assert tried(made, "select count(*) from supplier;")
    assert tried(made, "SELECT  name FROM supplier")
    assert not tried(made, FIXED)
    assert not tried(made, None)


# -- where the graph goes after checking -------------------------------------------------------


def routed(case) -> tuple[str, str]:
    candidates = []
    for line in case.input.splitlines():
        cid, status, *flags = line.split()
        options = dict(flag.partition("=")[::2] for flag in flags)
        candidates.append(candidate(
            cid, status, rounds=int(options["rounds"]) if "rounds" in options else None,
            stopped=f"round {options.get('rounds', 1)} answered with a query already tried" if "stopped" in options else None,
            kind=options.get("kind")))
    runtime = SimpleNamespace(context=SimpleNamespace(settings=Settings(fix_rounds=int(case.meta["beta"]))))
    ((target, reason),) = after_check({"candidates": candidates, "fix_round": int(case.meta["round"])}, runtime)
    return target, reason


@pytest.mark.parametrize("case", ROUTES, ids=[c.name for c in ROUTES])
def test_after_checking(case):
    target, reason = routed(case)
    expected_target, expected_reason = case.expected.splitlines()
    assert (target, reason) == (expected_target, expected_reason)


def test_after_checking_with_no_round_played_yet():
    runtime = SimpleNamespace(context=SimpleNamespace(settings=Settings(fix_rounds=1)))
    assert after_check({"candidates": [candidate()]}, runtime)[0][0] == "fix_candidates"
    assert after_check({"candidates": [candidate()], "fix_round": None}, runtime)[0][0] == "fix_candidates"


# -- one round of the fixer --------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo():
    with GuardedDatabase(demo_db_path()) as db:
        yield db, introspect(db, sample_values=0)


class Fixer:
    """A fixing model answering each prompt from ``answers`` (a function of the failing query
    the prompt shows): a query, text without one, or an exception to raise."""

    def __init__(self, answers: dict[str, Any]):
        self.answers = answers
        self.prompts: list[str] = []

    def __call__(self, messages: Any) -> str:
        prompt = prompt_text(messages)
        self.prompts.append(prompt)
        answer = self.answers[sql_of(prompt)]
        if isinstance(answer, Exception):
            raise answer
        return answer if answer.startswith("No") else f"The table is misspelt.\nFinal Answer: {answer}"


def fix(demo, candidates: list[dict[str, Any]], answers: dict[str, Any], *, fix_round: int = 0,
        evidence: str = "suppliers are rows of suppliers", schema_view: str | None = "(schema)", **settings):
    db, schema = demo
    fixer = Fixer(answers)
    model = sampled_model(fixer)
    context = Context(db=db, models={r: model for r in ROLES}, schema=schema,
                      settings=Settings(trace_dir=None, cache=False, model_retries=0, **settings))
    state = {"question": QUESTION, "evidence": evidence, "schema_view": schema_view,
             "values": {"suppliers.name": [{"value": "Acme Supplies"}]}, "candidates": candidates, "fix_round": fix_round}
    update = fix_candidates(state, SimpleNamespace(context=context))
    return update, fixer, model


def test_a_new_query_replaces_the_broken_one_and_joins_its_history(demo):
    update, fixer, model = fix(demo, [candidate(kind="execution", meta_note="kept")], {BROKEN: FIXED})
    (fixed,) = update["candidates"]
    assert (fixed["sql"], fixed["status"], fixed["error"], fixed["error_kind"]) == (FIXED, "unchecked", None, None)
    assert fixed["fix_attempts"] == 1
    assert fixed["history"] == [{"sql": BROKEN, "status": "error", "error": "no such table: t"}]
    assert fixed["meta"] == {"meta_note": "kept", "fix": {"rounds": 1, "no_sql": 0, "stopped": None}}
    assert update["fix_round"] == 1 and update["errors"] == [] and len(update["usage"]) == 1
    assert [s[1:] for s in model.sampling] == [(None, None)]  # the first round samples as the run does
    shown, task = fixer.prompts[0].split("======= Your task =======")
    assert "suppliers are rows of suppliers" in task and "(schema)" in task and QUESTION in task
    assert "Acme Supplies" in task and "Error: no such table: t" in task
    assert examples_text(Settings(), "sqlite") in shown
    assert [(u["node"], u["role"]) for u in update["usage"]] == [(NODE, "fixing")]


def test_a_task_without_a_hint_or_a_query_says_so(demo):
    _, fixer, _ = fix(demo, [candidate(sql="")], {"(no query was produced)": FIXED}, evidence="")
    task = fixer.prompts[0].split("======= Your task =======")[-1]
    assert "Evidence:\n(none)" in task and "The SQL query executed was:\n(no query was produced)\n" in task


def test_a_candidate_stopped_or_failed_does_not_stop_the_others(demo):
    other = "SELECT name FROM supplier"
    update, _, _ = fix(demo, [candidate("c0"), candidate("c1", sql=other)], {BROKEN: BROKEN, other: FIXED})
    assert [(c["id"], c["sql"]) for c in update["candidates"]] == [("c0", BROKEN), ("c1", FIXED)]
    update, _, _ = fix(demo, [candidate("c0"), candidate("c1", sql=other)],
                       {BROKEN: RuntimeError("down"), other: FIXED})
    assert [(c["id"], c["sql"]) for c in update["candidates"]] == [("c0", BROKEN), ("c1", FIXED)]
    update, _, _ = fix(demo, [candidate("c0"), candidate("c1", sql=other)], {BROKEN: "No idea.", other: FIXED})
    assert [(c["id"], c["sql"]) for c in update["candidates"]] == [("c0", BROKEN), ("c1", FIXED)]


class OtherEngine:
    """The demo database as an engine of another dialect says it is (MySQL, where a double-quoted
    word is a string)."""

    dialect = "mysql"

    def __init__(self, db: Any):
        self._db = db

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def test_the_fixer_reads_queries_and_shows_examples_in_the_databases_dialect(demo):
    db, schema = demo
    quoted = "SELECT 'Acme' FROM supplier"
    fixer = Fixer({quoted: 'SELECT "Acme" FROM supplier'})
    model = sampled_model(fixer)
    context = Context(db=OtherEngine(db), models={r: model for r in ROLES}, schema=schema,
                      settings=Settings(trace_dir=None, cache=False, model_retries=0))
    state = {"question": QUESTION, "evidence": "", "schema_view": "(schema)", "values": {},
             "candidates": [candidate(sql=quoted)], "fix_round": 0}
    (stopped,) = fix_candidates(state, SimpleNamespace(context=context))["candidates"]
    # In MySQL the answer is the same query again: the fixer stops rather than count it as new.
    assert stopped["meta"]["fix"]["stopped"] == "round 1 answered with a query already tried"
    assert examples_text(context.settings, "mysql") in fixer.prompts[0]
    assert not tried(candidate(sql=quoted), 'SELECT "Acme" FROM supplier')  # in SQLite a name, not a string
    assert tried(candidate(sql=quoted), 'SELECT "Acme" FROM supplier', "mysql")


def test_a_later_round_samples_as_a_retry(demo):
    earlier = [{"sql": "SELECT COUNT(*) FROM supplyer", "status": "error", "error": "no such table: supplyer"}]
    update, fixer, model = fix(demo, [candidate(rounds=1, fix_attempts=1, history=earlier)], {BROKEN: FIXED},
                               fix_round=1, retry_temperature=0.6, retry_top_p=0.9)
    assert [s[1:] for s in model.sampling] == [(0.6, 0.9)]
    (fixed,) = update["candidates"]
    assert fixed["fix_attempts"] == 2 and fixed["meta"]["fix"]["rounds"] == 2
    assert [h["sql"] for h in fixed["history"]] == ["SELECT COUNT(*) FROM supplyer", BROKEN]
    assert update["fix_round"] == 2
    assert "Attempt 1:\nSELECT COUNT(*) FROM supplyer\nIts result: Error: no such table: supplyer" in fixer.prompts[0]


def test_an_answer_repeating_a_query_tried_stops_the_candidate(demo):
    earlier = [{"sql": FIXED, "status": "empty", "error": None}]
    update, _, _ = fix(demo, [candidate(rounds=1, fix_attempts=1, history=earlier)], {BROKEN: FIXED.lower()})
    (stopped,) = update["candidates"]
    assert (stopped["sql"], stopped["status"], stopped["fix_attempts"], stopped["history"]) == (BROKEN, "error", 1, earlier)
    assert stopped["meta"]["fix"] == {"rounds": 2, "no_sql": 0, "stopped": "round 2 answered with a query already tried"}
    assert not can_fix(stopped, 3)


def test_an_answer_repeating_the_query_it_fixes_stops_the_candidate(demo):
    update, _, _ = fix(demo, [candidate()], {BROKEN: BROKEN})
    (stopped,) = update["candidates"]
    assert stopped["fix_attempts"] == 0 and stopped["history"] == []
    assert stopped["meta"]["fix"]["stopped"] == "round 1 answered with a query already tried"


def test_an_answer_without_sql_spends_the_round_and_says_so_next_time(demo):
    update, _, _ = fix(demo, [candidate()], {BROKEN: "No idea."})
    (kept,) = update["candidates"]
    assert (kept["sql"], kept["status"], kept["fix_attempts"], kept["history"]) == (BROKEN, "error", 0, [])
    assert kept["meta"]["fix"] == {"rounds": 1, "no_sql": 1, "stopped": None}
    assert update["errors"] == [{"node": NODE, "kind": "parse", "message": "c0: the fixer's answer contained no SQL."}]
    assert can_fix(kept, 3)
    again, fixer, _ = fix(demo, [kept], {BROKEN: "No idea still."}, fix_round=1)
    assert "1 earlier answer(s) to this task contained no SQL query" in fixer.prompts[0]
    assert again["candidates"][0]["meta"]["fix"] == {"rounds": 2, "no_sql": 2, "stopped": None}


def test_a_failing_model_spends_the_round_and_keeps_the_query(demo):
    update, _, _ = fix(demo, [candidate()], {BROKEN: RuntimeError("the provider is down")})
    (kept,) = update["candidates"]
    assert (kept["sql"], kept["status"], kept["fix_attempts"]) == (BROKEN, "error", 0)
    assert kept["meta"]["fix"] == {"rounds": 1, "no_sql": 0, "stopped": None}
    ((error),) = update["errors"]
    assert error["node"] == NODE and error["message"].startswith("c0: ") and "the provider is down" in error["message"]
    # The failed call is still a call of the run's: its record is in the usage.
    assert [(u["node"], u["role"]) for u in update["usage"]] == [(NODE, "fixing")]


def test_a_state_without_a_schema_view_shows_an_empty_schema(demo):
    _, fixer, _ = fix(demo, [candidate()], {BROKEN: FIXED}, schema_view=None)
    task = fixer.prompts[0].split("======= Your task =======")[-1]
    assert "Table creation statements\n\n**************************" in task


def test_only_candidates_the_fixer_takes_are_changed(demo):
    made = [candidate("ok", "ok", FIXED), candidate("spent", rounds=3), candidate("stopped", rounds=1, stopped="x"),
            candidate("damaged", kind="database_open"), candidate("empty", "empty", "SELECT 1 WHERE 0")]
    update, fixer, _ = fix(demo, made, {"SELECT 1 WHERE 0": "SELECT 1"}, fix_rounds=3)
    assert [c["id"] for c in update["candidates"]] == ["empty"]
    assert "The query ran but returned no rows (an empty result)." in fixer.prompts[0]
    assert update["candidates"][0]["history"] == [{"sql": "SELECT 1 WHERE 0", "status": "empty", "error": None}]


def test_candidates_with_the_same_prompt_share_one_call(demo):
    update, fixer, model = fix(demo, [candidate("c0"), candidate("c1")], {BROKEN: FIXED})
    assert len(fixer.prompts) == 1 and len(update["usage"]) == 1
    assert [c["sql"] for c in update["candidates"]] == [FIXED, FIXED]


def test_a_first_round_and_a_retry_with_the_same_prompt_make_a_call_each(demo):
    # The same query and history: the prompts are the same, but a retry samples afresh.
    update, fixer, model = fix(demo, [candidate("c0"), candidate("c1", rounds=1)], {BROKEN: FIXED})
    assert len(fixer.prompts) == 2 and fixer.prompts[0] == fixer.prompts[1]
    assert [s[1:] for s in model.sampling] == [(None, None), (0.8, 0.95)]
    assert len(update["usage"]) == 2


def test_a_shared_failing_call_is_an_error_for_each_candidate(demo):
    update, fixer, _ = fix(demo, [candidate("c0"), candidate("c1")], {BROKEN: RuntimeError("down")})
    assert len(fixer.prompts) == 1
    assert [e["message"][:4] for e in update["errors"]] == ["c0: ", "c1: "]
    assert [c["meta"]["fix"]["rounds"] for c in update["candidates"]] == [1, 1]


def test_the_round_counter_counts_from_the_state(demo):
    update, _, _ = fix(demo, [], {}, fix_round=2)
    assert update == {"candidates": [], "fix_round": 3, "usage": [], "errors": []}
