"""A database's statements run in several guarded worker processes: side by side up to a bound,
the rest waiting their turn within their budget, one client's at most its share.

No test here measures time. A slow statement is an endless recursion with a budget far longer
than any test waits (it never finishes on any machine; closing the database ends it), and what
runs at once is read from the pool's own account of its workers and processes, and from which
statements have ended, not from when.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading

import pytest

from conftest import WAIT_S, sha256, wait_for
from sqlchorus.config.settings import Settings
from sqlchorus.core.dependencies import DatabaseResources, Dependencies
from sqlchorus.tools.engines import base
from sqlchorus.tools.engines import sqlite as database
from sqlchorus.tools.engines.sqlite import (
    ExecutionError,
    GuardedDatabase,
    QueryTimeoutError,
    SqlError,
)

ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
"""A statement that never ends by itself: only its budget, a kill or closing the database ends it."""

LONG_S = 10 * WAIT_S
"""A slow statement's budget: far past anything a test waits for, so it is still running when the
test looks, however slow the machine; the test closes the database to end it."""

CHEAP = "SELECT count(*) FROM singer"


@pytest.fixture
def concert(spider, tmp_path):
    """A private copy of a Spider database, and its digest before any test touches it."""
    path = tmp_path / "concert_singer.sqlite"
    shutil.copy(spider("concert_singer"), path)
    return path


class Slow(threading.Thread):
    """An endless statement run on its own thread; ``done`` is set when it has ended, and
    ``outcome`` is its result or its error."""

    def __init__(self, db: GuardedDatabase, client=None, *, timeout_s: float = LONG_S):
        super().__init__(daemon=True)
        self.db, self.client, self.timeout_s = db, client, timeout_s
        self.done = threading.Event()
        self.outcome: object = None

    def run(self) -> None:
        try:
            self.outcome = self.db.execute(ENDLESS, timeout_s=self.timeout_s, client=self.client)
        except SqlError as e:
            self.outcome = e
        finally:
            self.done.set()


@contextlib.contextmanager
def opened(path, **kwargs):
    """The database, closed at the end whatever happened (which ends its slow statements)."""
    before = sha256(path)
    db = GuardedDatabase(path, **kwargs)
    slow: list[Slow] = []
    try:
        yield db, slow
    finally:
        db.close()
        for thread in slow:
            thread.join(WAIT_S)
    assert not any(thread.is_alive() for thread in slow), "closing the database ended every statement"
    assert sha256(path) == before


def start(slow: list[Slow], db: GuardedDatabase, count: int, client=None) -> list[Slow]:
    threads = [Slow(db, client) for _ in range(count)]
    for thread in threads:
        thread.start()
    slow.extend(threads)
    return threads


def status_is(db: GuardedDatabase, **expected):
    """A condition for :func:`wait_for`: the pool's status, once its fields have these values."""

    def check():
        status = db.worker_status()
        return status if all(status[k] == v for k, v in expected.items()) else None

    return check


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_slow_statements_run_side_by_side_up_to_the_bound(concert):
    with opened(concert, workers=3, client_workers=3) as (db, slow):
        threads = start(slow, db, 4)
        # Three run at once, each in its own live process; the fourth waits its turn.
        status = wait_for(status_is(db, running=3, waiting=1), "three statements running and one waiting")
        pids = wait_for(lambda: (p := db.worker_status()["running_pids"]) and len(p) == 3 and p,
                        "three worker processes")
        assert len(set(pids)) == 3 and all(alive(pid) for pid in pids)
        assert status["started"] == 3  # never more workers than the bound
        assert not any(thread.done.is_set() for thread in threads)
    # Closing ended them all, those running and the one waiting, with an error that says so.
    assert all(isinstance(t.outcome, ExecutionError) and "closed" in str(t.outcome) for t in threads), [
        repr(t.outcome) for t in threads]
    assert db.worker_status()["pids"] == []


def test_a_cheap_statement_completes_while_slow_ones_run(concert):
    with opened(concert, workers=4) as (db, slow):
        # Four slow statements of one client: two run (its share of four workers), two wait.
        threads = start(slow, db, 4, client="heavy")
        wait_for(status_is(db, running=2, waiting=2), "two slow statements running, two waiting")
        # A cheap statement of another client, and one of no client, run at once and end first.
        assert db.execute(CHEAP, client="light").rows[0][0] > 0
        assert db.for_client("other").execute(CHEAP).rows[0][0] > 0
        # The connection of this process (schema lookups) does not wait for statements either.
        assert db.lookup(CHEAP).rows[0][0] > 0
        assert not any(thread.done.is_set() for thread in threads)
        assert db.worker_status()["running_by_client"] == {"heavy": 2}


def test_the_per_client_cap_holds(concert):
    with opened(concert, workers=4, client_workers=2) as (db, slow):
        start(slow, db, 2, client="a")
        start(slow, db.for_client("a"), 1)  # a view's client counts like a passed one
        start(slow, db, 1, client="b")
        status = wait_for(status_is(db, running=3, waiting=1), "three statements running, one of a waiting")
        assert status["running_by_client"] == {"a": 2, "b": 1}
        # A worker is free, but not for a: another client's statement takes it...
        assert db.execute(CHEAP, client="c").rows[0][0] > 0
        # ...while a's waits, and one that waits its whole budget fails without running.
        with pytest.raises(QueryTimeoutError, match="its share"):
            db.execute(CHEAP, client="a", timeout_s=0.2)
        status = db.worker_status()
        assert status["running_by_client"] == {"a": 2, "b": 1} and status["waiting"] == 1
        assert not any(thread.done.is_set() for thread in slow)


def test_a_statement_that_waits_past_its_budget_times_out(concert):
    with opened(concert, workers=1) as (db, slow):
        (thread,) = start(slow, db, 1)
        wait_for(status_is(db, running=1), "the slow statement running")
        with pytest.raises(QueryTimeoutError, match="waited its whole 0.2 s budget"):
            db.execute(CHEAP, timeout_s=0.2)
        # It failed while the statement ahead of it still ran: at its budget, not after its turn.
        assert not thread.done.is_set()
        assert db.worker_status()["waiting"] == 0


def test_an_overrunning_worker_is_killed_and_replaced(concert, monkeypatch):
    with opened(concert, workers=2, client_workers=2) as (db, slow):
        (other,) = start(slow, db, 1)  # runs on one worker meanwhile
        wait_for(status_is(db, running=1), "the other statement running")
        assert db.execute(CHEAP).rows[0][0] > 0  # starts the second worker
        status = db.worker_status()
        (first,) = set(status["pids"]) - set(status["running_pids"])
        # The kill is the guard for one long call that SQLite cannot stop between steps. To reach
        # it with a statement that certainly outruns it, this statement's kill comes half a second
        # after its start while SQLite's own stop would come at its budget, 100 s later.
        with monkeypatch.context() as patch:
            patch.setattr(base, "KILL_GRACE_S", -99.5)
            with pytest.raises(QueryTimeoutError, match="ran longer than its 100 s budget"):
                db.execute(ENDLESS, timeout_s=100.0)
        status = db.worker_status()
        assert status["replaced"] == 1 and first not in status["pids"]
        # The replacement answers the next statement; the other worker was left alone.
        assert db.execute(CHEAP).rows[0][0] > 0
        status = db.worker_status()
        assert first not in status["pids"] and len(status["pids"]) == 2 and status["started"] == 2
        assert not other.done.is_set()


def test_a_closed_database_runs_nothing(concert):
    db = GuardedDatabase(concert, workers=2)
    db.close()
    with pytest.raises(ExecutionError, match="closed"):
        db.execute(CHEAP)


@pytest.mark.parametrize("kwargs", [{"workers": 0}, {"workers": 65}, {"workers": 2, "client_workers": 3},
                                    {"workers": 2, "client_workers": 0}])
def test_bounds_are_checked(concert, kwargs):
    with pytest.raises(ValueError, match="workers"):
        GuardedDatabase(concert, **kwargs)


def test_defaults_and_the_setting(concert, tmp_path):
    with GuardedDatabase(concert, prestart=False) as db:
        assert (db.workers, db.client_workers) == (database.DEFAULT_WORKERS, 2)
        assert db.worker_status()["started"] == 0
    assert Settings().statement_workers == database.DEFAULT_WORKERS
    settings = Settings(statement_workers=3, value_cache_dir=str(tmp_path / "values"))
    resources = DatabaseResources.open(concert, settings)
    try:
        assert (resources.db.workers, resources.db.client_workers) == (3, 2)
        # A run's statements count as the client its entry point names.
        dependencies = Dependencies(settings=settings, models={})
        assert dependencies.context(resources, client="10.0.0.7").db.client == "10.0.0.7"
        assert dependencies.context(resources).db.client is None
    finally:
        resources.close()


def test_a_servers_runs_count_as_the_client_that_asked(monkeypatch, tmp_path):
    """The REST API passes each request's remote address down to the run's context, whose
    database view then counts its statements as that client's."""
    from starlette.testclient import TestClient

    from sqlchorus.interfaces.rest import create_app
    from sqlchorus.runs.demo import load_demo_questions
    from sqlchorus.runs.service import RunService
    from sqlchorus.testing import oracle_model

    seen: list = []
    real = Dependencies.context

    def context(self, resources, **kwargs):
        made = real(self, resources, **kwargs)
        seen.append((kwargs.get("client"), made.db.client))
        return made

    monkeypatch.setattr(Dependencies, "context", context)
    gold = {q["question"]: q["sql"] for q in load_demo_questions()}
    service = RunService(settings=Settings(trace_dir=str(tmp_path / "traces"), preset="tiny"),
                         model=oracle_model(gold.get))
    try:
        client = TestClient(create_app(service), base_url="http://127.0.0.1")
        answered = client.post("/v1/ask", json={"question": "How many customers do we have?"})
        assert answered.status_code == 200 and answered.json()["rows"] == [[62]]
    finally:
        service.close()
    assert seen == [("testclient", "testclient")]
