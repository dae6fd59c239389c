"""What the guard's time limit costs per statement, and how far past its budget a statement runs.

Runs every Spider dev gold query whose database is present twice, in one run: through the guard
in this process (the parse check, then the guarded connection: what a statement cost when it ran
in-process, with no way to stop one long SQLite call), and through ``GuardedDatabase.execute``
(the same, in the database's worker process, killed at the deadline). Then runs the guard
corpora of the test suite (``tests/fixtures/guard_corpus``) through ``GuardedDatabase`` and
reports how each class ended and the largest time over a budget.

Prints one JSON line: ``statements``, ``in_process_ms`` and ``worker_ms`` (median and p95 per
statement), ``ratio_median``, ``corpus`` (cases and outcomes as expected, by class) and
``largest_overrun_s``.

    python benchmarks/guard.py [--limit N] [--skip-corpus]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from sqlchorus.tools.engines.sqlite import GuardedDatabase, SqlError, check_single_query
from sqlchorus.tools.engines.sqlite_guard import GuardState, open_guarded, run

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from conftest import load_pairs  # noqa: E402  the suite's one fixture reader


def data_dir() -> Path:
    default = ROOT.parent / "shared" / "data"
    return Path(os.environ.get("SQLCHORUS_DATA", default))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "p95": round(percentile(values, 0.95), 3)}


def statement_costs(limit: int | None) -> dict:
    root = data_dir() / "spider"
    examples = json.loads((root / "dev.json").read_text(encoding="utf-8"))
    by_db: dict[str, list[str]] = {}
    for ex in examples:
        path = root / "database" / ex["db_id"] / f"{ex['db_id']}.sqlite"
        if path.exists():
            by_db.setdefault(str(path), []).append(ex["query"])
    in_process: list[float] = []
    worker: list[float] = []
    n = 0
    for path, queries in by_db.items():
        if limit is not None and n >= limit:
            break
        queries = queries[: None if limit is None else limit - n]
        n += len(queries)
        state = GuardState()
        conn = open_guarded(path, state, max_value_bytes=16 * 1024 * 1024)
        with GuardedDatabase(path) as db:
            db.execute("SELECT 1")  # the worker starts once per database, not per statement
            for sql in queries:
                start = time.perf_counter()
                try:
                    check_single_query(sql)
                    run(conn, state, sql, (), 10.0, 10_000, 16 * 1024 * 1024)
                except Exception:  # a gold query the guard refuses costs what it costs
                    pass
                in_process.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                try:
                    db.execute(sql)
                except SqlError:
                    pass
                worker.append((time.perf_counter() - start) * 1000)
        conn.close()
    return {
        "statements": len(worker),
        "databases": len(by_db) if limit is None else None,
        "in_process_ms": summary(in_process),
        "worker_ms": summary(worker),
        "ratio_median": round(statistics.median(worker) / statistics.median(in_process), 2),
    }


def corpus() -> dict:
    db_path = data_dir() / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"
    classes: dict[str, dict[str, int]] = {}
    overrun = 0.0
    for path in sorted((ROOT / "tests" / "fixtures" / "guard_corpus").glob("*.sql")):
        counts = classes.setdefault(path.stem, {"cases": 0, "as_expected": 0})
        for pair in load_pairs(path):
            sql = eval(pair.input) if pair.meta.get("python") else pair.input  # fixture data of our own
            budget = float(pair.meta.get("budget", 1))
            with GuardedDatabase(db_path, timeout_s=budget) as db:
                start = time.monotonic()
                try:
                    result = db.execute(sql)
                    outcome = "ok, truncated" if result.truncated else "ok"
                except SqlError as e:
                    outcome = e.kind
                seconds = time.monotonic() - start
            counts["cases"] += 1
            counts["as_expected"] += outcome == pair.expected
            overrun = max(overrun, seconds - budget)
    return {"corpus": classes, "largest_overrun_s": round(overrun, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, help="gold queries at most")
    parser.add_argument("--skip-corpus", action="store_true", help="measure the statements only")
    args = parser.parse_args(argv)
    figures = {"benchmark": "guard", **statement_costs(args.limit)}
    if not args.skip_corpus:
        figures.update(corpus())
    figures["python"] = sys.version.split()[0]
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
