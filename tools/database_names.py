"""How a database's name says which engine and which file it is: plain string work, so that
what only needs the name (the command line refusing a missing file at once) imports no engine.

>>> engine_of("postgresql://me@host/shop"), engine_of("sales.duckdb"), engine_of("shop.sqlite")
('postgresql', 'duckdb', 'sqlite')
>>> str(file_of("duckdb:///data/sales")), file_of("postgresql://me@host/shop") is None
('/data/sales', True)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlchorus.tools.sql_errors import DatabaseOpenError

__all__ = ["DUCKDB_SCHEME", "DUCKDB_SUFFIXES", "ENGINES", "POSTGRES_SCHEMES", "duckdb_path", "engine_of",
           "file_of", "is_server_url", "require_file"]

ENGINES = ("sqlite", "postgresql", "duckdb")
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
DUCKDB_SCHEME = "duckdb://"
DUCKDB_SUFFIXES = (".duckdb", ".ddb")


def engine_of(name: str | os.PathLike[str] | Any) -> str:
    """The engine a database name (or an open database) is of: ``sqlite``, ``postgresql`` or
    ``duckdb``."""
    if not isinstance(name, (str, os.PathLike)) and isinstance(getattr(name, "engine", None), str):
        return name.engine  # an open database
    text = str(name)
    lowered = text.lower()
    if lowered.startswith(POSTGRES_SCHEMES):
        return "postgresql"
    if lowered.startswith(DUCKDB_SCHEME) or lowered.endswith(DUCKDB_SUFFIXES):
        return "duckdb"
    return "sqlite"


def is_server_url(name: str | os.PathLike[str]) -> bool:
    """Whether ``name`` is a database on a server (not a file)."""
    return engine_of(name) == "postgresql"


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
    if engine == "postgresql":
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

