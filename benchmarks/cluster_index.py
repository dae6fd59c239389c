"""A large value index built locally and on a local Ray cluster; prints one JSON line.

Generates a SQLite database of ``--values`` distinct text values (default 10 million): tables of
five text columns, :data:`VALUES_PER_COLUMN` distinct values each (the default
``max_values_per_column``, so no column is cut), each value two or three synthetic words. It is
generated once into a cache folder (``$SQLCHORUS_BENCH_CACHE``, else ``sqlchorus-bench`` under
the system's temporary folder) and reused by later runs.

Then it builds the database's value index once locally (``ValueIndex.build``) and once on a Ray
cluster started here for each worker count of ``--workers`` (what ``sqlchorus index --ray local``
does, the cluster given that many CPUs), and says whether every cluster build wrote the local
build's file byte for byte. Build seconds are the index's own (plan, columns, merge, write);
starting the cluster is timed apart. Workers are Ray worker processes, one CPU each; with more
workers than the machine has cores they share the cores, and the driver's merge shares them too.
The CPU count and load average are printed, since the machine may be shared.

    python benchmarks/cluster_index.py [--values 10000000] [--workers 2 4]

Another benchmark imports :func:`measure`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlchorus.cluster.connect import cluster
from sqlchorus.cluster.index_build import cluster_parts
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.values import DEFAULT_MAX_VALUES, ValueIndex

VALUES_PER_COLUMN = DEFAULT_MAX_VALUES
COLUMNS_PER_TABLE = 5
GENERATOR_VERSION = 1
"""In the generated file's name: a change to the generator makes a new file."""

_SYLLABLES = ("ka", "lo", "mi", "ren", "sa", "tu", "vel", "no", "pri", "dan",
              "gor", "li", "mar", "te", "su", "bel", "co", "ria", "fen", "ost")
_WORDS = [a + b + c for a in _SYLLABLES for b in _SYLLABLES for c in _SYLLABLES]  # 8000


def value(i: int, column: int) -> str:
    """The ``i``-th value of a column: distinct for every ``i`` below 64 million.

    The second word is word ``i % 8000`` and the first is shifted by ``i // 8000``, so each
    pair (first, second) comes from one ``i`` only; one value in three has a third word.

    >>> value(0, 0), value(1, 0), value(8000, 0)
    ('Kakaka kakaka kakaka', 'Ostbelost kakalo', 'Kakalo kakaka')
    >>> len({value(i, 0) for i in range(100_000)})
    100000
    """
    a, b = divmod(i, len(_WORDS))
    second = _WORDS[(b + 37 * column) % len(_WORDS)]
    first = _WORDS[(a + b * 7919 + column * 101) % len(_WORDS)].capitalize()
    return f"{first} {second}" if i % 3 else f"{first} {second} {_WORDS[(i + column) % 997]}"


def database(values: int, folder: Path | None = None) -> Path:
    """The generated database of ``values`` distinct values, made once and kept in ``folder``."""
    folder = folder or Path(os.environ.get("SQLCHORUS_BENCH_CACHE")
                            or Path(tempfile.gettempdir()) / "sqlchorus-bench")
    path = folder / f"cluster_index-v{GENERATOR_VERSION}-{values}.sqlite"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + f".{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    conn = sqlite3.connect(partial)
    try:
        column = 0
        remaining = values
        for table in range(-(-values // (VALUES_PER_COLUMN * COLUMNS_PER_TABLE))):
            width = min(COLUMNS_PER_TABLE, -(-remaining // VALUES_PER_COLUMN))
            rows = min(VALUES_PER_COLUMN, remaining)
            names = [f"c{j}" for j in range(width)]
            conn.execute(f"CREATE TABLE t{table} (id INTEGER PRIMARY KEY, "
                         f"{', '.join(n + ' TEXT' for n in names)})")
            # The last column of the last table may be shorter: NULL past its values.
            counts = [min(rows, max(0, remaining - j * rows)) for j in range(width)]
            conn.executemany(
                f"INSERT INTO t{table} ({', '.join(names)}) VALUES ({', '.join('?' * width)})",
                ([value(i, column + j) if i < counts[j] else None for j in range(width)]
                 for i in range(rows)))
            column += width
            remaining -= sum(counts)
        conn.commit()
    finally:
        conn.close()
    os.replace(partial, path)
    return path


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def measure(values: int, workers: list[int]) -> dict[str, Any]:
    """Build the index of the generated database of ``values`` values locally, then on a local
    Ray cluster of each worker count; the seconds of each and whether the files are identical."""
    started = time.perf_counter()
    path = database(values)
    figures: dict[str, Any] = {
        "values_requested": values,
        "database_mb": round(path.stat().st_size / 1e6, 1),
        "database_ready_s": round(time.perf_counter() - started, 2),
    }
    with tempfile.TemporaryDirectory(prefix="sqlchorus-cluster-index-") as tmp, \
            GuardedDatabase(path, prestart=False) as db:
        with ValueIndex.build(db, cache_dir=Path(tmp) / "local") as local:
            figures.update(values=local.stats["values"], columns=local.stats["columns"],
                           index_mb=round(local.stats["bytes_on_disk"] / 1e6, 1),
                           local_s=local.stats["build_seconds"])
            expected = _digest(local.path)
            local.path.unlink()  # a 10M-value index is a gigabyte or more
        runs = []
        for count in workers:
            start = time.perf_counter()
            with cluster("local", cpus=count) as info:
                up = time.perf_counter() - start
                with ValueIndex.build(db, cache_dir=Path(tmp) / f"ray{count}",
                                      parts=cluster_parts(db)) as built:
                    seconds = built.stats["build_seconds"]
                    runs.append({"workers": count, "cluster_cpus": info.cpus,
                                 "cluster_start_s": round(up, 2), "build_s": seconds,
                                 "speedup": round(figures["local_s"] / seconds, 2),
                                 "identical": _digest(built.path) == expected})
                    built.path.unlink()
        figures["cluster"] = runs
        figures["identical"] = all(r["identical"] for r in runs)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=10_000_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    args = parser.parse_args(argv)
    load = round(os.getloadavg()[0], 2)
    figures = measure(args.values, args.workers)
    print(json.dumps({
        "benchmark": "cluster_index",
        "cpus": os.cpu_count(),
        "load_average_1m_before": load,
        "load_average_1m_after": round(os.getloadavg()[0], 2),
        "python": sys.version.split()[0],
        **figures,
    }))
    return 0 if figures["identical"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
