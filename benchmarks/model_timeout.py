"""How close to its time limit a model call ends: ``sqlchorus demo --model-timeout T`` run again and
again, optionally beside CPU-bound processes.

Each run is ``sqlchorus demo --model-timeout T --no-cache`` in a folder of its own, with the
offline model (local:smollm2) unless ``--model`` names another. Its trace is read back, and for
every model call (a ``chat ...`` span) the benchmark takes:

* ``call_s``: the call's time from its clock's start to its end, the span's duration less the
  time the call waited before its clock started (``sqlchorus.model.ready_s``: loading the weights
  on the first call, another call that had the model);
* ``span_s``: the span's whole duration, loading included;
* whether it answered or was stopped.

Prints one JSON line: the runs, calls answered and stopped, the largest ``call_s`` and how far it
went past T (``max_over_limit_s``), the largest ``span_s`` and ``ready_s``, the largest wall time
of a whole demo run, the exit codes seen, and the number of CPU-bound processes beside.

Run: ``.venv/bin/python benchmarks/model_timeout.py [--runs 20] [--timeout 2] [--load 2]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlchorus.core.trace_file import SpanNode, load_spans
from sqlchorus.tools.tracing import attributes as attrs

BURN_LIMIT_S = 3600.0  # a burner that outlives its benchmark stops by itself


def _burn(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _spans(nodes: list[SpanNode]) -> list[SpanNode]:
    return [span for node in nodes for span in (node, *_spans(node.children))]


def model_calls(trace: Path) -> list[dict[str, Any]]:
    """The model calls of one trace file: clock time, span time, waiting time, stopped or not."""
    calls = []
    for span in _spans(load_spans(trace)):
        if not span.name.startswith("chat "):
            continue
        span_s = span.ms / 1000.0
        ready_s = float(span.attributes.get(attrs.SQLCHORUS_MODEL_READY_S, 0.0))
        calls.append({
            "span_s": span_s, "ready_s": ready_s, "call_s": span_s - ready_s,
            "stopped": "no answer within" in str(span.attributes.get(attrs.SQLCHORUS_ERROR, "")),
        })
    return calls


def run_once(timeout_s: float, model: str | None, folder: Path) -> tuple[int, float, list[dict[str, Any]]]:
    command = [sys.executable, "-m", "sqlchorus", "demo", "--model-timeout", f"{timeout_s:g}", "--no-cache",
               "--trace-dir", str(folder / "traces")]
    if model:
        command += ["--model", model]
    start = time.monotonic()
    out = subprocess.run(command, capture_output=True, text=True, cwd=folder, timeout=timeout_s * 10 + 300)
    wall = time.monotonic() - start
    traces = sorted((folder / "traces").glob("*.jsonl"))
    if not traces:
        raise RuntimeError(f"the demo left no trace (exit {out.returncode}): {out.stderr[-1000:]}")
    return out.returncode, wall, model_calls(traces[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=2.0, help="the demo's --model-timeout")
    parser.add_argument("--load", type=int, default=0, help="CPU-bound processes to run beside")
    parser.add_argument("--model", default=None, help="the demo's --model (default: local:smollm2)")
    args = parser.parse_args()

    burners = [multiprocessing.Process(target=_burn, args=(BURN_LIMIT_S,), daemon=True) for _ in range(args.load)]
    for burner in burners:
        burner.start()
    codes: dict[int, int] = {}
    walls: list[float] = []
    calls: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="sqlchorus-timeout-") as tmp:
            for number in range(args.runs):
                folder = Path(tmp) / f"run{number}"
                folder.mkdir()
                code, wall, run_calls = run_once(args.timeout, args.model, folder)
                codes[code] = codes.get(code, 0) + 1
                walls.append(wall)
                calls.extend(run_calls)
    finally:
        for burner in burners:
            burner.terminate()
            burner.join()
    if not calls:
        raise SystemExit("no model call was traced")
    largest = max(call["call_s"] for call in calls)
    print(json.dumps({
        "benchmark": "model_timeout",
        "runs": args.runs,
        "limit_s": args.timeout,
        "load_processes": args.load,
        "calls": len(calls),
        "stopped": sum(call["stopped"] for call in calls),
        "answered": sum(not call["stopped"] for call in calls),
        "max_call_s": round(largest, 3),
        "max_over_limit_s": round(largest - args.timeout, 3),
        "max_span_s": round(max(call["span_s"] for call in calls), 3),
        "max_ready_s": round(max(call["ready_s"] for call in calls), 3),
        "max_run_wall_s": round(max(walls), 3),
        "exit_codes": {str(code): count for code, count in sorted(codes.items())},
    }))


if __name__ == "__main__":
    main()
