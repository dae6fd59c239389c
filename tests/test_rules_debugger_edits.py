"""The debugger's edits of every kind of state key: a whole key's new value replaces the old one,
whatever the key's reducer would do with an update (a list-valued key such as the usage is not
appended to, the candidates are not merged by id), for every key the state declares
(tests/fixtures/rules/debugger_edits.txt); an edit of a part (``candidates[0].sql``,
``usage[0].model``, ``links.orders``) changes that part and nothing else; and the run stays
paused before the same node, with the edit being what that node meets."""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest

import sqlchorus
from conftest import FIXTURES, load_pairs
from sqlchorus.core.state import SqlchorusState
from sqlchorus.runs.debugger import Debugger, state_keys
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import oracle_model

EDITS = load_pairs(FIXTURES / "rules" / "debugger_edits.txt")
GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"


@pytest.fixture(scope="module")
def paused(tmp_path_factory, demo_db_module):
    """A run paused before check_candidates with its one candidate; each test starts from that
    checkpoint (``at``)."""
    folder = tmp_path_factory.mktemp("debugger-edits")
    # Shared by the module's tests, so set up before each test's own private folders: its own here.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_DATA_HOME", str(folder / "user-data"))
        patch.chdir(folder)
        settings = sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(folder / "traces"), cache=False,
                                      checkpoints=str(folder / "checkpoints.sqlite"), generators={"divide_conquer": 1})
        with sqlchorus.Session(settings) as session:
            debugger = Debugger.start(QUESTION, demo_db_module, session=session, breakpoints=["check_candidates"])
            assert debugger.cont() == "check_candidates"
            debugger.at = debugger.checkpoint_id
            yield debugger
            debugger.close()


@pytest.fixture(scope="module")
def demo_db_module():
    from sqlchorus.runs.demo import demo_db_path

    return demo_db_path()


@pytest.fixture
def debugger(paused):
    paused.goto(paused.at)
    return paused


def test_every_key_of_the_state_has_a_case():
    assert {c.meta["target"] for c in EDITS} == set(state_keys()) == set(typing.get_type_hints(SqlchorusState))


def test_the_paused_run_has_what_the_edits_replace(paused):
    paused.goto(paused.at)
    values = paused.state()
    assert [c["id"] for c in values["candidates"]] == ["divide_conquer-0"]
    assert values["usage"] and values["keywords"]


@pytest.mark.parametrize("case", EDITS, ids=[c.name for c in EDITS])
def test_a_whole_key_is_replaced(debugger, case):
    key, value = case.meta["target"], json.loads(case.input)
    before = debugger.state()
    first = debugger.set(key, value)
    second = debugger.set(key, value)  # an appending or merging reducer would show now
    assert first != second != debugger.at
    assert debugger.state(key) == value
    assert debugger.next_nodes == ("check_candidates",)
    # Nothing else changed, and the checkpoint edited keeps its own value.
    after = debugger.state()
    assert {k: v for k, v in after.items() if k != key} == {k: v for k, v in before.items() if k != key}
    assert debugger.snapshot(debugger.at).values.get(key) == before.get(key)


def test_an_edit_of_one_candidates_field_changes_only_that(debugger):
    (before,) = debugger.state("candidates")
    debugger.set("candidates[0].sql", "SELECT COUNT(*) FROM orders")
    (after,) = debugger.state("candidates")
    assert after == {**before, "sql": "SELECT COUNT(*) FROM orders"}


def test_an_edit_inside_the_usage_keeps_its_length(debugger):
    before = debugger.state("usage")
    debugger.set("usage[0].model", "edited")
    debugger.set("usage[-1].output_tokens", 7)
    expected = [dict(u) for u in before]
    expected[0]["model"] = "edited"
    expected[-1]["output_tokens"] = 7
    assert debugger.state("usage") == expected


def test_an_edit_of_one_keyword_and_one_link(debugger):
    keywords, links = debugger.state("keywords"), debugger.state("links")
    debugger.set("keywords[0]", "clients")
    debugger.set("links.orders", ["id"])
    assert debugger.state("keywords") == ["clients", *keywords[1:]]
    assert debugger.state("links") == {**links, "orders": ["id"]}


def test_a_field_of_a_record_not_set_yet_starts_the_record(debugger):
    assert debugger.state("selection") is None
    debugger.set("selection.method", "vote")
    assert debugger.state("selection") == {"method": "vote"}


def test_the_edited_candidates_are_what_the_run_goes_on_with(debugger):
    edited = {"id": "edited-0", "generator": "edited", "sql": "SELECT COUNT(*) FROM orders", "reasoning": "",
              "status": "unchecked", "error": None, "error_kind": None, "fingerprint": None, "row_count": None,
              "fix_attempts": 0, "history": []}
    debugger.set("candidates", [edited])
    assert debugger.cont() is None
    result = debugger.result()
    assert [c["id"] for c in result.candidates] == ["edited-0"]
    assert result.sql == "SELECT COUNT(*) FROM orders"


def test_an_edited_usage_is_what_the_run_counts(debugger):
    record: dict[str, Any] = {"node": "edited", "role": "generation", "model": "m", "input_tokens": 1,
                              "output_tokens": 2, "latency_ms": 3.0}
    debugger.set("usage", [record])
    assert debugger.cont() is None
    assert debugger.state("usage")[0] == record
    assert all(u["node"] in ("edited", "select_candidate") for u in debugger.state("usage"))
