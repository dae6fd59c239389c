"""Opening a SQLite file under the guard, in the calling process, with every failure said as a
:class:`~sqlchorus.tools.sql.errors.DatabaseOpenError`. Apart from :mod:`sqlchorus.tools.engines.sqlite_guard`,
which its worker processes run on their own, without the package."""

from __future__ import annotations

import sqlite3

from sqlchorus.tools.engines.names import require_file
from sqlchorus.tools.sql.errors import DatabaseOpenError
from sqlchorus.tools.engines.sqlite_guard import GuardState, open_guarded


def open_checked(path: str, state: GuardState, *, max_value_bytes: int | None = None) -> sqlite3.Connection:
    """:func:`open_guarded`, after checking that ``path`` is a SQLite file, every failure said as
    a :class:`~sqlchorus.tools.sql.errors.DatabaseOpenError`."""
    require_file(path)
    with open(path, "rb") as f:
        header = f.read(16)
    if header != b"SQLite format 3\x00":
        raise DatabaseOpenError(f"{path} is not a SQLite database (its header does not match).")
    try:
        return open_guarded(path, state, max_value_bytes=max_value_bytes)
    except sqlite3.DatabaseError as e:
        raise DatabaseOpenError(f"Cannot open {path} as a database: {e}") from e
