"""The vote without a model reads evidence in a run's results: each rule of
:mod:`sqlchorus.core.vote_rules` that reads it has questions it decides
(tests/fixtures/selection/evidence_cases.json), says what it did, and can be left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sqlchorus.core import vote_rules
from sqlchorus.core.vote_rules import evidence
from sqlchorus.runs.standalone_selection import RULES, check, decide, key_columns, select
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.schema.introspect import introspect

CASES = json.loads((Path(__file__).parent / "fixtures" / "selection" / "evidence_cases.json").read_text())


@pytest.fixture(scope="module")
def concert(spider):
    with GuardedDatabase(spider(CASES["db_id"])) as db:
        yield db, introspect(db)


@pytest.mark.parametrize("case", CASES["cases"], ids=[c["name"] for c in CASES["cases"]])
def test_each_rule_decides_its_questions(concert, case):
    db, schema = concert
    chosen = select(db, case["question"], case["candidates"], schema=schema)
    assert chosen["chosen"] == case["expect"], chosen["reason"]
    checked = check(db, case["candidates"])
    keys = key_columns(schema)
    without = decide(checked, None, RULES - {case["rule"]}, question=case["question"], key_columns=keys)
    assert without["chosen"] == case["without"]
    # What each rule did is in the answer, with why it is a rule; one that decided says so.
    by_rule = {r["rule"]: r for r in chosen["vote_rules"]}
    assert set(by_rule) == set(RULES)
    assert all(r["why"] for r in by_rule.values())
    if case["expect"] != case["without"]:
        assert by_rule[case["rule"]]["effect"] != "no change"
        assert f"({case['rule']})" in chosen["reason"]


def test_every_rule_is_a_module_of_its_own_applied_in_order():
    names = [rule.NAME for rule in vote_rules.RULES]
    assert names == list(vote_rules.NAMES) and set(names) == set(RULES)
    assert names.index("weights") == 0  # every later count reads the weights
    assert len({rule.__name__ for rule in vote_rules.RULES}) == len(names)
    with pytest.raises(ValueError, match="unknown vote rule"):
        decide([], None, {"errors", "majority"})


@pytest.mark.parametrize("columns, rows, expect", [
    (["n"], [(0,)], {"degenerate": True, "integer_columns": [True]}),
    (["s"], [(None,)], {"degenerate": True, "integer_columns": [False]}),
    (["n", "name"], [(0, "x")], {"degenerate": False, "integer_columns": [True, False]}),
    (["n"], [(0,), (0,)], {"degenerate": False, "integer_columns": [True]}),
    (["n"], [], {"degenerate": False, "integer_columns": [False]}),
    (["flag"], [(True,)], {"degenerate": False, "integer_columns": [False]}),
    (["avg"], [(2.5,)], {"degenerate": False, "integer_columns": [False]}),
])
def test_what_the_rules_read_of_a_result(columns, rows, expect):
    got = evidence.describe(columns, rows)
    assert {k: got[k] for k in expect} == expect
    assert got["column_names"] == columns


def test_the_answer_key_ignores_column_order_and_nothing_else():
    a = evidence.describe(["name", "age"], [("Ann", 30), ("Bo", 41)])["answer_key"]
    assert evidence.describe(["age", "name"], [(41, "Bo"), (30, "Ann")])["answer_key"] == a
    assert evidence.describe(["name", "age"], [("Ann", 41), ("Bo", 30)])["answer_key"] != a  # rows re-paired
    assert evidence.describe(["name", "age", "x"], [("Ann", 30, 1), ("Bo", 41, 1)])["answer_key"] != a
    twice = evidence.describe(["name"], [("Ann",), ("Ann",)])["answer_key"]
    assert twice != evidence.describe(["name"], [("Ann",)])["answer_key"]  # rows are a bag


def test_key_columns_are_the_schemas_primary_and_foreign_keys(concert):
    _, schema = concert
    keys = key_columns(schema)
    assert {"singer_id", "stadium_id", "concert_id"} <= keys
    assert "name" not in keys and "capacity" not in keys


def test_a_count_of_zero_nearly_all_systems_give_votes_as_any_other(concert, monkeypatch):
    from sqlchorus.core.vote_rules import agreed_degenerate

    db, schema = concert
    question = "How many singers are older than 60?"
    zero = ["SELECT count(*) FROM singer WHERE Age > 60", "SELECT COUNT(*) FROM singer WHERE Age >= 61",
            "SELECT count(Name) FROM singer WHERE Age > 60", "SELECT count(*) FROM singer WHERE 60 < Age"]
    other = "SELECT count(*) FROM singer WHERE Age > 40"
    # Four of five count nothing (0.8 of the votes): their 0 stands.
    chosen = select(db, question, [*zero, other], schema=schema)
    assert chosen["chosen"] == 0 and "(agreed_degenerate)" in chosen["reason"]
    checked = check(db, [*zero, other])
    assert decide(checked, None, RULES - {"agreed_degenerate"}, question=question)["chosen"] == 4
    # Three of five, or four of five with the share out of reach: set aside for the count.
    assert select(db, question, [*zero[:3], other, other.replace("40", "41")], schema=schema)["chosen"] == 3
    monkeypatch.setattr(agreed_degenerate, "SHARE", 1.01)
    assert select(db, question, [*zero, other], schema=schema)["chosen"] == 4


def test_empty_results_most_systems_give_vote_as_any_other(concert, monkeypatch):
    from sqlchorus.core.vote_rules import agreed_empty

    db, schema = concert
    question = "Which singers are older than 60?"
    none = ["SELECT Name FROM singer WHERE Age > 60", "SELECT Name FROM singer WHERE Age > 60 ORDER BY Name",
            "SELECT Name FROM singer WHERE Age >= 61"]
    rows = "SELECT Name FROM singer WHERE Age >= 50"
    # Three of four find no rows (0.75 of the votes): their answer stands.
    chosen = select(db, question, [*none, rows], schema=schema)
    assert chosen["chosen"] == 0 and "(agreed_empty)" in chosen["reason"]
    checked = check(db, [*none, rows])
    assert decide(checked, None, RULES - {"agreed_empty"}, question=question)["chosen"] == 3
    # Two of four, or three of four with the share out of reach: set aside for the rows.
    assert select(db, question, [*none[:2], rows, rows.replace("50", "52")], schema=schema)["chosen"] == 2
    monkeypatch.setattr(agreed_empty, "SHARE", 1.01)
    assert select(db, question, [*none, rows], schema=schema)["chosen"] == 3
