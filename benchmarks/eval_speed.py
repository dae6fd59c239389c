"""Throughput of ``sqlchorus eval`` with a zero-latency model; prints one JSON line.

Runs the first ``--limit`` Spider dev questions (default 200) through
:func:`sqlchorus.evaluation.runs.run_eval` with ``--workers 1`` and ``--workers 2`` (each in a fresh
run folder), using a scripted oracle that answers every question with its gold SQL at once. The
time measured is therefore sqlchorus's own: the graph, the guarded executions, per-question
scoring of every candidate, records, the final scoring of the prediction file and the report.

Each worker count runs in a fresh process, so neither inherits the other's per-database caches
(schema, value index) or compiled graph: each pays what a ``sqlchorus eval`` command pays.
The load average is printed too, since the machine may be shared.

For each worker count it prints ``questions_per_s`` (questions over the whole ``run_eval``
wall time), ``graph_questions_per_s`` (the same without the final scoring and report), the EX
and the questions that were not correct, with whether their gold query returns no rows (the
fixer is asked to repair an empty result; the oracle answers it with the same gold query, so
such questions should still be correct: any that is not is listed here).

    python benchmarks/eval_speed.py [--limit 200] [--workers 1 2] [--no-trace]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sqlchorus.runs.session  # noqa: F401  imported before timing: the figures are the run's, not imports
from sqlchorus.config.settings import Settings
from sqlchorus.evaluation.runs import open_dataset, run_eval, subset
from sqlchorus.testing import oracle_model
from sqlchorus.tools.engines.sqlite import GuardedDatabase


def empty_gold(example) -> bool | None:
    """Whether the gold query returns no rows (None when it fails)."""
    try:
        with GuardedDatabase(example.db_path) as db:
            return not db.execute(example.gold_sql).rows
    except Exception:
        return None


def measure(limit: int, workers: int, trace: bool) -> dict[str, object]:
    """One ``run_eval`` of the first ``limit`` Spider dev questions with ``workers``."""
    dataset = subset(open_dataset("spider-dev"), limit)
    gold: dict[str, str] = {}
    for e in dataset.examples:
        gold.setdefault(e.question, e.gold_sql)
    with tempfile.TemporaryDirectory(prefix="sqlchorus-eval-speed-") as tmp:
        model = oracle_model(gold.get, name="scripted-zero-latency")
        settings = Settings(model=model, cache=False,
                            trace_dir=str(Path(tmp) / "traces") if trace else None)
        start = time.perf_counter()
        run = run_eval(dataset, settings, out_dir=Path(tmp) / "run", workers=workers, progress=False)
        total = time.perf_counter() - start
    s = run.summary
    graph_s = s["run"]["run_wall_s"]
    wrong = [r for r in run.records if r["status"] != "missing_db" and not r["correct"]]
    return {
        "questions": len(dataset.examples),
        "databases": len({e.db_id for e in dataset.examples}),
        "questions_per_s": round(len(dataset.examples) / total, 2),
        "graph_questions_per_s": round(len(dataset.examples) / graph_s, 2) if graph_s else None,
        "wall_s": round(total, 2),
        "scoring_s": s["scoring_elapsed_s"],
        "ex": s["ex"],
        "n_scored": s["n_scored"],
        "n_missing_db": s["n_missing_db"],
        "model_calls": s["cost"]["model_calls"],
        "not_correct": [
            {"question_id": r["question_id"], "status": r["status"], "verdict": r["verdict"],
             "gold_empty": empty_gold(dataset.examples[r["index"]]), "prediction": r["prediction"],
             "error": (r["error"] or "")[:200] or None}
            for r in wrong
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--no-trace", action="store_true", help="write no per-question trace files")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.limit, args.workers[0], not args.no_trace)))
        return 0

    figures: dict[str, object] = {
        "benchmark": "eval_speed",
        "dataset": "spider-dev",
        "limit": args.limit,
        "traces": not args.no_trace,
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "python": sys.version.split()[0],
    }
    for workers in args.workers:
        command = [sys.executable, __file__, "--child", "--limit", str(args.limit),
                   "--workers", str(workers)] + (["--no-trace"] if args.no_trace else [])
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        figures[f"workers_{workers}"] = json.loads(out.strip().splitlines()[-1])
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
