"""How a database's name says which engine and which file it is: plain string work, so that
what only needs the name (the command line refusing a missing file at once) imports no engine.

>>> engine_of("postgresql://me@host/shop"), engine_of("sales.duckdb"), engine_of("shop.sqlite")
('postgresql', 'duckdb', 'sqlite')
>>> engine_of("mysql://me@host/shop"), engine_of("mariadb://me@host/shop")
('mysql', 'mysql')
>>> str(file_of("duckdb:///data/sales")), file_of("postgresql://me@host/shop") is None
('/data/sales', True)
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from sqlchorus.tools.sql.errors import DatabaseOpenError

__all__ = ["DUCKDB_SCHEME", "DUCKDB_SUFFIXES", "ENGINES", "MYSQL_SCHEMES", "POSTGRES_SCHEMES", "SERVER_ENGINES",
           "duckdb_path", "engine_of", "file_of", "is_server_url", "redact_url", "require_file"]

ENGINES = ("sqlite", "postgresql", "duckdb", "mysql")
SERVER_ENGINES = ("postgresql", "mysql")
"""Engines whose databases are on a server, named by a URL (the others are files)."""
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
MYSQL_SCHEMES = ("mysql://", "mariadb://")
"""MySQL's and MariaDB's URLs: one engine (``mysql``), one dialect, one guard for both servers."""
DUCKDB_SCHEME = "duckdb://"
DUCKDB_SUFFIXES = (".duckdb", ".ddb")


def engine_of(name: str | os.PathLike[str] | Any) -> str:
    """The engine a database name (or an open database) is of: ``sqlite``, ``postgresql``,
    ``duckdb`` or ``mysql`` (MySQL and MariaDB alike)."""
    if not isinstance(name, (str, os.PathLike)) and isinstance(getattr(name, "engine", None), str):
        return name.engine  # an open database
    text = str(name)
    lowered = text.lower()
    if lowered.startswith(POSTGRES_SCHEMES):
        return "postgresql"
    if lowered.startswith(MYSQL_SCHEMES):
        return "mysql"
    if lowered.startswith(DUCKDB_SCHEME) or lowered.endswith(DUCKDB_SUFFIXES):
        return "duckdb"
    return "sqlite"


def is_server_url(name: str | os.PathLike[str]) -> bool:
    """Whether ``name`` is a database on a server (not a file)."""
    return engine_of(name) in SERVER_ENGINES


def duckdb_path(name: str | os.PathLike[str]) -> Path:
    """The file a DuckDB name stands for (``duckdb:///abs/path`` or a path)."""
    text = str(name)
    if text.lower().startswith(DUCKDB_SCHEME):
        text = text[len(DUCKDB_SCHEME):]
        if text.startswith("//"):  # duckdb:///abs → /abs; duckdb://rel → rel
            text = text[1:]
    return Path(text).expanduser()


def file_of(name: str | os.PathLike[str]) -> Path | None:
    """The file a database name stands for (SQLite, DuckDB), or None for one on a server."""
    engine = engine_of(name)
    if engine in SERVER_ENGINES:
        return None
    return duckdb_path(name) if engine == "duckdb" else Path(name).expanduser()


def require_file(path: str | os.PathLike[str]) -> None:
    """Refuse, with one line, a database file that is not there or is not a file.

    Raises:
        DatabaseOpenError: the file does not exist, or ``path`` is a folder.
    """
    if not os.path.exists(path):
        raise DatabaseOpenError(f"No database at {path}: the file does not exist.")
    if not os.path.isfile(path):
        raise DatabaseOpenError(f"{path} is not a file.")



_PASSWORD_KV = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_PASSWORD_KEYS = ("password", "passwd")  # libpq's; MySQL's clients take both


def redact_url(url: str) -> str:
    """A server's URL (PostgreSQL's, MySQL's or MariaDB's), or a libpq ``key=value`` string,
    without its password: in the authority and in the query.

    >>> redact_url("postgresql://u:pw@h:5/db?sslmode=require&password=pw2")
    'postgresql://u@h:5/db?sslmode=require'
    >>> redact_url("mysql://u:p%40w@h/db?unix_socket=/run/m.sock&passwd=x")
    'mysql://u@h/db?unix_socket=/run/m.sock'
    >>> redact_url("host=h user=u password='p w' dbname=d")
    'host=h user=u password=*** dbname=d'
    """
    text = url or ""
    if not text.lower().startswith((*POSTGRES_SCHEMES, *MYSQL_SCHEMES)):
        return _PASSWORD_KV.sub(r"\1***", text).strip()
    parts = urlsplit(text)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hosts = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}@{hosts}" if user else hosts
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                       if k.lower() not in _PASSWORD_KEYS], safe=",/")
    # Written by hand: urlunsplit drops an empty authority (postgresql:///db -> postgresql:/db).
    return (f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")
            + (f"#{parts.fragment}" if parts.fragment else ""))
