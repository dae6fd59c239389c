"""Four expensive statements and a cheap query on one database, with one statement worker per
database against the default pool; prints one JSON line.

Each run opens the database anew, warms its workers, then submits four expensive statements at
once (finite recursive CTEs sized to take about ``--expensive-s`` seconds each when run alone)
and, as soon as all four are submitted, one cheap query (``SELECT count(*) FROM singer``) and
one schema lookup on sqlchorus's own connection. It records the cheap query's latency, the
lookup's, and when each of the four ended (seconds after submission).

Configurations:

* ``workers_1``: one worker per database, as before the pool; everything queues behind the four;
* ``default_one_client``: the default pool (``statement_workers`` = 4), the four statements from
  one client (a server's remote address or token), which holds at most half of the workers, the
  cheap query from another client;
* ``default_four_clients``: the default pool, the four statements from four clients: they take
  every worker, and the cheap query waits for the first to end.

For each it prints the cheap query's and the lookup's median and p95 milliseconds over
``--runs`` runs, and the median over runs of the k-th expensive statement's end (k = 1..4) in
seconds. The machine's CPU count and load are printed too: four CPU-bound statements in parallel
share the CPUs, so each takes longer than alone when there are fewer than four.

    python benchmarks/statement_parallelism.py [--runs 7] [--expensive-s 0.75] [--db PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import threading
import time
from pathlib import Path

from sqlchorus.tools.engines.sqlite import DEFAULT_WORKERS, GuardedDatabase

ROOT = Path(__file__).resolve().parent.parent

EXPENSIVE = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) SELECT count(*) FROM c"
CHEAP = "SELECT count(*) FROM singer"
LOOKUP = "SELECT name FROM sqlite_master WHERE type = 'table'"
BUDGET_S = 600.0
"""The expensive statements' budget: far past their length, so that all of them end by themselves."""


def data_dir() -> Path:
    return Path(os.environ.get("SQLCHORUS_DATA", ROOT.parent / "shared" / "data"))


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def calibrate(path: Path, seconds: float) -> tuple[int, float]:
    """The recursion depth whose statement takes about ``seconds`` alone, and what it took."""
    with GuardedDatabase(path, timeout_s=BUDGET_S, workers=1) as db:
        db.execute("SELECT 1")
        depth = 100_000
        for _ in range(12):  # bounded: each round grows the depth towards the target
            start = time.perf_counter()
            db.execute(EXPENSIVE, parameters=(depth,))
            took = time.perf_counter() - start
            if took >= seconds * 0.9:
                return depth, took
            depth = int(depth * min(10.0, max(1.2, seconds / max(took, 1e-3))))
        return depth, took


def one_run(path: Path, workers: int, depth: int, clients: list[str]) -> dict[str, object]:
    with GuardedDatabase(path, timeout_s=BUDGET_S, workers=workers) as db:
        # Warm every worker, so that no process start is measured.
        warm = [threading.Thread(target=db.execute, args=("SELECT 1",)) for _ in range(workers)]
        for thread in warm:
            thread.start()
        for thread in warm:
            thread.join()
        ends: list[float] = []
        lock = threading.Lock()
        start = time.perf_counter()

        def expensive(client: str) -> None:
            db.execute(EXPENSIVE, parameters=(depth,), client=client)
            with lock:
                ends.append(time.perf_counter() - start)

        threads = [threading.Thread(target=expensive, args=(client,)) for client in clients]
        for thread in threads:
            thread.start()
        for _ in range(10_000):  # until all four are running or waiting for a worker (bounded)
            status = db.worker_status()
            if status["running"] + status["waiting"] >= len(clients):
                break
            time.sleep(0.001)
        t0 = time.perf_counter()
        db.execute(CHEAP, client="light")
        cheap_ms = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        db.lookup(LOOKUP)
        lookup_ms = (time.perf_counter() - t0) * 1000
        for thread in threads:
            thread.join()
        client_workers = db.client_workers
    return {"cheap_ms": cheap_ms, "lookup_ms": lookup_ms, "ends_s": sorted(ends), "client_workers": client_workers}


def summary(runs: list[dict[str, object]]) -> dict[str, object]:
    cheap = [r["cheap_ms"] for r in runs]
    lookup = [r["lookup_ms"] for r in runs]
    ends = [r["ends_s"] for r in runs]
    return {
        "cheap_ms": {"median": round(statistics.median(cheap), 1), "p95": round(percentile(cheap, 95), 1),
                     "all": [round(v, 1) for v in cheap]},
        "lookup_ms": {"median": round(statistics.median(lookup), 2), "p95": round(percentile(lookup, 95), 2)},
        "expensive_ends_s": [round(statistics.median(e[k] for e in ends), 2) for k in range(len(ends[0]))],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--expensive-s", type=float, default=0.75)
    parser.add_argument("--db", type=Path, default=None)
    args = parser.parse_args()
    path = args.db or data_dir() / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"
    if not path.exists():
        sys.exit(f"no database at {path} (set SQLCHORUS_DATA or pass --db)")
    depth, alone = calibrate(path, args.expensive_s)
    configs = {
        "workers_1": (1, ["heavy"] * 4),
        "default_one_client": (DEFAULT_WORKERS, ["heavy"] * 4),
        "default_four_clients": (DEFAULT_WORKERS, ["heavy-1", "heavy-2", "heavy-3", "heavy-4"]),
    }
    figures: dict[str, object] = {}
    for name, (workers, clients) in configs.items():
        runs = [one_run(path, workers, depth, clients) for _ in range(args.runs)]
        figures[name] = {"workers": workers, "client_workers": runs[0]["client_workers"], **summary(runs)}
    print(json.dumps({
        "benchmark": "statement_parallelism",
        "database": path.stem,
        "cpus": os.cpu_count(),
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "runs": args.runs,
        "expensive_depth": depth,
        "expensive_alone_s": round(alone, 3),
        "configs": figures,
    }))


if __name__ == "__main__":
    main()
