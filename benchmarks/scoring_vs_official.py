"""`sqlchorus eval --predictions` against the official Spider test-suite evaluator; one JSON line.

Both are timed end to end as whole processes (wall clock, the way a shell runs them) on the same
Spider dev prediction files, in the same run, alternating, ``--runs`` times each; the medians and
their ratio are reported. The files, each 1,034 predictions:

* ``gold``: the gold SQL as the prediction;
* ``breakage``: the ``breakage`` file of ``benchmarks/scoring.py`` (question i, by ``i % 4``: a
  missing table, ORDER BY flipped, LIMIT removed, or the gold unchanged).

The official evaluator is ``evaluation.py --etype exec`` of taoyds/test-suite-sql-eval (default
flags: values are not plugged in, DISTINCT is removed), run from the checkout given with
``--official DIR`` by ``--official-python`` (a Python with its dependencies, nltk and sqlparse).
Its per-question verdicts come from one more, untimed, run of the same script in which
``exec_eval.eval_exec_match`` records what it returns; sqlchorus's from one untimed run with
``--out``. The two lists must be equal (``agree``), and the official run's printed accuracy must
be the share of its recorded verdicts.

The data folder is built in a temporary folder from ``SQLCHORUS_DATA``'s Spider dev: a database
missing there (``wta_1`` in the shared data) is made schema-only from ``tables.json``, since the
official evaluator stops on a missing database; both tools read the same folder. nltk's
``punkt_tab`` tables (the evaluator tokenizes SQL with them) are used when nltk finds them; when
it does not, empty ones are written and the output says ``"punkt_tab": "parameter-free"``: the
evaluator tokenizes SQL with its string literals taken out, where the sentence tables change
nothing, and execution verdicts never read the tokens.

Also measured: the CLI's start-up, ``python -m sqlchorus --help`` (median of ``--startup-runs``),
beside a bare ``python -c pass``.

Nothing is cached between runs: every run reads the files, opens the databases and executes both
queries of every question.

Run: ``.venv/bin/python benchmarks/scoring_vs_official.py --official /path/to/test-suite-sql-eval
--official-python /path/to/python [--runs 5] [--workers 2]``. Without ``--official`` (or with a
folder that has no ``evaluation.py``), the script says so and measures sqlchorus alone.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scoring import perturb_breakage  # noqa: E402

from sqlchorus.evaluation.datasets import data_dir  # noqa: E402
from sqlchorus.evaluation.scoring import write_spider_predictions  # noqa: E402
from sqlchorus.tools.schema.introspect import schema_only_database  # noqa: E402

RECORDER = r"""
import json, runpy, sys
sys.path.insert(0, sys.argv[1])
import exec_eval
verdicts = []
official = exec_eval.eval_exec_match
def recorded(*args, **kwargs):
    result = official(*args, **kwargs)
    verdicts.append(int(result))
    return result
exec_eval.eval_exec_match = recorded
out = sys.argv[2]
sys.argv = [sys.argv[1] + "/evaluation.py"] + sys.argv[3:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    with open(out, "w") as f:
        json.dump(verdicts, f)
"""


def build_data(folder: Path) -> tuple[Path, list[str]]:
    """A Spider data folder whose dev databases all exist (missing ones made schema-only)."""
    source = data_dir() / "spider"
    spider = folder / "spider"
    (spider / "database").mkdir(parents=True)
    for name in ("dev.json", "dev_gold.sql", "tables.json"):
        (spider / name).symlink_to(source / name)
    tables = {t["db_id"]: t for t in json.loads((source / "tables.json").read_text(encoding="utf-8"))}
    db_ids = sorted({row["db_id"] for row in json.loads((source / "dev.json").read_text(encoding="utf-8"))})
    made = []
    for db_id in db_ids:
        real = source / "database" / db_id / f"{db_id}.sqlite"
        if real.is_file():
            (spider / "database" / db_id).symlink_to(real.parent, target_is_directory=True)
        else:
            schema_only_database(tables[db_id], spider / "database" / db_id / f"{db_id}.sqlite")
            made.append(db_id)
    return spider, made


def punkt_env(python: str, folder: Path) -> tuple[dict[str, str], str]:
    probe = "import nltk; nltk.data.find('tokenizers/punkt_tab/english/')"
    if subprocess.run([python, "-c", probe], capture_output=True).returncode == 0:
        return dict(os.environ), "nltk"
    english = folder / "nltk_data" / "tokenizers" / "punkt_tab" / "english"
    english.mkdir(parents=True)
    for name in ("collocations.tab", "sent_starters.txt", "abbrev_types.txt", "ortho_context.tab"):
        (english / name).write_text("", encoding="utf-8")
    return {**os.environ, "NLTK_DATA": str(folder / "nltk_data")}, "parameter-free"


def timed(command: list[str], env: dict[str, str], cwd: str | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds, done.stdout


def official_accuracy(stdout: str) -> float:
    for line in stdout.splitlines():
        if line.startswith("execution"):
            return float(line.split()[-1])
    raise SystemExit("the official evaluator printed no execution accuracy")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--official", type=Path, help="checkout of taoyds/test-suite-sql-eval")
    parser.add_argument("--official-python", default=sys.executable, help="Python with nltk and sqlparse")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each tool on each file")
    parser.add_argument("--workers", type=int, default=1, help="sqlchorus eval --workers")
    parser.add_argument("--startup-runs", type=int, default=10, help="runs of python -m sqlchorus --help")
    args = parser.parse_args(argv)

    official = args.official
    if official is None or not (official / "evaluation.py").is_file():
        print(f"The official evaluator is absent ({official or 'no --official given'}): no evaluation.py "
              "there. Measuring sqlchorus alone.", file=sys.stderr)
        official = None

    with tempfile.TemporaryDirectory(prefix="sqlchorus-vs-official-") as tmp:
        folder = Path(tmp)
        spider, made = build_data(folder / "data")
        env = {**os.environ, "SQLCHORUS_DATA": str(folder / "data")}
        gold_lines = [ln for ln in (spider / "dev_gold.sql").read_text(encoding="utf-8").splitlines() if ln.strip()]
        gold_sql = [ln.split("\t")[0] for ln in gold_lines]
        files = {"gold": folder / "gold.txt", "breakage": folder / "breakage.txt"}
        write_spider_predictions(files["gold"], gold_sql)
        write_spider_predictions(files["breakage"], [perturb_breakage(i, s) for i, s in enumerate(gold_sql)])

        ours = [sys.executable, "-m", "sqlchorus", "eval", "--dataset", "spider-dev", "--json",
                "--workers", str(args.workers), "--predictions"]
        theirs_env, punkt = (punkt_env(args.official_python, folder) if official else (None, None))

        def theirs(pred: Path) -> list[str]:
            return [args.official_python, str(official / "evaluation.py"), "--gold", str(spider / "dev_gold.sql"),
                    "--pred", str(pred), "--db", str(spider / "database"), "--table",
                    str(spider / "tables.json"), "--etype", "exec"]

        figures: dict = {}
        for name, pred in files.items():
            # Per-question verdicts, untimed.
            out_dir = folder / f"out-{name}"
            subprocess.run([*ours, str(pred), "--out", str(out_dir)], env=env, check=True, capture_output=True)
            records = [json.loads(ln) for ln in (out_dir / "records.jsonl").read_text(encoding="utf-8").splitlines()]
            our_verdicts = [int(bool(r["correct"])) for r in records]
            entry: dict = {"n": len(our_verdicts), "sqlchorus_correct": sum(our_verdicts)}
            if official:
                recorded = folder / f"official-{name}.json"
                subprocess.run([args.official_python, "-c", RECORDER, str(official), str(recorded),
                                *theirs(pred)[2:]], env=theirs_env, cwd=official, check=True, capture_output=True)
                their_verdicts = json.loads(recorded.read_text())
                entry["official_correct"] = sum(their_verdicts)
                entry["agree"] = their_verdicts == our_verdicts
                entry["n_disagree"] = sum(a != b for a, b in zip(their_verdicts, our_verdicts)) + abs(
                    len(their_verdicts) - len(our_verdicts))
            figures[name] = entry

        # Timed runs, alternating tools so both see the same machine.
        seconds: dict[str, dict[str, list[float]]] = {n: {"sqlchorus": [], "official": []} for n in files}
        for _ in range(args.runs):
            for name, pred in files.items():
                s, out = timed([*ours, str(pred)], env)
                seconds[name]["sqlchorus"].append(s)
                assert json.loads(out)["n_correct"] == figures[name]["sqlchorus_correct"]
                if official:
                    s, out = timed(theirs(pred), theirs_env, cwd=str(official))
                    seconds[name]["official"].append(s)
                    accuracy = official_accuracy(out)
                    assert abs(accuracy - figures[name]["official_correct"] / figures[name]["n"]) < 0.0006

        for name in files:
            entry = figures[name]
            entry["sqlchorus_s"] = round(statistics.median(seconds[name]["sqlchorus"]), 3)
            entry["sqlchorus_runs_s"] = [round(x, 3) for x in seconds[name]["sqlchorus"]]
            if official:
                entry["official_s"] = round(statistics.median(seconds[name]["official"]), 3)
                entry["official_runs_s"] = [round(x, 3) for x in seconds[name]["official"]]
                entry["ratio"] = round(entry["official_s"] / entry["sqlchorus_s"], 2)

        startup = [timed([sys.executable, "-m", "sqlchorus", "--help"], env)[0] for _ in range(args.startup_runs)]
        bare = [timed([sys.executable, "-c", "pass"], env)[0] for _ in range(args.startup_runs)]

    result = {
        "benchmark": "scoring_vs_official",
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "runs": args.runs,
        "workers": args.workers,
        "official": str(official) if official else None,
        "punkt_tab": punkt,
        "schema_only_databases": made,
        "files": figures,
        "cli_help_s": round(statistics.median(startup), 3),
        "python_pass_s": round(statistics.median(bare), 3),
    }
    if official:
        total_ours = sum(figures[n]["sqlchorus_s"] for n in files)
        total_theirs = sum(figures[n]["official_s"] for n in files)
        result.update(
            official_s=round(total_theirs, 3), sqlchorus_s=round(total_ours, 3),
            ratio=round(total_theirs / total_ours, 2), agree=all(figures[n]["agree"] for n in files),
        )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
