"""DIN-SQL's schema links: a ``table.column`` reference read, and links as the prompt shows
them (``[table.column, a.x = b.y, ...]``)."""

from __future__ import annotations

import re

from sqlglot import exp

from sqlchorus.tools.sql import text as sql_text
from sqlchorus.tools.engines.catalog import DatabaseSchema
from sqlchorus.tools.sql.errors import SqlError

_DOTTED = re.compile(
    r'^(?:`(?P<t1>[^`]+)`|"(?P<t2>[^"]+)"|\[(?P<t3>[^\]]+)\]|(?P<t4>[A-Za-z_][\w ]*?))'
    r"\s*\.\s*(?P<column>\S.*?)\s*$",
    re.DOTALL,
)



def schema_links_text(schema: DatabaseSchema, links: dict[str, list[str]] | None) -> str:
    """Schema links written from resolved ``links`` (table -> columns), for when no model wrote
    its own list (lexical linking, a failed linking call): the linked columns and the
    foreign-key equalities between linked tables, in DIN-SQL's ``Schema_links`` form.

    No cell values: only a linking model knows which values the question mentions.
    """
    links = links or {}
    linked = {t.lower() for t in links}
    items: list[str] = []
    for table, columns in links.items():
        items.extend(f"{table}.{c}" for c in columns) if columns else items.append(f"{table}.*")
    for known in schema.tables:
        if known.name.lower() not in linked:
            continue
        for fk in known.foreign_keys:
            if fk.ref_table.lower() in linked:
                items.append(f"{known.name}.{fk.column} = {fk.ref_table}.{fk.ref_column}")
    return "[" + ",".join(dict.fromkeys(items)) + "]"


def dotted_column(text: str) -> tuple[str, str] | None:
    """``(table, column)`` of a ``table.column`` reference, or None when ``text`` is not one.

    SQL (``frpm.`Free Meal Count (K-12)```, ``"frpm"."x"``, ``[frpm].[x]``, ``head.*``) is read
    by sqlglot, which unquotes names exactly; prose that is not SQL (``frpm.Free Meal Count
    (K-12)``, ``Laboratory.T-BIL``, ``'singer.name'``) by its first dot, the column being all
    that follows it.
    """
    text = text.strip()
    if not text:
        return None
    column = _sql_column(text)
    if column is not None:
        return column
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1].strip()
    match = _DOTTED.match(text)
    if match is None:
        return None
    table = next(match[g] for g in ("t1", "t2", "t3", "t4") if match[g] is not None).strip()
    name = match["column"]
    if len(name) >= 2 and (name[0], name[-1]) in (("`", "`"), ('"', '"'), ("[", "]")):
        name = name[1:-1].strip()
    return (table, name) if table and name else None


def _sql_column(text: str) -> tuple[str, str] | None:
    try:
        tree = sql_text.parse_one(text)
    except SqlError:
        return None
    if not isinstance(tree, exp.Column) or not tree.table:
        return None
    return tree.table, "*" if isinstance(tree.this, exp.Star) else tree.name
