"""Time sqlchorus spends outside model calls, per question and per node.

Runs the first N Spider dev questions (default 100) through one ``sqlchorus.Session`` (as
evaluation does: models, cache and each database's schema and value index built once) with a
scripted model that answers instantly (each question with its gold SQL), collects every span in
memory,
and reports, per question, the wall time of the run minus the time inside model calls; per node,
the node spans' time minus their model-call children. ``setup`` is the run's time outside any
node (opening the database, introspection, value lookup tables on first use of a database).

Prints one JSON line: ``median_ms``, ``p95_ms``, ``mean_ms`` and ``by_node`` (median and p95 per
node, per question), with the number of questions and databases; and ``checkpoints``: the same
questions run first with checkpoints off as the baseline, the time checkpoints add per question
and per checkpoint, the bytes each run's checkpoints take, and each run replayed from its first
checkpoint with a model that raises if called (time, model calls, answers).

    python benchmarks/overhead.py [--limit 100] [--trace-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sqlchorus
from sqlchorus.config.settings import Settings
from sqlchorus.testing import ScriptedChatModel, oracle_model


def data_dir() -> Path:
    default = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    return Path(os.environ.get("SQLCHORUS_DATA", default))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def ms(span) -> float:
    return (span.end_time - span.start_time) / 1e6


def measure(chosen: list[dict], root: Path, settings: Settings) -> dict[str, Any]:
    """Run every question once through one session; time outside model calls, by node."""
    outside: list[float] = []
    by_node: dict[str, list[float]] = defaultdict(list)
    runs: list[tuple[str, int]] = []
    answered = 0
    session = sqlchorus.Session(settings)
    for ex in chosen:
        exporter = InMemorySpanExporter()
        db = root / "database" / ex["db_id"] / f"{ex['db_id']}.sqlite"
        result = session.ask(ex["question"], db=db, exporters=[exporter])
        answered += result.ok
        runs.append((result.run_id, len(result.usage)))
        spans = exporter.get_finished_spans()
        by_id = {s.context.span_id: s for s in spans}
        llm_ms = sum(ms(s) for s in spans if s.attributes.get("gen_ai.operation.name") == "chat")
        # Wall time of the whole call, not only the run span: opening the database counts too.
        outside.append(result.seconds * 1000.0 - llm_ms)
        per_question: dict[str, float] = defaultdict(float)
        for span in spans:
            if span.name.startswith("node:"):
                per_question[span.name[5:]] += ms(span)
        for span in spans:
            if span.attributes.get("gen_ai.operation.name") == "chat" and span.parent is not None:
                parent = by_id.get(span.parent.span_id)
                if parent is not None and parent.name.startswith("node:"):
                    per_question[parent.name[5:]] -= ms(span)
        nodes_ms = sum(ms(s) for s in spans if s.name.startswith("node:"))
        per_question["setup"] = result.seconds * 1000.0 - nodes_ms
        for node, value in per_question.items():
            by_node[node].append(value)
    return {"outside": outside, "by_node": by_node, "answered": answered, "runs": runs, "session": session}


def _refusing_model():
    def refuse(messages):
        raise RuntimeError("a replay of an unedited run must not call the model")

    return ScriptedChatModel(refuse, name="refuses")


def checkpoint_figures(off: dict[str, Any], on: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """What checkpoints cost: time per question and per checkpoint, bytes per run; and what a
    whole run's replay from its first checkpoint takes."""
    session = on["session"]
    store = session.checkpoints()
    per_run_bytes, per_run_checkpoints = [], []
    for run_id, _ in on["runs"]:
        per_run_bytes.append(store.bytes_of(run_id))
        per_run_checkpoints.append(len(list(store.list({"configurable": {"thread_id": run_id}}))))
    extra = [b - a for a, b in zip(off["outside"], on["outside"])]
    replayer = sqlchorus.Session(settings.replace(model=_refusing_model()))
    replay_ms, replay_calls, replay_same = [], [], 0
    for (run_id, _), original in zip(on["runs"], on["outside"]):
        started = time.perf_counter()
        result = replayer.replay(run_id)
        replay_ms.append((time.perf_counter() - started) * 1000.0)
        replay_calls.append(sum(1 for u in result.usage if not u.get("replayed")))
        replay_same += result.ok
    replayer.close()
    return {
        "median_ms_off": round(statistics.median(off["outside"]), 3),
        "median_ms_on": round(statistics.median(on["outside"]), 3),
        "added_ms_per_question_median": round(statistics.median(extra), 3),
        "checkpoints_per_run_median": statistics.median(per_run_checkpoints),
        "added_ms_per_checkpoint_median": round(statistics.median(
            [e / max(n, 1) for e, n in zip(extra, per_run_checkpoints)]), 3),
        "bytes_per_run_median": statistics.median(per_run_bytes),
        "bytes_per_run_max": max(per_run_bytes),
        "replay_ms_median": round(statistics.median(replay_ms), 3),
        "replay_ms_p95": round(percentile(replay_ms, 0.95), 3),
        "replay_model_calls": sum(replay_calls),
        "replayed_answers": replay_same,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--trace-dir", help="write trace files here (default: a temporary folder)")
    args = parser.parse_args(argv)

    root = data_dir() / "spider"
    examples = json.loads((root / "dev.json").read_text(encoding="utf-8"))
    runnable = [ex for ex in examples if (root / "database" / ex["db_id"] / f"{ex['db_id']}.sqlite").exists()]
    chosen = runnable[: args.limit]
    gold = {}
    for ex in chosen:
        gold.setdefault(ex["question"], ex["query"])
    model = oracle_model(gold.get, name="scripted-zero-latency")
    trace_dir = args.trace_dir or tempfile.mkdtemp(prefix="sqlchorus-overhead-")
    settings = Settings(model=model, trace_dir=trace_dir)

    start_all = time.perf_counter()
    # The same questions without checkpoints first, as the baseline of what they cost.
    off = measure(chosen, root, settings.replace(checkpoints=None))
    off["session"].close()
    on = measure(chosen, root, settings)
    checkpoints = checkpoint_figures(off, on, settings)
    on["session"].close()
    total = time.perf_counter() - start_all
    outside, by_node = on["outside"], on["by_node"]

    figures = {
        "benchmark": "overhead",
        "questions": len(chosen),
        "databases": len({ex["db_id"] for ex in chosen}),
        "answered": on["answered"],
        "median_ms": round(statistics.median(outside), 3),
        "p95_ms": round(percentile(outside, 0.95), 3),
        "mean_ms": round(statistics.fmean(outside), 3),
        "by_node": {
            node: {"median_ms": round(statistics.median(v), 3), "p95_ms": round(percentile(v, 0.95), 3)}
            for node, v in sorted(by_node.items())
        },
        "checkpoints": checkpoints,
        "total_seconds": round(total, 2),
        "python": sys.version.split()[0],
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
