"""SQLite's guard worker, rule by rule, in process: what one statement's run gives back (its
columns, its rows under the caps, its bound parameters, its time from the worker's own clock) and
leaves behind (no deadline), and what the authorizer tells of a function it refuses. The same
parts run in the worker process; tests/test_layers_sqlite.py shows each layer's refusals."""

from __future__ import annotations

import math
import sqlite3

import pytest

from sqlchorus.runs.demo import demo_db_path
from sqlchorus.tools.engines import sqlite_guard
from sqlchorus.tools.engines.sqlite_guard import GuardState, authorize, open_guarded, run


@pytest.fixture
def guarded():
    state = GuardState()
    conn = open_guarded(str(demo_db_path()), state)
    yield conn, state
    conn.close()


class Clock:
    """The worker's clock, read twice by a run: at its start and at its end."""

    def __init__(self, *readings: float):
        self.readings = list(readings)

    def monotonic(self) -> float:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def test_a_run_gives_the_columns_the_rows_and_its_time_by_the_workers_clock(guarded, monkeypatch):
    conn, state = guarded
    monkeypatch.setattr(sqlite_guard, "time", Clock(100.0, 100.25))
    columns, rows, truncated, elapsed_ms = run(conn, state, "SELECT ? AS n, ? AS word", (7, "x"), 5.0, 10, 10_000)
    assert (columns, rows, truncated, elapsed_ms) == (["n", "word"], [(7, "x")], False, 250.0)


def test_a_run_leaves_no_deadline_behind_even_when_it_fails(guarded):
    conn, state = guarded
    run(conn, state, "SELECT 1", (), 5.0, 10, 10_000)
    assert state.deadline == math.inf
    with pytest.raises(sqlite3.OperationalError):
        run(conn, state, "SELECT * FROM no_such_table", (), 5.0, 10, 10_000)
    assert state.deadline == math.inf and state.refused is None


def test_a_run_is_cut_at_its_row_cap(guarded):
    conn, state = guarded
    columns, rows, truncated, _ = run(conn, state, "SELECT customer_id FROM customers ORDER BY customer_id", (),
                                      5.0, 3, 10_000)
    assert (columns, [r[0] for r in rows], truncated) == (["customer_id"], [1, 2, 3], True)


@pytest.mark.parametrize("function, refused", [
    ("upper", None),
    ("load_extension", "the function load_extension (loads native code)"),
    ("no_such_function", "the function no_such_function (it is not on the list of allowed functions)"),
])
def test_the_authorizer_names_the_function_it_refuses_and_why(function, refused):
    state = GuardState()
    code = authorize(state, sqlite3.SQLITE_FUNCTION, None, function, None, None)
    assert (code == sqlite3.SQLITE_OK, state.refused) == (refused is None, refused)
