"""Schema introspection: tables, columns, keys, row counts, sample values, descriptions."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Column:
    name: str
    type: str
    primary_key: bool = False
    not_null: bool = False
    samples: list[Any] = field(default_factory=list)
    description: str | None = None
    value_description: str | None = None


@dataclass
class ForeignKey:
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

    def column(self, name: str) -> Column | None:
        low = name.lower()
        return next((c for c in self.columns if c.name.lower() == low), None)


@dataclass
class DatabaseSchema:
    name: str
    tables: list[Table]

    def table(self, name: str) -> Table | None:
        low = name.lower()
        return next((t for t in self.tables if t.name.lower() == low), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
