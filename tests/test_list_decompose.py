"""LIST decomposer: expected steps from fixture files, and every step run through the guard.

Fixtures (``tests/fixtures/list_decompose/*.sql``) are read by :func:`conftest.load_pairs`: each
case is named by its ``-- case:`` line, its input is the query, and its expected part lists each
expected step as

    -- <scope> | <operation> | <elements>
    -- says: <describe_step(step)>          (optional)
    <step SQL, on one or more lines>

A step's SQL may be wrapped at spaces; lines are joined with one space before comparing.
Every case also runs against a small database built here: each step must execute through
:class:`GuardedDatabase`, and the last step must return the rows of the original query.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO, Pair, load_pairs, spider_examples
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.steps.decompose import (
    DecomposeError,
    decompose,
    describe_step,
    describe_steps,
    execute_steps,
    split_pass,
    steps_as_dicts,
)

CASES_DIR = FIXTURES / "list_decompose"

SCHEMA_SQL = """
CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
CREATE TABLE stadium (stadium_id INTEGER PRIMARY KEY, name TEXT, capacity INTEGER);
CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, singer_id INTEGER, stadium_id INTEGER,
                      year INTEGER);
INSERT INTO singer VALUES (1, 'Ann', 'France', 28), (2, 'Bob', 'France', 45), (3, 'Cy', 'Peru', 33),
                          (4, 'Dee', 'Japan', 22), (5, 'Eve', NULL, 37);
INSERT INTO stadium VALUES (1, 'Arena', 12000), (2, 'Hall', 800), (3, 'Dome', 50000);
INSERT INTO concert VALUES (1, 1, 1, 2015), (2, 1, 2, 2016), (3, 2, 1, 2015), (4, 3, 3, 2016),
                           (5, 3, 1, 2015), (6, 1, 3, 2017);
"""
SCHEMA = {
    "singer": ["singer_id", "name", "country", "age"],
    "stadium": ["stadium_id", "name", "capacity"],
    "concert": ["concert_id", "singer_id", "stadium_id", "year"],
}

_MARKER = re.compile(r"^-- (?P<scope>[^|]+?) \| (?P<operation>[^|]+?) \| (?P<elements>.*)$")


@dataclass
class ExpectedStep:
    scope: str
    operation: str
    elements: str
    says: str | None = None
    sql_lines: list[str] = field(default_factory=list)

    @property
    def sql(self) -> str:
        return " ".join(line.strip() for line in self.sql_lines)


@dataclass
class Case:
    name: str
    sql: str
    steps: list[ExpectedStep]


def parse_steps(path: Path, pair: Pair) -> list[ExpectedStep]:
    """The expected steps written in a case's expected part (none when it has no such part)."""
    steps: list[ExpectedStep] = []
    for line in (pair.expected or "").splitlines():
        marker = _MARKER.match(line)
        if marker:
            steps.append(ExpectedStep(**marker.groupdict()))
        elif not steps:
            raise ValueError(f"{path} case {pair.name!r}: the steps must start with a "
                             f"'-- <scope> | <operation> | <elements>' line, not {line!r}")
        elif not line.strip():
            raise ValueError(f"{path} case {pair.name!r}: a blank line inside the expected steps")
        elif line.startswith("-- says: "):
            steps[-1].says = line[len("-- says: "):]
        else:
            steps[-1].sql_lines.append(line)
    return steps


ALL_CASES = [
    Case(f"{path.stem}-{pair.name}", pair.input, parse_steps(path, pair))
    for path in sorted(CASES_DIR.glob("*.sql"))
    for pair in load_pairs(path)
]


@pytest.fixture(scope="module")
def small_db(tmp_path_factory) -> GuardedDatabase:
    path = tmp_path_factory.mktemp("list_decompose") / "concerts.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA_SQL)
    conn.close()
    db = GuardedDatabase(path, timeout_s=5)
    yield db
    db.close()


def same_rows(sql: str, expected: list, got: list) -> bool:
    if re.search(r"\border\s+by\b", sql, re.IGNORECASE):
        return expected == got
    return sorted(map(repr, expected)) == sorted(map(repr, got))


def test_fixtures_cover_the_features():
    stems = {p.stem for p in CASES_DIR.glob("*.sql")}
    assert {"single_table", "joins", "where", "group_having", "order_limit", "distinct",
            "subquery_where", "subquery_from", "cte", "set_operations"} <= stems
    assert all(case.steps for case in ALL_CASES)


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.name)
def test_steps_match_fixture(case: Case):
    steps = decompose(case.sql, schema=SCHEMA)
    got = [(s.scope, s.operation, s.elements, s.sql) for s in steps]
    want = [(e.scope, e.operation, e.elements, e.sql) for e in case.steps]
    assert got == want
    for step, expected in zip(steps, case.steps, strict=True):
        if expected.says is not None:
            assert describe_step(step) == expected.says


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.name)
def test_step_structure(case: Case):
    steps = decompose(case.sql, schema=SCHEMA)
    assert [s.index for s in steps] == list(range(len(steps)))
    assert all(s.depth == s.scope.count(" > ") for s in steps)
    last_of_scope = {s.scope: s.index for s in steps}
    assert {s.index for s in steps if s.final} == set(last_of_scope.values())
    assert steps[-1].scope == "main" and steps[-1].final


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.name)
def test_every_step_executes_and_last_matches(case: Case, small_db: GuardedDatabase):
    steps = decompose(case.sql, schema=SCHEMA)
    failures = [(c.step.sql, c.error) for c in execute_steps(steps, small_db) if not c.ok]
    assert failures == []
    original = small_db.execute(case.sql).rows
    assert same_rows(case.sql, original, small_db.execute(steps[-1].sql).rows)


@pytest.mark.parametrize(
    "sql",
    ["", "   ", "SELEC name FROM", "SELECT 1; SELECT 2", "DELETE FROM singer",
     "CREATE TABLE t (a INT)", "SELECT name FROM WHERE x = 1"],
)
def test_rejects_what_is_not_one_query(sql: str):
    with pytest.raises(DecomposeError):
        decompose(sql)
    assert split_pass(sql) is False


def test_unqualified_outer_reference_needs_the_schema(small_db: GuardedDatabase):
    # `age` belongs to the outer singer table: without a schema the subquery looks standalone.
    sql = "SELECT name FROM singer WHERE EXISTS (SELECT 1 FROM stadium WHERE capacity > age * 1000)"
    with_schema = decompose(sql, schema=SCHEMA)
    without = decompose(sql)
    assert all(s.depth == 0 for s in with_schema)
    assert any(s.depth == 1 for s in without)
    assert all(c.ok for c in execute_steps(with_schema, small_db))
    assert not all(c.ok for c in execute_steps(without, small_db))


def test_describe_steps_and_dicts():
    steps = decompose("SELECT name FROM singer WHERE age > 30 ORDER BY age LIMIT 1")
    assert describe_steps(steps).splitlines() == [
        "Step 1: Take the rows of singer.",
        "Step 2: Keep only the rows where age > 30.",
        "Step 3: Return name.",
        "Step 4: Sort the result by age.",
        "Step 5: Keep the first row of the result.",
    ]
    as_dicts = steps_as_dicts(steps)
    assert json.loads(json.dumps(as_dicts)) == as_dicts
    assert as_dicts[-1]["final"] is True and as_dicts[-1]["sql"] == steps[-1].sql


def test_spider_concert_singer_gold_queries(spider):
    """Every step of every gold query on one Spider database runs; the last step matches."""
    with GuardedDatabase(spider("concert_singer"), timeout_s=5) as db:
        examples = spider_examples("concert_singer")
        assert examples
        for example in examples:
            sql = example["query"]
            steps = decompose(sql)
            failures = [(c.step.sql, c.error) for c in execute_steps(steps, db) if not c.ok]
            assert failures == [], sql
            assert same_rows(sql, db.execute(sql).rows, db.execute(steps[-1].sql).rows), sql


def load_benchmark():
    path = REPO / "benchmarks" / "list_coverage.py"
    spec = importlib.util.spec_from_file_location("list_coverage", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_coverage_benchmark_counts_and_classifies_failures(small_db: GuardedDatabase):
    bench = load_benchmark()
    tally = bench.Tally()
    items = [
        ("SELECT name FROM singer WHERE age > 30 ORDER BY name", "x"),
        ("SELECT nme FROM singer WHERE age > 30", "x"),
        ("SELECT FROM WHERE", "x"),
    ]
    bench.measure(items, lambda _: small_db, {"x": SCHEMA}, tally,
                  timeout_s=2, compare_last=True, details=None)
    figures = tally.figures("t")
    assert (figures["t_queries"], figures["t_split_pass"], figures["t_complete_pass"]) == (3, 2, 1)
    assert (figures["t_steps"], figures["t_steps_pass"]) == (7, 6)
    assert figures["t_spr"] == round(2 / 3, 4) and figures["t_sqpr"] == round(6 / 7, 4)
    assert figures["t_gold_fails"] == 2
    assert (tally.last_compared, tally.last_equal) == (1, 1)
    report = tally.failure_report()
    assert set(report) == {"split: DecomposeError", "SELECT: no such column: <name>"}
    assert report["SELECT: no such column: <name>"]["example"]["error"] == "no such column: nme"


@pytest.mark.slow
def test_coverage_benchmark_quick_run():
    script = REPO / "benchmarks" / "list_coverage.py"
    # A statement budget no statement of these queries comes near on any machine, so that the
    # figures are the decomposer's and never the machine's.
    out = subprocess.run(
        [sys.executable, str(script), "--limit", "50", "--timeout", "60"],
        capture_output=True, text=True, timeout=600, check=True,
    )
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1
    figures = json.loads(lines[0])
    # The first 50 gold queries of each set all split, and every step of each runs; on Spider,
    # the last step returns the gold query's rows every time.
    assert {k: v for k, v in figures.items() if k.startswith("bird_") and k != "bird_seconds"} == {
        "bird_queries": 50, "bird_split_pass": 50, "bird_complete_pass": 50, "bird_gold_fails": 0,
        "bird_steps": 243, "bird_steps_pass": 243, "bird_spr": 1.0, "bird_cpr": 1.0, "bird_sqpr": 1.0,
    }
    assert {k: v for k, v in figures.items() if k.startswith("spider_") and k != "spider_seconds"} == {
        "spider_queries": 50, "spider_split_pass": 50, "spider_complete_pass": 50, "spider_gold_fails": 0,
        "spider_steps": 216, "spider_steps_pass": 216, "spider_spr": 1.0, "spider_cpr": 1.0, "spider_sqpr": 1.0,
        # wta_1's queries, in the whole of Spider dev: it has no database file.
        "spider_skipped_no_database": 62,
        "spider_last_step_compared": 50, "spider_last_step_equal": 50,
    }
    assert figures["failures"] == {"bird": {}, "spider": {}}
    assert (figures["limit"], figures["timeout_s"]) == (50, 60.0)
    # Wall-clock seconds, of each set and of the whole run: reported, never compared.
    for key in ("bird_seconds", "spider_seconds", "elapsed_s"):
        assert isinstance(figures[key], (int, float)) and figures[key] >= 0, key
