"""Finding one's way in a schema a little at a time: tables and columns by name pattern, and one
table at a chosen level of detail. What the MCP server's and the LangChain toolkit's
``search_schema`` and ``describe_table`` return."""

from __future__ import annotations

import fnmatch
from typing import Any

from sqlchorus.tools.json_values import json_value
from sqlchorus.tools.engines.catalog import DatabaseSchema, Table

SEARCH_LIMIT = 100
"""Tables or columns one search returns at most."""


def _pattern(pattern: str) -> Any:
    """A case-insensitive matcher: ``*``/``%`` and ``?``/``_`` are wildcards; no wildcard
    matches anywhere in the name."""
    text = (pattern or "").strip().lower().replace("%", "*").replace("_", "?") if any(
        c in (pattern or "") for c in "*%?") else f"*{(pattern or '').strip().lower()}*"
    return lambda name: fnmatch.fnmatchcase(name.lower(), text)


def table_detail(table: Table, detail: str) -> dict[str, Any]:
    """A table at a detail level: ``names`` (its columns' names), ``summary`` (types, keys, row
    count), ``full`` (also foreign keys, descriptions and sample values)."""
    if detail == "names":
        return {"table": table.name, "columns": [c.name for c in table.columns]}
    data: dict[str, Any] = {
        "table": table.name, "rows": table.row_count, "is_view": table.is_view, "primary_key": table.primary_key,
        "columns": [{"name": c.name, "type": c.type} for c in table.columns],
    }
    if detail == "full":
        data["description"] = table.description
        data["columns"] = [
            {"name": c.name, "type": c.type, "primary_key": c.primary_key, "not_null": c.not_null,
             "description": c.description or c.full_name, "samples": [json_value(v) for v in c.samples]}
            for c in table.columns]
        data["foreign_keys"] = [{"column": f.column, "ref_table": f.ref_table, "ref_column": f.ref_column}
                                for f in table.foreign_keys]
    return data


def search(schema: DatabaseSchema, pattern: str, detail: str, limit: int = SEARCH_LIMIT) -> dict[str, Any]:
    """Tables whose name matches ``pattern``, and tables with a column that does (those columns
    named), at ``detail``; ``truncated`` when more than ``limit`` matched."""
    matches = _pattern(pattern)
    found: list[dict[str, Any]] = []
    total = 0
    for table in schema.tables:
        columns = [c.name for c in table.columns if matches(c.name)]
        if not matches(table.name) and not columns:
            continue
        total += 1
        if len(found) < limit:
            entry = table_detail(table, detail)
            entry["matched"] = "table" if matches(table.name) else "columns"
            if columns:
                entry["matching_columns"] = columns
            found.append(entry)
    return {"tables": found, "matched": total, "truncated": total > limit}


def close_tables(schema: DatabaseSchema, name: str, limit: int = 3) -> list[str]:
    """The tables whose names are closest to ``name`` (for an error that names no table)."""
    from rapidfuzz import process

    return [m[0] for m in process.extract(name, [t.name for t in schema.tables], limit=limit)]
