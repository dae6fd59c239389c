"""Narrowing a schema that does not fit a prompt: keep what the question most likely needs.

:func:`rank_columns` orders every column of a schema by how likely the question needs it;
:func:`narrow_schema` keeps the longest prefix of that order whose rendering still fits, and
says what it left out; :func:`names_listing` lists, by name only, the columns a narrowed view
leaves out, as many as its own room holds (a two-tier view: details for the columns ranked
first, the names of the rest, as RSL-SQL's first pass sees the whole schema and CHESS's
selector prunes the details).

The order, first to last:

1. the linked columns (a schema linker's choice, or the columns an earlier query used; always
   kept while they fit);
2. for each table that the question touches, best table first: its key columns and the columns
   the question names (by name, readable name or description) or whose values it mentions;
   after the best tables, the tables that join two of them (a bridge the question does not
   name, but its query needs);
3. the other columns of those tables, best table first;
4. the tables the question does not touch, neighbours (by foreign key) of the touched ones
   first.

A table scores by the question's words found in its name, in its best columns (by name, readable
name, description) and in the values retrieved from it, plus a share of its best foreign-key
neighbour's score, since a question that reaches a table often needs the table it joins through.
A column whose whole name the question or hint spells out (BIRD's hints quote them:
```Free Meal Count (K-12)` / `Enrollment (K-12)```) scores above any single word.
A kept table always keeps its primary key and the columns of foreign keys between kept tables, so
the narrowed schema still says how to join what it shows.

Each source of evidence can be left out (``evidence``, :data:`EVIDENCE`), to measure what it buys
(``benchmarks/large_schema.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from sqlchorus.tools.engines.catalog import Column, DatabaseSchema, Table
from sqlchorus.tools.schema.rank import words_of

EVIDENCE: tuple[str, ...] = ("question", "hint", "values", "descriptions", "foreign_keys", "links")
"""What the ranking reads: the question's words, the hint's words, the retrieved values, the
readable names and descriptions, foreign-key neighbourhoods and bridges, and the linked columns
(a linker's or an earlier query's)."""
NEIGHBOUR_SHARE = 0.5
"""Share of a table's best foreign-key neighbour's score added to its own."""
TOP_COLUMNS = 5
"""Columns whose scores add up to a table's score: a wide table does not win by width alone."""
NAMED_SCORE = 6.0
"""What a column scores when the question or hint spells out its whole name: more than three of
its words would, since a name quoted whole leaves no doubt which column is meant."""
BRIDGED_TABLES = 4
"""The best tables whose pairwise bridges (a table joined to two of them) are kept with them."""
_MAX_SEARCH_STEPS = 64


@dataclass
class Narrowing:
    """A narrowed schema and what it left out.

    Attributes:
        schema: the narrowed schema (tables in schema order, kept columns in column order).
        tables_total, columns_total: the whole schema's size.
        left_out_tables: the tables left out entirely, best ranked first.
        left_out_links: linked columns (``table.column``) that did not fit.
    """

    schema: DatabaseSchema
    tables_total: int
    columns_total: int
    left_out_tables: list[str] = field(default_factory=list)
    left_out_links: list[str] = field(default_factory=list)
    listed: set[tuple[str, str]] = field(default_factory=set)

    @property
    def tables_kept(self) -> int:
        return len(self.schema.tables)

    @property
    def columns_kept(self) -> int:
        return sum(len(t.columns) for t in self.schema.tables)

    def note(self, limit: int = 8) -> str:
        """One sentence on what was left out."""
        text = (
            f"The schema was narrowed to fit the prompt: {self.tables_kept} of {self.tables_total} tables and "
            f"{self.columns_kept} of {self.columns_total} columns shown"
        )
        if self.listed:
            text += f", {len(self.listed)} more by name only"
        if self.left_out_tables:
            shown = ", ".join(self.left_out_tables[:limit])
            more = len(self.left_out_tables) - limit
            text += f"; left out: {shown}" + (f" and {more} more tables" if more > 0 else "")
        if self.left_out_links:
            text += f"; linked columns that did not fit: {', '.join(self.left_out_links[:limit])}"
        return text + "."


def column_count(schema: DatabaseSchema) -> int:
    return sum(len(t.columns) for t in schema.tables)


def _column_words(column: Column) -> tuple[frozenset[str], frozenset[str]]:
    names = words_of(column.name) | words_of(column.full_name or "")
    described = words_of(column.description or "") | words_of(column.value_description or "")
    return names, described


def _column_score(words: AbstractSet[str], column: Column, valued: bool, described: bool, named: bool) -> float:
    names, about = _column_words(column) if described else (words_of(column.name), frozenset())
    score = 2.0 * len(words & names) + 0.5 * min(len(words & (about - names)), 4)
    return score + (3.0 if valued else 0.0) + (NAMED_SCORE if named else 0.0)


def spelled_out(text: str) -> str:
    """``text`` lower-cased with every run of non-word characters as one space, padded, so a
    name is found as a whole phrase (``free meal count k 12``), not inside another word."""
    return f" {' '.join(re.findall(r'[a-z0-9]+', text.lower()))} "


def named_in(spelled: str, column: Column, described: bool) -> bool:
    """Whether ``spelled`` (:func:`spelled_out`) holds the column's whole name, or its readable
    name, when that name is distinctive: two words at least, or one joined by ``_`` or case."""
    names = [column.name] + ([column.full_name] if described and column.full_name else [])
    for name in names:
        phrase = spelled_out(re.sub(r"([a-z])([A-Z])", r"\1 \2", name).replace("_", " "))
        if len(phrase.split()) >= 2 and phrase in spelled:
            return True
    return False


def rank_columns(
    schema: DatabaseSchema,
    text: str,
    values: Mapping[str, Sequence[Any]] | None = None,
    links: Mapping[str, Collection[str]] | None = None,
    *,
    hint: str = "",
    evidence: Collection[str] = EVIDENCE,
) -> list[tuple[str, str]]:
    """Every ``(table, column)`` of ``schema``, most needed first (see the module docstring).

    Args:
        schema: the schema.
        text: the question (and its hint, when ``hint`` is not given apart).
        values: retrieved values by ``"table.column"``; a column with values ranks higher.
        links: linked columns per table, in the schema's spelling; they come first.
        hint: the hint, read as the question is.
        evidence: the sources of :data:`EVIDENCE` to read; the others are ignored.
    """
    said = " ".join(part for key, part in (("question", text), ("hint", hint)) if key in evidence and part)
    words = words_of(said)
    spelled = spelled_out(said)
    described = "descriptions" in evidence
    valued = {str(k).lower() for k, hits in (values or {}).items() if hits} if "values" in evidence else set()
    links = links if "links" in evidence else None
    col_scores: dict[tuple[str, str], float] = {}
    base: dict[str, float] = {}
    for table in schema.tables:
        scores = []
        for column in table.columns:
            s = _column_score(words, column, f"{table.name}.{column.name}".lower() in valued, described,
                              named_in(spelled, column, described))
            col_scores[(table.name, column.name)] = s
            scores.append(s)
        own = 3.0 * len(words & words_of(table.name))
        if described:
            own += 0.5 * min(len(words & words_of(table.description or "")), 4)
        base[table.name] = own + sum(sorted(scores, reverse=True)[:TOP_COLUMNS])
    joined = "foreign_keys" in evidence
    neighbours = _neighbours(schema) if joined else {t.name: set() for t in schema.tables}
    score = {
        t.name: base[t.name] + NEIGHBOUR_SHARE * max((base[n] for n in neighbours[t.name]), default=0.0)
        for t in schema.tables
    }
    order = sorted(schema.tables, key=lambda t: (-score[t.name], -base[t.name], -(t.row_count or 0), t.name))
    touched = [t for t in order if base[t.name] > 0]
    if joined:
        touched = _with_bridges(touched, order, neighbours)
    # Untouched tables: neighbours of touched ones first (their score holds the neighbour share).
    chosen = {t.name for t in touched}
    untouched = [t for t in order if t.name not in chosen]

    ranked: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()

    def add(item: tuple[str, str]) -> None:
        if item not in seen:
            seen.add(item)
            ranked.append(item)

    for table in schema.tables:
        for linked in (links or {}).get(table.name, ()):
            found = table.column(linked)
            if found is not None:
                add((table.name, found.name))
    for table in touched:
        for name in _keys(table):
            add((table.name, name))
        best = sorted(
            (c for c in table.columns if col_scores[(table.name, c.name)] > 0),
            key=lambda c: -col_scores[(table.name, c.name)],
        )
        for column in best:
            add((table.name, column.name))
    for table in touched + untouched:
        for column in table.columns:
            add((table.name, column.name))
    return ranked


def _with_bridges(touched: list[Table], order: list[Table], neighbours: Mapping[str, set[str]]) -> list[Table]:
    """``touched`` with, after its best :data:`BRIDGED_TABLES`, each table that joins two of
    them and is not among them (best ranked first): a query over two tables that do not join
    directly goes through it."""
    best = [t.name for t in touched[:BRIDGED_TABLES]]

    def bridges_two(table: str) -> bool:
        ends = [b for b in best if b in neighbours[table]]
        return any(b not in neighbours[a] for i, a in enumerate(ends) for b in ends[i + 1:])

    bridges = [t for t in order if t.name not in best and bridges_two(t.name)]
    head = touched[:BRIDGED_TABLES]
    return head + bridges + [t for t in touched[BRIDGED_TABLES:] if t not in bridges]


def names_listing(
    schema: DatabaseSchema,
    ranked: Sequence[tuple[str, str]],
    shown: Collection[tuple[str, str]],
    count: Callable[[str], int],
    room: int,
    *,
    prefix: str = "",
) -> tuple[str, set[tuple[str, str]]]:
    """The columns of ``ranked`` not in ``shown``, by name only, one line per table in the order
    of ``ranked``, as many lines as ``room`` tokens hold (by ``count``), and the columns listed.

    ``prefix`` starts every line (``-- `` keeps a DDL view valid SQL)."""
    header = f"{prefix}Other columns, by name only (table: columns); link one to see its details:"
    by_table: dict[str, list[str]] = {}
    for table, column in ranked:
        if (table, column) not in shown:
            by_table.setdefault(table, []).append(column)
    used = count(header)
    lines: list[str] = []
    listed: set[tuple[str, str]] = set()
    for table, columns in by_table.items():  # bounded by the schema's tables
        line = f"{prefix}{_name(table)}: {', '.join(_name(c) for c in columns)}"
        cost = count(line) + 1
        if used + cost > room:
            continue  # a shorter line further down may still fit
        lines.append(line)
        used += cost
        listed.update((table, c) for c in columns)
    if not lines:
        return "", set()
    return "\n".join([header, *lines]), listed


def _name(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f"`{name}`"


def _keys(table: Table) -> list[str]:
    keys = [c.name for c in table.columns if c.primary_key]
    return keys + [fk.column for fk in table.foreign_keys if fk.column not in keys]


def _neighbours(schema: DatabaseSchema) -> dict[str, set[str]]:
    known = {t.name for t in schema.tables}
    out: dict[str, set[str]] = {t.name: set() for t in schema.tables}
    for table in schema.tables:
        for fk in table.foreign_keys:
            ref = next((n for n in known if n.lower() == fk.ref_table.lower()), None)
            if ref is not None and ref != table.name:
                out[table.name].add(ref)
                out[ref].add(table.name)
    return out


def subset(schema: DatabaseSchema, keep: Mapping[str, Collection[str]]) -> DatabaseSchema:
    """The part of ``schema`` with the tables of ``keep`` and their columns, plus each kept
    table's primary key and the columns of foreign keys between kept tables; foreign keys to
    tables left out are dropped."""
    kept_tables = {name.lower() for name in keep}
    referenced: dict[str, set[str]] = {}  # columns of a table that kept tables' foreign keys reference
    for other in schema.tables:
        if other.name.lower() in kept_tables:
            for fk in other.foreign_keys:
                referenced.setdefault(fk.ref_table.lower(), set()).add(fk.ref_column.lower())
    tables = []
    for table in schema.tables:
        if table.name.lower() not in kept_tables:
            continue
        wanted = {c.lower() for c in keep.get(table.name, ())}
        fks = [fk for fk in table.foreign_keys if fk.ref_table.lower() in kept_tables]
        wanted |= {c.name.lower() for c in table.columns if c.primary_key}
        wanted |= {fk.column.lower() for fk in fks}
        wanted |= referenced.get(table.name.lower(), set())
        columns = [c for c in table.columns if c.name.lower() in wanted]
        if not columns:
            columns = list(table.columns[:1])
        shown = {c.name.lower() for c in columns}
        tables.append(
            Table(
                name=table.name,
                columns=columns,
                foreign_keys=[fk for fk in fks if fk.column.lower() in shown],
                row_count=table.row_count,
                description=table.description,
                is_view=table.is_view,
            )
        )
    return DatabaseSchema(name=schema.name, tables=tables)


def _prefix(ranked: Sequence[tuple[str, str]], k: int) -> dict[str, list[str]]:
    keep: dict[str, list[str]] = {}
    for table, column in ranked[:k]:
        keep.setdefault(table, []).append(column)
    return keep


def narrow_schema(
    schema: DatabaseSchema,
    ranked: Sequence[tuple[str, str]],
    fits: Callable[[DatabaseSchema], bool],
    *,
    linked: int = 0,
    whole_checked: bool = False,
) -> Narrowing | None:
    """The largest prefix of ``ranked`` whose schema ``fits``, or None when the whole schema fits.

    Args:
        schema: the whole schema.
        ranked: its columns in the order to keep them (:func:`rank_columns`).
        fits: whether a schema's rendering fits the room there is; it grows with the schema.
        linked: how many of ``ranked``'s first items are linked columns, reported when cut.
        whole_checked: the caller knows the whole schema does not fit (it is not measured again).

    Returns:
        The narrowing; its schema keeps at least one column even when nothing fits.
    """
    if not whole_checked and fits(schema):
        return None
    # Galloping first, then halving: the prefixes tried stay near the size that fits, so a
    # schema of thousands of columns is never rendered whole again.
    low, high, steps = 1, len(ranked), 0  # a prefix of ``low`` items is taken to fit
    probe = 32
    while probe < high and steps < _MAX_SEARCH_STEPS:
        steps += 1
        if not fits(subset(schema, _prefix(ranked, probe))):
            high = probe - 1
            break
        low, probe = probe, probe * 2
    while low < high and steps < _MAX_SEARCH_STEPS:
        steps += 1
        middle = (low + high + 1) // 2
        if fits(subset(schema, _prefix(ranked, middle))):
            low = middle
        else:
            high = middle - 1
    keep = _prefix(ranked, low)
    narrowed = subset(schema, keep)
    shown = {(t.name, c.name) for t in narrowed.tables for c in t.columns}
    kept_tables = {t.name for t in narrowed.tables}
    order: list[str] = []
    for table, _ in ranked:
        if table not in kept_tables and table not in order:
            order.append(table)
    return Narrowing(
        schema=narrowed,
        tables_total=len(schema.tables),
        columns_total=column_count(schema),
        left_out_tables=order,
        left_out_links=[f"{t}.{c}" for t, c in ranked[:linked] if (t, c) not in shown],
    )
