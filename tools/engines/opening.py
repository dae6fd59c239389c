"""One way to name a database, whatever its engine, and to open it under its engine's guard.

A database is named the same way everywhere sqlchorus takes one (the commands' ``--db``, the
Python API, the servers, the LangChain tools):

* a SQLite file: its path (``shop.sqlite``, ``~/data/shop.db``);
* a PostgreSQL database: a libpq URL, ``postgresql://user@host:5432/name`` (or ``postgres://``).
  What the URL leaves out comes from the usual ``PG*`` environment variables and the password
  file (``~/.pgpass`` or ``PGPASSFILE``), as for ``psql``; a password is never shown: traces,
  logs and messages name the database by :func:`display_name`;
* a DuckDB file: a path ending in ``.duckdb`` or ``.ddb``, or ``duckdb:///path/to/file``;
* a MySQL or MariaDB database: ``mysql://user@host:3306/name`` (or ``mariadb://``). What the URL
  leaves out comes from the ``[client]`` group of ``~/.my.cnf`` and then ``MYSQL_PWD``, as for
  the ``mysql`` client; a password is never shown either.

:func:`open_database` opens any of them as a :class:`~sqlchorus.tools.engines.base.Database`.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from sqlchorus.tools.engines.base import Database
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.engines.names import (
    DUCKDB_SCHEME,
    DUCKDB_SUFFIXES,
    ENGINES,
    MYSQL_SCHEMES,
    POSTGRES_SCHEMES,
    duckdb_path,
    engine_of,
    file_of,
    is_server_url,
    redact_url,
)
from sqlchorus.tools.engines.duckdb import DuckDatabase
from sqlchorus.tools.engines.mysql import MySQLDatabase
from sqlchorus.tools.engines.postgres import PostgresDatabase

__all__ = ["DUCKDB_SCHEME", "DUCKDB_SUFFIXES", "ENGINES", "MYSQL_SCHEMES", "POSTGRES_SCHEMES", "database_key",
           "database_name", "database_url", "display_name", "duckdb_path", "engine_of", "file_of", "is_server_url",
           "open_database", "redact_url"]


def display_name(name: str | os.PathLike[str] | Database) -> str:
    """The database as messages, traces and logs name it: a file's path, or a URL without its
    password."""
    if isinstance(name, Database):
        return name.location
    if is_server_url(name):
        return redact_url(str(name))
    return str(name)


def database_key(name: str | os.PathLike[str]) -> str:
    """A stable key of the database ``name`` stands for: a file's resolved path, or the URL
    without its password (two spellings of one file are one key)."""
    path = file_of(name)
    return redact_url(str(name)) if path is None else str(path.resolve())


def open_database(name: str | os.PathLike[str], **options: Any) -> Database:
    """Open the database ``name`` under its engine's guard.

    ``options`` are the guard's (``timeout_s``, ``max_rows``, ``max_bytes``, ``tracer``,
    ``prestart``, ``workers``, ``client_workers``); PostgreSQL, MySQL and MariaDB also take
    ``allow_writable_role`` (by default from ``SQLCHORUS_ALLOW_WRITABLE_ROLE``) and
    ``require_readonly_role``.

    Raises:
        DatabaseOpenError: the database cannot be opened (missing, unreachable, refused, not of
            its engine), or its engine's extra is not installed.
    """
    engine = engine_of(name)
    if engine in ("postgresql", "mysql"):
        if options.get("allow_writable_role") is None:
            # Not said by the caller: the administrator's choice in the environment, as Settings reads it.
            flag = os.environ.get("SQLCHORUS_ALLOW_WRITABLE_ROLE", "").strip().lower()
            options["allow_writable_role"] = flag in ("1", "true", "yes", "on")
        if engine == "mysql":
            return MySQLDatabase(str(name), **options)
        return PostgresDatabase(str(name), **options)
    options.pop("require_readonly_role", None)
    options.pop("allow_writable_role", None)
    if engine == "duckdb":
        return DuckDatabase(duckdb_path(name), **options)
    return GuardedDatabase(name, **options)


def database_url(server_url: str, database: str) -> str:
    """The URL of database ``database`` on the server of ``server_url`` (a ``postgresql://``,
    ``mysql://`` or ``mariadb://`` URL whose own database, if any, is replaced; user, host, port
    and query are kept).

    Raises:
        ValueError: ``server_url`` is not a server's URL.
    """
    if not is_server_url(server_url):
        raise ValueError(f"Not a PostgreSQL or MySQL URL (postgresql://user@host:port/, mysql://user@host:port/): "
                         f"{display_name(server_url)}")
    parts = urlsplit(server_url)
    path = "/" + quote(database, safe="")
    if not parts.netloc:  # postgresql:///name: urlunsplit would drop the empty authority
        return f"{parts.scheme}://{path}" + (f"?{parts.query}" if parts.query else "")
    return urlunsplit(parts._replace(path=path))


def database_name(db: Database) -> str:
    """The name that opens ``db`` again, without secrets: a file's path (``duckdb://`` before a
    DuckDB file whose name does not say so), or a server's URL without its password (the
    password then comes from the environment or the password or option file, as the first time
    should)."""
    if db.engine in ("postgresql", "mysql") or db.path is None:
        return db.location
    if db.engine == "duckdb" and not str(db.path).lower().endswith(DUCKDB_SUFFIXES):
        return f"{DUCKDB_SCHEME}{db.path}"
    return str(db.path)
