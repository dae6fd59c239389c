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
* ``selection``: what ``sqlchorus select`` does without a selection model over a file of these
  questions (:func:`sqlchorus.runs.standalone_selection.select` with no model, each system
  weighed by :func:`~sqlchorus.runs.standalone_selection.agreement_weights` over the whole run):
  failed candidates vote for no answer, empty results vote only when no candidate has rows, only
  the column count most votes give can win, each vote weighs its system's agreement with the
  others, ties go to the larger cluster, then the earlier candidate.
* ``selection_cv``: the same with the weights cross-validated: estimated on the even-numbered
  questions for the odd ones and the other way round, so no question's own candidates set its
  weights.
* ``ablation``: selection with each rule off in turn (``without_errors``, ``without_empty``,
  ``without_shape``, ``without_weights``), each with its own sign test against selection.
* each system on its own, and the ``oracle`` (some candidate of the pool is correct).

Files are refused, not scored, when one holds a different number of predictions than the
dataset has questions, or when it does not follow the dataset's order: over each block of 50
questions, its queries must resemble the gold queries at their own positions more than at a
shift of up to three (token overlap; a file out of order, or missing or adding a line, fails).
A dataset whose databases are absent cannot be executed (BIRD's are not shipped); the benchmark
says so and stops.

When no candidate runs, both voters answer with the first system's query, so such questions
count the same for both. Questions on which the two choose different results are counted by
which of them was right, and by the rule that separated them (``empty_set_aside``: the
majority's result had no rows and selection took a result with rows; ``other`` otherwise), with
the exact two-sided sign test (McNemar) over the questions exactly one of them got right
(``sign_test_p``).
Selection's own record says whether its vote was confident (``vote``) or it fell back to the
largest cluster for want of a model (``fallback``); accuracy is reported for each.

Prints one JSON line (``weights`` gives each system's). ``--details FILE`` writes one JSON line per question on which the two
voters differ.

Usage::

    .venv/bin/python benchmarks/selection_pool.py PRED_A PRED_B PRED_C [...] \\
        [--names a,b,c] [--dataset spider-dev] [--data DIR] [--limit N] [--details FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import re
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
from sqlchorus.runs.standalone_selection import RULES, agreement_weights, check, select
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


ABLATIONS = {f"without_{rule}": RULES - {rule} for rule in sorted(RULES)}
"""Selection with one rule off, by name."""
BLOCK = 50
"""Questions per block of the order check."""
SHIFTS = 3
"""The largest shift the order check compares against."""


def _tokens(sql: str | None) -> frozenset[str]:
    return frozenset(re.findall(r"[a-z_][a-z0-9_]*|\d+", (sql or "").lower()))


def order_problem(golds: Sequence[str], predictions: Sequence[str | None]) -> str | None:
    """Why ``predictions`` are not in the order of ``golds`` (None when they are).

    Over each block of :data:`BLOCK` questions, the mean token overlap (Jaccard) of each query
    with the gold query at its own position must exceed that at every shift up to
    :data:`SHIFTS`: a file out of order, or missing or adding a line, fails where that starts.
    """
    if len(predictions) != len(golds):
        return f"{len(predictions)} predictions for {len(golds)} questions"
    gold = [_tokens(g) for g in golds]
    pred = [_tokens(p) for p in predictions]

    def overlap(i: int, j: int) -> float:
        union = pred[i] | gold[j]
        return len(pred[i] & gold[j]) / len(union) if union else 1.0

    for start in range(0, len(golds), BLOCK):
        block = range(start, min(start + BLOCK, len(golds)))
        if len(block) < 2 * SHIFTS:
            break
        means = {}
        for shift in range(-SHIFTS, SHIFTS + 1):
            pairs = [(i, i + shift) for i in block if 0 <= i + shift < len(golds)]
            means[shift] = sum(overlap(i, j) for i, j in pairs) / len(pairs)
        if any(means[shift] >= means[0] for shift in means if shift):
            best = max(means, key=means.get)
            return (f"not in the dataset's order: questions {block[0] + 1}-{block[-1] + 1} match the gold "
                    f"queries {'best at a shift of ' + str(best) if best else 'no better in place than shifted'}")
    return None


def compare_pool(
    dataset: Dataset,
    pools: Sequence[Sequence[str | None]],
    names: Sequence[str],
    *,
    settings: Settings | None = None,
    workers: int = 1,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Score majority voting, no-model selection (and its ablations), each system and the oracle.

    Args:
        dataset: the questions, in the order of the prediction files.
        pools: one list of SQL (None for a missing prediction) per system, in question order.
        names: one name per system.
        settings: executor limits and voting thresholds for selection (defaults otherwise).
        workers: scoring processes.

    Returns:
        ``(figures, records)``: the summary, and one record per question whose database exists
        (``index``, ``candidates``, ``statuses``, chosen indices of ``majority``, ``selection``,
        ``selection_cv`` and each ablation, ``method``, ``reason``, ``correct`` per system and
        method).
    """
    if len(pools) != len(names):
        raise ValueError("one name per prediction list")
    settings = settings or Settings(trace_dir=None)
    n = len(dataset.examples)
    lists = [list(p)[:n] + [None] * (n - min(len(p), n)) for p in pools]
    deps = Dependencies(settings=settings, models={})  # no selection model: `sqlchorus select` without one
    methods = ["majority", "selection", "selection_cv", *ABLATIONS]
    chosen: dict[str, list[str | None]] = {m: [None] * n for m in methods}
    records: list[dict[str, Any]] = []
    schemas: dict[Path, DatabaseSchema] = {}
    databases: dict[Path, GuardedDatabase] = {}
    try:
        runs: list[tuple[int, list[str], list[dict[str, Any]]]] = []
        for i, example in enumerate(dataset.examples):
            if example.db_path is None:
                continue
            if example.db_path not in databases:
                databases[example.db_path] = GuardedDatabase(
                    example.db_path, timeout_s=settings.sql_timeout_s, max_rows=settings.max_rows,
                    max_bytes=settings.max_bytes,
                )
                schemas[example.db_path] = introspect(databases[example.db_path], sample_values=settings.sample_values)
            candidates = [(p[i] or "") for p in lists]
            runs.append((i, candidates, check(databases[example.db_path], candidates)))
        # The weights as `sqlchorus select` estimates them over a file of these questions, and
        # cross-validated: each half's weights come from the other half.
        weights = agreement_weights([r[2] for r in runs])
        halves = [agreement_weights([r[2] for r in runs[h::2]]) for h in (0, 1)]
        for position, (i, candidates, checked) in enumerate(runs):
            example = dataset.examples[i]
            db = databases[example.db_path]

            def pick(w, rules=RULES, *, example=example, db=db, candidates=candidates, checked=checked):
                return select(db, example.question, candidates, example.evidence, schema=schemas[example.db_path],
                              dependencies=deps, checked=checked, weights=w, rules=rules)

            outcome = pick(weights)
            picks = {"majority": majority_vote(checked), "selection": outcome["chosen"],
                     "selection_cv": pick(halves[1 - position % 2])["chosen"]}
            for name, rules in ABLATIONS.items():
                picks[name] = pick(weights, rules)["chosen"]
            for m in methods:
                chosen[m][i] = candidates[picks[m] if picks[m] is not None else 0]
            records.append({
                "index": i, "db_id": example.db_id, "question": example.question,
                "candidates": candidates, "statuses": [c["status"] for c in checked],
                "fingerprints": [c["fingerprint"] for c in checked], "columns": [c["columns"] for c in checked],
                **picks, "method": outcome["method"], "votes": outcome["votes"], "reason": outcome["reason"],
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
    per_method = {m: verdicts(chosen[m]) for m in methods}
    scoring_s = time.perf_counter() - started
    for r in records:
        i = r["index"]
        r["correct"] = {**{name: per_system[k][i] for k, name in enumerate(names)},
                        **{m: per_method[m][i] for m in methods}}
    figures = _figures(dataset, names, records, scoring_s)
    figures["weights"] = dict(zip(names, weights)) if weights else None
    return figures, records


def _versus(records: Sequence[dict[str, Any]], a: str, b: str) -> dict[str, Any]:
    """How ``a`` and ``b`` split the questions exactly one of them got right, and the sign test."""
    wins = sum(r["correct"][a] and not r["correct"][b] for r in records)
    losses = sum(r["correct"][b] and not r["correct"][a] for r in records)
    return {"wins": wins, "losses": losses, "sign_test_p": sign_test_p(wins, losses)}


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
    ablation = {}
    for name in ABLATIONS:
        ablation[name] = {"ex": ex(name), "selection_minus_this": round(ex("selection") - ex(name), 2),
                          "selection_vs_this": _versus(records, "selection", name)}
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
        "selection_cv_ex": ex("selection_cv"),
        "selection_cv_vs_majority": _versus(records, "selection_cv", "majority"),
        "ablation": ablation,
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
                        help="write the questions on which majority voting and selection differ, one JSON line each")
    args = parser.parse_args(argv)

    files = [Path(p) for p in args.predictions]
    names = args.names.split(",") if args.names else [p.stem for p in files]
    if len(names) != len(files) or len(set(names)) != len(names):
        parser.error("--names must give one distinct name per prediction file")
    dataset = load_dataset(args.dataset, root=args.data or data_dir())
    if not any(e.db_path is not None for e in dataset.examples):
        print(f"error: none of {dataset.name}'s databases is in the data folder, so no candidate can be "
              "executed and nothing can be scored", file=sys.stderr)
        return 2
    pools = [read_predictions(p) for p in files]
    golds = [e.gold_sql for e in dataset.examples]
    refused = [(path, problem) for path, pool in zip(files, pools) if (problem := order_problem(golds, pool))]
    for path, problem in refused:
        print(f"error: {path}: {problem}; refused", file=sys.stderr)
    if refused:
        return 2
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
