"""Evaluation throughput on Ray workers against threads of one process, and a large index; one JSON line.

A scripted model answers like an API: every call takes ``--latency`` seconds (0.5 by default) and
answers with the gold SQL of Spider dev's question. The same ``--questions`` questions are
evaluated, in the same run:

- ``threads``: ``sqlchorus eval --workers K`` (K questions at a time in threads of this process);
- ``ray``: ``sqlchorus eval --ray local --workers K`` (K Ray workers, one Session each, on a
  cluster started here with K logical CPUs; starting it is timed apart);
- ``ray_limited``: the largest K on Ray with a cluster-wide limit of ``--rpm`` requests per minute
  on the model, which then bounds the throughput at about rpm / (calls per question).

for each K of ``--workers`` (1 2 4 8). Each figure is questions per minute over the questions'
own wall time (what the progress line's rate shows). Then, unless ``--no-index``, the value index
of a database of ``--index-values`` distinct values (10 million), built locally and on the
cluster (``benchmarks/cluster_index.py``'s :func:`measure`).

    python benchmarks/cluster.py [--questions 32] [--latency 0.5] [--workers 1 2 4 8] [--rpm 60]

Every question's records are compared between the runs: the benchmark says whether they agree.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sqlchorus.cluster.connect import cluster  # noqa: E402
from sqlchorus.cluster.eval import cluster_runner  # noqa: E402
from sqlchorus.cluster.limiter import shared_limiter  # noqa: E402
from sqlchorus.cluster.workers import Pool  # noqa: E402
from sqlchorus.config.settings import Settings  # noqa: E402
from sqlchorus.evaluation.runs import open_dataset, read_records, run_eval, subset  # noqa: E402

FACTORY = '''
import json, os, time
from sqlchorus.testing import oracle_model, ScriptedChatModel


def slow_oracle():
    """The gold SQL of each question, each call taking $BENCH_LATENCY seconds, as an API would."""
    with open(os.environ["BENCH_ANSWERS"], encoding="utf-8") as f:
        table = json.load(f)
    latency = float(os.environ["BENCH_LATENCY"])
    model = oracle_model(table.get, name="slow-oracle")

    class Slow(type(model)):
        def _generate(self, *args, **kwargs):
            time.sleep(latency)
            return super()._generate(*args, **kwargs)

    model.__class__ = Slow
    return model
'''

VOLATILE = {"run_id", "seconds", "model_seconds", "trace_path", "checkpoint_path"}


def _settings(folder: Path) -> Settings:
    return Settings(model="python:bench_cluster_models:slow_oracle", trace_dir=None, cache=False)


def _records(path: Path) -> dict[int, dict[str, Any]]:
    return {i: {k: v for k, v in r.items() if k not in VOLATILE} for i, r in read_records(path).items()}


def _rate(run: Any) -> float:
    wall = run.summary["run"]["run_wall_s"]
    return round(60.0 * run.summary["run"]["n_run"] / wall, 2) if wall else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--rpm", type=float, default=60.0)
    parser.add_argument("--index-values", type=int, default=10_000_000)
    parser.add_argument("--index-workers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--no-index", action="store_true")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="sqlchorus-cluster-bench-"))
    data = subset(open_dataset("spider-dev"), args.questions)
    answers: dict[str, str] = {}
    for e in data.examples:
        answers.setdefault(e.question, e.gold_sql)
    (work / "answers.json").write_text(json.dumps(answers), encoding="utf-8")
    (work / "bench_cluster_models.py").write_text(FACTORY, encoding="utf-8")
    os.environ.update(BENCH_ANSWERS=str(work / "answers.json"), BENCH_LATENCY=str(args.latency))
    sys.path.insert(0, str(work))
    os.chdir(work)  # the workers import the model's module from the command's folder
    settings = _settings(work)
    dbs = [e.db_path for e in data.examples if e.db_path is not None]
    out: dict[str, Any] = {"benchmark": "cluster", "questions": len(data.examples), "latency_s": args.latency,
                           "cpus": os.cpu_count(), "load_avg": os.getloadavg()[0]}

    threads: dict[str, float] = {}
    reference = None
    for k in args.workers:
        run = run_eval(data, settings, out_dir=work / f"threads-{k}", workers=k, progress=False, resume=False)
        threads[str(k)] = _rate(run)
        reference = reference or _records(work / f"threads-{k}" / "records.jsonl")
        calls = run.summary.get("model_calls") or sum(r.get("model_calls", 0) for r in run.records)
    out["calls_per_question"] = round(calls / len(data.examples), 2)
    out["threads_qpm"] = threads

    ray_rates: dict[str, float] = {}
    same = True
    started = time.perf_counter()
    with cluster("local", cpus=max(args.workers)):
        out["ray_start_s"] = round(time.perf_counter() - started, 2)
        for k in args.workers:
            with Pool(settings, k) as pool:
                pool.start(dbs)
                run = run_eval(data, settings, out_dir=work / f"ray-{k}", workers=k, progress=False, resume=False,
                               runner=cluster_runner(pool, settings))
            ray_rates[str(k)] = _rate(run)
            same = same and _records(work / f"ray-{k}" / "records.jsonl") == reference
        k = max(args.workers)
        limited = settings.replace(model_limits={"python:bench_cluster_models:slow_oracle": f"{args.rpm:g}rpm"})
        limiter = shared_limiter(limited.model_limits)
        with Pool(limited, k, limiter=limiter) as pool:
            pool.start(dbs)
            run = run_eval(data, limited, out_dir=work / "ray-limited", workers=k, progress=False, resume=False,
                           runner=cluster_runner(pool, limited, limiter))
        out["ray_limited"] = {"workers": k, "rpm": args.rpm, "qpm": _rate(run),
                              "bound_qpm": round(args.rpm / out["calls_per_question"], 2),
                              "waited_s": round(limiter.waited()["seconds"], 1)}
        same = same and _records(work / "ray-limited" / "records.jsonl") == reference
    out["ray_qpm"] = ray_rates
    out["ray_over_threads"] = {k: round(ray_rates[k] / threads[k], 2) for k in ray_rates if threads.get(k)}
    out["records_agree"] = same
    if not args.no_index:
        import cluster_index

        out["index"] = cluster_index.measure(args.index_values, args.index_workers)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
