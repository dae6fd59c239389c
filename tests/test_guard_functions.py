"""The guard's function allow-list: reviewed against what the linked SQLite offers, and named
when it refuses."""

from __future__ import annotations

import sqlite3

import pytest

from sqlchorus.tools.engines.sqlite import ForbiddenError, GuardedDatabase
from sqlchorus.tools.engines.sqlite_guard import ALLOWED_FUNCTIONS, REFUSED_FUNCTIONS, GuardState, authorize


def offered() -> set[str]:
    with sqlite3.connect(":memory:") as conn:
        return {row[0] for row in conn.execute("SELECT name FROM pragma_function_list")}


def test_every_function_sqlite_offers_has_been_reviewed():
    unreviewed = offered() - ALLOWED_FUNCTIONS - set(REFUSED_FUNCTIONS)
    assert unreviewed == set(), "new SQLite functions: allow or refuse each, with a reason"


def test_no_function_is_both_allowed_and_refused():
    assert ALLOWED_FUNCTIONS.isdisjoint(REFUSED_FUNCTIONS)


@pytest.mark.parametrize("name", sorted(offered()))
def test_the_authorizer_follows_the_lists(name):
    state = GuardState()
    verdict = authorize(state, sqlite3.SQLITE_FUNCTION, None, name, None, None)
    if name in ALLOWED_FUNCTIONS:
        assert verdict == sqlite3.SQLITE_OK and state.refused is None
    else:
        assert verdict == sqlite3.SQLITE_DENY
        assert name in state.refused and REFUSED_FUNCTIONS[name] in state.refused


def test_a_refusal_names_the_function(demo_db):
    with GuardedDatabase(demo_db) as db:
        with pytest.raises(ForbiddenError, match=r"the function fts3_tokenizer \(registers or reveals"):
            db.execute("SELECT count(*) FROM customers WHERE fts3_tokenizer('simple') IS NULL")
        with pytest.raises(ForbiddenError, match=r"table-valued function \(json_each\)"):
            db.execute("SELECT value FROM json_each('[1, 2]')")
        assert db.execute("SELECT count(*) FROM customers").rows[0][0] > 0  # and it goes on
    state = GuardState()
    assert authorize(state, sqlite3.SQLITE_PRAGMA, "user_version", "3", None, None) == sqlite3.SQLITE_DENY
    assert state.refused == "PRAGMA user_version = 3"
