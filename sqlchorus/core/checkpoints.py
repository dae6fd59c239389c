"""Checkpoints of runs, in one SQLite file: LangGraph's SQLite saver, storing large values once.

Every run is a LangGraph thread whose id is the run's id, so a run's trace and its checkpoints
share it. LangGraph's SQLite saver writes every state value into every checkpoint; a run's schema
view, retrieved values and candidates would be written again at each step. :class:`RunCheckpoints`
keeps each value of :data:`VALUE_MIN_BYTES` or more once, by its digest, in a table of its own, and
puts a reference in the checkpoint; reading a checkpoint puts the value back. The file stays
readable by LangGraph's own saver for everything but those references.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.sqlite import SqliteSaver

VALUE_MIN_BYTES = 512
"""Serialised state values at least this large are stored once per file, by digest."""
_REF = "__sqlchorus_value__"


class CheckpointFileError(RuntimeError):
    """The checkpoint file cannot be opened or read (locked, not SQLite, no permission)."""


class RunCheckpoints(SqliteSaver):
    """LangGraph's SQLite checkpointer over ``path``, storing each large state value once.

    Raises:
        CheckpointFileError: the file cannot be opened as a checkpoint file.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Nodes run in LangGraph's worker threads; the saver's own lock serialises use.
            conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=10.0)
            conn.execute("PRAGMA journal_mode=WAL")
        except (sqlite3.Error, OSError) as e:
            raise CheckpointFileError(f"Cannot open the checkpoint file {self.path}: {e}") from e
        super().__init__(conn)
        try:
            self.setup()
            with self.lock:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS sqlchorus_values (digest TEXT PRIMARY KEY, type TEXT NOT NULL, value BLOB NOT NULL)"
                )
                conn.commit()
        except sqlite3.Error as e:
            conn.close()
            raise CheckpointFileError(f"{self.path} is not a usable checkpoint file: {e}") from e

    def close(self) -> None:
        self.conn.close()

    # -- writing ----------------------------------------------------------------------------

    def put(self, config, checkpoint, metadata, new_versions):
        values = dict(checkpoint.get("channel_values") or {})
        for key, value in values.items():
            kind, data = self.serde.dumps_typed(value)
            if len(data) >= VALUE_MIN_BYTES:
                values[key] = {_REF: self._store(kind, data)}
        return super().put(config, {**checkpoint, "channel_values": values}, metadata, new_versions)

    def _store(self, kind: str, data: bytes) -> str:
        digest = hashlib.sha256(kind.encode() + b"\0" + data).hexdigest()
        with self.lock:
            self.conn.execute(
                "INSERT OR IGNORE INTO sqlchorus_values (digest, type, value) VALUES (?, ?, ?)", (digest, kind, data)
            )
            self.conn.commit()
        return digest

    # -- reading ----------------------------------------------------------------------------

    def get_tuple(self, config) -> CheckpointTuple | None:
        return self._restore(super().get_tuple(config))

    def list(self, config, *, filter=None, before=None, limit=None) -> Iterator[CheckpointTuple]:
        # The saver holds its lock while its own listing runs: read it all, then restore.
        items = list(super().list(config, filter=filter, before=before, limit=limit))
        for item in items:
            yield self._restore(item)

    def _restore(self, item: CheckpointTuple | None) -> CheckpointTuple | None:
        if item is None:
            return None
        values = item.checkpoint.get("channel_values") or {}
        if not any(_is_ref(v) for v in values.values()):
            return item
        restored = {k: self._load(v[_REF]) if _is_ref(v) else v for k, v in values.items()}
        return item._replace(checkpoint={**item.checkpoint, "channel_values": restored})

    def _load(self, digest: str) -> Any:
        with self.lock:
            row = self.conn.execute("SELECT type, value FROM sqlchorus_values WHERE digest = ?", (digest,)).fetchone()
        if row is None:
            raise CheckpointFileError(f"{self.path} lost a stored value ({digest[:12]}); the checkpoint cannot be read.")
        return self.serde.loads_typed((row[0], row[1]))

    # -- size -------------------------------------------------------------------------------

    def bytes_of(self, thread_id: str) -> int:
        """Bytes the thread's checkpoints, pending writes and the values they refer to take."""
        with self.lock:
            own = self.conn.execute(
                "SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints WHERE thread_id = ?",
                (thread_id,),
            ).fetchone()[0]
            writes = self.conn.execute(
                "SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes WHERE thread_id = ?", (thread_id,)
            ).fetchone()[0]
        digests: set[str] = set()
        for item in list(super().list({"configurable": {"thread_id": thread_id}})):
            digests |= {v[_REF] for v in (item.checkpoint.get("channel_values") or {}).values() if _is_ref(v)}
        with self.lock:
            shared = sum(
                self.conn.execute("SELECT LENGTH(value) FROM sqlchorus_values WHERE digest = ?", (d,)).fetchone()[0]
                for d in digests
            )
        return int(own + writes + shared)


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and _REF in value
