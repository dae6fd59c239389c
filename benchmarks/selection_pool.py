"""No-model selection against plain majority voting, over a pool of several systems' predictions.

Each prediction file is one system's answers to the same benchmark questions (Spider's
``pred.txt``: one query a line, in question order; or BIRD's JSON object), read as
``sqlchorus eval --predictions`` reads it. For every question whose database exists, the pool is
one candidate per system, in the order the files are given, and four answers are scored by
execution accuracy with the project's scorer (:func:`sqlchorus.evaluation.scoring.score_predictions`,
the benchmark's official semantics):

* ``majority``: plain majority voting over execution results: among the candidates that ran, the
  most common result wins, ties going to the earlier system. Results are compared as selection
  compares them (:func:`sqlchorus.tools.results.fingerprint`: rows as a bag, column order kept),
  so the two differ in their rules only, not in what counts as the same result.
* ``selection``: what ``sqlchorus select`` does without a selection model
  (:func:`sqlchorus.runs.standalone_selection.select` with no model): clusters by result, every candidate a vote,
  failed candidates voting for no answer, empty results voting only when no candidate has rows,
  ties to the larger cluster, then the earlier candidate.
* each system on its own, and the ``oracle`` (some candidate of the pool is correct).

When no candidate runs, both voters answer with the first system's query, so such questions
count the same for both. Questions on which the two choose different results are counted by
which of them was right, and by the rule that separated them (``empty_set_aside``: the
majority's result had no rows and selection took a result with rows; ``other`` otherwise), with
the exact two-sided sign test (McNemar) over the questions exactly one of them got right
(``sign_test_p``).
Selection's own record says whether its vote was confident (``vote``) or it fell back to the
largest cluster for want of a model (``fallback``); accuracy is reported for each.

Prints one JSON line. ``--details FILE`` writes one JSON line per question on which the two
voters differ.

Usage::

    .venv/bin/python benchmarks/selection_pool.py PRED_A PRED_B PRED_C [...] \\
        [--names a,b,c] [--dataset spider-dev] [--data DIR] [--limit N] [--details FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from sqlchorus.config.settings import Settings
from sqlchorus.core.dependencies import Dependencies
from sqlchorus.evaluation.datasets import Dataset, data_dir, load_dataset
from sqlchorus.evaluation.scoring import read_predictions, score_predictions
from sqlchorus.runs.standalone_selection import check, select
from sqlchorus.tools.database import GuardedDatabase
from sqlchorus.tools.schema import DatabaseSchema, introspect


def majority_vote(checked: Sequence[dict[str, Any]]) -> int | None:
    """Plain majority voting: the index of the first candidate with the most common result
    among those that ran (empty results included), or None when none ran."""
    ran = [c for c in checked if c["status"] != "error"]
    if not ran:
        return None
    counts = Counter(c["fingerprint"] for c in ran)
    top = max(counts.values())
    return next(c["index"] for c in ran if counts[c["fingerprint"]] == top)


def sign_test_p(wins: int, losses: int) -> float | None:
    """Exact two-sided sign test: the chance of a split at least this uneven if either side
    were equally likely to be right on each question where exactly one is."""
    n = wins + losses
    if n == 0:
        return None
    tail = sum(math.comb(n, k) for k in range(0, min(wins, losses) + 1)) / 2**n
    return round(min(1.0, 2 * tail), 4)


def _percent(flags: Sequence[bool]) -> float | None:
    return round(100.0 * sum(flags) / len(flags), 2) if flags else None


def compare_pool(
    dataset: Dataset,
    pools: Sequence[Sequence[str | None]],
    names: Sequence[str],
    *,
    settings: Settings | None = None,
    workers: int = 1,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Score majority voting, no-model selection, each system and the oracle over ``pools``.

    Args:
        dataset: the questions, in the order of the prediction files.
        pools: one list of SQL (None for a missing prediction) per system, in question order.
        names: one name per system.
        settings: executor limits and voting thresholds for selection (defaults otherwise).
        workers: scoring processes.

    Returns:
        ``(figures, records)``: the summary, and one record per question whose database exists
        (``index``, ``candidates``, ``statuses``, ``majority``/``selection`` chosen indices,
        ``method``, ``reason``, ``correct`` per system and method).
    """
    if len(pools) != len(names):
        raise ValueError("one name per prediction list")
    settings = settings or Settings(trace_dir=None)
    n = len(dataset.examples)
    lists = [list(p)[:n] + [None] * (n - min(len(p), n)) for p in pools]
    deps = Dependencies(settings=settings, models={})  # no selection model: `sqlchorus select` without one
    majority: list[str | None] = [None] * n
    selected: list[str | None] = [None] * n
    records: list[dict[str, Any]] = []
    schemas: dict[Path, DatabaseSchema] = {}
    databases: dict[Path, GuardedDatabase] = {}
    try:
        for i, example in enumerate(dataset.examples):
            if example.db_path is None:
                continue
            if example.db_path not in databases:
                databases[example.db_path] = GuardedDatabase(
                    example.db_path, timeout_s=settings.sql_timeout_s, max_rows=settings.max_rows,
                    max_bytes=settings.max_bytes,
                )
                schemas[example.db_path] = introspect(databases[example.db_path], sample_values=settings.sample_values)
            db = databases[example.db_path]
            candidates = [(p[i] or "") for p in lists]
            checked = check(db, candidates)
            outcome = select(db, example.question, candidates, example.evidence,
                             schema=schemas[example.db_path], dependencies=deps, checked=checked)
            vote = majority_vote(checked)
            pick = outcome["chosen"]
            majority[i] = candidates[vote if vote is not None else 0]
            selected[i] = candidates[pick if pick is not None else 0]
            records.append({
                "index": i, "db_id": example.db_id, "question": example.question,
                "candidates": candidates, "statuses": [c["status"] for c in checked],
                "fingerprints": [c["fingerprint"] for c in checked],
                "majority": vote, "selection": pick,
                "method": outcome["method"], "votes": outcome["votes"], "reason": outcome["reason"],
            })
    finally:
        for db in databases.values():
            db.close()
        deps.close()

    def verdicts(preds: Sequence[str | None]) -> list[bool]:
        report = score_predictions(dataset, preds, workers=workers)
        return [v.correct for v in report.verdicts]

    started = time.perf_counter()
    per_system = [verdicts(p) for p in lists]
    maj, sel = verdicts(majority), verdicts(selected)
    scoring_s = time.perf_counter() - started
    for r in records:
        i = r["index"]
        r["correct"] = {**{name: per_system[k][i] for k, name in enumerate(names)},
                        "majority": maj[i], "selection": sel[i]}
    return _figures(dataset, names, records, scoring_s), records


def _reason(record: dict[str, Any]) -> str:
    """The rule that separated majority voting and selection on this question."""
    m, s = record["majority"], record["selection"]
    if m is not None and s is not None and record["statuses"][m] == "empty" and record["statuses"][s] == "ok":
        return "empty_set_aside"
    return "other"


def _figures(dataset: Dataset, names: Sequence[str], records: list[dict[str, Any]], scoring_s: float) -> dict[str, Any]:
    def ex(key: str) -> float | None:
        return _percent([r["correct"][key] for r in records])

    differ = [r for r in records if r["majority"] != r["selection"]]
    by_reason: dict[str, dict[str, int]] = {}
    for r in differ:
        tally = by_reason.setdefault(_reason(r), {"n": 0, "selection_right": 0, "majority_right": 0, "both_wrong": 0})
        tally["n"] += 1
        if r["correct"]["selection"] and not r["correct"]["majority"]:
            tally["selection_right"] += 1
        elif r["correct"]["majority"] and not r["correct"]["selection"]:
            tally["majority_right"] += 1
        elif not r["correct"]["majority"]:
            tally["both_wrong"] += 1
    methods: dict[str, dict[str, Any]] = {}
    for method in sorted({r["method"] for r in records}):
        group = [r for r in records if r["method"] == method]
        methods[method] = {"n": len(group), "selection_ex": _percent([r["correct"]["selection"] for r in group]),
                           "majority_ex": _percent([r["correct"]["majority"] for r in group])}
    systems = {name: ex(name) for name in names}
    best = max(names, key=lambda name: systems[name] or 0.0)
    majority_ex, selection_ex = ex("majority"), ex("selection")
    return {
        "dataset": dataset.name,
        "n_questions": len(dataset.examples),
        "n_scored": len(records),
        "n_missing_db": dataset.n_missing_db,
        "systems": systems,
        "best_system": best,
        "majority_ex": majority_ex,
        "selection_ex": selection_ex,
        "selection_minus_majority": (round(selection_ex - majority_ex, 2)
                                     if selection_ex is not None and majority_ex is not None else None),
        "oracle_ex": _percent([any(r["correct"][name] for name in names) for r in records]),
        "n_differ": len(differ),
        "sign_test_p": sign_test_p(sum(t["selection_right"] for t in by_reason.values()),
                                   sum(t["majority_right"] for t in by_reason.values())),
        "differ_by_rule": by_reason,
        "selection_methods": methods,
        "scoring_s": round(scoring_s, 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("predictions", nargs="+", help="one prediction file per system, in pool order")
    parser.add_argument("--names", help="comma-separated system names (default: the files' stems)")
    parser.add_argument("--dataset", default="spider-dev", help="a built-in dataset name or a dataset JSON file")
    parser.add_argument("--data", type=Path, default=None, help="the data folder (default: SQLCHORUS_DATA)")
    parser.add_argument("--limit", type=int, default=0, help="the first N questions only")
    parser.add_argument("--workers", type=int, default=1, help="scoring processes")
    parser.add_argument("--details", type=Path, default=None,
                        help="write the questions on which the two voters differ, one JSON line each")
    args = parser.parse_args(argv)

    files = [Path(p) for p in args.predictions]
    names = args.names.split(",") if args.names else [p.stem for p in files]
    if len(names) != len(files) or len(set(names)) != len(names):
        parser.error("--names must give one distinct name per prediction file")
    dataset = load_dataset(args.dataset, root=args.data or data_dir())
    pools = [read_predictions(p) for p in files]
    for path, pool in zip(files, pools):
        if len(pool) != len(dataset.examples):
            print(f"warning: {path} has {len(pool)} predictions for {len(dataset.examples)} questions",
                  file=sys.stderr)
    if args.limit:
        dataset = replace(dataset, examples=dataset.examples[: args.limit])
    started = time.perf_counter()
    figures, records = compare_pool(dataset, pools, names, workers=args.workers)
    figures["files"] = {name: str(path) for name, path in zip(names, files)}
    figures["elapsed_s"] = round(time.perf_counter() - started, 2)
    if args.details:
        with open(args.details, "w", encoding="utf-8") as out:
            for r in records:
                if r["majority"] != r["selection"]:
                    out.write(json.dumps({**r, "rule": _reason(r)}, ensure_ascii=False) + "\n")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
