"""What a trace's content costs: bytes of a trace file and milliseconds per question, by mode.

Runs the first N Spider dev questions (default 30) with the ``full`` preset (every generator,
pairwise selection) through one ``sqlchorus.Session`` per mode of ``--trace-content``, with a
scripted model that answers each question with its gold SQL at once, writing each run's trace
file. The modes run in turn on the same questions, in the same process, after one warm-up pass
(databases, value indexes and the graph built once), so the figures compare like with like.
``none`` writes what traces held before content was added; ``metadata`` and ``all`` add to it.

Prints one JSON line: per mode, the median and total bytes of a run's trace file, the median
and p95 milliseconds per question, and ``all``'s and ``metadata``'s extra milliseconds and bytes
against ``none``.

    python benchmarks/trace_content.py [--limit 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlchorus
from sqlchorus.config.settings import Settings
from sqlchorus.testing import oracle_model

MODES = ("none", "metadata", "all")


def data_dir() -> Path:
    default = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    return Path(os.environ.get("SQLCHORUS_DATA", default))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def run_mode(mode: str, chosen: list[dict], root: Path, folder: Path) -> dict[str, Any]:
    gold = {ex["question"]: ex["query"] for ex in chosen}
    settings = Settings(model=oracle_model(gold.get), preset="full", trace_dir=str(folder), checkpoints=None,
                        cache=False, trace_content=mode)
    seconds: list[float] = []
    sizes: list[int] = []
    answered = 0
    with sqlchorus.Session(settings) as session:
        for ex in chosen:
            db = root / "database" / ex["db_id"] / f"{ex['db_id']}.sqlite"
            start = time.perf_counter()
            result = session.ask(ex["question"], db)
            seconds.append((time.perf_counter() - start) * 1000.0)
            answered += result.ok
            if result.trace_path:
                sizes.append(Path(result.trace_path).stat().st_size)
    return {
        "answered": answered,
        "median_bytes": int(statistics.median(sizes)) if sizes else 0,
        "total_bytes": sum(sizes),
        "median_ms": round(statistics.median(seconds), 2),
        "p95_ms": round(percentile(seconds, 0.95), 2),
        "_seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=30)
    args = parser.parse_args()
    root = data_dir() / "spider"
    if not (root / "dev.json").exists():
        sys.exit(f"No Spider dev set at {root}: set SQLCHORUS_DATA.")
    chosen = json.loads((root / "dev.json").read_text(encoding="utf-8"))[: args.limit]
    with tempfile.TemporaryDirectory() as tmp:
        run_mode("none", chosen, root, Path(tmp) / "warm-up")  # builds what every mode shares
        results = {mode: run_mode(mode, chosen, root, Path(tmp) / mode) for mode in MODES}
    base = results["none"]["_seconds"]
    out: dict[str, Any] = {"benchmark": "trace_content", "questions": len(chosen), "preset": "full"}
    for mode, figures in results.items():
        own = figures.pop("_seconds")
        if mode != "none":
            figures["extra_ms_median"] = round(statistics.median(a - b for a, b in zip(own, base)), 2)
            figures["extra_bytes_median"] = figures["median_bytes"] - results["none"]["median_bytes"]
        out[mode] = figures
    print(json.dumps(out))


if __name__ == "__main__":
    main()
