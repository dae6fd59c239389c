"""The databases a server or a toolkit answers over, each known by an id (its file's stem), opened
once in one session."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlchorus.config.errors import ServiceError, UnknownDatabaseError
from sqlchorus.runs.session import Session
from sqlchorus.tools.database import GuardedDatabase
from sqlchorus.tools.schema import DatabaseSchema


def database_ids(paths: Sequence[str | Path]) -> dict[str, Path]:
    """Ids for ``paths``: each file's name without its extension.

    Raises:
        ServiceError: two files would share an id.
    """
    ids: dict[str, Path] = {}
    for path in paths:
        db_id = Path(path).stem
        if db_id in ids:
            raise ServiceError(f"Two databases would both be called {db_id!r}: {ids[db_id]} and {path}. "
                               "Give files of different names.")
        ids[db_id] = Path(path)
    return ids


class Databases:
    """``paths`` (id → SQLite file) in ``session``, each opened now, so that a bad file is found
    before a request or a tool call is.

    Raises:
        sqlchorus.tools.database.DatabaseOpenError: a file is missing or not SQLite.
    """

    def __init__(self, paths: Mapping[str, str | Path], session: Session):
        self.paths: dict[str, Path] = {k: Path(v) for k, v in paths.items()}
        self.session = session
        for path in self.paths.values():
            session.database(path)

    def resolve(self, database: str | None) -> tuple[str, Path]:
        """The id and file of ``database``; None names the only one there is.

        Raises:
            UnknownDatabaseError: no such id, or none given where there are several.
        """
        if not database:
            if len(self.paths) == 1:
                return next(iter(self.paths.items()))
            raise UnknownDatabaseError(f"Say which database: there are {', '.join(self.paths)}.")
        if database not in self.paths:
            raise UnknownDatabaseError(f"No database {database!r} here; there are: {', '.join(self.paths)}.")
        return database, self.paths[database]

    def databases(self) -> list[dict[str, Any]]:
        """Each database: id, file name, tables and columns."""
        rows = []
        for db_id, path in self.paths.items():
            schema = self.schema(db_id)
            rows.append({"id": db_id, "file": path.name, "tables": len(schema.tables),
                         "columns": sum(len(t.columns) for t in schema.tables)})
        return rows

    def schema(self, database: str | None) -> DatabaseSchema:
        """The introspected schema of ``database``."""
        return self.session.database(self.resolve(database)[1]).schema

    def guarded(self, database: str | None) -> GuardedDatabase:
        """The guarded database of ``database``: the only way a request reaches its data."""
        return self.session.database(self.resolve(database)[1]).db
