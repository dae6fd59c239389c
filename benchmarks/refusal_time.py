"""How long the command line takes to refuse input that cannot run.

Each bad input is given to ``sqlchorus ask`` in a fresh process (``python -m sqlchorus``, as a
user's shell starts it) ``--repeat`` times; the wall time from start to exit is measured around
the process. Every case must exit with status 2 and its message, or the benchmark stops.

Prints ONE JSON line: ``repeat``, ``cpus``, and per case its ``median_s``, ``min_s``, ``max_s``,
``exit`` and the first line of the message.

    python benchmarks/refusal_time.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CASES = {
    "missing database": (["ask", "How many?", "--db", "/no/such/shop.sqlite", "--model", "openai:gpt-4o-mini"],
                         "No database at /no/such/shop.sqlite"),
    "empty question": (["ask", "   ", "--model", "openai:gpt-4o-mini"], "The question is empty"),
    "over-long question": (["ask", "x" * 9000, "--model", "openai:gpt-4o-mini"], "the limit is 8,000"),
    "unknown preset": (["ask", "How many?", "--preset", "nosuch", "--model", "openai:gpt-4o-mini"], "Unknown preset"),
    "unknown model provider": (["ask", "How many?", "--model", "nosuch:foo"], "names an unknown provider 'nosuch'"),
    "model name without a model": (["ask", "How many?", "--model", "openai:"], "is not of the form 'provider:model'"),
}


def _time(args: list[str], env: dict[str, str], cwd: str) -> tuple[float, int, str]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sqlchorus", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)
    took = time.perf_counter() - start
    return took, done.returncode, (done.stderr.strip().splitlines() or [""])[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="Runs of each case (the median is reported).")
    args = parser.parse_args(argv)
    # No model or settings from the caller's environment: each case is refused for its own reason.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLCHORUS_")}
    out: dict[str, object] = {"repeat": args.repeat, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as cwd:
        _time(["--version"], env, cwd)  # the interpreter and package files read once, as a shell's second command
        for name, (case, said) in CASES.items():
            times = []
            for _ in range(args.repeat):
                took, code, line = _time(case, env, cwd)
                if code != 2 or said not in line:
                    print(f"{name}: exit {code}, {line!r}; expected exit 2 and {said!r}", file=sys.stderr)
                    return 1
                times.append(took)
            out[name] = {"median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3),
                         "max_s": round(max(times), 3), "exit": 2, "message": line[:100]}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
