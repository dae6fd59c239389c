"""Benchmark and user datasets as one list of :class:`Example`.

Built-in names, read from the data folder (``SQLCHORUS_DATA``, default ``../shared/data``
relative to the repository root):

``spider-dev``
    ``spider/dev.json`` (1034 questions, in file order). The gold SQL comes from
    ``spider/dev_gold.sql`` when present (the file the official scorer reads; its queries are the
    same as dev.json's), else from dev.json. ``question_id`` is the position in the file.
    Difficulty is Spider hardness of the gold SQL: from the query's parse that ``dev.json``
    carries (its ``sql`` dictionary, what the official scorer computes hardness from) when the
    gold text is that entry's ``query``, else from the text (:mod:`sqlchorus.tools.sql.hardness`).
    Database: ``spider/database/<db>/<db>.sqlite``.
``bird-dev``
    ``bird/dev.json`` (1534 questions) with its ``difficulty`` (simple / moderate /
    challenging). Database: ``bird/dev_databases/<db>/<db>.sqlite``.
``bird-mini-dev``
    ``bird/mini_dev/mini_dev_sqlite.json`` (500 questions); gold from
    ``mini_dev_sqlite_gold.sql`` when present. Same database layout as bird-dev.

A database that is not there gives ``db_path=None``: the example is kept and counted as
missing-db by the scorer, never dropped.

A user dataset is a JSON file, either a list of examples or an object::

    {"benchmark": "spider" | "bird",        # scoring semantics, default "spider"
     "db_root": "databases",                # relative to the file, default: the file's folder
     "examples": [
        {"question": "How many singers?",   # required
         "db_id": "concert_singer",         # required
         "gold_sql": "SELECT count(*) FROM singer",  # required; "query" or "SQL" also accepted
         "question_id": 7,                  # optional, default: position in the list
         "evidence": "",                    # optional
         "difficulty": "easy",              # optional, default: Spider hardness of the gold SQL
         "db_path": "dbs/singers.sqlite"}   # optional, relative to the file's folder
     ]}

Without ``db_path`` the database is looked up as ``<db_root>/<db_id>/<db_id>.sqlite``, then
``<db_root>/<db_id>.sqlite``. Spider's and BIRD's own JSON files are valid user datasets.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlchorus.tools.sql.hardness_rules import hardness_from_spider_sql

__all__ = ["Example", "Dataset", "BUILTIN_DATASETS", "data_dir", "load_dataset"]

BUILTIN_DATASETS = ("spider-dev", "bird-dev", "bird-mini-dev")


@dataclass(frozen=True)
class Example:
    """One benchmark question.

    Attributes:
        question_id: the benchmark's id (BIRD) or the position in the file (Spider).
        db_id: database name.
        db_path: the SQLite file, or None when it is missing.
        question: the question in plain language.
        evidence: BIRD's external knowledge hint ("" when there is none).
        gold_sql: the reference query.
        difficulty: Spider hardness or BIRD difficulty.
        sqlite_path: the benchmark's SQLite file when the question is asked of a copy of it on
            another engine (:func:`sqlchorus.evaluation.engines.on_engine`); ``db_path`` then
            names the copy (a DuckDB file, a PostgreSQL URL).
    """

    question_id: int | str
    db_id: str
    db_path: Path | str | None
    question: str
    evidence: str
    gold_sql: str
    difficulty: str
    sqlite_path: Path | None = None


@dataclass
class Dataset:
    """A named list of examples and the scoring semantics that apply to it.

    Attributes:
        name: ``spider-dev``, ``bird-dev``, ``bird-mini-dev`` or the file's stem.
        benchmark: ``spider`` or ``bird``: which official semantics score it.
        examples: the questions, in file order (the order of Spider's prediction file).
        source: the file read.
        engine: the engine its databases are on: ``sqlite``, or ``postgresql``/``duckdb`` for
            copies (:func:`sqlchorus.evaluation.engines.on_engine`).
    """

    name: str
    benchmark: str
    examples: list[Example]
    source: Path
    engine: str = "sqlite"

    def __len__(self) -> int:
        return len(self.examples)

    @property
    def n_missing_db(self) -> int:
        return sum(1 for e in self.examples if e.db_path is None)


def data_dir() -> Path:
    """The benchmark data folder: ``$SQLCHORUS_DATA``, else ``../shared/data`` beside the repo."""
    env = os.environ.get("SQLCHORUS_DATA")
    if env:
        return Path(env).expanduser().resolve()
    repo_root = Path(__file__).resolve().parents[2]  # sqlchorus/evaluation/datasets.py in a checkout
    return (repo_root / ".." / "shared" / "data").resolve()


def load_dataset(name_or_path: str | os.PathLike[str], *, root: Path | None = None) -> Dataset:
    """Load a built-in benchmark by name, or a user dataset from a JSON file.

    Args:
        name_or_path: one of :data:`BUILTIN_DATASETS`, or a path to a JSON file.
        root: the data folder for built-in names (default :func:`data_dir`).

    Raises:
        FileNotFoundError: the dataset file does not exist.
        ValueError: the file is not in a format described in this module.
    """
    name = str(name_or_path)
    if name in BUILTIN_DATASETS:
        base = root or data_dir()
        if name == "spider-dev":
            return _load_spider(base / "spider", "dev.json", "dev_gold.sql", name)
        if name == "bird-dev":
            return _load_bird(base / "bird", base / "bird" / "dev.json", None, name)
        return _load_bird(
            base / "bird",
            base / "bird" / "mini_dev" / "mini_dev_sqlite.json",
            base / "bird" / "mini_dev" / "mini_dev_sqlite_gold.sql",
            name,
        )
    return _load_user(Path(name_or_path))


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"No dataset file at {path}.")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _gold_lines(path: Path | None, expected: int) -> list[str] | None:
    """SQL column of a ``SQL<TAB>db_id`` gold file, if present and of the right length."""
    if path is None or not path.is_file():
        return None
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if len(lines) != expected:
        return None
    return [ln.strip().split("\t")[0] for ln in lines]


def _existing(path: Path) -> Path | None:
    return path if path.is_file() else None


def _hardness_or_unknown(sql: str) -> str:
    # Parsing SQL text needs sqlglot, imported only when a dataset has queries without a parse.
    from sqlchorus.tools.sql.hardness import spider_hardness

    try:
        return spider_hardness(sql)
    except ValueError:
        return "unknown"


def _spider_hardness(sql: str, row: dict[str, Any]) -> str:
    """Hardness of ``sql``, from ``row``'s parsed ``sql`` dictionary when ``sql`` is ``row``'s
    query (both give the same levels on Spider dev; the dictionary needs no SQL parser)."""
    parsed = row.get("sql")
    query = row.get("query")
    if isinstance(parsed, dict) and isinstance(query, str) and query.split() == sql.split():
        try:
            return hardness_from_spider_sql(parsed)
        except (KeyError, IndexError, TypeError):
            pass
    return _hardness_or_unknown(sql)


def _load_spider(folder: Path, dev: str, gold: str, name: str) -> Dataset:
    source = folder / dev
    rows = _read_json(source)
    golds = _gold_lines(folder / gold, len(rows))
    examples = []
    for i, row in enumerate(rows):
        sql = golds[i] if golds else row["query"]
        db_id = row["db_id"]
        examples.append(
            Example(
                question_id=i,
                db_id=db_id,
                db_path=_existing(folder / "database" / db_id / f"{db_id}.sqlite"),
                question=row["question"],
                evidence="",
                gold_sql=sql,
                difficulty=_spider_hardness(sql, row),
            )
        )
    return Dataset(name=name, benchmark="spider", examples=examples, source=source)


def _load_bird(folder: Path, source: Path, gold: Path | None, name: str) -> Dataset:
    rows = _read_json(source)
    golds = _gold_lines(gold, len(rows))
    examples = []
    for i, row in enumerate(rows):
        db_id = row["db_id"]
        examples.append(
            Example(
                question_id=row.get("question_id", i),
                db_id=db_id,
                db_path=_existing(folder / "dev_databases" / db_id / f"{db_id}.sqlite"),
                question=row["question"],
                evidence=row.get("evidence") or "",
                gold_sql=golds[i] if golds else row["SQL"],
                difficulty=row.get("difficulty") or "unknown",
            )
        )
    return Dataset(name=name, benchmark="bird", examples=examples, source=source)


_GOLD_KEYS = ("gold_sql", "query", "SQL", "sql")


def _load_user(path: Path) -> Dataset:
    data = _read_json(path)
    folder = path.resolve().parent
    if isinstance(data, list):
        meta: dict[str, Any] = {}
        rows = data
    elif isinstance(data, dict) and isinstance(data.get("examples"), list):
        meta, rows = data, data["examples"]
    else:
        raise ValueError(f"{path}: expected a list of examples or an object with 'examples'.")
    benchmark = meta.get("benchmark", "spider")
    if benchmark not in ("spider", "bird"):
        raise ValueError(f"{path}: 'benchmark' must be 'spider' or 'bird', not {benchmark!r}.")
    if meta.get("db_root") is not None and not isinstance(meta["db_root"], str):
        raise ValueError(f"{path}: 'db_root' must be a path string.")
    db_root = (folder / meta["db_root"]) if meta.get("db_root") else folder
    examples = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{path}: example {i} is not an object.")
        gold = next((row[k] for k in _GOLD_KEYS if isinstance(row.get(k), str)), None)
        missing = [k for k, v in (("question", row.get("question")), ("db_id", row.get("db_id")),
                                  ("gold_sql", gold)) if not v]
        if missing:
            raise ValueError(f"{path}: example {i} lacks {', '.join(missing)}.")
        db_id = str(row["db_id"])
        if row.get("db_path"):
            if not isinstance(row["db_path"], str):
                raise ValueError(f"{path}: example {i} has a 'db_path' that is not a path string.")
            db_path = _existing(folder / row["db_path"])
        else:
            db_path = _existing(db_root / db_id / f"{db_id}.sqlite") or _existing(
                db_root / f"{db_id}.sqlite"
            )
        examples.append(
            Example(
                question_id=row.get("question_id", i),
                db_id=db_id,
                db_path=db_path,
                question=str(row["question"]),
                evidence=str(row.get("evidence") or ""),
                gold_sql=gold,
                difficulty=str(row.get("difficulty") or _spider_hardness(gold, row)),
            )
        )
    return Dataset(name=path.stem, benchmark=benchmark, examples=examples, source=path)
