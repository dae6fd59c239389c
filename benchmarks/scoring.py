"""Scoring speed and agreement figures; prints one JSON line.

For Spider dev (the 972 questions whose database exists) and BIRD mini-dev it measures:

* EX of the gold SQL scored as the prediction (must be 100 wherever the database exists);
* EX of two prediction files derived from the gold deterministically:
  ``columns`` - every top-level SELECT with several items has them reversed and gets DISTINCT
  (Spider semantics accept both: permuted columns and DISTINCT removal; BIRD compares tuples,
  so reversed columns are wrong unless the rows are empty or symmetric);
  ``breakage`` - question i gets, by ``i % 4``: 0 a query on a table that does not exist (always
  an error), 1 its ORDER BY directions flipped, 2 its LIMIT removed, 3 the gold unchanged;
* the wall time to score each file with ``--workers 1``, and with 2 workers as processes and as
  threads (best of ``--repeat`` runs).

BIRD's databases are not in the data folder; unless they are, the script builds schema-only
databases from ``dev_tables.json`` (empty tables, so every result is empty) in a temporary
folder and says so in the output (``"bird_databases": "schema-only"``). Those figures time the
machinery, not the real BIRD queries.

Run: ``.venv/bin/python benchmarks/scoring.py [--repeat 3] [--out-dir DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import sqlglot
from sqlglot import exp

from sqlchorus.evaluation.datasets import Dataset, data_dir, load_dataset
from sqlchorus.evaluation.scoring import (
    read_predictions,
    score_predictions,
    write_predictions,
)
from sqlchorus.tools.schema.introspect import schema_only_database


def _top_selects(tree: exp.Expression) -> list[exp.Select]:
    if isinstance(tree, exp.SetOperation):
        return _top_selects(tree.this) + _top_selects(tree.expression)
    if isinstance(tree, exp.Subquery):
        return _top_selects(tree.this)
    return [tree] if isinstance(tree, exp.Select) else []


def perturb_columns(sql: str) -> str:
    """Reverse multi-item SELECT lists and add DISTINCT at the top level."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.SqlglotError:
        return sql
    selects = _top_selects(tree)
    if not selects:
        return sql
    changed = False
    for select in selects:
        items = list(select.expressions)
        if len(items) > 1 and not any(isinstance(e, exp.Star) for e in items):
            select.set("expressions", items[::-1])
            changed = True
        if not select.args.get("distinct"):
            select.set("distinct", exp.Distinct())
            changed = True
    return tree.sql(dialect="sqlite") if changed else sql


def perturb_breakage(i: int, sql: str) -> str:
    """The ``i % 4`` breakage described in the module docstring."""
    kind = i % 4
    if kind == 0:
        return "SELECT * FROM no_such_table_for_scoring"
    if kind == 3:
        return sql
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.SqlglotError:
        return sql
    if kind == 1:
        order = tree.args.get("order")
        if order is None:
            return sql
        for ordered in order.expressions:
            ordered.set("desc", not ordered.args.get("desc"))
            ordered.set("nulls_first", None)
    else:
        if tree.args.get("limit") is None:
            return sql
        tree.set("limit", None)
    return tree.sql(dialect="sqlite")


def _with_schema_only_databases(dataset: Dataset, folder: Path) -> Dataset:
    tables_path = dataset.source.parent / "dev_tables.json"
    if not tables_path.exists():
        tables_path = data_dir() / "bird" / "dev_tables.json"
    entries = {e["db_id"]: e for e in json.loads(tables_path.read_text(encoding="utf-8"))}
    paths: dict[str, Path] = {}
    for db_id in sorted({e.db_id for e in dataset.examples}):
        paths[db_id] = schema_only_database(entries[db_id], folder / db_id / f"{db_id}.sqlite")
    examples = [replace(e, db_path=paths[e.db_id]) for e in dataset.examples]
    return replace(dataset, examples=examples)


def _timed(dataset: Dataset, preds: list[str | None], workers: int, executor: str, repeat: int):
    best, report = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        report = score_predictions(dataset, preds, workers=workers, executor=executor)
        best = min(best, time.perf_counter() - start)
    return round(best, 3), report


def measure(dataset: Dataset, out_dir: Path, repeat: int) -> dict:
    gold = [e.gold_sql for e in dataset.examples]
    files = {
        "gold": gold,
        "columns": [perturb_columns(s) for s in gold],
        "breakage": [perturb_breakage(i, s) for i, s in enumerate(gold)],
    }
    ext = "json" if dataset.benchmark == "bird" else "txt"
    figures: dict = {
        "n_total": len(dataset),
        "n_scored": len(dataset) - dataset.n_missing_db,
        "n_missing_db": dataset.n_missing_db,
    }
    for name, preds in files.items():
        # Round-trip through the submission format, as an external file would be scored.
        path = out_dir / f"{dataset.name}-{name}.{ext}"
        write_predictions(path, dataset, preds)
        preds = read_predictions(path)
        seconds = {}
        report = None
        for label, workers, executor in (
            ("workers_1", 1, "process"),
            ("workers_2_process", 2, "process"),
            ("workers_2_thread", 2, "thread"),
        ):
            seconds[label], report = _timed(dataset, preds, workers, executor, repeat)
        summary = report.summary
        figures[name] = {
            "ex": summary["ex"],
            "n_correct": summary["n_correct"],
            "n_pred_errors": summary["n_pred_errors"],
            "n_gold_errors": summary["n_gold_errors"],
            "by_difficulty": {k: v["ex"] for k, v in summary["by_difficulty"].items()},
            "seconds": seconds,
        }
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per setting (best kept)")
    parser.add_argument("--out-dir", type=Path, default=None, help="keep prediction files here")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="sqlchorus-scoring-") as tmp:
        out_dir = args.out_dir or Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        spider = load_dataset("spider-dev")
        bird = load_dataset("bird-mini-dev")
        bird_databases = "real"
        if bird.n_missing_db:
            bird_databases = "schema-only"
            bird = _with_schema_only_databases(bird, Path(tmp) / "bird_schema_only")
        result = {
            "benchmark": "scoring",
            "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0],
            "repeat": args.repeat,
            "spider_dev": measure(spider, out_dir, args.repeat),
            "bird_mini_dev": measure(bird, out_dir, args.repeat),
            "bird_databases": bird_databases,
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
