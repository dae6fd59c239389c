"""Exact and fuzzy matching of keywords against the distinct text values of a database.

This in-memory matcher reads up to ``max_values_per_column`` distinct values of every text
column once, then scores each keyword against them with rapidfuzz: exact (case-insensitive)
matches score 100, others by ``WRatio`` over lower-cased text. It suits small and medium
databases; it holds every value it read in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rapidfuzz import fuzz, process, utils

from sqlchorus.tools.database import GuardedDatabase, SqlError
from sqlchorus.tools.schema import DatabaseSchema, quote_identifier

_TEXT_TYPES = ("CHAR", "CLOB", "TEXT", "VARCHAR", "STRING", "")


@dataclass
class ValueMatcher:
    """Distinct text values per ``table.column`` and a fuzzy search over them."""

    columns: dict[str, list[str]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        db: GuardedDatabase,
        schema: DatabaseSchema,
        *,
        max_values_per_column: int = 5_000,
        max_value_chars: int = 200,
        timeout_s: float = 5.0,
    ) -> ValueMatcher:
        matcher = cls()
        for table in schema.tables:
            for column in table.columns:
                key = f"{table.name}.{column.name}"
                declared = (column.type or "").upper()
                if not any(t in declared for t in _TEXT_TYPES if t) and declared:
                    continue
                sql = (
                    f"SELECT DISTINCT {quote_identifier(column.name)} FROM "
                    f"{quote_identifier(table.name)} WHERE typeof({quote_identifier(column.name)})"
                    f" = 'text' LIMIT {max_values_per_column + 1}"
                )
                try:
                    result = db.execute(sql, timeout_s=timeout_s, max_rows=max_values_per_column + 1)
                except SqlError as e:
                    matcher.skipped[key] = f"could not read values: {e.message}"
                    continue
                values = [
                    r[0] for r in result.rows if isinstance(r[0], str) and 0 < len(r[0]) <= max_value_chars
                ]
                if len(result.rows) > max_values_per_column:
                    matcher.skipped[key] = (
                        f"more than {max_values_per_column} distinct values; only the first were kept"
                    )
                    values = values[:max_values_per_column]
                if values:
                    matcher.columns[key] = values
        return matcher

    def search(
        self, keywords: list[str], *, top_k: int = 5, threshold: float = 80.0
    ) -> dict[str, list[dict[str, Any]]]:
        """Best values per column for the keywords, best first, each with its score and keyword."""
        found: dict[str, dict[str, dict[str, Any]]] = {}
        for keyword in keywords:
            query = keyword.strip()
            if len(query) < 2:
                continue
            folded = query.casefold()
            for key, values in self.columns.items():
                hits = process.extract(
                    query,
                    values,
                    scorer=fuzz.WRatio,
                    processor=utils.default_process,
                    limit=top_k,
                    score_cutoff=threshold,
                )
                for value, score, _ in hits:
                    if value.casefold() == folded:
                        score = 100.0
                    best = found.setdefault(key, {}).get(value)
                    if best is None or score > best["score"]:
                        found[key][value] = {
                            "value": value,
                            "score": round(float(score), 2),
                            "keyword": keyword,
                        }
        return {
            key: sorted(hits.values(), key=lambda h: (-h["score"], h["value"]))[:top_k]
            for key, hits in sorted(found.items())
        }


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
