"""Few-shot examples: the shipped files, files a user puts in their place, and train-set loaders.

Every prompt's examples live in ``prompts/<prompt>_examples.json``. A user replaces them without
touching code by pointing ``Settings.examples_dir`` at a folder holding a file of the same name;
prompts without such a file keep the shipped examples.

The generic example format, which the N-rep prompts use and :func:`load_train_file` writes::

    {"db_id": "college_2", "question": "...", "evidence": "", "sql": "SELECT ...",
     "schema": {"name": "college_2", "tables": [{"name": "course",
                "columns": [["course_id", "TEXT"], ...], "primary_key": ["course_id"],
                "foreign_keys": [["dept_name", "department", "dept_name"]]}, ...]},
     "links": {"course": ["title", "course_id"]}}

The schema is kept as structure rather than text so that an example can be rendered in the same
representation and at the same filter level as the question it accompanies. ``links`` (the
tables and columns the SQL uses) is derived from the SQL when absent.

Examples must never come from the questions a system is evaluated on: :func:`load_train_file`
takes the evaluation questions to leave out, and the test suite checks the shipped files against
the Spider and BIRD dev sets.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rapidfuzz import fuzz, utils
from sqlglot import exp
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import build_scope

from sqlchorus import prompts
from sqlchorus.tools import sql_text
from sqlchorus.tools.errors import SqlchorusError
from sqlchorus.tools.schema import Column, DatabaseSchema, ForeignKey, Table, flatten_indices


class ExamplesFileError(SqlchorusError, ValueError):
    """An examples file that is missing, not JSON, or not a list of examples."""

    kind = "examples_file"


def examples(name: str, settings: Any = None) -> list[dict[str, Any]]:
    """The few-shot examples of prompt ``name``: the user's file if there is one, else the shipped one.

    Args:
        name: the prompt name (the file is ``<name>_examples.json``).
        settings: a ``Settings`` whose ``examples_dir`` may hold a replacement file.

    Raises:
        ExamplesFileError: the user's file exists but is not a usable examples file.
    """
    folder = getattr(settings, "examples_dir", None)
    if folder:
        path = Path(folder) / f"{name}_examples.json"
        if path.exists():
            return load_examples_file(path)
    return prompts.examples(name)


def load_examples_file(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read an examples file: a JSON list of objects that each have a ``question``.

    Raises:
        ExamplesFileError: the file is not JSON or not such a list.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ExamplesFileError(f"Cannot read examples file {path}: {e}") from e
    if not isinstance(data, list) or not all(isinstance(x, dict) and x.get("question") for x in data):
        raise ExamplesFileError(f"Examples file {path} must be a JSON list of objects with a 'question'.")
    return data


def write_examples(items: Iterable[Mapping[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write examples as a JSON list, one example per line, so that diffs stay readable."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    body = ",\n".join(json.dumps(dict(x), ensure_ascii=False) for x in items)
    target.write_text(f"[\n{body}\n]\n", encoding="utf-8")
    return target


# -- schemas ---------------------------------------------------------------------------------


def compact_schema(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The compact schema of one Spider/BIRD ``tables.json`` entry (original names)."""
    tables = list(entry["table_names_original"])
    types = list(entry.get("column_types") or [])
    columns: dict[int, list[list[str]]] = {i: [] for i in range(len(tables))}
    owner: dict[int, tuple[int, str]] = {}
    for idx, (t_idx, name) in enumerate(entry["column_names_original"]):
        if t_idx < 0:
            continue
        kind = (types[idx] if idx < len(types) else "") or ""
        columns[t_idx].append([name, "" if kind.lower() == "others" else kind.upper()])
        owner[idx] = (t_idx, name)
    primary: dict[int, list[str]] = {i: [] for i in range(len(tables))}
    for item in flatten_indices(entry.get("primary_keys") or []):
        if item in owner:
            primary[owner[item][0]].append(owner[item][1])
    foreign: dict[int, list[list[str]]] = {i: [] for i in range(len(tables))}
    for pair in entry.get("foreign_keys") or []:
        if len(pair) == 2 and pair[0] in owner and pair[1] in owner:
            (t_from, c_from), (t_to, c_to) = owner[pair[0]], owner[pair[1]]
            foreign[t_from].append([c_from, tables[t_to], c_to])
    return {
        "name": entry["db_id"],
        "tables": [
            {"name": t, "columns": columns[i], "primary_key": primary[i], "foreign_keys": foreign[i]}
            for i, t in enumerate(tables)
        ],
    }


def schema_of(compact: Mapping[str, Any]) -> DatabaseSchema:
    """A :class:`DatabaseSchema` from a compact schema, ready for ``render_view``."""
    tables = []
    for t in compact["tables"]:
        pk = set(t.get("primary_key") or [])
        tables.append(
            Table(
                name=t["name"],
                columns=[Column(name=c[0], type=c[1] if len(c) > 1 else "", primary_key=c[0] in pk) for c in t["columns"]],
                foreign_keys=[ForeignKey(column=fk[0], ref_table=fk[1], ref_column=fk[2]) for fk in t.get("foreign_keys") or []],
            )
        )
    return DatabaseSchema(name=compact.get("name", ""), tables=tables)


def sql_links(sql: str, schema: DatabaseSchema) -> dict[str, list[str]]:
    """The tables and columns ``sql`` uses, in the schema's spelling and order.

    Column references are resolved through aliases and sub-queries; a table used only for
    ``COUNT(*)`` is kept with no columns. SQL that does not parse gives no links.
    """
    mapping = {t.name.lower(): {c.name.lower(): "TEXT" for c in t.columns} for t in schema.tables}
    try:
        tree = sql_text.parse_one(sql)
        root = build_scope(qualify(tree, schema=mapping, dialect="sqlite", validate_qualify_columns=False))
    except Exception:  # analysis only: a query sqlglot cannot qualify simply has no links
        return {}
    used: dict[str, set[str]] = {}
    if root is not None:
        for scope in root.traverse():
            for source in scope.sources.values():
                if isinstance(source, exp.Table):
                    used.setdefault(source.name.lower(), set())
            for column in scope.columns:
                source = scope.sources.get(column.table)
                if isinstance(source, exp.Table):
                    used.setdefault(source.name.lower(), set()).add(column.name.lower())
    out: dict[str, list[str]] = {}
    for table in schema.tables:
        if table.name.lower() in used:
            names = used[table.name.lower()]
            out[table.name] = [c.name for c in table.columns if c.name.lower() in names]
    return out


def links_of(example: Mapping[str, Any]) -> dict[str, list[str]]:
    """An example's links: its own ``links``, else derived from its SQL and schema."""
    if example.get("links"):
        return {t: list(cols) for t, cols in example["links"].items()}
    if not example.get("schema") or not example.get("sql"):
        return {}
    return sql_links(example["sql"], schema_of(example["schema"]))


# -- train-style files -----------------------------------------------------------------------


def _normalise(question: str) -> str:
    return " ".join(question.lower().split())


def load_train_file(
    questions_path: str | os.PathLike[str],
    tables_path: str | os.PathLike[str],
    *,
    exclude_questions: Iterable[str] = (),
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Examples in the generic format from a Spider or BIRD train-style file.

    Spider files give ``query`` and no evidence; BIRD files give ``SQL`` and ``evidence``.
    Questions whose database is not in ``tables_path`` are skipped.

    Args:
        questions_path: ``train_spider.json``, BIRD ``train.json``, or any file of that shape.
        tables_path: the matching ``tables.json`` / ``train_tables.json``.
        exclude_questions: questions to leave out (the evaluation set), compared without case
            and extra spaces.
        limit: keep at most this many examples.
    """
    rows = json.loads(Path(questions_path).read_text(encoding="utf-8"))
    entries = {e["db_id"]: e for e in json.loads(Path(tables_path).read_text(encoding="utf-8"))}
    excluded = {_normalise(q) for q in exclude_questions}
    schemas: dict[str, dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for row in rows:
        sql = (row.get("query") or row.get("SQL") or "").strip().rstrip(";").strip()
        db_id = row.get("db_id")
        if not sql or db_id not in entries or _normalise(row["question"]) in excluded:
            continue
        if db_id not in schemas:
            schemas[db_id] = compact_schema(entries[db_id])
        example = {
            "db_id": db_id,
            "question": row["question"].strip(),
            "evidence": (row.get("evidence") or "").strip(),
            "sql": sql,
            "schema": schemas[db_id],
        }
        example["links"] = links_of(example)
        out.append(example)
        if limit is not None and len(out) >= limit:
            break
    return out


def most_similar(pool: list[dict[str, Any]], question: str, k: int) -> list[dict[str, Any]]:
    """The ``k`` examples whose questions read most like ``question`` (token-set similarity),
    ties in file order. A stand-in for N-rep's embedding retrieval that needs no model."""
    scored = [
        (-fuzz.token_set_ratio(question, ex["question"], processor=utils.default_process), i)
        for i, ex in enumerate(pool)
    ]
    return [pool[i] for _, i in sorted(scored)[: max(k, 0)]]
