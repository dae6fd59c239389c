"""What PostgreSQL's guard adds to a statement, before and after its rebuild, and how its corpus ends.

The rebuild read statements with the server's own parser and checked the server's plan; the
corpus is measured by the largest time past a budget and the most memory a server backend reached.

Everything runs on one throwaway PostgreSQL server (``tests/servers.py``'s ``PostgresServer``),
into which Spider's concert_singer is loaded as ``tests/test_postgres_guard.py`` loads it
(``prepare_concert``: names in lower case, a few extra objects, a read-only role with
``temp_file_limit``); the server is stopped and removed at the end.

1. Added time per statement (``timing``). The Spider dev gold queries on concert_singer,
   transpiled to PostgreSQL (:func:`sqlchorus.tools.sql.transpile.transpile`, with the names as the
   loaded database spells them), run three ways as the read-only role, one connection each:
   ``raw``, plain psycopg in a ``BEGIN READ ONLY`` transaction fetching at most the guard's row
   cap (the baseline); ``old``, the guard before the rebuild (``tools/engines/postgres.py`` of
   ``--old-rev``, sqlglot's check only, loaded as a module of its own); ``new``, today's
   :class:`~sqlchorus.tools.engines.postgres.PostgresDatabase` (libpg_query's check, the
   server's plan checked, ``DISCARD ALL`` after each statement). A query that any way refuses
   or fails in the warm-up round is left out and listed. Then ``--rounds`` rounds: in each, every
   query runs raw, then old and new, in an order that alternates from round to round. Reported:
   median and p95 of each way's time, and of ``old`` and ``new`` minus ``raw`` on the same query
   in the same round (``added_ms``); the client-side check alone (``db.check``) of each guard;
   and the new guard's extra steps one by one (``new_parts_ms``: the second parse that builds
   the plan check, the ``EXPLAIN (VERBOSE, FORMAT JSON)`` round trip, the plan check, ``DISCARD
   ALL``).
2. Attack corpus (``corpus``). Every case of ``tests/fixtures/guard_corpus_postgres`` runs
   through the new guard, once as the read-only role and once as the server's superuser (opened
   with ``allow_writable_role=True``), each case on a database opened for it with the case's
   budget (``workers=1``, its connection opened ahead). Per case: the outcome (``ok``, ``ok,
   truncated`` or the error's kind), seconds, and overrun = seconds past the budget. While a case
   runs, its backend's ``/proc/<pid>/status`` is read every 20 ms (``VmRSS``, ``RssAnon``) and
   once more at the end (``VmHWM``): a backend the guard terminates is gone by then, so the
   samples are what is left of it. Per role: outcomes by class, the cases whose outcome differs
   from the corpus's expected one (which is written for the read-only role), the largest overrun
   and the largest backend memory (resident, and anonymous, i.e. the backend's own rather than
   shared buffers), each with its case, the median backend (most cases never run: a backend's
   floor), and whether every table, role and large object is as before. Needs /proc and permission to read the server's processes (root, or the same user).

Prints one JSON line; progress goes to standard error. Takes about a minute, most of it the
corpus's budgets.

    SQLCHORUS_DATA=/work/shared/data .venv/bin/python benchmarks/postgres_guard.py \
        [--rounds N] [--only timing|corpus | --skip-corpus] [--old-rev REV]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

from sqlchorus.evaluation.datasets import load_dataset
from sqlchorus.tools.engines.sqlite import DEFAULT_MAX_ROWS
from sqlchorus.tools.engines.postgres import EXPLAIN, PostgresDatabase
from sqlchorus.tools.sql.errors import SqlError
from sqlchorus.tools.sql.transpile import names_of, transpile

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from conftest import FIXTURES, load_pairs, repo_module, spider_db  # noqa: E402  the suite's own helpers

engine_guard = repo_module("benchmarks/engine_guard.py")
log, summary = engine_guard.log, engine_guard.summary

OLD_REV = "985d9cb"
"""The last commit of the guard that checked with sqlglot only."""
DATABASE = "concert_singer"
SAMPLE_S = 0.02


# -- the server ----------------------------------------------------------------------------------


class Concert:
    """concert_singer on a throwaway server: the superuser's and the read-only role's URLs."""

    def __enter__(self) -> Concert:
        import psycopg
        from servers import PostgresServer
        from test_postgres_guard import prepare_concert

        source = spider_db(DATABASE)
        if not source.exists():
            raise SystemExit(f"Spider database {DATABASE} not found at {source} (set SQLCHORUS_DATA)")
        log("starting a throwaway PostgreSQL server")
        self.server = PostgresServer().start()
        try:
            self.admin = self.server.new_database()
            dbname = self.admin.rsplit("/", 1)[1]
            role, password = f"reader_{secrets.token_hex(4)}", secrets.token_hex(16)
            prepare_concert(source, self.admin, dbname, role, password)
            self.reader = f"postgresql://{role}:{password}@127.0.0.1:{self.server.port}/{dbname}"
            with psycopg.connect(self.admin) as conn:
                self.version = conn.info.parameter_status("server_version")
        except BaseException:
            self.server.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.stop()
        log("PostgreSQL server stopped and removed")


def old_guard(rev: str) -> ModuleType:
    """``tools/engines/postgres.py`` as it was at ``rev``, imported beside today's (it imports
    today's versions of the modules it uses)."""
    text = subprocess.run(["git", "show", f"{rev}:tools/engines/postgres.py"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    name = f"postgres_database_{rev}"
    with tempfile.TemporaryDirectory(prefix="postgres-guard-old-") as folder:
        path = Path(folder) / f"{name}.py"
        path.write_text(text, encoding="utf-8")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


# -- 1. added time per statement -----------------------------------------------------------------


def gold_queries(names: Any) -> tuple[dict[int, str], int]:
    """The gold queries on the database, in PostgreSQL's dialect; and how many did not transpile."""
    out: dict[int, str] = {}
    failed = 0
    for ex in load_dataset("spider-dev").examples:
        if ex.db_id != DATABASE:
            continue
        try:
            out[ex.question_id] = transpile(ex.gold_sql, "postgresql", names)
        except Exception:  # noqa: BLE001  sqlglot raises ParseError, TokenError, UnsupportedError...
            failed += 1
    return out, failed


def run_raw(conn: Any, sql: str) -> None:
    with conn.transaction():
        conn.execute(sql).fetchmany(DEFAULT_MAX_ROWS)


def ms(call: Any, *args: Any) -> float:
    start = time.perf_counter()
    call(*args)
    return (time.perf_counter() - start) * 1000


def first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]


def timing(concert: Concert, old: ModuleType, rounds: int) -> dict:
    import psycopg

    # Neither guard lets psycopg prepare statements on the server (the old one reads through named
    # cursors, which are never prepared; the new one turns it off): neither does the baseline.
    raw = psycopg.connect(concert.reader, autocommit=True, prepare_threshold=None)
    raw.read_only = True
    new_db = PostgresDatabase(concert.reader, workers=1)
    old_db = old.PostgresDatabase(concert.reader, workers=1)
    try:
        queries, untranspiled = gold_queries(names_of(new_db.read_structure()))
        ways = {"raw": lambda sql: run_raw(raw, sql), "old": old_db.execute, "new": new_db.execute}
        left_out: list[dict] = []
        for qid, sql in list(queries.items()):  # the warm-up round
            for way, run in ways.items():
                try:
                    run(sql)
                except (SqlError, psycopg.Error) as e:
                    left_out.append({"question_id": qid, "way": way, "kind": getattr(e, "kind", type(e).__name__),
                                     "message": first_line(e), "sql": sql})
                    del queries[qid]
                    break
        log(f"timing: {len(queries)} queries, {len(left_out)} left out, {rounds} rounds")
        times: dict[str, list[float]] = {way: [] for way in ways}
        added: dict[str, list[float]] = {"old": [], "new": []}
        for r in range(rounds):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            for sql in queries.values():
                this = {"raw": ms(ways["raw"], sql)}
                for way in order:
                    this[way] = ms(ways[way], sql)
                for way, t in this.items():
                    times[way].append(t)
                for way in added:
                    added[way].append(this[way] - this["raw"])
            log(f"timing: round {r + 1}/{rounds}")
        return {
            "database": DATABASE, "queries": len(queries), "rounds": rounds, "untranspiled": untranspiled,
            "left_out": left_out,
            "ms": {way: summary(t) for way, t in times.items()},
            "added_ms": {way: summary(a) for way, a in added.items()},
            **check_parts(queries, raw, old_db, new_db, rounds),
        }
    finally:
        new_db.close()
        old_db.close()
        raw.close()


def check_parts(queries: dict[int, str], raw: Any, old_db: Any, new_db: PostgresDatabase, rounds: int) -> dict:
    """The guards' checks alone, and the new guard's steps around the statement, each timed apart."""
    check: dict[str, list[float]] = {"old": [], "new": []}
    parts: dict[str, list[float]] = {"plan_check_parse": [], "explain": [], "plan_check": [], "discard_all": []}
    for _ in range(rounds):
        for sql in queries.values():
            check["old"].append(ms(old_db.check, sql))
            check["new"].append(ms(new_db.check, sql))
            start = time.perf_counter()
            verify = new_db._verifier(sql)
            parts["plan_check_parse"].append((time.perf_counter() - start) * 1000)
            with raw.transaction():
                start = time.perf_counter()
                plan = raw.execute(EXPLAIN + sql.strip()).fetchone()[0]
                parts["explain"].append((time.perf_counter() - start) * 1000)
            parts["plan_check"].append(ms(verify, plan))
            parts["discard_all"].append(ms(raw.execute, "DISCARD ALL"))
    return {"check_ms": {way: summary(t) for way, t in check.items()},
            "new_parts_ms": {part: summary(t) for part, t in parts.items()}}


# -- 2. the attack corpus ------------------------------------------------------------------------


class BackendMemory:
    """The most memory the server backend ``pid`` is seen to hold while the block runs, in kB:
    ``rss`` (resident, shared buffers it touched included) and ``anon`` (its own)."""

    def __init__(self, pid: int | None):
        self.pid = pid
        self.rss = self.anon = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def read(self) -> bool:
        try:
            with open(f"/proc/{self.pid}/status", encoding="ascii") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except (OSError, ValueError):
            return False  # the backend has ended (terminated by the guard, or its connection replaced)
        kb = {k: int(v.split()[0]) for k, v in fields.items() if k in ("VmRSS", "VmHWM", "RssAnon")}
        self.rss = max(self.rss, kb.get("VmRSS", 0), kb.get("VmHWM", 0))
        self.anon = max(self.anon, kb.get("RssAnon", 0))
        return True

    def _poll(self) -> None:
        while not self._stop.is_set() and self.read():
            self._stop.wait(SAMPLE_S)

    def __enter__(self) -> BackendMemory:
        if self.pid is not None:
            self.read()
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.pid is not None:
            self._stop.set()
            self._thread.join()
            self.read()  # VmHWM: the peak between samples, if the backend is still there


def run_case(url: str, pair: Any, allow_writable_role: bool) -> dict:
    budget = float(pair.meta.get("budget", 1))
    max_bytes = int(pair.meta.get("max_bytes", 16 * 1024 * 1024))
    with PostgresDatabase(url, timeout_s=budget, workers=1, allow_writable_role=allow_writable_role) as db:
        # The statement runs on the pool's one connection, opened ahead (prestart).
        with BackendMemory(db._pool._all[0].pid) as memory:
            start = time.monotonic()
            message = None
            try:
                result = db.execute(pair.input, timeout_s=budget, max_bytes=max_bytes)
                outcome = "ok, truncated" if result.truncated else "ok"
            except SqlError as e:
                outcome, message = e.kind, first_line(e)
            seconds = time.monotonic() - start
    return {"outcome": outcome, "message": message, "seconds": seconds, "budget": budget,
            "overrun": max(0.0, seconds - budget), "rss_kb": memory.rss, "anon_kb": memory.anon}


def run_corpus(cases: dict[str, list[Any]], url: str, admin: str, role: str, allow_writable_role: bool) -> dict:
    from test_postgres_guard import server_state

    before = server_state(admin)
    start = time.perf_counter()
    classes: dict[str, dict[str, Any]] = {}
    unexpected: list[dict] = []
    overrun = memory = anon = None
    every_rss: list[float] = []
    for stem, pairs in cases.items():
        counts = classes.setdefault(stem, {"cases": 0, "as_expected": 0, "outcomes": Counter()})
        for pair in pairs:
            case = f"{stem}/{pair.name}"
            got = run_case(url, pair, allow_writable_role)
            every_rss.append(got["rss_kb"] / 1024)
            counts["cases"] += 1
            counts["outcomes"][got["outcome"]] += 1
            counts["as_expected"] += got["outcome"] == pair.expected
            if got["outcome"] != pair.expected:
                unexpected.append({"case": case, "expected": pair.expected, "outcome": got["outcome"],
                                   "message": got["message"], "seconds": round(got["seconds"], 3)})
            if overrun is None or got["overrun"] > overrun["seconds"]:
                overrun = {"seconds": round(got["overrun"], 3), "case": case, "budget": got["budget"],
                           "outcome": got["outcome"]}
            if memory is None or got["rss_kb"] > memory["kb"]:
                memory = {"kb": got["rss_kb"], "case": case, "outcome": got["outcome"]}
            if anon is None or got["anon_kb"] > anon["kb"]:
                anon = {"kb": got["anon_kb"], "case": case, "outcome": got["outcome"]}
        log(f"corpus as {role}: {stem}: {counts['as_expected']}/{counts['cases']} as expected")
    for counts in classes.values():
        counts["outcomes"] = dict(counts["outcomes"].most_common())
    return {
        "cases": sum(c["cases"] for c in classes.values()),
        "as_expected": sum(c["as_expected"] for c in classes.values()),
        "classes": classes,
        "unexpected": unexpected,
        "largest_overrun": overrun,
        "peak_backend_rss_mb": {"mb": round(memory["kb"] / 1024, 1), "case": memory["case"],
                                "outcome": memory["outcome"]},
        "peak_backend_anon_mb": {"mb": round(anon["kb"] / 1024, 1), "case": anon["case"],
                                 "outcome": anon["outcome"]},
        # What a backend holds for a case that never runs (most are refused): the floor of the peaks.
        "median_backend_rss_mb": round(statistics.median(every_rss), 1),
        "server_unchanged": server_state(admin) == before,
        "seconds": round(time.perf_counter() - start, 1),
    }


def corpus(concert: Concert) -> dict:
    # Read once, so that both roles run the same cases.
    cases = {path.stem: load_pairs(path) for path in sorted((FIXTURES / "guard_corpus_postgres").glob("*.sql"))}
    return {"reader": run_corpus(cases, concert.reader, concert.admin, "reader", allow_writable_role=False),
            "superuser": run_corpus(cases, concert.admin, concert.admin, "superuser", allow_writable_role=True)}


# -- main ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds over every query (default 20)")
    parser.add_argument("--only", choices=("timing", "corpus"), help="measure one part only")
    parser.add_argument("--skip-corpus", action="store_true", help="the same as --only timing")
    parser.add_argument("--old-rev", default=OLD_REV, help=f"the commit of the old guard (default {OLD_REV})")
    args = parser.parse_args(argv)
    if args.skip_corpus and args.only == "corpus":
        parser.error("--skip-corpus and --only corpus contradict each other")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    only = "timing" if args.skip_corpus else args.only
    # The superuser's run is warned of what the role could do; expected here.
    logging.getLogger("sqlchorus.tools.engines.postgres").setLevel(logging.ERROR)
    logging.getLogger(f"postgres_database_{args.old_rev}").setLevel(logging.ERROR)
    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # the corpus's non-queries parse as commands
    start = time.perf_counter()
    figures: dict[str, Any] = {"benchmark": "postgres_guard", "old_rev": args.old_rev}
    with Concert() as concert:
        figures["server_version"] = concert.version
        if only in (None, "timing"):
            figures["timing"] = timing(concert, old_guard(args.old_rev), args.rounds)
        if only in (None, "corpus"):
            figures["corpus"] = corpus(concert)
    figures["seconds"] = round(time.perf_counter() - start, 1)
    figures["python"] = sys.version.split()[0]
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
