"""Retrieved values as prompts and schema views show them.

Values are found by :mod:`sqlchorus.tools.values`; these helpers turn its results
(``{"table.column": [{"value", "score", "keyword"}, ...]}``) into text.
"""

from __future__ import annotations

from typing import Any


def values_text(values: dict[str, list[dict[str, Any]]] | None) -> str:
    """Retrieved values as prompt text: one ``table.column: 'a', 'b'`` line per column."""
    if not values:
        return "(none)"
    lines = []
    for key, hits in values.items():
        shown = ", ".join(repr(h["value"]) for h in hits)
        lines.append(f"{key}: {shown}")
    return "\n".join(lines)


def values_by_column(values: dict[str, list[dict[str, Any]]] | None) -> dict[str, list[str]]:
    """Retrieved values reduced to their text, keyed by ``table.column``, for schema views."""
    return {key: [h["value"] for h in hits] for key, hits in (values or {}).items()}
