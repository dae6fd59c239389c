"""Schema views: one :class:`DatabaseSchema` rendered as text in several formats and at three
filter levels, as N-rep uses them for schema linking and candidate generation.

Formats (:data:`SCHEMA_FORMATS`), after the N-rep paper's appendix E:

* ``ddl``: ``CREATE TABLE`` statements, keys as table constraints, with a ``--`` comment after
  each column holding its description and example values. Names are double-quoted only where
  SQLite needs it, so the text stays valid SQLite (executing it recreates the tables). Column
  pairs that together reference a compound primary key are shown as one ``FOREIGN KEY``.
* ``m-schema``: XiYan-SQL's M-Schema: ``【DB_ID】``, ``【Schema】``, one ``# Table:`` block of
  ``(column:TYPE, Primary Key, description, Examples: [..])`` tuples per table, then
  ``【Foreign keys】`` as ``table.column=table.column`` lines.
* ``mac-schema``: MAC-SQL's selector format: ``(column, description. Value examples: [..].)``
  tuples, where a column without a description shows its name in words, and the foreign keys.
* ``json``: a stable JSON document (tables, columns with type and notes, primary key, foreign
  keys), keys in schema order, indented by two spaces.
* ``markdown``: a heading and a table of columns per table.

Levels (:data:`LEVELS`): ``full`` shows the whole schema; ``tables`` shows the linked tables with
all their columns; ``columns`` shows the linked tables with only their linked columns, plus the
columns of every foreign key between two shown tables, so the view still says how to join them
(a linked table with no linked column shows its primary key, or all its columns if it has none).
A level other than ``full`` with no usable links falls back to the whole schema. Foreign keys are
shown when both of their columns are shown.

Rendering is deterministic: the same schema and arguments give the same text. ``shuffle_seed``
reorders tables and the columns inside each table with a seeded generator, for candidate
diversity. Retrieved values (``values``, keyed ``"table.column"``) are shown beside their column
as ``Matched values``, apart from the sampled examples. Columns without a declared type show
``ANY``.
"""

from __future__ import annotations

import functools
import json
import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlchorus.tools.json_values import json_value
from sqlchorus.tools.schema.links import dotted_column
from sqlchorus.tools.engines.catalog import Column, DatabaseSchema, ForeignKey, Table

SCHEMA_FORMATS: tuple[str, ...] = ("ddl", "m-schema", "mac-schema", "json", "markdown")
LEVELS: tuple[str, ...] = ("full", "tables", "columns")

_FORMAT_ALIASES = {
    "mschema": "m-schema",
    "m_schema": "m-schema",
    "macschema": "mac-schema",
    "mac_schema": "mac-schema",
    "mac": "mac-schema",
    "md": "markdown",
    "sql": "ddl",
}

# SQLite's keywords (https://sqlite.org/lang_keywords.html): a name equal to one is quoted.
_SQLITE_KEYWORDS = frozenset(
    """ABORT ACTION ADD AFTER ALL ALTER ALWAYS ANALYZE AND AS ASC ATTACH AUTOINCREMENT BEFORE
    BEGIN BETWEEN BY CASCADE CASE CAST CHECK COLLATE COLUMN COMMIT CONFLICT CONSTRAINT CREATE
    CROSS CURRENT CURRENT_DATE CURRENT_TIME CURRENT_TIMESTAMP DATABASE DEFAULT DEFERRABLE DEFERRED
    DELETE DESC DETACH DISTINCT DO DROP EACH ELSE END ESCAPE EXCEPT EXCLUDE EXCLUSIVE EXISTS
    EXPLAIN FAIL FILTER FIRST FOLLOWING FOR FOREIGN FROM FULL GENERATED GLOB GROUP GROUPS HAVING
    IF IGNORE IMMEDIATE IN INDEX INDEXED INITIALLY INNER INSERT INSTEAD INTERSECT INTO IS ISNULL
    JOIN KEY LAST LEFT LIKE LIMIT MATCH MATERIALIZED NATURAL NO NOT NOTHING NOTNULL NULL NULLS OF
    OFFSET ON OR ORDER OTHERS OUTER OVER PARTITION PLAN PRAGMA PRECEDING PRIMARY QUERY RAISE RANGE
    RECURSIVE REFERENCES REGEXP REINDEX RELEASE RENAME REPLACE RESTRICT RETURNING RIGHT ROLLBACK ROW
    ROWS SAVEPOINT SELECT SET TABLE TEMP TEMPORARY THEN TIES TO TRANSACTION TRIGGER UNBOUNDED UNION
    UNIQUE UPDATE USING VACUUM VALUES VIEW VIRTUAL WHEN WHERE WINDOW WITH WITHOUT""".split()
)
_QUOTE_PAIRS = (('"', '"'), ("`", "`"), ("[", "]"), ("'", "'"))
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


# -- selection --------------------------------------------------------------------------------


@dataclass
class _ShownTable:
    table: Table
    columns: list[Column]
    foreign_keys: list[ForeignKey] = field(default_factory=list)


def render_view(
    schema: DatabaseSchema,
    fmt: str,
    *,
    level: str = "full",
    links: Mapping[str, Sequence[str]] | None = None,
    values: Mapping[str, Sequence[Any]] | None = None,
    shuffle_seed: int | None = None,
    sample_values: int = 3,
) -> str:
    """Render ``schema`` as text.

    Args:
        schema: the schema to show.
        fmt: one of :data:`SCHEMA_FORMATS`.
        level: one of :data:`LEVELS` (see the module docstring for what each keeps).
        links: linked columns per table, as a schema linker returns them; names match
            case-insensitively and unknown names are ignored (see :func:`resolve_links`).
        values: retrieved values per ``"table.column"`` (case-insensitive), shown beside the
            column in addition to its sampled examples.
        shuffle_seed: when given, tables and columns are shuffled with this seed.
        sample_values: sampled examples shown per column at most (0 shows none).

    Returns:
        The view, without a trailing newline.

    Raises:
        ValueError: an unknown format or level.
    """
    name = _format_name(fmt)
    if level not in LEVELS:
        raise ValueError(f"Unknown schema level {level!r}; choose one of {', '.join(LEVELS)}.")
    shown = _select(schema, level, resolve_links(schema, links) if links else {})
    if shuffle_seed is not None:
        rng = random.Random(shuffle_seed)
        rng.shuffle(shown)
        for item in shown:
            rng.shuffle(item.columns)
    matched = {str(k).strip().lower(): list(v) for k, v in (values or {}).items()}
    notes = _Notes(max(sample_values, 0), matched)
    return _RENDERERS[name](schema.name, shown, notes)


def resolve_links(
    schema: DatabaseSchema, links: Mapping[str, Sequence[str]] | None
) -> dict[str, list[str]]:
    """Normalise schema links to the schema's own spelling and drop unknown names.

    Table and column names match case-insensitively, ignoring surrounding whitespace and
    quotes (``"x"``, ```x```, ``[x]``). A column may be written ``table.column``; if it names
    another known table, it is linked there. A known table whose columns are all unknown stays
    linked with an empty list.

    Returns:
        ``{table: [columns]}`` in schema order, columns in column order.
    """
    chosen: dict[str, set[str]] = {}
    for raw_table, raw_columns in (links or {}).items():
        table = schema.table(_unquote(str(raw_table)))
        if table is None:
            continue
        chosen.setdefault(table.name, set())
        if isinstance(raw_columns, str):
            raw_columns = [raw_columns]
        for raw in raw_columns or []:
            owner, column = _find_column(schema, table, str(raw))
            if column is not None:
                chosen.setdefault(owner.name, set()).add(column.name)
    return {
        t.name: [c.name for c in t.columns if c.name in chosen[t.name]]
        for t in schema.tables
        if t.name in chosen
    }


def _format_name(fmt: str) -> str:
    key = str(fmt).strip().lower()
    key = _FORMAT_ALIASES.get(key, key)
    if key not in SCHEMA_FORMATS:
        raise ValueError(
            f"Unknown schema format {fmt!r}; choose one of {', '.join(SCHEMA_FORMATS)}."
        )
    return key


def _unquote(name: str) -> str:
    name = name.strip()
    while len(name) >= 2 and (name[0], name[-1]) in _QUOTE_PAIRS:
        name = name[1:-1].strip()
    return name


def _find_column(schema: DatabaseSchema, table: Table, raw: str) -> tuple[Table, Column | None]:
    name = _unquote(raw)
    column = table.column(name)
    if column is not None or "." not in name:
        return table, column
    # ``table.column`` with either part quoted or not: ```frpm`.`Free Meal Count (K-12)``` is not
    # one quoted name, and a column's own brackets and dashes are not separators.
    dotted = dotted_column(raw)
    if dotted is None:
        return table, None
    owner = schema.table(_unquote(dotted[0]))
    if owner is None:
        return table, None
    return owner, owner.column(_unquote(dotted[1]))


def _select(
    schema: DatabaseSchema, level: str, links: dict[str, list[str]]
) -> list[_ShownTable]:
    if level == "full" or not links:
        shown = [_ShownTable(t, list(t.columns)) for t in schema.tables]
    else:
        tables = [t for t in schema.tables if t.name in links]
        if level == "tables":
            shown = [_ShownTable(t, list(t.columns)) for t in tables]
        else:
            shown = _select_columns(tables, links)
    names = {s.table.name.lower(): s for s in shown}
    for item in shown:
        own = {c.name.lower() for c in item.columns}
        for fk in item.table.foreign_keys:
            target = names.get(fk.ref_table.lower())
            if target is None or fk.column.lower() not in own:
                continue
            if any(c.name.lower() == fk.ref_column.lower() for c in target.columns):
                item.foreign_keys.append(fk)
    return shown


def _primary_key(item: _ShownTable) -> list[str]:
    """Shown primary-key columns in the table's own order, whatever order the columns are in."""
    shown = {c.name for c in item.columns}
    return [name for name in item.table.primary_key if name in shown]


def _select_columns(tables: list[Table], links: dict[str, list[str]]) -> list[_ShownTable]:
    wanted = {t.name.lower(): {c.lower() for c in links[t.name]} for t in tables}
    for table in tables:
        for fk in table.foreign_keys:
            if fk.ref_table.lower() in wanted:
                wanted[table.name.lower()].add(fk.column.lower())
                wanted[fk.ref_table.lower()].add(fk.ref_column.lower())
    shown = []
    for table in tables:
        keep = wanted[table.name.lower()]
        columns = [c for c in table.columns if c.name.lower() in keep]
        if not columns:
            columns = [c for c in table.columns if c.primary_key] or list(table.columns)
        shown.append(_ShownTable(table, columns))
    return shown


# -- column notes -----------------------------------------------------------------------------


@dataclass
class _Notes:
    samples: int
    matched: dict[str, list[Any]]

    def examples(self, column: Column) -> list[Any]:
        return list(column.samples[: self.samples]) if self.samples else []

    def matches(self, table: Table, column: Column) -> list[Any]:
        return self.matched.get(f"{table.name}.{column.name}".lower(), [])


def _one_line(value: Any) -> str:
    return " ".join(str(value).split())


@functools.lru_cache(maxsize=65_536)
def _norm(text: str) -> str:
    return re.sub(r"[^0-9a-z]", "", text.lower())


def _description(column: Column) -> str | None:
    """The column's readable name and description, without repeating its name."""
    parts: list[str] = []
    for text in (column.full_name, column.description):
        if not text:
            continue
        key = _norm(text)
        if key == _norm(column.name) or any(key == _norm(p) for p in parts):
            continue
        parts.append(_one_line(text).rstrip("."))
    return "; ".join(parts) or None


def _value_description(column: Column) -> str | None:
    return _one_line(column.value_description).rstrip(".") if column.value_description else None


def _type(column: Column) -> str:
    return column.type.strip().upper() or "ANY"


def _plain(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return _one_line(value)


def _python_literal(value: Any) -> str:
    return repr(_one_line(value)) if isinstance(value, str) else _plain(value)


def _sql_literal(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _plain(value)
    return "'" + _one_line(value).replace("'", "''") + "'"


def _sql_name(name: str) -> str:
    if _PLAIN_NAME.match(name) and name.upper() not in _SQLITE_KEYWORDS:
        return name
    return '"' + name.replace('"', '""') + '"'


def _backtick(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _backtick_name(name: str) -> str:
    if _PLAIN_NAME.match(name) and name.upper() not in _SQLITE_KEYWORDS:
        return name
    return _backtick(name)


# -- formats ----------------------------------------------------------------------------------


def _render_ddl(db_name: str, shown: list[_ShownTable], notes: _Notes) -> str:
    blocks = [f"-- Database: {_one_line(db_name)}"]
    tables = {s.table.name.lower(): s.table for s in shown}
    for item in shown:
        table = item.table
        lines = []
        if table.is_view:
            lines.append(f"-- {_sql_name(table.name)} is a view.")
        if table.description:
            lines.append(f"-- {_one_line(table.description)}")
        entries: list[tuple[str, str | None]] = []
        for column in item.columns:
            text = f"{_sql_name(column.name)} {_type(column)}"
            if column.not_null:
                text += " NOT NULL"
            entries.append((text, _ddl_comment(table, column, notes)))
        pk = _primary_key(item)
        if pk:
            entries.append(("PRIMARY KEY (" + ", ".join(_sql_name(c) for c in pk) + ")", None))
        for group in _ddl_foreign_keys(item, tables):
            entries.append(
                (
                    "FOREIGN KEY (" + ", ".join(_sql_name(fk.column) for fk in group) + ") "
                    f"REFERENCES {_sql_name(group[0].ref_table)} ("
                    + ", ".join(_sql_name(fk.ref_column) for fk in group) + ")",
                    None,
                )
            )
        lines.append(f"CREATE TABLE {_sql_name(table.name)} (")
        for i, (text, comment) in enumerate(entries):
            comma = "," if i < len(entries) - 1 else ""
            lines.append(f"  {text}{comma}" + (f" -- {comment}" if comment else ""))
        lines.append(");")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _ddl_foreign_keys(item: _ShownTable, tables: dict[str, Table]) -> list[list[ForeignKey]]:
    """Foreign keys as DDL clauses: pairs that together reference the whole compound primary
    key of one table are put back into one clause; all others stay one clause per column."""
    by_target: dict[str, list[ForeignKey]] = {}
    for fk in item.foreign_keys:
        by_target.setdefault(fk.ref_table.lower(), []).append(fk)
    groups: list[list[ForeignKey]] = []
    for target, fks in by_target.items():
        pk = [c.lower() for c in tables[target].primary_key]
        refs = [fk.ref_column.lower() for fk in fks]
        if len(fks) > 1 and len(set(refs)) == len(refs) and sorted(refs) == sorted(pk):
            groups.append(sorted(fks, key=lambda fk: pk.index(fk.ref_column.lower())))
        else:
            groups.extend([fk] for fk in fks)
    return groups


def _ddl_comment(table: Table, column: Column, notes: _Notes) -> str | None:
    parts = []
    if desc := _description(column):
        parts.append(desc)
    if vd := _value_description(column):
        parts.append(f"Value description: {vd}")
    if examples := notes.examples(column):
        parts.append("Examples: " + ", ".join(_sql_literal(v) for v in examples))
    if matches := notes.matches(table, column):
        parts.append("Matched values: " + ", ".join(_sql_literal(v) for v in matches))
    return ". ".join(parts) or None


def _render_bracketed(
    db_name: str,
    shown: list[_ShownTable],
    field_text: Callable[[Table, Column], str],
    fk_line: Callable[[Table, ForeignKey], str],
) -> str:
    """The frame M-Schema and MAC-SQL share: the database, each table's header and its fields
    in brackets, then the foreign keys; ``field_text`` and ``fk_line`` write what differs."""
    lines = [f"【DB_ID】 {_one_line(db_name)}", "【Schema】"]
    for item in shown:
        table = item.table
        header = f"# {'View' if table.is_view else 'Table'}: {table.name}"
        if table.description:
            header += f", {_one_line(table.description)}"
        lines.append(header)
        lines.append("[")
        fields = [field_text(table, column) for column in item.columns]
        if fields:
            lines.append(",\n".join(fields))
        lines.append("]")
    fks = [fk_line(item.table, fk) for item in shown for fk in item.foreign_keys]
    if fks:
        lines.append("【Foreign keys】")
        lines.extend(fks)
    return "\n".join(lines)


def _render_m_schema(db_name: str, shown: list[_ShownTable], notes: _Notes) -> str:
    def field_text(table: Table, column: Column) -> str:
        parts = [f"{column.name}:{_type(column)}"]
        if column.primary_key:
            parts.append("Primary Key")
        comment = "; ".join(
            p for p in (_description(column), _value_description(column)) if p
        )
        if comment:
            parts.append(comment)
        if examples := notes.examples(column):
            parts.append("Examples: [" + ", ".join(_plain(v) for v in examples) + "]")
        if matches := notes.matches(table, column):
            parts.append("Matched values: [" + ", ".join(_plain(v) for v in matches) + "]")
        return "(" + ", ".join(parts) + ")"

    def fk_line(table: Table, fk: ForeignKey) -> str:
        return (f"{_backtick_name(table.name)}.{_backtick_name(fk.column)}="
                f"{_backtick_name(fk.ref_table)}.{_backtick_name(fk.ref_column)}")

    return _render_bracketed(db_name, shown, field_text, fk_line)


def _render_mac_schema(db_name: str, shown: list[_ShownTable], notes: _Notes) -> str:
    def field_text(table: Table, column: Column) -> str:
        desc = _description(column) or _one_line(column.name.replace("_", " "))
        text = f"  ({column.name}, {desc}."
        if examples := notes.examples(column):
            listed = ", ".join(_python_literal(v) for v in examples)
            text += f" Value examples: [{listed}]."
        if matches := notes.matches(table, column):
            listed = ", ".join(_python_literal(v) for v in matches)
            text += f" Matched values: [{listed}]."
        if vd := _value_description(column):
            text += f" Value description: {vd}."
        return text + ")"

    def fk_line(table: Table, fk: ForeignKey) -> str:
        return (f"{_backtick_name(table.name)}.{_backtick(fk.column)} = "
                f"{_backtick_name(fk.ref_table)}.{_backtick(fk.ref_column)}")

    return _render_bracketed(db_name, shown, field_text, fk_line)


def _json_value(value: Any) -> Any:
    # The view is strict JSON, which has no NaN or infinity.
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return json_value(value)


def _render_json(db_name: str, shown: list[_ShownTable], notes: _Notes) -> str:
    tables: dict[str, Any] = {}
    for item in shown:
        table = item.table
        entry: dict[str, Any] = {}
        if table.is_view:
            entry["view"] = True
        if table.description:
            entry["description"] = _one_line(table.description)
        if table.row_count is not None:
            entry["row_count"] = table.row_count
        columns: dict[str, Any] = {}
        for column in item.columns:
            info: dict[str, Any] = {"type": _type(column)}
            if column.not_null:
                info["not_null"] = True
            if desc := _description(column):
                info["description"] = desc
            if vd := _value_description(column):
                info["value_description"] = vd
            if examples := notes.examples(column):
                info["examples"] = [_json_value(v) for v in examples]
            if matches := notes.matches(table, column):
                info["matched_values"] = [_json_value(v) for v in matches]
            columns[column.name] = info
        entry["columns"] = columns
        entry["keys"] = {"primary_key": _primary_key(item)}
        entry["foreign_keys"] = [
            {
                "column": fk.column,
                "referenced_table": fk.ref_table,
                "referenced_column": fk.ref_column,
            }
            for fk in item.foreign_keys
        ]
        tables[table.name] = entry
    return json.dumps({"database": db_name, "tables": tables}, indent=2, ensure_ascii=False)


def _cell(text: str) -> str:
    return _one_line(text).replace("|", "\\|")


def _render_markdown(db_name: str, shown: list[_ShownTable], notes: _Notes) -> str:
    blocks = [f"# Database: {_one_line(db_name)}"]
    for item in shown:
        table = item.table
        heading = f"## {'View' if table.is_view else 'Table'}: {_cell(table.name)}"
        if table.row_count is not None:
            heading += f" ({table.row_count} row{'' if table.row_count == 1 else 's'})"
        lines = [heading]
        if table.description:
            lines += ["", _one_line(table.description)]
        fk_of: dict[str, list[str]] = {}
        for fk in item.foreign_keys:
            fk_of.setdefault(fk.column.lower(), []).append(f"FK -> {fk.ref_table}.{fk.ref_column}")
        described = any(_description(c) or _value_description(c) for c in item.columns)
        matched = any(notes.matches(table, c) for c in item.columns)
        header = ["Column", "Type", "Key"]
        if described:
            header.append("Description")
        header.append("Examples")
        if matched:
            header.append("Matched values")
        lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for column in item.columns:
            keys = (["PK"] if column.primary_key else []) + fk_of.get(column.name.lower(), [])
            row = [column.name, _type(column), ", ".join(keys)]
            if described:
                desc = _description(column) or ""
                if vd := _value_description(column):
                    desc = f"{desc}. Values: {vd}" if desc else f"Values: {vd}"
                row.append(desc)
            row.append(", ".join(_plain(v) for v in notes.examples(column)))
            if matched:
                row.append(", ".join(_plain(v) for v in notes.matches(table, column)))
            lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


_RENDERERS: dict[str, Callable[[str, list[_ShownTable], _Notes], str]] = {
    "ddl": _render_ddl,
    "m-schema": _render_m_schema,
    "mac-schema": _render_mac_schema,
    "json": _render_json,
    "markdown": _render_markdown,
}
