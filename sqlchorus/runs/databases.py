"""The databases a server or a toolkit answers over, each known by an id (its file's stem, or a
PostgreSQL or MySQL database's name), opened once in one session."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from sqlchorus.config.errors import ServiceError, UnknownDatabaseError, UnknownTableError
from sqlchorus.runs.session import Session
from sqlchorus.tools.engines.sqlite import Database
from sqlchorus.tools.engines.opening import display_name, duckdb_path, engine_of, is_server_url
from sqlchorus.tools.json_values import json_value
from sqlchorus.tools.engines.mysql import connection_parameters
from sqlchorus.tools.engines.catalog import DatabaseSchema
from sqlchorus.tools.schema.search import close_tables, table_detail


def database_ids(paths: Sequence[str | Path]) -> dict[str, str | Path]:
    """Ids for ``paths`` (database names: files or URLs): each file's name without its
    extension, each PostgreSQL or MySQL database's name.

    Raises:
        ServiceError: two databases would share an id.
        DatabaseOpenError: a MySQL URL that names no database, where the option file names none
            either (MySQL has no default database).
    """
    ids: dict[str, str | Path] = {}
    for path in paths:
        db_id = _id_of(path)
        if db_id in ids:
            raise ServiceError(f"Two databases would both be called {db_id!r}: {display_name(ids[db_id])} and "
                               f"{display_name(path)}. Give databases of different names.")
        ids[db_id] = path if is_server_url(path) else Path(path)
    return ids


def _id_of(name: str | Path) -> str:
    if is_server_url(name):
        database = unquote(urlsplit(str(name)).path.strip("/"))
        if database:
            return database
        if engine_of(name) == "mysql":
            # The database the mysql client would use: the option file's [client] database.
            return connection_parameters(str(name))["database"]
        return "postgres"
    if engine_of(name) == "duckdb":
        return duckdb_path(name).stem
    return Path(name).stem


EXECUTE_ROWS = 100
"""Rows a query from a tool returns unless asked for more."""
MAX_EXECUTE_ROWS = 1000
"""Rows a query from a tool returns at most."""


class Databases:
    """``paths`` (id → SQLite file) in ``session``, each opened now, so that a bad file is found
    before a request or a tool call is.

    Raises:
        sqlchorus.tools.engines.sqlite.DatabaseOpenError: a file is missing or not SQLite.
    """

    def __init__(self, paths: Mapping[str, str | Path], session: Session):
        self.paths: dict[str, str | Path] = {k: v if is_server_url(v) else Path(v) for k, v in paths.items()}
        self.session = session
        for path in self.paths.values():
            session.database(path)

    def resolve(self, database: str | None) -> tuple[str, str | Path]:
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
        """Each database: id, file name (a URL without password), engine, tables and columns."""
        rows = []
        for db_id, path in self.paths.items():
            schema = self.schema(db_id)
            shown = display_name(path) if is_server_url(path) else Path(path).name
            rows.append({"id": db_id, "file": shown, "engine": engine_of(path), "tables": len(schema.tables),
                         "columns": sum(len(t.columns) for t in schema.tables)})
        return rows

    def schema(self, database: str | None) -> DatabaseSchema:
        """The introspected schema of ``database``."""
        return self.session.database(self.resolve(database)[1]).schema

    def guarded(self, database: str | None) -> Database:
        """The guarded database of ``database``: the only way a request reaches its data."""
        return self.session.database(self.resolve(database)[1]).db

    # -- what the tools of the MCP server and the LangChain toolkit do -----------------------

    def describe(self, table: str, database: str | None = None) -> dict[str, Any]:
        """Everything about one table (:func:`~sqlchorus.tools.schema.search.table_detail`, full).

        Raises:
            UnknownTableError: no such table (the closest names are said).
        """
        schema = self.schema(database)
        found = schema.table(table)
        if found is None:
            near = close_tables(schema, table)
            raise UnknownTableError(f"no table {table!r} in {schema.name}."
                                    + (f" Close names: {', '.join(near)}." if near else ""))
        return table_detail(found, "full")

    def query(self, sql: str, database: str | None = None, max_rows: int = EXECUTE_ROWS, *,
              client: str | None = None) -> dict[str, Any]:
        """One read query through the guard: its columns, rows (``max_rows``, within 1 and
        :data:`MAX_EXECUTE_ROWS`) as JSON values, row count, whether rows were cut, milliseconds.
        ``client`` (a server passes the remote address) holds at most its share of the
        database's statement workers.

        Raises:
            sqlchorus.tools.sql.errors.SqlError: the guard refused the query, or it failed.
        """
        result = self.guarded(database).execute(sql, max_rows=max(1, min(int(max_rows), MAX_EXECUTE_ROWS)),
                                                client=client)
        return {"columns": result.columns, "rows": [[json_value(v) for v in row] for row in result.rows],
                "row_count": result.row_count, "truncated": result.truncated,
                "elapsed_ms": round(result.elapsed_ms, 3)}

    def plan(self, sql: str, database: str | None = None) -> list[str]:
        """The engine's plan of one read query, a step a line, without running it.

        Raises:
            sqlchorus.tools.sql.errors.SqlError: the query would not run.
        """
        return [str(row[-1]) for row in self.guarded(database).explain_query_plan(sql).rows]
