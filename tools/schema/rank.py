"""Schema linking without a model: tables and columns ranked by what the question says.

A small local model links a schema poorly, and every prompt token costs it time. This ranker
links deterministically instead: a table scores by the question's words that match its name and
its columns' names (a plural or singular form counts, ``customer`` for ``customers``), and by the
retrieved values found in its columns; a column scores the same way. The best tables are kept,
with their foreign-key neighbours when a question reaches across them, and every kept table keeps
its key columns and its best columns.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from sqlchorus.tools.engines.catalog import DatabaseSchema, Table

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an and are as at be by did do does for from had has have how i in is it many much of on or "
    "the their them there these this those to was were what when where which who whose why with "
    "we our us you your give list show tell me all each every any".split()
)


def _stem(word: str) -> str:
    for suffix, repl in (("ies", "y"), ("sses", "ss"), ("ses", "s"), ("s", "")):
        if word.endswith(suffix) and len(word) > len(suffix) + 2:
            return word[: -len(suffix)] + repl
    return word


@functools.lru_cache(maxsize=65_536)
def words_of(text: str) -> frozenset[str]:
    """Lower-case word stems of ``text``, splitting snake_case and camelCase names too."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text).replace("_", " ").lower()
    return frozenset(_stem(w) for w in _WORD.findall(spaced) if w not in _STOP)


def _column_score(words: AbstractSet[str], table: Table, column: str, valued: AbstractSet[str]) -> float:
    score = 2.0 * len(words & words_of(column))
    if f"{table.name}.{column}".lower() in valued:
        score += 3.0
    return score


def rank_schema(
    schema: DatabaseSchema,
    question: str,
    values: Mapping[str, Sequence[dict[str, Any]]] | None = None,
    *,
    max_tables: int = 3,
    max_columns: int = 6,
) -> dict[str, list[str]]:
    """Schema links for ``question``: ``{table: [columns]}`` in the schema's spelling.

    Args:
        schema: the database's schema.
        question: the question (and hint) in plain language.
        values: retrieved values by ``"table.column"`` (``retrieve_values``' output).
        max_tables: tables kept at most, foreign-key neighbours included.
        max_columns: columns kept per table at most, besides its keys.

    Returns:
        The best tables (those scoring at least half the best one's score) with their key and
        best columns; the largest table when nothing matches.
    """
    if not schema.tables:
        return {}
    words = words_of(question)
    valued = {key.lower() for key, hits in (values or {}).items() if hits}
    scores: dict[str, float] = {}
    for table in schema.tables:
        score = 3.0 * len(words & words_of(table.name))
        score += sum(_column_score(words, table, c.name, valued) for c in table.columns)
        scores[table.name] = score
    ranked = sorted(schema.tables, key=lambda t: (-scores[t.name], -(t.row_count or 0), t.name))
    top = scores[ranked[0].name]
    if top <= 0:
        chosen = [ranked[0]]
    else:
        # Tables that score near the best one: a passing mention (a shared key column) is not
        # enough, or a small model is shown tables it then picks at random.
        chosen = [t for t in ranked if scores[t.name] >= top / 2][:max_tables]
    chosen = _with_bridges(schema, chosen, max_tables)
    links: dict[str, list[str]] = {}
    for table in chosen:
        keys = [c.name for c in table.columns if c.primary_key]
        keys += [fk.column for fk in table.foreign_keys if fk.ref_table in {t.name for t in chosen}]
        best = sorted(
            (c for c in table.columns if c.name not in keys),
            key=lambda c: -_column_score(words, table, c.name, valued),
        )
        matching = [c.name for c in best if _column_score(words, table, c.name, valued) > 0]
        rest = [c.name for c in best if c.name not in matching]
        links[table.name] = list(dict.fromkeys(keys + (matching + rest)[:max_columns]))
    return links


def _with_bridges(schema: DatabaseSchema, chosen: list[Table], max_tables: int) -> list[Table]:
    """``chosen``, plus a table that joins two chosen tables no foreign key links directly."""
    names = {t.name for t in chosen}

    def linked(a: Table, b: Table) -> bool:
        return any(fk.ref_table == b.name for fk in a.foreign_keys) or any(
            fk.ref_table == a.name for fk in b.foreign_keys
        )

    out = list(chosen)
    for i, a in enumerate(chosen):
        for b in chosen[i + 1:]:
            if linked(a, b) or len(out) >= max_tables:
                continue
            bridge = next((t for t in schema.tables if t.name not in names and linked(a, t) and linked(t, b)), None)
            if bridge is not None:
                out.append(bridge)
                names.add(bridge.name)
    return out
