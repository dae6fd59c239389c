"""DIN-SQL's schema links as the prompt shows them: ``[table.column, a.x = b.y, ...]``."""

from __future__ import annotations

from sqlchorus.tools.schema import DatabaseSchema


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
