"""Coverage of the LIST decomposer on BIRD dev and Spider dev gold queries.

Measures the three rates of the LIST paper (appendix B.2) and prints them as one JSON line:

* split pass rate (SPR): share of queries the decomposer splits without error;
* complete pass rate (CPR): share of queries all of whose steps execute without error;
* sub-query pass rate (SQPR): share of all steps that execute without error.

BIRD's databases are not shipped, so each BIRD database is rebuilt empty from
``dev_tables.json`` (:func:`sqlchorus.tools.schema.introspect.schema_only_database`) in a temporary folder:
the steps then run against the real schema, which is what "executes without error" needs. Spider
uses its real databases; ``wta_1`` has no database file and its queries are skipped and counted.
On Spider the last step's rows are also compared with the gold query's rows.

Every statement runs through :class:`GuardedDatabase`. Usage::

    python benchmarks/list_coverage.py [--limit N] [--timeout S] [--details failures.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlchorus.tools.engines.sqlite import GuardedDatabase, SqlError
from sqlchorus.tools.steps.decompose import decompose, execute_steps
from sqlchorus.tools.schema.introspect import schema_only_database

REPO = Path(__file__).resolve().parent.parent
SPIDER_MISSING = {"wta_1"}


def data_dir() -> Path:
    return Path(os.environ.get("SQLCHORUS_DATA", REPO.parent / "shared" / "data")).resolve()


@dataclass
class Tally:
    """Counts for one dataset."""

    queries: int = 0
    split_pass: int = 0
    complete_pass: int = 0
    steps: int = 0
    steps_pass: int = 0
    gold_fails: int = 0
    last_compared: int = 0
    last_equal: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    examples: dict[str, dict[str, Any]] = field(default_factory=dict)

    def fail(self, kind: str, example: dict[str, Any]) -> None:
        self.failures[kind] += 1
        self.examples.setdefault(kind, example)

    def figures(self, prefix: str) -> dict[str, Any]:
        def rate(num: int, den: int) -> float | None:
            return round(num / den, 4) if den else None

        out = {
            f"{prefix}_spr": rate(self.split_pass, self.queries),
            f"{prefix}_cpr": rate(self.complete_pass, self.queries),
            f"{prefix}_sqpr": rate(self.steps_pass, self.steps),
            f"{prefix}_queries": self.queries,
            f"{prefix}_split_pass": self.split_pass,
            f"{prefix}_complete_pass": self.complete_pass,
            f"{prefix}_steps": self.steps,
            f"{prefix}_steps_pass": self.steps_pass,
            f"{prefix}_gold_fails": self.gold_fails,
        }
        return out

    def failure_report(self) -> dict[str, dict[str, Any]]:
        return {
            kind: {"count": count, "example": self.examples[kind]}
            for kind, count in self.failures.most_common()
        }


_ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)
_NAMES = re.compile(r"(: |near )(\"[^\"]*\"|'[^']*'|\S+)")


def failure_kind(operation: str, message: str) -> str:
    """A stable kind for an error: the step's operation and the message without names."""
    text = message.strip().splitlines()[0] if message.strip() else message
    text = _NAMES.sub(lambda m: m.group(1) + "<name>", text)
    return f"{operation}: {text}"


def column_map(entry: dict[str, Any]) -> dict[str, list[str]]:
    tables = entry["table_names_original"]
    out: dict[str, list[str]] = {t: [] for t in tables}
    for t_idx, name in entry["column_names_original"]:
        if t_idx >= 0:
            out[tables[t_idx]].append(name)
    return out


def same_rows(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]], ordered: bool) -> bool:
    if ordered:
        return a == b
    return sorted(map(repr, a)) == sorted(map(repr, b))


def measure(
    items: Iterable[tuple[str, str]],
    open_db: Any,
    schemas: dict[str, dict[str, list[str]]],
    tally: Tally,
    *,
    timeout_s: float,
    compare_last: bool,
    details: Any,
) -> None:
    """Decompose and run every (sql, db_id) pair, adding to ``tally``."""
    for sql, db_id in items:
        tally.queries += 1
        db = open_db(db_id)
        gold = None
        try:
            gold = db.execute(sql, timeout_s=timeout_s)
        except SqlError:
            tally.gold_fails += 1
        try:
            steps = decompose(sql, schema=schemas.get(db_id))
        except Exception as e:  # noqa: BLE001 - any crash, not only DecomposeError, is a split failure
            kind = f"split: {type(e).__name__}"
            tally.fail(kind, {"db": db_id, "sql": sql, "error": str(e)[:300]})
            _write(details, {"db": db_id, "sql": sql, "kind": kind, "error": str(e)})
            continue
        tally.split_pass += 1
        checks = execute_steps(steps, db, timeout_s=timeout_s)
        tally.steps += len(checks)
        passed = [c for c in checks if c.ok]
        tally.steps_pass += len(passed)
        if len(passed) == len(checks):
            tally.complete_pass += 1
        for c in checks:
            if not c.ok:
                kind = failure_kind(c.step.operation, c.error or "")
                example = {"db": db_id, "sql": sql, "step": c.step.sql, "error": c.error}
                tally.fail(kind, example)
                _write(details, {**example, "kind": kind, "scope": c.step.scope})
        if compare_last and gold is not None and checks[-1].ok:
            tally.last_compared += 1
            last = db.execute(steps[-1].sql, timeout_s=timeout_s)
            if same_rows(gold.rows, last.rows, ordered=bool(_ORDER_BY.search(sql))):
                tally.last_equal += 1
            else:
                kind = "last step: rows differ from the query"
                tally.fail(kind, {"db": db_id, "sql": sql, "step": steps[-1].sql})
                _write(details, {"db": db_id, "sql": sql, "kind": kind, "step": steps[-1].sql})


def _write(details: Any, record: dict[str, Any]) -> None:
    if details is not None:
        details.write(json.dumps(record) + "\n")


def bird_items(root: Path, limit: int | None) -> list[tuple[str, str]]:
    rows = json.loads((root / "bird" / "dev.json").read_text())
    items = [(r["SQL"], r["db_id"]) for r in rows]
    return items[:limit] if limit else items


def spider_items(root: Path, limit: int | None) -> tuple[list[tuple[str, str]], int]:
    items, skipped = [], 0
    for line in (root / "spider" / "dev_gold.sql").read_text().splitlines():
        if not line.strip():
            continue
        sql, db_id = line.rsplit("\t", 1)
        if db_id.strip() in SPIDER_MISSING:
            skipped += 1
            continue
        items.append((sql, db_id.strip()))
    return (items[:limit] if limit else items), skipped


def _by_db(tables_json: Path) -> dict[str, dict[str, Any]]:
    return {entry["db_id"]: entry for entry in json.loads(tables_json.read_text())}


class Databases:
    """Opens each database once; closes them all at the end."""

    def __init__(self, locate: Any, timeout_s: float):
        self.locate = locate
        self.timeout_s = timeout_s
        self.open: dict[str, GuardedDatabase] = {}

    def __call__(self, db_id: str) -> GuardedDatabase:
        if db_id not in self.open:
            self.open[db_id] = GuardedDatabase(self.locate(db_id), timeout_s=self.timeout_s,
                                               max_rows=100_000)
        return self.open[db_id]

    def close(self) -> None:
        for db in self.open.values():
            db.close()


def run(limit: int | None, timeout_s: float, details_path: str | None) -> dict[str, Any]:
    root = data_dir()
    started = time.monotonic()
    details = open(details_path, "w") if details_path else None
    result: dict[str, Any] = {"limit": limit, "timeout_s": timeout_s}
    failures: dict[str, Any] = {}
    try:
        bird_tables = _by_db(root / "bird" / "dev_tables.json")
        with tempfile.TemporaryDirectory(prefix="list_coverage_") as tmp:
            def bird_path(db_id: str) -> Path:
                return schema_only_database(bird_tables[db_id], Path(tmp) / f"{db_id}.sqlite")

            bird = Tally()
            dbs = Databases(bird_path, timeout_s)
            t0 = time.monotonic()
            try:
                measure(bird_items(root, limit), dbs,
                        {k: column_map(v) for k, v in bird_tables.items()}, bird,
                        timeout_s=timeout_s, compare_last=False, details=details)
            finally:
                dbs.close()
            result.update(bird.figures("bird"))
            result["bird_seconds"] = round(time.monotonic() - t0, 2)
            failures["bird"] = bird.failure_report()

        spider_tables = _by_db(root / "spider" / "tables.json")
        items, skipped = spider_items(root, limit)
        spider = Tally()
        dbs = Databases(lambda d: root / "spider" / "database" / d / f"{d}.sqlite", timeout_s)
        t0 = time.monotonic()
        try:
            measure(items, dbs, {k: column_map(v) for k, v in spider_tables.items()}, spider,
                    timeout_s=timeout_s, compare_last=True, details=details)
        finally:
            dbs.close()
        result.update(spider.figures("spider"))
        result["spider_skipped_no_database"] = skipped
        result["spider_last_step_compared"] = spider.last_compared
        result["spider_last_step_equal"] = spider.last_equal
        result["spider_seconds"] = round(time.monotonic() - t0, 2)
        failures["spider"] = spider.failure_report()
    finally:
        if details is not None:
            details.close()
    result["elapsed_s"] = round(time.monotonic() - started, 2)
    result["failures"] = failures
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="first N queries of each set")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds per statement")
    parser.add_argument("--details", default=None, help="write every failure to this JSONL file")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.limit, args.timeout, args.details)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
