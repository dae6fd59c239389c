"""LIST's search decisions, rule by rule: what verifying a step keeps (the verified path, the
deepest state, the step's failures, the queries written, a warning the model kept), what a
traceback sets aside (tests/fixtures/rules/list_traceback.txt), where the search goes next
(tests/fixtures/rules/list_routes.txt), which candidate a finished search stands for
(tests/fixtures/rules/list_candidates.txt), and the search's bounds. Each case changes its
outcome when its rule changes."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import FIXTURES, load_pairs
from sqlchorus.config.settings import Settings
from sqlchorus.core.context import Context
from sqlchorus.core.list_search import recursion_limit, sampling
from sqlchorus.graph import routing
from sqlchorus.graph.list_graph import build_list_graph
from sqlchorus.nodes.generate_list import candidate_of, generate_list
from sqlchorus.nodes.list_traceback import list_traceback
from sqlchorus.nodes.list_verify_step import list_verify_step
from sqlchorus.runs.demo import demo_db_path
from sqlchorus.testing import ScriptedChatModel, prompt_text, role_of_call
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.schema.introspect import introspect

TRACEBACKS = load_pairs(FIXTURES / "rules" / "list_traceback.txt")
ROUTES = load_pairs(FIXTURES / "rules" / "list_routes.txt")
CANDIDATES = load_pairs(FIXTURES / "rules" / "list_candidates.txt")

FROM = "SELECT * FROM products AS p"
JOIN = FROM + " JOIN categories AS c ON p.category_id = c.category_id"
OTHER_JOIN = FROM + " JOIN suppliers AS s ON p.supplier_id = s.supplier_id"
WHERE = JOIN + " WHERE c.name = 'Kitchen' AND p.unit_price > 20"
EMPTY = JOIN + " WHERE c.name = 'Nowhere'"
BROKEN = JOIN + " WHERE c.nme = 'Kitchen'"
CROSS = FROM + " JOIN categories AS c"
PLAN = ["Take the products.", "Join their categories.", "Keep the Kitchen ones over 20.", "Count them."]


@pytest.mark.parametrize("case", TRACEBACKS, ids=[c.name for c in TRACEBACKS])
def test_a_traceback(case):
    state = json.loads(case.input)
    assert list_traceback(state, SimpleNamespace(context=None)) == json.loads(case.expected)


def runtime_with(local: int = 3, global_: int = 15) -> Any:
    settings = Settings(list_max_local_attempts=local, list_max_global_attempts=global_)
    return SimpleNamespace(context=SimpleNamespace(settings=settings))


@pytest.mark.parametrize("case", ROUTES, ids=[c.name for c in ROUTES])
def test_where_the_search_goes(case):
    router = getattr(routing, case.meta["router"])
    runtime = runtime_with(int(case.meta.get("local", 3)), int(case.meta.get("global", 15)))
    ((target, reason),) = router(json.loads(case.input), runtime)
    assert [target, reason] == case.expected.splitlines()


def subset(got: Any, expected: Any) -> Any:
    """``got`` cut down to the keys ``expected`` names, at every depth of nested objects."""
    if isinstance(expected, dict) and isinstance(got, dict):
        return {k: subset(got.get(k), v) for k, v in expected.items()}
    return got


@pytest.mark.parametrize("case", CANDIDATES, ids=[c.name for c in CANDIDATES])
def test_the_candidate_of_a_search(case):
    made = dict(candidate_of(json.loads(case.input), 2, Settings()))
    made["list"] = made.pop("meta")["list"]
    expected = json.loads(case.expected)
    assert subset(made, expected) == expected
    assert made["id"] == "list-2" and made["generator"] == "list" and made["list"]["verifier"] == "strong"


# -- verifying a step --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo():
    with GuardedDatabase(demo_db_path()) as db:
        yield db, introspect(db, sample_values=0)


def verify(demo, state: dict[str, Any], **settings) -> dict[str, Any]:
    db, schema = demo
    context = Context(db=db, models={}, schema=schema, settings=Settings(trace_dir=None, **settings))
    return list_verify_step({"plan": PLAN, "plan_round": 1, **state}, SimpleNamespace(context=context))


def test_a_verified_step_joins_the_path_with_the_failures_before_it(demo):
    earlier = [{"sql": BROKEN, "kind": "execution", "error": "no such column: c.nme", "failing": BROKEN}]
    update = verify(demo, {"step": 1, "verified": [{"step": 0, "sql": FROM, "failures": []}], "failures": earlier,
                           "local_attempts": 2, "attempt": {"step": 1, "kind": "reprompt", "sql": JOIN},
                           "written": [FROM]})
    assert update["verified"] == [{"step": 0, "sql": FROM, "failures": []}, {"step": 1, "sql": JOIN, "failures": earlier}]
    assert (update["step"], update["local_attempts"], update["failures"]) == (2, 0, [])
    assert update["check"]["ok"] and update["check"]["step"] == 1
    assert update["written"] == [FROM, JOIN]
    assert update["best"] == {"verified": 2, "steps": 4, "sql": JOIN, "plan": 1}
    assert update["trail"] == [{"plan": 1, "step": 2, "kind": "reprompt", "ok": True, "verdict": "ok", "error": None}]


def test_a_rewritten_step_replaces_the_path_after_it(demo):
    # After a traceback the step is written again: the path is cut at it, whatever was beyond.
    path = [{"step": 0, "sql": FROM, "failures": []}, {"step": 1, "sql": OTHER_JOIN, "failures": []},
            {"step": 2, "sql": "stale", "failures": []}]
    update = verify(demo, {"step": 1, "verified": path, "attempt": {"step": 1, "kind": "write", "sql": JOIN}})
    assert [v["sql"] for v in update["verified"]] == [FROM, JOIN]
    assert update["step"] == 2


def test_the_deepest_state_at_a_tie_is_the_latest_after_a_traceback(demo):
    """Step 2's first version led to a dead end and the search went back; its rewrite is verified
    at the same depth. The deepest state is now the rewrite, the path the search is on, not the
    version it set aside."""
    best = {"verified": 2, "steps": 4, "sql": OTHER_JOIN, "plan": 1}
    update = verify(demo, {"step": 1, "verified": [{"step": 0, "sql": FROM, "failures": []}], "best": best,
                           "dead_ends": [{"step": 1, "sql": OTHER_JOIN, "error": "no such column", "failures": []}],
                           "tracebacks": 1, "attempt": {"step": 1, "kind": "write", "sql": JOIN}})
    assert update["best"] == {"verified": 2, "steps": 4, "sql": JOIN, "plan": 1}


def test_a_shallower_state_does_not_replace_the_deepest(demo):
    best = {"verified": 3, "steps": 4, "sql": WHERE, "plan": 1}
    update = verify(demo, {"step": 1, "verified": [{"step": 0, "sql": FROM, "failures": []}], "best": best,
                           "attempt": {"step": 1, "kind": "write", "sql": JOIN}})
    assert "best" not in update


def test_a_deeper_state_of_a_new_plan_replaces_the_deepest(demo):
    best = {"verified": 1, "steps": 4, "sql": OTHER_JOIN, "plan": 1}
    update = verify(demo, {"plan_round": 2, "step": 1, "verified": [{"step": 0, "sql": FROM, "failures": []}],
                           "best": best, "attempt": {"step": 1, "kind": "write", "sql": JOIN}})
    assert update["best"] == {"verified": 2, "steps": 4, "sql": JOIN, "plan": 2}
    assert update["trail"][0]["plan"] == 2


def test_a_failed_step_joins_the_steps_failures_and_nothing_is_verified(demo):
    earlier = [{"sql": "SELECT 1", "kind": "execution", "error": "e", "failing": "SELECT 1"}]
    update = verify(demo, {"step": 1, "verified": [{"step": 0, "sql": FROM, "failures": []}], "failures": earlier,
                           "local_attempts": 1, "attempt": {"step": 1, "kind": "reprompt", "sql": BROKEN},
                           "best": {"verified": 1, "steps": 4, "sql": FROM, "plan": 1}})
    assert not update["check"]["ok"] and update["check"]["kind"] == "execution" and update["check"]["step"] == 1
    assert update["failures"] == [*earlier, {"sql": BROKEN, "kind": "execution", "error": "no such column: c.nme",
                                             "failing": update["check"]["failing"]}]
    assert "verified" not in update and "step" not in update and "local_attempts" not in update
    assert "best" not in update
    assert update["trail"] == [{"plan": 1, "step": 2, "kind": "reprompt", "ok": False, "verdict": "execution",
                                "error": "no such column: c.nme"}]


def test_a_query_written_before_is_not_counted_again(demo):
    update = verify(demo, {"step": 0, "verified": [], "written": [FROM.lower() + ";"],
                           "attempt": {"step": 0, "kind": "reprompt", "sql": FROM}})
    assert "written" not in update
    none = verify(demo, {"step": 0, "verified": [], "written": [FROM], "attempt": {"step": 0, "kind": "write", "sql": None}})
    assert "written" not in none and not none["check"]["ok"]
    assert none["trail"][0]["kind"] == "write"


def test_an_attempt_without_a_kind_is_a_write_at_the_states_step(demo):
    update = verify(demo, {"step": 0, "verified": [], "attempt": {"sql": FROM}})
    assert update["trail"][0]["kind"] == "write" and update["trail"][0]["step"] == 1
    assert update["check"]["step"] == 0 and update["verified"][0]["step"] == 0


@pytest.mark.parametrize("sql, kind", [(EMPTY, "empty"), (CROSS, "cross_join")])
def test_a_warning_the_model_kept_is_accepted_once(demo, sql, kind):
    first = verify(demo, {"step": 1, "verified": [{"step": 0, "sql": FROM, "failures": []}],
                          "attempt": {"step": 1, "kind": "write", "sql": sql}})
    check = first["check"]
    assert (check["ok"], check["kind"]) == (False, kind)
    # The model's repair is the same query: the warning is accepted, and says so.
    kept = verify(demo, {"step": 1, "verified": [{"step": 0, "sql": FROM, "failures": []}], "check": check,
                         "attempt": {"step": 1, "kind": "reprompt", "sql": sql + " ;"}})
    assert kept["check"]["ok"] and kept["check"]["kind"] == "ok"
    assert kept["check"]["warning"] == f"{check['error']} (kept by the model)"
    assert kept["accepted"] == [check["failing"]]
    assert kept["trail"][0] == {"plan": 1, "step": 2, "kind": "reprompt", "ok": True, "verdict": "ok",
                                "error": check["error"][:200]}
    assert kept["verified"][-1]["sql"] == kept["check"]["sql"]


def test_a_warning_is_accepted_only_for_the_same_query_in_a_repair_after_the_same_warning(demo):
    _, first = None, verify(demo, {"step": 1, "verified": [{"step": 0, "sql": FROM, "failures": []}],
                                   "attempt": {"step": 1, "kind": "write", "sql": EMPTY}})
    check = first["check"]
    base = {"step": 1, "verified": [{"step": 0, "sql": FROM, "failures": []}]}
    rewritten = verify(demo, {**base, "check": check, "attempt": {"step": 1, "kind": "write", "sql": EMPTY}})
    other = verify(demo, {**base, "check": check, "attempt": {"step": 1, "kind": "reprompt",
                                                               "sql": JOIN + " WHERE c.name = 'Elsewhere'"}})
    after_error = verify(demo, {**base, "check": {**check, "kind": "execution"},
                                "attempt": {"step": 1, "kind": "reprompt", "sql": EMPTY}})
    for update in (rewritten, other, after_error):
        assert not update["check"]["ok"] and "accepted" not in update


def test_an_accepted_sub_query_is_not_reported_again(demo):
    first = verify(demo, {"step": 1, "verified": [{"step": 0, "sql": FROM, "failures": []}],
                          "attempt": {"step": 1, "kind": "write", "sql": EMPTY}})
    again = verify(demo, {"step": 1, "verified": [{"step": 0, "sql": FROM, "failures": []}],
                          "accepted": [first["check"]["failing"]], "attempt": {"step": 1, "kind": "write", "sql": EMPTY}})
    assert again["check"]["ok"] and "accepted" not in again


def test_the_verifier_reads_outer_columns_by_the_schema(demo):
    # `joined_on` is the outer table's: only the schema says the sub-query is not standalone.
    sql = "SELECT first_name FROM customers WHERE EXISTS (SELECT 1 FROM stores WHERE stores.opened_on < joined_on)"
    update = verify(demo, {"step": 0, "verified": [], "attempt": {"step": 0, "kind": "write", "sql": sql}})
    assert update["check"]["ok"], update["check"]


@pytest.mark.parametrize("growth, verdict", [(100.0, "ok"), (1.5, "growth")])
def test_the_verifier_bounds_a_joins_growth_by_the_setting(demo, growth, verdict):
    sql = "SELECT * FROM products AS p JOIN categories AS c ON p.category_id >= c.category_id"
    update = verify(demo, {"step": 0, "verified": [], "attempt": {"step": 0, "kind": "write", "sql": sql}},
                    list_join_growth=growth)
    assert update["check"]["kind"] == verdict


@pytest.fixture(scope="module")
def duck(tmp_path_factory):
    import duckdb

    from sqlchorus.tools.engines.duckdb import DuckDatabase

    path = tmp_path_factory.mktemp("duck") / "pets.duckdb"
    made = duckdb.connect(str(path))
    made.execute("CREATE TABLE pets (id INTEGER, weight INTEGER)")
    made.execute("INSERT INTO pets VALUES (1, 10), (2, 20)")
    made.close()
    with DuckDatabase(path) as db:
        yield db, introspect(db, sample_values=0)


# `//` is DuckDB's integer division; read as SQLite, the text does not parse, and the two spellings differ.
DUCK_EMPTY = "SELECT * FROM pets WHERE weight // 2 = 999"


def test_sameness_is_read_in_the_databases_dialect(duck):
    update = verify(duck, {"step": 0, "verified": [], "written": [DUCK_EMPTY.lower()],
                           "attempt": {"step": 0, "kind": "write", "sql": DUCK_EMPTY}})
    assert "written" not in update
    check = update["check"]
    assert (check["ok"], check["kind"]) == (False, "empty")
    kept = verify(duck, {"step": 0, "verified": [], "check": check,
                         "attempt": {"step": 0, "kind": "reprompt", "sql": DUCK_EMPTY.lower()}})
    assert kept["check"]["ok"] and kept["accepted"] == [check["failing"]]


def test_the_weak_verifier_runs_only_the_whole_query(demo):
    update = verify(demo, {"step": 0, "verified": [], "attempt": {"step": 0, "kind": "write", "sql": CROSS}},
                    list_verifier="weak")
    assert update["check"]["ok"]


def test_a_long_error_is_cut_in_the_trail(demo):
    long_name = "x" * 300
    update = verify(demo, {"step": 0, "verified": [], "attempt": {"step": 0, "kind": "write",
                                                                    "sql": f"SELECT {long_name} FROM products"}})
    assert len(update["trail"][0]["error"]) == 200 and update["trail"][0]["error"] == update["check"]["error"][:200]


def test_a_search_that_gives_up_keeps_the_rewrite_it_was_on_not_the_dead_end(demo):
    """Step 3 can be built on neither version of step 2. The search verifies the first version,
    goes back, verifies the second at the same depth, and gives up on step 3: the deepest state it
    reports is the second version, the last path it tried."""
    answers = {"plan": "\n".join(f"[[Step {n}: {s}]]" for n, s in enumerate(PLAN, 1)),
               ("write", 1): [FROM], ("write", 2): [OTHER_JOIN, JOIN], ("write", 3): [BROKEN], ("repair", 3): [BROKEN]}

    def model(messages: Any) -> str:
        if role_of_call() == "list:plan":
            return answers["plan"]
        found = re.search(r"(write|repair) step (\d+) of \d+", prompt_text(messages).split("======= Your task =======")[-1])
        queue = answers[(found.group(1), int(found.group(2)))]
        return f"```sql\n{queue.pop(0) if len(queue) > 1 else queue[0]}\n```"

    db, schema = demo
    context = Context(db=db, models={"generation": ScriptedChatModel(model)}, schema=schema,
                      settings=Settings(trace_dir=None, cache=False, list_max_global_attempts=12))
    update = generate_list({"question": "How many Kitchen products cost more than 20?", "schema_view": "(schema)",
                            "values": {}, "sample": 0}, SimpleNamespace(context=context), search=build_list_graph())
    (made,) = update["candidates"]
    record = made["meta"]["list"]
    assert record["tracebacks"] >= 1 and not record["complete"] and made["sql"] == ""
    assert record["deepest_verified"] == {"verified": 2, "steps": 4, "sql": JOIN}


# -- the search's bounds and sampling ----------------------------------------------------------


@pytest.mark.parametrize("local, global_, limit", [(3, 15, 44), (1, 5, 22), (0, 4, 22), (3, 4, 16), (3, 16, 46)])
def test_the_step_limit(local, global_, limit):
    # two graph steps per query, two per traceback (one per local + 1 queries), the first plan,
    # and a margin of five
    settings = Settings(list_max_local_attempts=local, list_max_global_attempts=global_)
    assert recursion_limit(settings) == limit


def test_a_first_pass_call_carries_the_sample_and_a_retry_none():
    context = SimpleNamespace(settings=Settings(retry_temperature=0.7, retry_top_p=0.9))
    assert sampling(context, {"sample": 3}, retry=False) == {"temperature": 0.7, "top_p": 0.9, "sample": 3}
    assert sampling(context, {}, retry=False) == {"temperature": 0.7, "top_p": 0.9, "sample": 0}
    assert sampling(context, {"sample": 3}, retry=True) == {"temperature": 0.7, "top_p": 0.9}
