"""The catalogue's plain-data model: tables, columns, keys, as every engine reads them.

Each engine reads its own catalogue into these (:mod:`sqlchorus.tools.schema.introspect.introspect` reads
SQLite's, the other engines' modules their own), and every schema view is rendered from them, so
they sit below both. ``samples`` and descriptions are filled in by introspection.

>>> t = Table(name="singer", columns=[Column(name="Singer_ID", type="INT", primary_key=True)])
>>> DatabaseSchema(name="concert", tables=[t]).table("SINGER").primary_key
['Singer_ID']
>>> quote_identifier('a b')
'"a b"'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Column:
    """One column.

    ``samples`` holds a few distinct non-null values as plain Python values: binary values are
    shown as ``"<blob N bytes>"`` and long text is cut with an ellipsis. ``full_name`` is the
    readable name a description file gives (BIRD's ``column_name``), ``description`` and
    ``value_description`` its other two texts.
    """

    name: str
    type: str
    primary_key: bool = False
    not_null: bool = False
    samples: list[Any] = field(default_factory=list)
    description: str | None = None
    value_description: str | None = None
    full_name: str | None = None


@dataclass
class ForeignKey:
    """One referencing column: a compound key becomes one of these per column pair."""

    column: str
    ref_table: str
    ref_column: str


@dataclass
class Table:
    name: str
    columns: list[Column]
    foreign_keys: list[ForeignKey] = field(default_factory=list)
    row_count: int | None = None
    description: str | None = None
    is_view: bool = False

    def column(self, name: str) -> Column | None:
        low = name.lower()
        return next((c for c in self.columns if c.name.lower() == low), None)

    @property
    def primary_key(self) -> list[str]:
        """Names of the primary-key columns, in column order."""
        return [c.name for c in self.columns if c.primary_key]


@dataclass
class DatabaseSchema:
    name: str
    tables: list[Table]

    def table(self, name: str) -> Table | None:
        low = name.lower()
        return next((t for t in self.tables if t.name.lower() == low), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DatabaseSchema:
        """Rebuild a schema from :meth:`to_dict` output (for example, out of graph state)."""
        tables = []
        for t in data.get("tables", []):
            tables.append(
                Table(
                    name=t["name"],
                    columns=[Column(**c) for c in t.get("columns", [])],
                    foreign_keys=[ForeignKey(**fk) for fk in t.get("foreign_keys", [])],
                    row_count=t.get("row_count"),
                    description=t.get("description"),
                    is_view=t.get("is_view", False),
                )
            )
        return cls(name=data["name"], tables=tables)


def quote_identifier(name: str) -> str:
    """Quote a table or column name for SQLite, whatever characters it holds."""
    return '"' + name.replace('"', '""') + '"'
