"""The checks of what a database server says about a statement, on readings recorded from a real one.

Two layers of the guards judge the server's own account of a statement: PostgreSQL's plan
(:func:`~sqlchorus.tools.engines.postgres_check.check_plan`, on ``EXPLAIN (VERBOSE, FORMAT JSON)``)
and MariaDB's reading (:func:`~sqlchorus.tools.engines.mysql_check.check_note`, on ``EXPLAIN
EXTENDED``'s note 1003). ``test_layers_postgres`` and ``test_layers_mysql`` test each alone on a
live server, in the slow tier. Mutation testing runs the quick tier only, so here the same
statements are judged again, with no server, from readings recorded once from those servers
(tests/fixtures/server_readings, written by ``scripts/record_server_readings.py``, whose
docstring says when to run it again): every attack the slow tests select must be refused with
the error they accept, every question let through.

The recordings must stay what the layer tests select now (a quick test compares the cases by
name, list and statement) and what the servers say (one slow test per engine reads a handful
of them again from a live server and compares). Where an attack names a file beside the server's
data, the recording writes the server's folder as the corpus does (``/outside`` for PostgreSQL,
``{outside}`` for MariaDB): the folder is a new temporary one on each run.
"""

from __future__ import annotations

import json

import pytest

import record_server_readings as recorder
import test_layers_mysql as layers_my
import test_layers_postgres as layers_pg
from guard_layers import ids
from servers import mariadb_of_a_test, postgres_of_a_test

from sqlchorus.tools.engines.mysql_check import check_note
from sqlchorus.tools.engines.postgres_check import check_plan
from sqlchorus.tools.sql.errors import ForbiddenError


def _load(path) -> dict:
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run scripts/record_server_readings.py")
    return json.loads(path.read_text(encoding="utf-8"))


PLANS = _load(recorder.PLANS_FILE)
NOTES = _load(recorder.NOTES_FILE)
PG_NAMES = recorder.names_of_json(PLANS["names"])


def _of(readings: dict, which: str) -> list[tuple[str, dict]]:
    """The recorded cases of list ``which`` ("refused" or "passes") that have a reading."""
    return [(name, case) for name, case in readings["cases"].items()
            if case["list"] == which and "error" not in case]


PG_REFUSED, PG_PASSES = _of(PLANS, "refused"), _of(PLANS, "passes")
MY_REFUSED, MY_PASSES = _of(NOTES, "refused"), _of(NOTES, "passes")

NOT_PLANNED = sorted(name for name, case in PLANS["cases"].items() if "error" in case)
NOT_EXPLAINED = sorted(name for name, case in NOTES["cases"].items() if "error" in case)
"""Statements the server would not plan or explain (its error is recorded instead of a reading):
there is nothing for the check to judge, so they are left out of its tests here. The slow layer
tests fail on such a statement (``_plan`` and ``_note`` raise), so there are none today; the test
below counts them, so that one cannot come in silently."""


# -- 1. PostgreSQL: the check of the server's plan --------------------------------------------


@pytest.mark.parametrize("name,case", PG_REFUSED, ids=ids(PG_REFUSED))
def test_the_plan_check_refuses_each_recorded_attack(name, case):
    """As ``test_layers_postgres.test_the_plan_check_alone_refuses_what_the_server_would_call``:
    no first reading, so no padding call is allowed."""
    with pytest.raises(ForbiddenError):
        check_plan(case["plan"], case["sql"], names=PG_NAMES)


@pytest.mark.parametrize("name,case", PG_PASSES, ids=ids(PG_PASSES))
def test_the_plan_check_lets_each_recorded_question_through(name, case):
    check_plan(case["plan"], case["sql"], names=PG_NAMES)


# -- 2. MariaDB: the check of the server's reading --------------------------------------------


@pytest.mark.parametrize("name,case", MY_REFUSED, ids=ids(MY_REFUSED))
def test_the_note_check_refuses_each_recorded_attack(name, case):
    """As ``test_layers_mysql.test_the_servers_reading_alone_refuses_what_it_would_call_and_read``:
    refused, and the refusal shows no secret (a reading may hold a constant the server computed)."""
    with pytest.raises(ForbiddenError) as raised:
        check_note(case["note"], case["sql"], database=layers_my.DATABASE)
    assert not any(secret in raised.value.message for secret in layers_my.SECRETS), raised.value.message


@pytest.mark.parametrize("name,case", MY_PASSES, ids=ids(MY_PASSES))
def test_the_note_check_lets_each_recorded_question_through(name, case):
    check_note(case["note"], case["sql"], database=layers_my.DATABASE, not_calls=layers_my._ctes(case["sql"]))


def test_every_recorded_statement_has_a_reading():
    assert (len(NOT_PLANNED), len(NOT_EXPLAINED)) == (0, 0), (NOT_PLANNED, NOT_EXPLAINED)


# -- 3. the recordings are of what the layer tests select now ---------------------------------


def _recorded(readings: dict) -> dict[str, dict[str, str]]:
    return {name: {"list": case["list"], "sql": case["sql"]} for name, case in readings["cases"].items()}


def test_the_plans_recorded_are_the_statements_the_plan_layer_test_selects():
    """A case added, renamed or rewritten in the corpus or in ``test_layers_postgres``'s lists
    (``PLAN_ATTACKS``, ``READS``): run scripts/record_server_readings.py again."""
    assert _recorded(PLANS) == recorder.postgres_selection()
    assert len(PG_REFUSED) == len(layers_pg.PLAN_ATTACKS) > 0 and len(PG_PASSES) > 0


def test_the_notes_recorded_are_the_statements_the_note_layer_test_selects():
    """Likewise for ``test_layers_mysql`` (``NOTE_ATTACKS``, ``READS``)."""
    assert _recorded(NOTES) == recorder.mariadb_selection()
    assert len(MY_REFUSED) == len(layers_my.NOTE_ATTACKS) > 0 and len(MY_PASSES) == len(layers_my.READS)


# -- 4. the recordings are what the servers say -----------------------------------------------

HANDFUL = 10


def _spread(names: list[str], count: int) -> list[str]:
    return [names[i * len(names) // count] for i in range(min(count, len(names)))]


def handful(readings: dict, placeholder: str) -> list[str]:
    """About ten recorded cases, spread evenly in name order: six refused, four passing, and the
    first one naming the server's folder (whose placeholder is put in and taken out again)."""
    cases = readings["cases"]
    picked = (_spread([n for n, c in cases.items() if c["list"] == "refused"], HANDFUL - 4)
              + _spread([n for n, c in cases.items() if c["list"] == "passes"], 4))
    folder = [n for n, c in cases.items() if placeholder in c["sql"]][:1]
    return picked + [n for n in folder if n not in picked]


def _reading(case: dict) -> dict:
    return {key: case[key] for key in ("plan", "note", "error") if key in case}


def _drifted(readings: dict, placeholder: str, read) -> list[str]:
    """The names of the handful whose live reading is not the recorded one, compared whole: two
    recordings, each on a server of its own, were byte for byte the same (the planner's
    estimates come from tables loaded the same way each time, too small for autovacuum to analyse
    them), so nothing but the server's folder (put back by the recorder) is normalised. Should an
    estimate (a plan's costs, rows and widths, numbers ``check_plan`` never reads) ever differ
    from run to run, they are what to leave out here."""
    return [name for name in handful(readings, placeholder)
            if read(readings["cases"][name]["sql"]) != _reading(readings["cases"][name])]


@pytest.fixture(scope="module")
def pg_server():
    yield from postgres_of_a_test()


@pytest.fixture(scope="module")
def pg(pg_server):
    """``test_layers_postgres``'s own ``pg``: concert_singer as the corpus expects it."""
    return recorder.fixture_function(layers_pg.pg)(pg_server)


@pytest.fixture(scope="module")
def pg_admin_db(pg):
    yield from recorder.fixture_function(layers_pg.admin_db)(pg)


@pytest.fixture(scope="module")
def mariadb_server():
    yield from mariadb_of_a_test()


@pytest.fixture(scope="module")
def my(mariadb_server):
    """``test_layers_mysql``'s own ``my``."""
    return recorder.fixture_function(layers_my.my)(mariadb_server)


@pytest.mark.slow
def test_postgres_still_plans_as_recorded(pg, pg_admin_db):
    """The catalogue's names, and a handful of plans, read again from a live server. A difference
    (another PostgreSQL version, a changed preparation): run scripts/record_server_readings.py
    again, and review what it changes."""
    live = recorder.postgres_version(pg)
    assert recorder.names_as_json(pg_admin_db.names) == PLANS["names"], (PLANS["server"]["version"], live)
    drifted = _drifted(PLANS, layers_pg.OUTSIDE, lambda sql: recorder.plan_reading(pg, sql))
    assert drifted == [], f"recorded on {PLANS['server']['version']}, read on {live}"


@pytest.mark.slow
def test_mariadb_still_reads_as_recorded(my):
    """A handful of the server's readings, read again from a live server; likewise."""
    live = recorder.mariadb_version(my)
    drifted = _drifted(NOTES, layers_my.OUTSIDE, lambda sql: recorder.note_reading(my, sql))
    assert drifted == [], f"recorded on {NOTES['server']['version']}, read on {live}"
