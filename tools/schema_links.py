"""DIN-SQL's schema links as the prompt shows them: ``[table.column, a.x = b.y, 'value']``."""

from __future__ import annotations

import re
from typing import Any

from sqlchorus.tools.schema import DatabaseSchema


def _literal(value: Any) -> str:
    text = str(value)
    return text if re.fullmatch(r"-?\d+(\.\d+)?", text) else "'" + text.replace("'", "''") + "'"


def schema_links_text(
    schema: DatabaseSchema, links: dict[str, list[str]] | None, values: dict[str, list[dict[str, Any]]] | None
) -> str:
    """The linked columns, the foreign-key equalities between linked tables, and the best
    retrieved value of each linked table's columns, in DIN-SQL's ``Schema_links`` form."""
    links = links or {}
    linked = {t.lower() for t in links}
    items: list[str] = []
    for table, columns in links.items():
        items.extend(f"{table}.{c}" for c in columns) if columns else items.append(f"{table}.*")
    for table in schema.tables:
        if table.name.lower() not in linked:
            continue
        for fk in table.foreign_keys:
            if fk.ref_table.lower() in linked:
                items.append(f"{table.name}.{fk.column} = {fk.ref_table}.{fk.ref_column}")
    for key, hits in (values or {}).items():
        if key.split(".", 1)[0].lower() in linked and hits:
            items.append(_literal(hits[0]["value"]))
    return "[" + ",".join(dict.fromkeys(items)) + "]"
