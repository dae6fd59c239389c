"""What crosses between the command's machine and a worker's node, besides questions and records.

- **Databases in, once per node.** A worker reads a SQLite or DuckDB file where it is when the same
  path on its node holds the same content (a shared file system, or the command's own machine);
  otherwise the command sends the file's bytes once through Ray's object store and each node keeps
  one copy, named by its content, in a folder of its own (:func:`node_cache`). A database on a
  server (PostgreSQL, MySQL) is reached by its URL from wherever the worker runs.
- **Runs out, into the run folder.** A remote run writes its trace and checkpoints into a folder
  of its own on the worker's node; the worker sends them back with the question's record and the
  command puts them where a local run would have written them (:func:`merge_checkpoints`), so the
  viewer and the debugger open the run as if it ran here. A checkpoint store on PostgreSQL is
  written by the workers directly and nothing is sent.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from sqlchorus.tools.engines.names import is_server_url, redact_url

CHUNK = 1 << 20


def content_digest(path: str | os.PathLike[str]) -> str:
    """A key for a file's bytes alone (not its name or time, which differ between nodes).

    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile(delete=False) as f:
    ...     _ = f.write(b"abc")
    >>> content_digest(f.name) == hashlib.blake2b(b"abc", digest_size=16).hexdigest()
    True
    >>> os.unlink(f.name)
    """
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def is_file_database(name: Any) -> bool:
    """Whether ``name`` is a database file a worker must be able to read (not a server's URL)."""
    return name is not None and not is_server_url(str(name))


def display(name: Any) -> str:
    """A database as a message may show it: a server's URL without its password."""
    return redact_url(str(name)) if is_server_url(str(name)) else str(name)


def node_cache() -> Path:
    """This node's folder for shipped databases (``SQLCHORUS_RAY_CACHE``, else one under the
    system's temporary folder, shared by every worker of the node)."""
    root = os.environ.get("SQLCHORUS_RAY_CACHE") or os.path.join(tempfile.gettempdir(), "sqlchorus-ray")
    return Path(root) / "databases"


def find_local(path: str, digest: str, size: int) -> str | None:
    """Where this node has the database of ``digest``: ``path`` itself when it holds the same bytes,
    else a copy shipped earlier, else None."""
    own = Path(path)
    try:
        if own.is_file() and own.stat().st_size == size and content_digest(own) == digest:
            return str(own)
    except OSError:
        pass
    shipped = node_cache() / digest / own.name
    if shipped.is_file() and shipped.stat().st_size == size:
        return str(shipped)
    return None


def keep_shipped(path: str, digest: str, data: bytes) -> str:
    """Write a shipped database into this node's cache (once: a copy already there is kept) and
    say where it is. Written beside and renamed, so a reader never sees half a file."""
    folder = node_cache() / digest
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / Path(path).name
    if target.is_file() and target.stat().st_size == len(data):
        return str(target)
    fd, partial = tempfile.mkstemp(dir=folder, suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if hashlib.blake2b(data, digest_size=16).hexdigest() != digest:
            raise OSError(f"the copy of {Path(path).name} arrived damaged")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return str(target)


# -- runs back into the run folder ------------------------------------------------------------

RUN_TABLES = ("checkpoints", "writes", "checkpoint_blobs", "sqlchorus_runs", "sqlchorus_calls",
              "sqlchorus_status", "sqlchorus_values")
"""The tables a run leaves in a SQLite checkpoint store (those that exist are copied)."""


def merge_checkpoints(source: bytes, target: str | os.PathLike[str], *, db_paths: dict[str, str]) -> int:
    """Copy every row of the checkpoint store ``source`` (the bytes of a SQLite file one remote run
    wrote) into the store ``target``, creating its tables as they are in the source where missing.
    ``db_paths`` maps a worker's copy of a database to the command's own path, so a run is
    reopened here on the database the command named. Returns the rows copied."""
    with tempfile.TemporaryDirectory(prefix="sqlchorus-merge-") as tmp:
        src = Path(tmp) / "run.sqlite"
        src.write_bytes(source)
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(str(target), timeout=60)
        try:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("ATTACH DATABASE ? AS run", (str(src),))
            copied = 0
            with con:
                schema = dict(con.execute(
                    "SELECT name, sql FROM run.sqlite_master WHERE type = 'table'").fetchall())
                present = {r[0] for r in con.execute("SELECT name FROM main.sqlite_master WHERE type = 'table'")}
                for table in RUN_TABLES:
                    if table not in schema:
                        continue
                    if table not in present:
                        con.execute(schema[table])
                    cur = con.execute(f'INSERT OR IGNORE INTO main."{table}" SELECT * FROM run."{table}"')
                    copied += max(cur.rowcount, 0)
                for remote, local in db_paths.items():
                    if remote != local and "sqlchorus_runs" in schema:
                        con.execute("UPDATE main.sqlchorus_runs SET db_path = ? WHERE db_path = ?", (local, remote))
                for index_sql, table in con.execute(
                        "SELECT sql, tbl_name FROM run.sqlite_master WHERE type = 'index' AND sql IS NOT NULL").fetchall():
                    if table not in RUN_TABLES:
                        continue  # a run's store holds more than its run (taught examples): only the run comes back
                    con.execute(index_sql.replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS", 1)
                                .replace("CREATE UNIQUE INDEX", "CREATE UNIQUE INDEX IF NOT EXISTS", 1))
            con.execute("DETACH DATABASE run")
        finally:
            con.close()
    return copied
