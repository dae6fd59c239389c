"""No-model selection against plain majority voting, over pools of several systems' predictions.

Each prediction file is one system's answers to the same benchmark questions (Spider's
``pred.txt``: one query a line, in question order; BIRD's JSON object; or a CSV file with a
``PREDICTED SQL`` column, as DIN-SQL's repository publishes its runs), read as
``sqlchorus eval --predictions`` reads it. For every question whose database exists, a pool is
one candidate per system, in the order the files are given, and these answers are scored by
execution accuracy with the project's scorer (:func:`sqlchorus.evaluation.scoring.score_predictions`,
the benchmark's official semantics):

* ``majority``: plain majority voting over execution results: among the candidates that ran, the
  most common result wins, ties going to the earlier system. Results are compared as selection
  compares them (:func:`sqlchorus.tools.candidates.results.fingerprint`: rows as a bag, column order kept),
  so the two differ in their rules only, not in what counts as the same result.
* ``selection``: what ``sqlchorus select`` does without a selection model over a file of these
  questions (:func:`sqlchorus.runs.standalone_selection.select` with no model, each system
  weighed by :func:`~sqlchorus.runs.standalone_selection.agreement_weights` over the whole run),
  with every rule of the vote (:mod:`sqlchorus.core.vote_rules`).
* ``old_rules``: the same with the four rules the vote had first (``errors``, ``empty``,
  ``shape``, ``weights``: :data:`~sqlchorus.runs.standalone_selection.BASE_RULES`).
* ``selection_cv``: selection with the weights cross-validated: estimated on the even-numbered
  questions for the odd ones and the other way round, so no question's own candidates set its
  weights.
* ``ablation``: selection with each rule off in turn (``without_<rule>``), each with its own sign
  test against selection.
* each system on its own, and the ``oracle`` (some candidate of the pool is correct).

A chosen candidate is one system's prediction, so its verdict is that system's verdict on the
question: each system is scored once, and every voter's accuracy is read from those verdicts.

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

One pool: the files on the command line; prints one JSON line (``weights`` gives each system's).
``--details FILE`` writes one JSON line per question on which the two voters differ.

Many pools: ``--pools SPEC`` (a JSON file like ``benchmarks/selection_pools.json``: where each
system's file comes from, and the pools as lists of system names) with ``--predictions DIR``
holding the files it names; every candidate runs once however many pools hold it, and one JSON
line gives, per pool, the best single system, majority, old rules, new rules (every rule), the
oracle, each against majority with its sign test, each new rule's ablation, and the same
figures on the two halves of the databases (alternate databases in name order), so a rule's
gain can be seen to hold on databases apart; then the mean over the pools.

Usage::

    .venv/bin/python benchmarks/selection_pool.py PRED_A PRED_B PRED_C [...] \\
        [--names a,b,c] [--dataset spider-dev] [--data DIR] [--limit N] [--details FILE]
    .venv/bin/python benchmarks/selection_pool.py --pools benchmarks/selection_pools.json \\
        --predictions DIR [--only NAME,...] [--data DIR]
"""

from __future__ import annotations

import argparse
import csv
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
from sqlchorus.runs.standalone_selection import (
    BASE_RULES,
    RULES,
    agreement_weights,
    check,
    decide,
    key_columns,
    select,
)
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.engines.catalog import DatabaseSchema
from sqlchorus.tools.schema.introspect import introspect


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


class Checks:
    """Every database opened and introspected once, and every query run once on it, however many
    pools hold it (:func:`check`'s record, its position filled in per pool)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.databases: dict[Path, GuardedDatabase] = {}
        self.schemas: dict[Path, DatabaseSchema] = {}
        self.runs: dict[tuple[Path, str], dict[str, Any]] = {}

    def database(self, path: Path) -> GuardedDatabase:
        if path not in self.databases:
            s = self.settings
            self.databases[path] = GuardedDatabase(path, timeout_s=s.sql_timeout_s, max_rows=s.max_rows,
                                                   max_bytes=s.max_bytes)
            self.schemas[path] = introspect(self.databases[path], sample_values=s.sample_values)
        return self.databases[path]

    def check(self, path: Path, sqls: Sequence[str]) -> list[dict[str, Any]]:
        db = self.database(path)
        out = []
        for k, sql in enumerate(sqls):
            key = (path, (sql or "").strip())
            if key not in self.runs:
                self.runs[key] = check(db, [sql])[0]
            out.append({**self.runs[key], "id": f"c{k}", "index": k})
        return out

    def close(self) -> None:
        for db in self.databases.values():
            db.close()
        self.databases.clear()


def system_verdicts(dataset: Dataset, predictions: Sequence[str | None], *, workers: int = 1) -> list[bool]:
    """One system's verdict on each question (the scorer's, in dataset order)."""
    return [v.correct for v in score_predictions(dataset, predictions, workers=workers).verdicts]


def compare_pool(
    dataset: Dataset,
    pools: Sequence[Sequence[str | None]],
    names: Sequence[str],
    *,
    settings: Settings | None = None,
    workers: int = 1,
    checks: Checks | None = None,
    verdicts: Sequence[Sequence[bool]] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Score majority voting, no-model selection (old rules, every rule, each ablation), each
    system and the oracle.

    Args:
        dataset: the questions, in the order of the prediction files.
        pools: one list of SQL (None for a missing prediction) per system, in question order.
        names: one name per system.
        settings: executor limits and voting thresholds for selection (defaults otherwise).
        workers: scoring processes.
        checks: runs shared with other pools (one of its own otherwise, closed at the end).
        verdicts: each system's verdicts (:func:`system_verdicts`) when already scored.

    Returns:
        ``(figures, records)``: the summary, and one record per question whose database exists
        (``index``, ``candidates``, ``statuses``, chosen indices of ``majority``, ``selection``,
        ``old_rules``, ``selection_cv`` and each ablation, ``method``, ``reason``,
        ``vote_rules``, ``correct`` per system and method).
    """
    if len(pools) != len(names):
        raise ValueError("one name per prediction list")
    settings = settings or Settings(trace_dir=None)
    n = len(dataset.examples)
    lists = [list(p)[:n] + [None] * (n - min(len(p), n)) for p in pools]
    owned = checks is None
    checks = checks or Checks(settings)
    deps = Dependencies(settings=settings, models={})  # no selection model: `sqlchorus select` without one
    methods = ["majority", "selection", "old_rules", "selection_cv", *ABLATIONS]
    records: list[dict[str, Any]] = []
    try:
        runs: list[tuple[int, list[str], list[dict[str, Any]]]] = []
        for i, example in enumerate(dataset.examples):
            if example.db_path is None:
                continue
            candidates = [(p[i] or "") for p in lists]
            runs.append((i, candidates, checks.check(example.db_path, candidates)))
        # The weights as `sqlchorus select` estimates them over a file of these questions, and
        # cross-validated: each half's weights come from the other half.
        weights = agreement_weights([r[2] for r in runs])
        halves = [agreement_weights([r[2] for r in runs[h::2]]) for h in (0, 1)]
        for position, (i, candidates, checked) in enumerate(runs):
            example = dataset.examples[i]
            db = checks.database(example.db_path)
            schema = checks.schemas[example.db_path]
            keys = key_columns(schema)
            ran = any(c["status"] != "error" for c in checked)

            def vote(w, rules, *, checked=checked, question=example.question, keys=keys, ran=ran):
                # select() without a model takes decide()'s choice whenever a candidate ran.
                decision = decide(checked, w, rules, question=question, key_columns=keys) if ran else None
                return decision["chosen"] if decision else None

            outcome = select(db, example.question, candidates, example.evidence, schema=schema,
                             dependencies=deps, checked=checked, weights=weights)
            picks = {"majority": majority_vote(checked), "selection": outcome["chosen"],
                     "old_rules": vote(weights, BASE_RULES),
                     "selection_cv": vote(halves[1 - position % 2], RULES)}
            for name, rules in ABLATIONS.items():
                picks[name] = vote(weights, rules)
            records.append({
                "index": i, "db_id": example.db_id, "question": example.question,
                "candidates": candidates, "statuses": [c["status"] for c in checked],
                "fingerprints": [c["fingerprint"] for c in checked], "columns": [c["columns"] for c in checked],
                **picks, "method": outcome["method"], "votes": outcome["votes"], "reason": outcome["reason"],
                "vote_rules": outcome["vote_rules"],
            })
    finally:
        if owned:
            checks.close()
        deps.close()

    started = time.perf_counter()
    per_system = (list(verdicts) if verdicts is not None
                  else [system_verdicts(dataset, p, workers=workers) for p in lists])
    scoring_s = time.perf_counter() - started
    for r in records:
        i = r["index"]
        # A chosen candidate is its system's prediction, so its verdict is that system's; with
        # no candidate that ran, both voters answer with the first system's query.
        r["correct"] = {**{name: per_system[k][i] for k, name in enumerate(names)},
                        **{m: per_system[r[m] if r[m] is not None else 0][i] for m in methods}}
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
        "selection_vs_majority": _versus(records, "selection", "majority"),
        "old_rules_ex": ex("old_rules"),
        "old_rules_vs_majority": _versus(records, "old_rules", "majority"),
        "selection_vs_old_rules": _versus(records, "selection", "old_rules"),
        "selection_cv_ex": ex("selection_cv"),
        "selection_cv_vs_majority": _versus(records, "selection_cv", "majority"),
        "halves": _halves(records),
        "ablation": ablation,
        "oracle_ex": _percent([any(r["correct"][name] for name in names) for r in records]),
        "n_differ": len(differ),
        "sign_test_p": sign_test_p(sum(t["selection_right"] for t in by_reason.values()),
                                   sum(t["majority_right"] for t in by_reason.values())),
        "differ_by_rule": by_reason,
        "selection_methods": methods,
        "scoring_s": round(scoring_s, 2),
    }


def _halves(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Majority, old rules and every rule on two halves of the databases (alternate databases in
    name order): a rule whose gain holds on both holds on databases apart."""
    dbs = sorted({r["db_id"] for r in records})
    out = {}
    for half, name in enumerate(("even_databases", "odd_databases")):
        group = [r for r in records if dbs.index(r["db_id"]) % 2 == half]
        out[name] = {"databases": dbs[half::2], "n": len(group),
                     **{m: _percent([r["correct"][m] for r in group]) for m in ("majority", "old_rules", "selection")}}
    return out


def read_pool_file(path: Path) -> list[str | None]:
    """A system's predictions: a CSV file with a ``PREDICTED SQL`` column (one row a question, as
    DIN-SQL's repository publishes its runs), or any file ``sqlchorus eval --predictions`` reads."""
    if path.suffix.lower() == ".csv":
        with open(path, encoding="utf-8", errors="replace", newline="") as f:
            return [(row.get("PREDICTED SQL") or "").strip() or None for row in csv.DictReader(f)]
    return read_predictions(path)


def pool_line(figures: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """One pool's figures as the many-pools line gives them."""
    best = figures["best_system"]
    return {
        "systems": list(names),
        "best_single": {"system": best, "ex": figures["systems"][best]},
        "majority": figures["majority_ex"],
        "old_rules": figures["old_rules_ex"],
        "new_rules": figures["selection_ex"],
        "oracle": figures["oracle_ex"],
        "new_vs_majority": figures["selection_vs_majority"],
        "old_vs_majority": figures["old_rules_vs_majority"],
        "new_vs_old": figures["selection_vs_old_rules"],
        "new_cv": figures["selection_cv_ex"],
        "without": {name.removeprefix("without_"): a["ex"] for name, a in figures["ablation"].items()},
        "halves": figures["halves"],
    }


def compare_pools(dataset: Dataset, files: dict[str, Path], pools: dict[str, list[str]], *,
                  workers: int = 1) -> dict[str, Any]:
    """:func:`compare_pool` for every pool, each system scored once and each query run once."""
    settings = Settings(trace_dir=None)
    predictions = {name: read_pool_file(files[name]) for name in sorted({s for p in pools.values() for s in p})}
    checks = Checks(settings)
    verdicts: dict[str, list[bool]] = {}
    out: dict[str, Any] = {}
    try:
        for pool, names in pools.items():
            for name in names:
                if name not in verdicts:
                    verdicts[name] = system_verdicts(dataset, predictions[name], workers=workers)
            figures, _ = compare_pool(dataset, [predictions[n] for n in names], names, settings=settings,
                                      checks=checks, verdicts=[verdicts[n] for n in names])
            out[pool] = pool_line(figures, names)
    finally:
        checks.close()
    return out


def summary(lines: dict[str, dict[str, Any]], target: float, size: int = 9) -> dict[str, Any]:
    """The mean of each figure over the pools, which pools miss majority or the old rules, and how
    many pools of ``size`` systems reach ``target``."""
    def mean(get) -> float | None:
        values = [x for x in map(get, lines.values()) if x is not None]  # a half with no database has none
        return round(sum(values) / len(values), 2) if values else None

    wins = sum(v["new_vs_majority"]["wins"] for v in lines.values())
    losses = sum(v["new_vs_majority"]["losses"] for v in lines.values())
    return {
        "pools": len(lines),
        **{key: mean(lambda v, key=key: v[key]) for key in ("majority", "old_rules", "new_rules", "oracle", "new_cv")},
        "best_single": mean(lambda v: v["best_single"]["ex"]),
        "halves": {h: {m: mean(lambda v, h=h, m=m: v["halves"][h][m]) for m in ("majority", "old_rules", "selection")}
                   for h in ("even_databases", "odd_databases")},
        "target": target,
        "new_rules_at_or_above_target": sum(v["new_rules"] >= target for v in lines.values()
                                            if len(v["systems"]) == size),
        "pools_of_target_size": sum(len(v["systems"]) == size for v in lines.values()),
        "new_rules_below_majority": [k for k, v in lines.items() if v["new_rules"] < v["majority"]],
        "new_rules_below_old_rules": [k for k, v in lines.items() if v["new_rules"] < v["old_rules"]],
        "new_vs_majority_all_pools": {"wins": wins, "losses": losses},
    }


def main_pools(args, parser) -> int:
    spec = json.loads(Path(args.pools).read_text(encoding="utf-8"))
    folder = Path(args.predictions) if args.predictions else None
    if folder is None:
        parser.error("--pools needs --predictions DIR, the folder holding the files the spec names")
    files = {name: folder / entry["file"] for name, entry in spec["systems"].items()}
    pools = {name: list(members) for name, members in spec["pools"].items()}
    if args.only:
        pools = {name: pools[name] for name in args.only.split(",")}
    missing = sorted({str(files[n]) for p in pools.values() for n in p if not files[n].exists()})
    if missing:
        print(f"error: prediction file(s) missing: {', '.join(missing)} (see the spec's 'source')", file=sys.stderr)
        return 2
    dataset = load_dataset(args.dataset, root=args.data or data_dir())
    if not any(e.db_path is not None for e in dataset.examples):
        print(f"error: none of {dataset.name}'s databases is in the data folder", file=sys.stderr)
        return 2
    golds = [e.gold_sql for e in dataset.examples]
    for name in sorted({n for p in pools.values() for n in p}):
        if problem := order_problem(golds, read_pool_file(files[name])):
            print(f"error: {files[name]}: {problem}; refused", file=sys.stderr)
            return 2
    if args.limit:
        dataset = replace(dataset, examples=dataset.examples[: args.limit])
    started = time.perf_counter()
    lines = compare_pools(dataset, files, pools, workers=args.workers)
    target, size = spec.get("target", 86.5), spec.get("target_pool_size", 9)
    groups: dict[str, dict[str, Any]] = {}
    for name, line in lines.items():  # pools named <group><number>: dev01, held03, small3_02, ...
        groups.setdefault(re.sub(r"_?\d+$", "", name), {})[name] = line
    print(json.dumps({"dataset": dataset.name, "pools": lines,
                      "summary": {"all_pools": summary(lines, target, size),
                                  **{group: summary(members, target, size) for group, members in groups.items()}},
                      "elapsed_s": round(time.perf_counter() - started, 2)}))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", metavar="PRED", help="one prediction file per system, in pool order")
    parser.add_argument("--pools", help="a JSON spec of systems and pools (benchmarks/selection_pools.json)")
    parser.add_argument("--predictions", help="with --pools: the folder holding the files the spec names")
    parser.add_argument("--only", help="with --pools: these pools only (comma-separated names)")
    parser.add_argument("--names", help="comma-separated system names (default: the files' stems)")
    parser.add_argument("--dataset", default="spider-dev", help="a built-in dataset name or a dataset JSON file")
    parser.add_argument("--data", type=Path, default=None, help="the data folder (default: SQLCHORUS_DATA)")
    parser.add_argument("--limit", type=int, default=0, help="the first N questions only")
    parser.add_argument("--workers", type=int, default=1, help="scoring processes")
    parser.add_argument("--details", type=Path, default=None,
                        help="write the questions on which majority voting and selection differ, one JSON line each")
    args = parser.parse_args(argv)
    if args.pools:
        return main_pools(args, parser)
    if len(args.files) < 2:
        parser.error("give two prediction files or more, or --pools SPEC")

    files = [Path(p) for p in args.files]
    names = args.names.split(",") if args.names else [p.stem for p in files]
    if len(names) != len(files) or len(set(names)) != len(names):
        parser.error("--names must give one distinct name per prediction file")
    dataset = load_dataset(args.dataset, root=args.data or data_dir())
    if not any(e.db_path is not None for e in dataset.examples):
        print(f"error: none of {dataset.name}'s databases is in the data folder, so no candidate can be "
              "executed and nothing can be scored", file=sys.stderr)
        return 2
    pools = [read_pool_file(p) for p in files]
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
