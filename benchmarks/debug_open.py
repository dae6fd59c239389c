"""The time from `sqlchorus debug --run ID` to its prompt, and what a debugger's step costs.

Asks the first Spider dev question of ``concert_singer`` with a zero-latency scripted model
(checkpoints on), then:

* starts ``python -m sqlchorus debug --run PREFIX --commands -`` N times, with no model (the
  run's kept answers serve it) and the first 20 characters of the run's id, with the single
  command ``quit``, and takes the wall time of the whole process (interpreter start, imports,
  opening the checkpoint file and the database, the first state shown): ``open_seconds_median``;
* in-process, ``Debugger.open`` alone (``open_ms_median``), and a new run stepped node by node to
  its end (``step_ms_median``, per step).

Prints one JSON line.

    python benchmarks/debug_open.py [--repeat 10]
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
from pathlib import Path

import sqlchorus
from sqlchorus.runs.debugger import Debugger

FACTORY = '''
import json
from sqlchorus.testing import oracle_model

GOLD = json.loads({gold!r})


def oracle():
    return oracle_model(GOLD.get, name="scripted-zero-latency")
'''


def data_dir() -> Path:
    default = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    return Path(os.environ.get("SQLCHORUS_DATA", default))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)
    spider = data_dir() / "spider"
    example = next(ex for ex in json.loads((spider / "dev.json").read_text(encoding="utf-8")) if ex["db_id"] == "concert_singer")
    db = spider / "database" / "concert_singer" / "concert_singer.sqlite"
    folder = Path(tempfile.mkdtemp(prefix="sqlchorus-debug-"))
    (folder / "bench_models.py").write_text(FACTORY.format(gold=json.dumps({example["question"]: example["query"]})),
                                            encoding="utf-8")
    sys.path.insert(0, str(folder))
    import bench_models

    settings = sqlchorus.Settings(model=bench_models.oracle(), trace_dir=str(folder / "traces"))
    with sqlchorus.Session(settings) as session:
        run_id = session.ask(example["question"], db=db).run_id
        opened, steps = [], []
        for _ in range(args.repeat):
            started = time.perf_counter()
            Debugger.open(run_id, session=session).close()
            opened.append((time.perf_counter() - started) * 1000.0)
        debugger = Debugger.start(example["question"], db, session=session)
        while not debugger.finished:
            started = time.perf_counter()
            debugger.step()
            steps.append((time.perf_counter() - started) * 1000.0)
        debugger.close()

    env = {**os.environ, "PYTHONPATH": str(folder)}
    env.pop("SQLCHORUS_MODEL", None)
    command = [sys.executable, "-m", "sqlchorus", "debug", "--run", run_id[:20],
               "--trace-dir", str(folder / "traces"), "--commands", "-"]
    process_seconds = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        out = subprocess.run(command, input="quit\n", capture_output=True, text=True, env=env, timeout=300)
        process_seconds.append(time.perf_counter() - started)
        if out.returncode != 0:
            raise SystemExit(f"debug --run failed: {out.stderr}")
    print(json.dumps({
        "benchmark": "debug_open",
        "repeat": args.repeat,
        "open_seconds_median": round(statistics.median(process_seconds), 3),
        "open_seconds_max": round(max(process_seconds), 3),
        "open_seconds_min": round(min(process_seconds), 3),
        "open_ms_median": round(statistics.median(opened), 3),
        "steps": len(steps),
        "step_ms_median": round(statistics.median(steps), 3),
        "python": sys.version.split()[0],
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
