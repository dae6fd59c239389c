"""What the tests of each guard layer alone share: the folders a layer must leave as they were, a
stop from outside that never comes, and a statement run under a watchdog."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from conftest import sha256


def ids(cases):
    return [c[0] for c in cases]


def files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


class Untouched:
    """The database and the folders around it as they were; :meth:`check` asserts they still are."""

    def __init__(self, db: Path, *folders: Path):
        self.db, self.folders = db, (db.parent, *folders)
        self.hash = sha256(db)
        self.files = [files(f) for f in self.folders]
        self.contents = {p: p.read_bytes() for f in folders for p in f.rglob("*") if p.is_file()}

    def check(self) -> None:
        assert sha256(self.db) == self.hash, "the database file changed"
        assert [files(f) for f in self.folders] == self.files, "a file appeared or went away"
        assert {p: p.read_bytes() for p in self.contents} == self.contents, "a file outside changed"


class NeverStopped:
    """A stop from outside that never comes (what ``_watch`` gives, with nothing behind it)."""

    fired = terminated = False

    def stop(self) -> None:
        pass


def within(seconds: float, db, sql: str, budget: float | None = None) -> BaseException | None:
    """What ``db.execute(sql)`` (under ``budget``, when given) raised, None if it returned; a
    statement still running after ``seconds`` fails the test, its database closed to end it."""
    raised: list[BaseException | None] = []

    def go():
        try:
            db.execute(sql) if budget is None else db.execute(sql, timeout_s=budget)
            raised.append(None)
        except BaseException as e:  # handed to the test
            raised.append(e)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        db.close()
        pytest.fail(f"nothing stopped the statement within {seconds:g} s")
    return raised[0]


def assert_the_caps_cut(db, sql: str, meta: dict) -> None:
    """``sql`` (a read within its budget) run with rows capped at 10,000 and bytes at the case's
    ``max_bytes``: the result is cut, and within both."""
    max_bytes = int(meta.get("max_bytes", 16 * 1024 * 1024))
    result = db.execute(sql, timeout_s=120, max_rows=10_000, max_bytes=max_bytes)
    assert result.truncated
    assert len(result.rows) <= 10_000
    assert sum(len(str(v)) for row in result.rows for v in row) <= max_bytes
