"""`sqlchorus eval --predictions` against BIRD's official EX, Soft-F1 and R-VES scripts; one JSON line.

BIRD's databases are not in the data folder, so Spider dev's serve as BIRD-format input: the
questions whose database exists (972 of 1,034 in the shared data), each with BIRD's difficulty
named from its Spider hardness (easy: simple, medium: moderate, hard and extra: challenging),
written in a temporary folder as the official scripts read them (``dev.jsonl``, a gold file of
``SQL<TAB>db_id`` lines, ``dev_databases/<db>/<db>.sqlite``) and as a sqlchorus dataset file over
the same copies. One prediction file, in BIRD's format, question ``i`` getting by ``i % 6``:

0. a query on a table that does not exist (an error);
1. the gold with its ORDER BY directions flipped, or its LIMIT removed (``benchmarks/scoring.py``'s
   breakage 1 and 2, alternating), right or wrong as the rows fall;
2. the gold with its SELECT items reversed and DISTINCT added (``perturb_columns``): wrong for EX
   wherever the columns differ, while Soft-F1 still finds the cells;
3. the gold, slowed: its rows filtered by a count over a recursive CTE of 200, 600 or 2,000 rows
   (in turn), so it stays correct and earns a lower R-VES tier;
4. and 5. the gold unchanged.

The official scripts are bird-bench/mini_dev's ``evaluation/evaluation_ex.py``, ``evaluation_f1.py``,
``evaluation_ves.py`` and ``evaluation_utils.py``, copied out of ``--official`` (a checkout, or a
bare git directory, read with ``git show``) into the temporary folder, run by ``--official-python``
(a Python with numpy, func_timeout, psycopg2 and pymysql, which ``evaluation_utils`` imports; when
none is given, a virtual environment is made in the temporary folder and those four installed with
pip) with ``--num_cpus`` set to ``--workers``. Each official run goes through a small wrapper that
runs the script unchanged (``runpy``) and then writes the per-question results it collected, so the
timed runs also give the per-question figures. sqlchorus is ``python -m sqlchorus eval --dataset
FILE --predictions FILE --workers N --metrics M --out DIR --json``, as a whole process too.

Reported per metric: both figures, whether they are identical (EX and Soft-F1: every question's
figure, and the totals as printed), and both end-to-end wall times (median) with their ratio. For
R-VES, whose figure depends on timings, the official script runs ``--runs`` times (default 3) and
sqlchorus as often, alternating, so both see the same machine: each run's R-VES, the official
runs' spread (max - min), whether sqlchorus's median lies within the official runs' range
widened by that spread on each side (``within_spread``), the mean timings sqlchorus took per
correct prediction, and how often a question gets the same reward from two official runs and
from sqlchorus and an official run. Also: all three metrics in one sqlchorus run against the
three official scripts run one after the other.

Run: ``.venv/bin/python benchmarks/bird_metrics.py --official /path/to/mini_dev [--official-python PY]
[--runs 3] [--workers 2]``.
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

from scoring import perturb_breakage, perturb_columns  # noqa: E402

from sqlchorus.evaluation.datasets import load_dataset  # noqa: E402
from sqlchorus.evaluation.scoring import one_line, write_bird_predictions  # noqa: E402

OFFICIAL_FILES = ("evaluation_ex.py", "evaluation_f1.py", "evaluation_ves.py", "evaluation_utils.py")
OFFICIAL_PACKAGES = ("numpy", "func_timeout", "psycopg2-binary", "pymysql")
LEVELS = {"easy": "simple", "medium": "moderate", "hard": "challenging", "extra": "challenging"}
SLOW_ROWS = (200, 600, 2000)

# Runs an official script unchanged and writes, afterwards, the per-question results it sorted
# into its module-level ``exec_result``: ``res`` for EX and Soft-F1, ``reward`` for R-VES.
RECORDER = r"""
import json, runpy, sys
folder, out, script = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, folder)
sys.argv = [script] + sys.argv[4:]
found = runpy.run_path(script, run_name="__main__")
with open(out, "w") as f:
    json.dump([r.get("res", r.get("reward")) for r in found["exec_result"]], f)
"""


def slowed(i: int, sql: str) -> str:
    rows = SLOW_ROWS[(i // 6) % len(SLOW_ROWS)]
    return (f"WITH RECURSIVE slow(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM slow WHERE x < {rows}) "
            f"SELECT * FROM ({sql}) WHERE (SELECT count(*) FROM slow) > 0")


def prediction(i: int, sql: str) -> str:
    kind = i % 6
    if kind == 0:
        return perturb_breakage(0, sql)
    if kind == 1:
        return perturb_breakage(1 + (i // 6) % 2, sql)
    if kind == 2:
        return perturb_columns(sql)
    if kind == 3:
        return slowed(i, sql)
    return sql


def build(folder: Path) -> dict[str, Path]:
    """The BIRD-format files and the sqlchorus dataset file over the same database copies."""
    spider = load_dataset("spider-dev")
    examples = [e for e in spider.examples if e.db_path is not None]
    dbs = folder / "dev_databases"
    for e in examples:
        target = dbs / e.db_id / f"{e.db_id}.sqlite"
        if not target.exists():  # copies: the official scripts open the files read-write
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(Path(e.db_path).read_bytes())
    gold = [one_line(e.gold_sql) for e in examples]
    paths = {"dev": folder / "dev.jsonl", "gold": folder / "gold.sql", "pred": folder / "predict_dev.json",
             "dataset": folder / "dataset.json", "dbs": dbs}
    with open(paths["dev"], "w", encoding="utf-8") as f:
        for i, e in enumerate(examples):
            f.write(json.dumps({"question_id": i, "db_id": e.db_id, "question": e.question,
                                "difficulty": LEVELS.get(e.difficulty, "challenging")}) + "\n")
    paths["gold"].write_text("".join(f"{g}\t{e.db_id}\n" for g, e in zip(gold, examples)), encoding="utf-8")
    write_bird_predictions(paths["pred"], [prediction(i, g) for i, g in enumerate(gold)], [e.db_id for e in examples])
    paths["dataset"].write_text(json.dumps({
        "benchmark": "bird", "db_root": "dev_databases",
        "examples": [{"question_id": i, "question": e.question, "db_id": e.db_id, "gold_sql": g,
                      "difficulty": LEVELS.get(e.difficulty, "challenging")}
                     for i, (g, e) in enumerate(zip(gold, examples))]}), encoding="utf-8")
    return paths


def official_scripts(source: Path, folder: Path) -> Path:
    """The four official files, copied from a checkout or shown out of a git directory."""
    target = folder / "official"
    target.mkdir()
    for name in OFFICIAL_FILES:
        checked_out = source / "evaluation" / name
        if checked_out.is_file():
            (target / name).write_bytes(checked_out.read_bytes())
        else:
            shown = subprocess.run(["git", "--git-dir", str(source), "show", f"HEAD:evaluation/{name}"],
                                   capture_output=True, check=True)
            (target / name).write_bytes(shown.stdout)
    return target


def official_python(given: str | None, folder: Path) -> str:
    if given:
        return given
    venv = folder / "official-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", *OFFICIAL_PACKAGES], check=True)
    return python


def timed(command: list[str], cwd: Path | None = None) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--official", type=Path, required=True,
                        help="bird-bench/mini_dev: a checkout, or its git directory")
    parser.add_argument("--official-python", help="a Python with numpy, func_timeout, psycopg2 and pymysql")
    parser.add_argument("--runs", type=int, default=3, help="runs of each tool for R-VES")
    parser.add_argument("--workers", type=int, default=2, help="sqlchorus --workers and the official --num_cpus")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="sqlchorus-bird-metrics-") as tmp:
        folder = Path(tmp)
        paths = build(folder)
        scripts = official_scripts(args.official, folder)
        python = official_python(args.official_python, folder)
        n = len(paths["gold"].read_text(encoding="utf-8").splitlines())
        counter = {"runs": 0}

        def official(script: str) -> tuple[float, list[float]]:
            counter["runs"] += 1
            out = folder / f"official-{counter['runs']}.json"
            seconds = timed([python, "-c", RECORDER, str(scripts), str(out), str(scripts / script),
                             "--predicted_sql_path", str(paths["pred"]), "--ground_truth_path", str(paths["gold"]),
                             "--db_root_path", f"{paths['dbs']}/", "--diff_json_path", str(paths["dev"]),
                             "--num_cpus", str(args.workers), "--output_log_path", str(folder / "official.log")],
                            cwd=scripts)
            return seconds, json.loads(out.read_text())

        def ours(metrics: str) -> tuple[float, dict, list[dict]]:
            counter["runs"] += 1
            out = folder / f"ours-{counter['runs']}"
            command = [sys.executable, "-m", "sqlchorus", "eval", "--dataset", str(paths["dataset"]),
                       "--predictions", str(paths["pred"]), "--workers", str(args.workers), "--metrics", metrics,
                       "--out", str(out), "--json"]
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True)
            seconds = time.perf_counter() - start
            if done.returncode != 0:
                raise SystemExit(f"sqlchorus eval failed ({done.returncode}):\n{done.stderr[-2000:]}")
            records = [json.loads(line) for line in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()]
            return seconds, json.loads(done.stdout), records

        figures: dict = {"questions": n, "workers": args.workers,
                         "predictions": "by i % 6: error, order/limit changed, columns reversed + DISTINCT, "
                                        "gold slowed by a recursive CTE, gold, gold"}

        # EX and Soft-F1: deterministic, so one run each, compared question by question.
        for metric, script, key in (("ex", "evaluation_ex.py", "correct"), ("soft_f1", "evaluation_f1.py", "soft_f1")):
            their_s, theirs = official(script)
            our_s, summary, records = ours(metric)
            mine = [int(bool(r["correct"])) if key == "correct" else r["soft_f1"] for r in records]
            official_total = round(sum(theirs) / len(theirs) * 100, 2)
            figures[metric] = {
                "sqlchorus": summary[metric], "official": official_total,
                "identical": summary[metric] == official_total and mine == theirs,
                "questions_differing": sum(a != b for a, b in zip(mine, theirs)),
                "sqlchorus_s": round(our_s, 3), "official_s": round(their_s, 3),
                "speedup": round(their_s / our_s, 2),
            }

        # R-VES: timed, so several runs of each, alternating.
        runs: dict[str, list] = {"official": [], "ours": []}
        for _ in range(args.runs):
            their_s, rewards = official("evaluation_ves.py")
            value = round(sum(r ** 0.5 * 100 for r in rewards) / len(rewards), 2)
            runs["official"].append((their_s, value, rewards))
            our_s, summary, records = ours("r_ves")
            runs["ours"].append((our_s, summary["r_ves"], [r["ves_reward"] for r in records],
                                 summary["ves_iterations"]["mean"]))
        official_values = [v for _, v, _ in runs["official"]]
        our_values = [v for _, v, _, _ in runs["ours"]]
        spread = round(max(official_values) - min(official_values), 2)
        middle = statistics.median(our_values)
        their_rewards = [r for _, _, r in runs["official"]]

        def agree(a: list[float], b: list[float]) -> float:
            return round(sum(x == y for x, y in zip(a, b)) / len(a), 4)

        official_s = statistics.median(s for s, _, _ in runs["official"])
        our_s = statistics.median(s for s, _, _, _ in runs["ours"])
        figures["r_ves"] = {
            "sqlchorus_runs": our_values, "official_runs": official_values, "official_spread": spread,
            "sqlchorus_median": middle, "official_median": statistics.median(official_values),
            "within_spread": min(official_values) - spread <= middle <= max(official_values) + spread,
            "sqlchorus_timings_per_correct_prediction": [m for _, _, _, m in runs["ours"]],
            "same_reward_official_vs_official": (agree(their_rewards[0], their_rewards[-1])
                                                 if len(their_rewards) > 1 else None),
            "same_reward_sqlchorus_vs_official": agree(runs["ours"][0][2], their_rewards[0]),
            "sqlchorus_s_runs": [round(s, 3) for s, _, _, _ in runs["ours"]],
            "official_s_runs": [round(s, 3) for s, _, _ in runs["official"]],
            "speedup": round(official_s / our_s, 2),
        }

        # All three at once against the three scripts one after the other.
        together_s, summary, _ = ours("ex,soft_f1,r_ves")
        scripts_s = figures["ex"]["official_s"] + figures["soft_f1"]["official_s"] + official_s
        figures["all_three"] = {"sqlchorus_s": round(together_s, 3), "official_s": round(scripts_s, 3),
                                "speedup": round(scripts_s / together_s, 2),
                                "sqlchorus": {k: summary[k] for k in ("ex", "soft_f1", "r_ves")}}
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
