"""Execution results as comparable values: fingerprints for clustering, previews for prompts."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from sqlchorus.tools.engines.sqlite import GuardedDatabase, SqlError
from sqlchorus.tools.json_values import BLOB_TYPES, blob_text


def normalise_value(value: Any) -> Any:
    """A value as it should compare: floats rounded, bytes by digest, text as is."""
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        return round(value, 6)
    if isinstance(value, BLOB_TYPES):
        return "blob:" + hashlib.sha1(bytes(value)).hexdigest()
    return value


def fingerprint(rows: Sequence[Sequence[Any]]) -> str:
    """A digest of the rows as a bag: equal for the same rows in any order.

    Column order matters (it is part of what a query answers); row order does not, so two
    candidates that differ only in ORDER BY of an unordered question fall in one cluster.
    """
    keys = sorted(repr(tuple(normalise_value(v) for v in row)) for row in rows)
    digest = hashlib.sha1()
    for key in keys:
        digest.update(key.encode("utf-8", "replace"))
        digest.update(b"\x00")
    return digest.hexdigest()[:16]


def preview(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, limit: int = 5, width: int = 60) -> str:
    """A few rows as text, for prompts and messages."""
    if not rows:
        return "The query returned no rows."
    shown = []
    for row in rows[:limit]:
        cells = []
        for value in row:
            text = blob_text(value) if isinstance(value, BLOB_TYPES) else repr(value)
            cells.append(text if len(text) <= width else text[: width - 3] + "...")
        shown.append("(" + ", ".join(cells) + ")")
    more = f"\n... {len(rows) - limit} more rows" if len(rows) > limit else ""
    return f"Columns: {', '.join(columns)}\n" + "\n".join(shown) + more


def check_sql(db: GuardedDatabase, sql: str, *, columns: bool = False) -> dict[str, Any]:
    """Run one candidate through the guard and say how it went.

    Returns ``status`` (``ok``: rows, ``empty``: no rows, ``error``), ``error`` and
    ``error_kind`` (the guard's typed error), ``fingerprint`` of the rows and ``row_count``;
    with ``columns``, also the result's column count (None for an error).
    """
    try:
        result = db.execute(sql)
    except SqlError as e:
        failed = {"status": "error", "error": e.message, "error_kind": e.kind, "fingerprint": None, "row_count": None}
        return {**failed, "columns": None} if columns else failed
    checked = {
        "status": "ok" if result.rows else "empty",
        "error": None,
        "error_kind": None,
        "fingerprint": fingerprint(result.rows),
        "row_count": result.row_count,
    }
    return {**checked, "columns": len(result.columns)} if columns else checked
