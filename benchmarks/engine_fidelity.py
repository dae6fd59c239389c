"""Fidelity of Spider dev's gold SQL on PostgreSQL, DuckDB and MySQL/MariaDB; prints one JSON line.

For every Spider dev question whose database exists, the gold SQL runs on SQLite and, transpiled
by sqlglot from SQLite's dialect, on each engine given, against the databases that
``scripts/load_spider_engines.py`` loaded. Results are normalised (:func:`normalise_rows`) and
compared with the Spider comparator (bag semantics, order when the gold has ``order by``).

Transpiling is :func:`sqlchorus.tools.sql.transpile.transpile` with the database's names, whose
rewrites make SQLite's name resolution and comparison rules explicit (``--raw`` turns them off,
to measure sqlglot alone).

Per engine: questions, equal, share equal, failures by reason, seconds. Reasons are
``transpile error: <class>``, ``execution error: <first line of the message, names and numbers
elided>`` and ``different result: <sub-reason>``, the sub-reason guessed from the two results and
the SQL: ``row count``, ``text case`` (equal once text is lower-cased: PostgreSQL's ``=`` and
``LIKE`` are case-sensitive, SQLite's ``LIKE`` is not), ``NULL ordering`` (equal as bags, the
order differs where NULLs are), ``row order`` (equal as bags: ties ordered differently),
``integer division`` (the SQL divides and numbers differ), ``ties under ORDER BY ... LIMIT``
(the SQL orders and limits, and other rows came out: rows tied on the order were cut
differently; SQLite's choice is no more right than the engine's), ``float precision`` (equal to 9
significant digits), ``value types`` (equal once every value is text, e.g. ``'1'`` vs ``1``),
``other``.

Connections are read-only: psycopg with ``default_transaction_read_only=on`` and a
``statement_timeout``; DuckDB opened ``read_only`` and interrupted at the time limit; PyMySQL in a
read-only session with ``max_statement_time`` (MariaDB) or ``max_execution_time`` (MySQL); SQLite
with a progress handler. No query can run longer than ``--timeout`` seconds (10 by default).

Run: ``.venv/bin/python benchmarks/engine_fidelity.py --postgres postgresql://user@host:port/postgres
--duckdb-dir DIR --mysql mysql://user@host:port/ [--details FILE] [--db NAME ...]``. An engine not
given is skipped.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sqlchorus.evaluation.datasets import load_dataset
from sqlchorus.tools.sql.compare import normalise_rows, spider_order_matters, spider_result_eq
from sqlchorus.tools.sql.transpile import Names, sqlite_names, transpile

ENGINES = ("postgres", "duckdb", "mysql")
DIALECT = {"postgres": "postgres", "duckdb": "duckdb", "mysql": "mysql"}


# -- running -------------------------------------------------------------------------------------


class QueryTimeout(Exception):
    pass


def run_sqlite(path: Path, sql: str, timeout_s: float) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    deadline = time.monotonic() + timeout_s
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError as e:
        if "interrupted" in str(e):
            raise QueryTimeout(f"over {timeout_s:g} s") from e
        raise
    finally:
        conn.close()


class Engines:
    """One read-only connection per engine and database, opened on first use."""

    def __init__(self, postgres_url: str | None, duckdb_dir: Path | None, timeout_s: float,
                 mysql_url: str | None = None):
        self.postgres_url, self.duckdb_dir, self.timeout_s = postgres_url, duckdb_dir, timeout_s
        self.mysql_url = mysql_url
        self.connections: dict[tuple[str, str], Any] = {}

    @property
    def names(self) -> list[str]:
        return [e for e, given in zip(ENGINES, (self.postgres_url, self.duckdb_dir, self.mysql_url)) if given]

    def _connect(self, engine: str, db: str) -> Any:
        key = (engine, db)
        if key not in self.connections:
            if engine == "postgres":
                import psycopg
                from psycopg.conninfo import conninfo_to_dict, make_conninfo

                params = conninfo_to_dict(self.postgres_url)
                params["dbname"] = db
                params["options"] = (f"-c default_transaction_read_only=on "
                                     f"-c statement_timeout={int(self.timeout_s * 1000)}")
                self.connections[key] = psycopg.connect(make_conninfo(**params), autocommit=True)
            elif engine == "mysql":
                import pymysql

                from sqlchorus.tools.engines.opening import database_url
                from sqlchorus.tools.engines.mysql import connection_parameters

                conn = pymysql.connect(**connection_parameters(database_url(self.mysql_url, db)),
                                       autocommit=True, charset="utf8mb4")
                with conn.cursor() as cur:
                    cur.execute("SELECT VERSION()")
                    if "mariadb" in str(cur.fetchone()[0]).lower():
                        cur.execute(f"SET SESSION max_statement_time = {self.timeout_s:g}, tx_read_only = 1")
                    else:
                        cur.execute(f"SET SESSION max_execution_time = {int(self.timeout_s * 1000)}, "
                                    "transaction_read_only = 1")
                self.connections[key] = conn
            else:
                import duckdb

                self.connections[key] = duckdb.connect(str(self.duckdb_dir / f"{db}.duckdb"),
                                                       read_only=True)
        return self.connections[key]

    def run(self, engine: str, db: str, sql: str) -> list[tuple]:
        conn = self._connect(engine, db)
        if engine == "postgres":
            return conn.execute(sql).fetchall()
        if engine == "mysql":
            with conn.cursor() as cur:
                cur.execute(sql)
                return list(cur.fetchall())
        timer = threading.Timer(self.timeout_s, conn.interrupt)
        timer.start()
        try:
            return conn.execute(sql).fetchall()
        finally:
            timer.cancel()

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()


# -- reasons -------------------------------------------------------------------------------------

_QUOTED = re.compile(r'"[^"]*"|\'[^\']*\'')
_NUMBER = re.compile(r"\b\d+\b")


def error_class(error: BaseException) -> str:
    """The first line of an error, with quoted names and numbers elided so that like errors
    group together."""
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    first = _NUMBER.sub("N", _QUOTED.sub('"…"', first))
    return first[:160]


def _lower(rows: list[tuple]) -> list[tuple]:
    return [tuple(v.lower() if isinstance(v, str) else v for v in r) for r in rows]


def _rounded(rows: list[tuple]) -> list[tuple]:
    return [tuple(float(f"{v:.9g}") if isinstance(v, float) else v for v in r) for r in rows]


def _texts(rows: list[tuple]) -> list[tuple]:
    def text(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        return None if v is None else str(v)

    return [tuple(text(v) for v in r) for r in rows]


def difference(sql: str, gold: list[tuple], got: list[tuple], order: bool) -> str:
    """A guess at why two unequal results differ (see the module docstring)."""
    if len(gold) != len(got):
        if re.search(r"\blike\b", sql, re.IGNORECASE) or "=" in sql:
            if spider_result_eq(_lower(gold), _lower(got), order):
                return "text case"
        return "row count"
    if re.search(r"\border\s+by\b.*\blimit\b", sql, re.IGNORECASE | re.DOTALL) and not order_free_equal(gold, got):
        return "ties under ORDER BY ... LIMIT"
    if order and spider_result_eq(gold, got, False):
        has_null = any(v is None for r in gold for v in r)
        return "NULL ordering" if has_null else "row order"
    if spider_result_eq(_lower(gold), _lower(got), order):
        return "text case"
    if spider_result_eq(_rounded(gold), _rounded(got), order):
        return "float precision"
    if "/" in sql and any(isinstance(v, (int, float)) for r in gold for v in r):
        return "integer division"
    if spider_result_eq(_texts(gold), _texts(got), order):
        return "value types"
    return "other"


def order_free_equal(gold: list[tuple], got: list[tuple]) -> bool:
    return len(gold) == len(got) and spider_result_eq(gold, got, False)


def first_difference(gold: list[tuple], got: list[tuple], order: bool) -> dict[str, Any] | None:
    if order:
        for i, (a, b) in enumerate(zip(gold, got)):
            if a != b:
                return {"index": i, "sqlite": repr(a), "engine": repr(b)}
    else:
        extra = Counter(gold) - Counter(got)
        other = Counter(got) - Counter(gold)
        if extra or other:
            return {"sqlite": repr(next(iter(extra), None)), "engine": repr(next(iter(other), None))}
    if len(gold) != len(got):
        return {"sqlite_rows": len(gold), "engine_rows": len(got)}
    return None


# -- main ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", metavar="URL", help="server with the loaded databases")
    parser.add_argument("--duckdb-dir", metavar="DIR", type=Path, help="folder of <db>.duckdb files")
    parser.add_argument("--mysql", metavar="URL", help="MySQL or MariaDB server with the loaded databases")
    parser.add_argument("--details", metavar="FILE", type=Path, help="write per-question records (JSON lines)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per query (default 10)")
    parser.add_argument("--db", action="append", default=[], help="only these databases")
    parser.add_argument("--raw", action="store_true", help="plain sqlglot.transpile, no schema rewrites")
    args = parser.parse_args(argv)
    engines = Engines(args.postgres, args.duckdb_dir, args.timeout, args.mysql)
    if not engines.names:
        parser.error("give --postgres URL, --duckdb-dir DIR and/or --mysql URL")
    examples = [e for e in load_dataset("spider-dev").examples
                if e.db_path is not None and (not args.db or e.db_id in args.db)]
    summary: dict[str, Any] = {"questions": len(examples), "transpile": "raw" if args.raw else "schema"}
    stats = {e: {"questions": 0, "equal": 0, "failures": Counter(), "seconds": 0.0} for e in engines.names}
    details = open(args.details, "w", encoding="utf-8") if args.details else None
    names_of: dict[str, Names] = {}
    sqlite_errors = 0
    start = time.perf_counter()
    try:
        for ex in examples:
            try:
                gold = run_sqlite(ex.db_path, ex.gold_sql, args.timeout)
            except (sqlite3.Error, QueryTimeout):
                sqlite_errors += 1
                continue
            order = spider_order_matters(ex.gold_sql)
            if ex.db_id not in names_of:
                names_of[ex.db_id] = sqlite_names(ex.db_path)
            for engine in engines.names:
                s = stats[engine]
                s["questions"] += 1
                t0 = time.perf_counter()
                record: dict[str, Any] = {"question_id": ex.question_id, "db": ex.db_id, "engine": engine}
                try:
                    sql = transpile(ex.gold_sql, engine, None if args.raw else names_of[ex.db_id])
                except Exception as e:  # sqlglot raises ParseError, TokenError, UnsupportedError...
                    status, reason, sql = "transpile error", f"transpile error: {type(e).__name__}", None
                else:
                    try:
                        got = normalise_rows(engines.run(engine, ex.db_id, sql))
                    except Exception as e:  # any driver error is a finding, not a crash
                        status, reason = "execution error", f"execution error: {error_class(e)}"
                    else:
                        if spider_result_eq(gold, got, order):
                            status, reason = "equal", None
                        else:
                            status = "different result"
                            reason = f"different result: {difference(ex.gold_sql, gold, got, order)}"
                            record["first_difference"] = first_difference(gold, got, order)
                s["seconds"] += time.perf_counter() - t0
                if reason is None:
                    s["equal"] += 1
                else:
                    s["failures"][reason] += 1
                if details:
                    record.update(status=status, reason=reason, gold_sql=ex.gold_sql, sql=sql)
                    details.write(json.dumps(record, default=repr) + "\n")
    finally:
        engines.close()
        if details:
            details.close()
    for engine, s in stats.items():
        summary[engine] = {
            "questions": s["questions"], "equal": s["equal"],
            "share_equal": round(s["equal"] / s["questions"], 4) if s["questions"] else None,
            "failures": dict(s["failures"].most_common()), "seconds": round(s["seconds"], 2)}
    summary["sqlite_errors"] = sqlite_errors
    summary["seconds"] = round(time.perf_counter() - start, 2)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
