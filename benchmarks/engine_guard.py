"""What the guard costs per statement on SQLite, PostgreSQL, DuckDB and MySQL/MariaDB, how long each
engine takes to build a value index, and how each engine's guard ends its attack corpus.

1. Statements. Every Spider dev gold query whose SQLite database is present (the others are
   counted as ``questions_without_database``) runs on each engine, on the same queries: on
   SQLite as written, on PostgreSQL, DuckDB and MySQL transpiled by
   :func:`sqlchorus.tools.sql.transpile.transpile` with the database's names. Each runs twice per
   engine: through the guard (``GuardedDatabase`` / ``PostgresDatabase`` / ``DuckDatabase`` /
   ``MySQLDatabase`` ``.execute``, a 10 s budget) and raw (a plain ``sqlite3`` read-only
   connection, a plain psycopg connection in autocommit, a plain ``duckdb.connect(path,
   read_only=True)``, a plain PyMySQL connection in autocommit), the raw run fetching at most the
   guard's row cap. Each database is opened once per engine and way and
   reused for all its queries; each query runs once as a warm-up, then once timed
   (``time.perf_counter``). A query that fails to transpile, fails guarded, or fails raw is
   skipped on that engine and counted by where it failed (guarded failures also by error kind:
   mostly SQL that SQLite accepts and the engine does not, as engine_fidelity.py reports). Per
   engine: ``statements``, ``guarded_ms``, ``raw_ms`` and ``overhead_ms`` (guarded minus raw, per
   statement), each as median and p95, and ``ratio_to_sqlite``: the engine's guarded median over
   SQLite's guarded median on the statements both ran.
2. Value index. The largest Spider dev database present (by total rows over its tables) is indexed
   on each engine as ``sqlchorus index --rebuild`` does (:meth:`ValueIndex.build` on the database
   opened as :func:`open_database` opens it, one worker, none started), into a temporary cache
   folder; seconds and values per engine.
3. Attack corpus (``--corpus``). The test suite's corpora (``tests/fixtures/guard_corpus``,
   ``guard_corpus_postgres``, ``guard_corpus_duckdb``) run through each engine's guard, on
   concert_singer as the tests build it (PostgreSQL: the test's loader, extra tables and a
   read-only role with ``temp_file_limit``; DuckDB: the test's file). Per class: cases and
   outcomes as expected; per engine the largest time past a budget. Statements run in this
   process (the tests run the slow classes in a process each). MySQL's corpus, which needs the
   server's files watched and a second database beside the one read, is run by
   ``tests/test_mysql_guard.py``.

Without ``--postgres`` a throwaway PostgreSQL server is started (``tests/servers.py``'s
``PostgresServer``: initdb in a temporary folder, as the postgres user when run as root), and
without ``--mysql`` a throwaway MariaDB server (``MariaDBServer``, likewise), each stopped and
removed at the end; without ``--duckdb-dir`` DuckDB files are made in a temporary folder. All are
loaded with ``scripts/load_spider_engines.py``'s ``load_database``. Given ``--postgres URL`` /
``--mysql URL`` / ``--duckdb-dir DIR`` are expected to hold the databases already (``--load``
loads what is missing). The guard connects as the URL's role or user (the server's administrator
for a throwaway server, let open as ``--allow-writable-role`` does; the guard's checks do not
depend on the user). An engine whose extra (psycopg, duckdb, pymysql) or server programs are
missing is reported as skipped.

Prints one JSON line; progress goes to standard error.

    SQLCHORUS_DATA=/work/shared/data .venv/bin/python benchmarks/engine_guard.py \
        [--postgres URL] [--mysql URL] [--duckdb-dir DIR] [--load] [--limit N] [--corpus] [--skip-index]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import logging
import secrets
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlchorus.evaluation.datasets import load_dataset
from sqlchorus.tools.engines.sqlite import DEFAULT_MAX_ROWS, GuardedDatabase, SqlError
from sqlchorus.tools.sql.transpile import sqlite_names, transpile

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))

from conftest import FIXTURES, load_pairs  # the suite's one fixture reader

ENGINES = ("sqlite", "postgres", "duckdb", "mysql")
DIALECT = {"postgres": "postgresql", "duckdb": "duckdb", "mysql": "mysql"}
TIMEOUT_S = 10.0


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": round(statistics.median(values), 3), "p95": round(percentile(values, 0.95), 3)}


# -- the engines ---------------------------------------------------------------------------------


class Targets:
    """Where each engine's copy of a Spider database is: a PostgreSQL server URL, a DuckDB folder,
    a MySQL or MariaDB server URL."""

    def __init__(self, postgres_url: str | None, duckdb_dir: Path | None, skipped: dict[str, str],
                 mysql_url: str | None = None):
        self.postgres_url, self.duckdb_dir, self.skipped = postgres_url, duckdb_dir, skipped
        self.mysql_url = mysql_url

    def my_url(self, db_id: str) -> str:
        from sqlchorus.tools.engines.opening import database_url

        return database_url(self.mysql_url, db_id)

    @property
    def engines(self) -> list[str]:
        return [e for e in ENGINES if e not in self.skipped]

    def pg_url(self, db_id: str) -> str:
        from load_spider_engines import _database_url

        return _database_url(self.postgres_url, db_id)

    def duck_path(self, db_id: str) -> Path:
        return self.duckdb_dir / f"{db_id}.duckdb"

    def guarded(self, engine: str, db_id: str, sqlite_path: Path, **options: Any) -> Any:
        """The database under its engine's guard, as :func:`open_database` opens it."""
        options.setdefault("timeout_s", TIMEOUT_S)
        if engine == "sqlite":
            return GuardedDatabase(sqlite_path, **options)
        if engine == "postgres":
            from sqlchorus.tools.engines.postgres import PostgresDatabase

            # The server this benchmark starts is reached as its superuser: let open, as an
            # administrator may (the guard's reads are the same under any role).
            options.setdefault("allow_writable_role", True)
            return PostgresDatabase(self.pg_url(db_id), **options)
        if engine == "mysql":
            from sqlchorus.tools.engines.mysql import MySQLDatabase

            options.setdefault("allow_writable_role", True)  # as for PostgreSQL's administrator
            return MySQLDatabase(self.my_url(db_id), **options)
        from sqlchorus.tools.engines.duckdb import DuckDatabase

        return DuckDatabase(self.duck_path(db_id), **options)

    def raw(self, engine: str, db_id: str, sqlite_path: Path) -> Any:
        if engine == "sqlite":
            conn = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)
            conn.text_factory = lambda b: b.decode("utf-8", "replace")
            return conn
        if engine == "postgres":
            import psycopg

            return psycopg.connect(self.pg_url(db_id), autocommit=True)
        if engine == "mysql":
            import pymysql

            from sqlchorus.tools.engines.mysql import connection_parameters

            return pymysql.connect(**connection_parameters(self.my_url(db_id)), autocommit=True, charset="utf8mb4")
        import duckdb

        return duckdb.connect(str(self.duck_path(db_id)), read_only=True)


def missing_extras(postgres_given: bool, mysql_given: bool = False) -> dict[str, str]:
    skipped = {}
    if importlib.util.find_spec("psycopg") is None:
        skipped["postgres"] = "psycopg is not installed (pip install 'sqlchorus[postgres]')"
    elif not postgres_given:
        from servers import postgres_bin

        if postgres_bin() is None:
            skipped["postgres"] = "no --postgres URL and PostgreSQL's server programs are not installed"
    if importlib.util.find_spec("duckdb") is None:
        skipped["duckdb"] = "duckdb is not installed (pip install 'sqlchorus[duckdb]')"
    if importlib.util.find_spec("pymysql") is None:
        skipped["mysql"] = "PyMySQL is not installed (pip install 'sqlchorus[mysql]')"
    elif not mysql_given:
        from servers import mariadb_bin

        if mariadb_bin() is None:
            skipped["mysql"] = "no --mysql URL and MariaDB's server programs are not installed"
    return skipped


@contextlib.contextmanager
def engines_ready(args: argparse.Namespace, sqlite_paths: list[Path]) -> Iterator[Targets]:
    """The engines' copies of the databases: given, or made here and removed at the end."""
    skipped = missing_extras(bool(args.postgres), bool(args.mysql))
    server = maria = None
    folder = None
    try:
        postgres_url = args.postgres
        if "postgres" not in skipped and not postgres_url:
            from servers import PostgresServer

            log("starting a throwaway PostgreSQL server")
            server = PostgresServer().start()
            postgres_url = server.url()
        mysql_url = args.mysql
        if "mysql" not in skipped and not mysql_url:
            from servers import MariaDBServer

            log("starting a throwaway MariaDB server")
            maria = MariaDBServer().start()
            mysql_url = maria.url("")
        duckdb_dir = args.duckdb_dir
        if "duckdb" not in skipped and duckdb_dir is None:
            folder = Path(tempfile.mkdtemp(prefix="engine-guard-duckdb-"))
            duckdb_dir = folder
        load_pg = "postgres" not in skipped and (server is not None or args.load)
        load_duck = "duckdb" not in skipped and (folder is not None or args.load)
        load_my = "mysql" not in skipped and (maria is not None or args.load)
        if load_pg or load_duck or load_my:
            from load_spider_engines import load_database

            start = time.perf_counter()
            for path in sqlite_paths:
                load_database(path, postgres_url=postgres_url if load_pg else None,
                              duckdb_path=duckdb_dir if load_duck else None,
                              mysql_url=mysql_url if load_my else None)
            log(f"loaded {len(sqlite_paths)} databases in {time.perf_counter() - start:.1f} s")
        yield Targets(postgres_url, duckdb_dir, skipped, mysql_url)
    finally:
        if server is not None:
            server.stop()
            log("PostgreSQL server stopped and removed")
        if maria is not None:
            maria.stop()
            log("MariaDB server stopped and removed")
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


# -- 1. statements -------------------------------------------------------------------------------


def fetch_raw(conn: Any, sql: str) -> None:
    if hasattr(conn, "cursor") and type(conn).__module__.startswith("pymysql"):
        with conn.cursor() as cur:  # PyMySQL's connections run statements through a cursor only
            cur.execute(sql)
            cur.fetchmany(DEFAULT_MAX_ROWS)
        return
    conn.execute(sql).fetchmany(DEFAULT_MAX_ROWS)


def time_guarded(db: Any, sql: str) -> float:
    db.execute(sql)  # warm-up
    start = time.perf_counter()
    db.execute(sql)
    return (time.perf_counter() - start) * 1000


def time_raw(conn: Any, sql: str) -> float:
    fetch_raw(conn, sql)  # warm-up
    start = time.perf_counter()
    fetch_raw(conn, sql)
    return (time.perf_counter() - start) * 1000


def statement_costs(targets: Targets, by_db: dict[str, tuple[Path, list[tuple[int, str]]]]) -> dict:
    guarded: dict[str, dict[int, float]] = {e: {} for e in targets.engines}
    raw: dict[str, dict[int, float]] = {e: {} for e in targets.engines}
    failed: dict[str, dict[str, int]] = {e: {"transpile": 0, "guarded": 0, "raw": 0} for e in targets.engines}
    kinds: dict[str, Counter] = {e: Counter() for e in targets.engines}
    for n, (db_id, (path, queries)) in enumerate(by_db.items(), 1):
        names = sqlite_names(path)
        for engine in targets.engines:
            sqls: dict[int, str] = {}
            for qid, gold in queries:
                if engine == "sqlite":
                    sqls[qid] = gold
                    continue
                try:
                    sqls[qid] = transpile(gold, DIALECT[engine], names)
                except Exception:  # noqa: BLE001  sqlglot raises ParseError, TokenError, UnsupportedError...
                    failed[engine]["transpile"] += 1
            done: dict[int, float] = {}
            with targets.guarded(engine, db_id, path) as db:
                for qid, sql in sqls.items():
                    try:
                        done[qid] = time_guarded(db, sql)
                    except SqlError as e:
                        failed[engine]["guarded"] += 1
                        kinds[engine][e.kind] += 1
            conn = targets.raw(engine, db_id, path)
            try:
                for qid, ms in done.items():
                    try:
                        raw[engine][qid] = time_raw(conn, sqls[qid])
                        guarded[engine][qid] = ms
                    except Exception:  # noqa: BLE001  any driver error: skipped on this engine
                        failed[engine]["raw"] += 1
            finally:
                conn.close()
        log(f"[{n}/{len(by_db)}] {db_id}: {len(queries)} queries")
    out: dict[str, Any] = {}
    for engine in targets.engines:
        g, r = guarded[engine], raw[engine]
        both = [q for q in g if q in guarded.get("sqlite", {})]
        ratio = None
        if both:
            ratio = round(statistics.median(g[q] for q in both)
                          / statistics.median(guarded["sqlite"][q] for q in both), 2)
        out[engine] = {
            "statements": len(g),
            "skipped": failed[engine],
            "guarded_errors": dict(kinds[engine].most_common()),
            "guarded_ms": summary(list(g.values())),
            "raw_ms": summary([r[q] for q in g]),
            "overhead_ms": summary([g[q] - r[q] for q in g]),
            "ratio_to_sqlite": ratio,
        }
    return out


# -- 2. the value index --------------------------------------------------------------------------


def total_rows(path: Path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        return sum(conn.execute(f'SELECT count(*) FROM "{t.replace(chr(34), chr(34) * 2)}"').fetchone()[0]
                   for t in tables)
    finally:
        conn.close()


def index_costs(targets: Targets, by_db: dict[str, tuple[Path, list[tuple[int, str]]]]) -> dict:
    from sqlchorus.tools.values import DEFAULT_MAX_VALUES, ValueIndex

    rows = {db_id: total_rows(path) for db_id, (path, _) in by_db.items()}
    largest = max(rows, key=rows.get)
    path = by_db[largest][0]
    out: dict[str, Any] = {"database": largest, "rows": rows[largest]}
    with tempfile.TemporaryDirectory(prefix="engine-guard-index-") as cache:
        for engine in targets.engines:
            # As `sqlchorus index --rebuild`: no statement worker, a build that reuses nothing.
            with targets.guarded(engine, largest, path, prestart=False, workers=1) as db:
                start = time.perf_counter()
                built = ValueIndex.build(db, cache_dir=Path(cache) / engine,
                                         max_values_per_column=DEFAULT_MAX_VALUES)
                seconds = time.perf_counter() - start
            with built:
                out[engine] = {"seconds": round(seconds, 3), "values": built.stats["values"],
                               "columns": built.stats["columns"]}
            log(f"value index of {largest} on {engine}: {seconds:.2f} s")
    return out


# -- 3. the attack corpora -----------------------------------------------------------------------


def run_corpus(folder: Path, open_db: Any, outcome_map: dict[str, str] | None = None) -> dict:
    classes: dict[str, dict[str, int]] = {}
    overrun = 0.0
    for path in sorted(folder.glob("*.sql")):
        counts = classes.setdefault(path.stem, {"cases": 0, "as_expected": 0})
        for pair in load_pairs(path):
            sql = eval(pair.input) if pair.meta.get("python") else pair.input  # fixture data of our own
            budget = float(pair.meta.get("budget", 1))
            max_bytes = int(pair.meta.get("max_bytes", 16 * 1024 * 1024))
            with open_db(budget) as db:
                start = time.monotonic()
                try:
                    result = db.execute(sql, timeout_s=budget, max_bytes=max_bytes)
                    outcome = "ok, truncated" if result.truncated else "ok"
                except SqlError as e:
                    outcome = (outcome_map or {}).get(e.kind, e.kind)
                seconds = time.monotonic() - start
            counts["cases"] += 1
            counts["as_expected"] += outcome == pair.expected
            overrun = max(overrun, seconds - budget)
        log(f"corpus {folder.name}/{path.stem}: {counts['as_expected']}/{counts['cases']} as expected")
    return {"classes": classes, "cases": sum(c["cases"] for c in classes.values()),
            "as_expected": sum(c["as_expected"] for c in classes.values()),
            "largest_overrun_s": round(overrun, 3)}


def postgres_corpus(targets: Targets, source: Path) -> dict:
    """The PostgreSQL corpus on concert_singer as tests/test_postgres_guard.py builds it, read by
    a read-only role with temp_file_limit; the database and role are dropped at the end."""
    import psycopg
    from test_postgres_guard import prepare_concert

    from sqlchorus.tools.engines.postgres import PostgresDatabase

    suffix = secrets.token_hex(4)
    dbname, role, password = f"engine_guard_corpus_{suffix}", f"engine_guard_reader_{suffix}", secrets.token_hex(16)
    admin_url = targets.pg_url(dbname)
    with psycopg.connect(targets.postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {dbname}")
    try:
        prepare_concert(source, admin_url, dbname, role, password)
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(admin_url)
        params.update(user=role, password=password)
        reader = make_conninfo(**params)
        return run_corpus(FIXTURES / "guard_corpus_postgres",
                          lambda budget: PostgresDatabase(reader, timeout_s=budget, workers=1, prestart=False))
    finally:
        with psycopg.connect(targets.postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")
            conn.execute(f"DROP ROLE IF EXISTS {role}")


def duckdb_corpus(source: Path) -> dict:
    """The DuckDB corpus on concert_singer as tests/test_duckdb_guard.py builds it."""
    from test_duckdb_guard import build_duckdb

    from sqlchorus.tools.engines.duckdb import DuckDatabase

    with tempfile.TemporaryDirectory(prefix="engine-guard-corpus-") as folder:
        db = build_duckdb(source, Path(folder) / "concert_singer.duckdb")
        # As the test's runner: a statement too long or too deeply nested to parse is not a query.
        return run_corpus(FIXTURES / "guard_corpus_duckdb", lambda budget: DuckDatabase(db, timeout_s=budget),
                          {"too_long": "not_a_query", "too_deep": "not_a_query"})


def corpora(targets: Targets, source: Path) -> dict:
    out: dict[str, Any] = {}
    for engine in targets.engines:
        try:
            if engine == "sqlite":
                out[engine] = run_corpus(FIXTURES / "guard_corpus",
                                         lambda budget: GuardedDatabase(source, timeout_s=budget))
            elif engine == "postgres":
                out[engine] = postgres_corpus(targets, source)
            elif engine == "mysql":
                out[engine] = {"skipped": "tests/test_mysql_guard.py runs MySQL's corpus, as the read-only "
                                          "user and as the administrator"}
            else:
                out[engine] = duckdb_corpus(source)
        except Exception as e:  # noqa: BLE001  a corpus that could not be set up; the others run
            first = (str(e).strip().splitlines() or [""])[0]
            out[engine] = {"error": f"{type(e).__name__}: {first}"}
    return out


# -- main ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", metavar="URL", help="server with the loaded databases (default: start one)")
    parser.add_argument("--mysql", metavar="URL",
                        help="MySQL or MariaDB server with the loaded databases (default: start a MariaDB one)")
    parser.add_argument("--duckdb-dir", metavar="DIR", type=Path,
                        help="folder of <db>.duckdb files (default: load into a temporary folder)")
    parser.add_argument("--load", action="store_true",
                        help="load what is missing into the given --postgres/--mysql/--duckdb-dir")
    parser.add_argument("--limit", type=int, help="gold queries at most")
    parser.add_argument("--corpus", action="store_true", help="also run each engine's attack corpus")
    parser.add_argument("--skip-index", action="store_true", help="do not time the value index")
    args = parser.parse_args(argv)
    # The guard warns once per database that a superuser could write; expected here.
    logging.getLogger("sqlchorus.tools.engines.postgres").setLevel(logging.ERROR)
    logging.getLogger("sqlchorus.tools.engines.mysql").setLevel(logging.ERROR)
    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # the corpus's non-queries parse as commands
    start = time.perf_counter()
    by_db: dict[str, tuple[Path, list[tuple[int, str]]]] = {}
    n = missing = 0
    for ex in load_dataset("spider-dev").examples:
        if ex.db_path is None or not Path(ex.db_path).exists():
            missing += 1
            continue
        if args.limit is not None and n >= args.limit:
            break
        by_db.setdefault(ex.db_id, (Path(ex.db_path), []))[1].append((ex.question_id, ex.gold_sql))
        n += 1
    # Every present database is loaded (and indexed) even with --limit: the index needs the largest.
    every_db = sorted({Path(ex.db_path) for ex in load_dataset("spider-dev").examples
                       if ex.db_path is not None and Path(ex.db_path).exists()})
    all_dbs = {p.stem: (p, by_db.get(p.stem, (p, []))[1]) for p in every_db}
    figures: dict[str, Any] = {"benchmark": "engine_guard", "questions": n, "databases": len(by_db),
                               "questions_without_database": missing}
    with engines_ready(args, every_db) as targets:
        figures["skipped_engines"] = targets.skipped
        figures["statements"] = statement_costs(targets, by_db)
        if not args.skip_index:
            figures["value_index"] = index_costs(targets, all_dbs)
        if args.corpus:
            source = next(p for p in every_db if p.stem == "concert_singer")
            figures["corpus"] = corpora(targets, source)
    figures["seconds"] = round(time.perf_counter() - start, 1)
    figures["python"] = sys.version.split()[0]
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
