"""Checkpoints of runs, in one SQLite file: LangGraph's SQLite saver, storing large values once.

Every run is a LangGraph thread whose id is the run's id, so a run's trace and its checkpoints
share it. LangGraph's SQLite saver writes every state value into every checkpoint; a run's schema
view, retrieved values and candidates would be written again at each step. :class:`RunCheckpoints`
keeps each value of :data:`VALUE_MIN_BYTES` or more once, by its digest, in a table of its own, and
puts a reference in the checkpoint; reading a checkpoint puts the value back. The file stays
readable by LangGraph's own saver for everything but those references.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.sqlite import SqliteSaver

from sqlchorus.tools.errors import SqlchorusError

LOCK_TIMEOUT_S = 10.0
"""How long a write waits for another program's lock on the file before giving up."""
VALUE_MIN_BYTES = 512
"""Serialised state values at least this large are stored once per file, by digest."""
_REF = "__sqlchorus_value__"
_DIGEST = re.compile(rb"[0-9a-f]{64}")
"""What a stored value's digest looks like inside a serialised checkpoint: scanning for it finds
the references of stores written before any list of them was kept, and a match that is not a
reference only keeps a value longer."""
_CHUNK = 500
"""Ids per statement when many are named at once (SQLite takes 999 parameters at most)."""
KEPT_THREADS = 1000
"""Runs whose unwritten record (see :meth:`RunRecords.take_unwritten`) a store keeps at most: a
program that never takes them (no server) holds no more."""
KEPT_CALLS = 1000
"""Model calls kept per run while the store does not take them."""
_unwritten_lock = threading.Lock()


_TABLES = """
CREATE TABLE IF NOT EXISTS sqlchorus_values (digest TEXT PRIMARY KEY, type TEXT NOT NULL, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS sqlchorus_runs (
    thread_id TEXT PRIMARY KEY, created TEXT NOT NULL, question TEXT NOT NULL, evidence TEXT NOT NULL,
    db_path TEXT, db_fingerprint TEXT, settings TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sqlchorus_calls (
    thread_id TEXT NOT NULL, seq INTEGER NOT NULL, key TEXT NOT NULL, role TEXT NOT NULL, node TEXT NOT NULL,
    messages TEXT NOT NULL, params TEXT NOT NULL, answer TEXT NOT NULL, usage TEXT NOT NULL,
    PRIMARY KEY (thread_id, seq));
CREATE INDEX IF NOT EXISTS sqlchorus_calls_key ON sqlchorus_calls (thread_id, key);
CREATE TABLE IF NOT EXISTS sqlchorus_status (
    thread_id TEXT PRIMARY KEY, status TEXT NOT NULL, owner TEXT NOT NULL, updated TEXT NOT NULL,
    question TEXT NOT NULL, database TEXT NOT NULL, kind TEXT NOT NULL, parent TEXT,
    cancel INTEGER NOT NULL DEFAULT 0, result TEXT, trace TEXT);
CREATE TABLE IF NOT EXISTS sqlchorus_taught (
    id TEXT PRIMARY KEY, database TEXT NOT NULL, kind TEXT NOT NULL, question TEXT NOT NULL, sql TEXT NOT NULL,
    hint TEXT NOT NULL, author TEXT NOT NULL, created TEXT NOT NULL, run_id TEXT, source TEXT NOT NULL,
    skeleton TEXT NOT NULL, features TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS sqlchorus_taught_database ON sqlchorus_taught (database, kind);
"""
TABLES = _TABLES
"""The tables of :class:`RunRecords`, in SQL that SQLite and PostgreSQL both take."""
STATUS_COLUMNS = {"lease_until": "TEXT", "resume_claim": "TEXT"}
"""Columns of ``sqlchorus_status`` added after its first version: a store made before them gets
them when a server opens it."""

RUN_STATUSES = ("queued", "running", "done", "failed", "cancelled")
"""What a run a server started can be: waiting for a worker, running, answered (``result`` says
whether there is an answer), ended by a fault, or cancelled."""
FINISHED = frozenset({"done", "failed", "cancelled"})
TAUGHT_COLUMNS = ("id", "database", "kind", "question", "sql", "hint", "author", "created", "run_id", "source",
                  "skeleton", "features")
"""The columns of a taught example or glossary entry (see :mod:`sqlchorus.tools.examples.taught`)."""


def is_database_url(target: str | Path | None) -> bool:
    """Whether ``target`` names a PostgreSQL database rather than a SQLite file."""
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def _now(after_s: float = 0.0) -> str:
    # One format everywhere (UTC, milliseconds): stamps compare as text, in SQL too.
    return (datetime.now(timezone.utc) + timedelta(seconds=after_s)).isoformat(timespec="milliseconds")


class StoreAwayError(SqlchorusError):
    """The checkpoint store is known to be unreachable: a write is skipped, not attempted, until
    it is back."""

    kind = "store_unavailable"
    http_status = 503

    def __str__(self) -> str:
        return "unreachable"


class UnknownRunError(SqlchorusError, LookupError):
    """No run of that id in the checkpoint file."""

    kind = "unknown_run"
    http_status = 404


class CheckpointFileError(SqlchorusError, RuntimeError):
    """The checkpoint file cannot be opened or read (locked, not SQLite, no permission)."""

    kind = "no_checkpoints"
    http_status = 409


class RunRecords:
    """What sqlchorus keeps beside LangGraph's checkpoints, in the same database: each run's
    question, database and settings; its model calls; and for runs a server started, their status,
    result and trace, so that any server sharing the database can read, cancel or resume them.

    The SQL is the part SQLite and PostgreSQL share; a subclass runs it (``_rows``, ``_write``)
    and names its driver's errors (``db_errors``).
    """

    db_errors: tuple[type[BaseException], ...] = ()
    path: Any = None
    failed: str | None = None
    """Why the store stopped taking checkpoints during a run, or None."""
    away = False
    """Set while a server finds the store unreachable: checkpoints and model calls are then not
    written (each try would wait for the store's time limit), the runs going on without them."""

    def _rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        raise NotImplementedError

    def _write(self, sql: str, params: tuple = ()) -> None:
        raise NotImplementedError

    def _update(self, sql: str, params: tuple = ()) -> int:
        """Run one writing statement; the rows it changed."""
        raise NotImplementedError

    def ping(self) -> None:
        """Reach the store once (raises one of ``db_errors`` when it cannot be reached)."""
        self._rows("SELECT 1")

    def busy(self, error: BaseException) -> bool:
        """Whether ``error`` says the store answers but had no connection free in time (then it
        is not away)."""
        return False

    def lost(self, error: BaseException) -> None:
        """Remember the first write the store refused in this run."""
        if self.failed is None:
            self.failed = f"{self.path} stopped taking checkpoints ({error}); the run went on without them"

    def _going_on(self, write: Any, config: dict[str, Any], checkpoint: dict[str, Any] | None = None,
                  metadata: Any = None, versions: dict[str, Any] | None = None) -> Any:
        """``write()`` (for a checkpoint, ``write(versions)``); a store that stops taking writes
        (locked by another program, disk full, a server gone) costs the run's checkpoints in the
        store from here on, not the run: it goes on in memory, and the first refusal is
        remembered (:meth:`lost`). The newest checkpoint it refused is kept, per thread and
        namespace, for whoever writes the run's end (:meth:`take_unwritten`)."""
        configurable = config["configurable"]
        key = (configurable["thread_id"], configurable.get("checkpoint_ns", ""))
        if checkpoint is not None and self._kept_checkpoint(key):
            # Checkpoints after one the store missed: the values written in between were never
            # stored, so this one carries every channel's value, not only the new ones.
            versions = dict(checkpoint.get("channel_versions") or versions or {})
        try:
            if self.away:
                raise StoreAwayError()
            written = write(versions) if checkpoint is not None else write()
        except (StoreAwayError, *self.db_errors) as e:
            self.lost(e)
            if checkpoint is None:
                return None
            self._keep(key[0], lambda kept: kept["checkpoints"].__setitem__(key[1], (
                {"configurable": {"thread_id": key[0], "checkpoint_ns": key[1],
                                  **({"checkpoint_id": configurable["checkpoint_id"]}
                                     if configurable.get("checkpoint_id") else {})}},
                checkpoint, metadata, dict(checkpoint.get("channel_versions") or {}))))
            return {"configurable": {"thread_id": key[0], "checkpoint_ns": key[1], "checkpoint_id": checkpoint["id"]}}
        if checkpoint is not None:
            self._keep(key[0], lambda kept: kept["checkpoints"].pop(key[1], None), create=False)
        return written

    # -- taught examples and glossary entries ------------------------------------------------------

    def add_taught(self, entry: dict[str, Any]) -> bool:
        """Keep a taught example or glossary entry (every column of :data:`TAUGHT_COLUMNS`);
        False when one of the same id (the same question or term on the same database) is kept
        already, which is then left as it was.

        Raises:
            one of ``db_errors``: the store did not take it (nothing is half written: one row).
        """
        values = tuple(entry.get(c) if c != "features" else ",".join(sorted(entry.get(c) or ()))
                       for c in TAUGHT_COLUMNS)
        marks = ", ".join("?" for _ in TAUGHT_COLUMNS)
        return self._update(f"INSERT INTO sqlchorus_taught ({', '.join(TAUGHT_COLUMNS)}) VALUES ({marks}) "
                            "ON CONFLICT (id) DO NOTHING", values) > 0

    def taught(self, database: str | None = None, kind: str | None = None,
               ids: list[str] | None = None) -> list[dict[str, Any]]:
        """The taught entries of ``database`` (all databases when None), of ``kind`` (both when
        None), or those of ``ids``, oldest first."""
        where, params = [], []
        if database is not None:
            where.append("database = ?")
            params.append(database)
        if kind is not None:
            where.append("kind = ?")
            params.append(kind)
        if ids is not None:
            if not ids:
                return []
            where.append(f"id IN ({', '.join('?' for _ in ids)})")
            params.extend(ids)
        sql = (f"SELECT {', '.join(TAUGHT_COLUMNS)} FROM sqlchorus_taught"
               f"{' WHERE ' + ' AND '.join(where) if where else ''} ORDER BY created, id")
        out = []
        for row in self._rows(sql, tuple(params)):
            entry = dict(zip(TAUGHT_COLUMNS, row))
            entry["features"] = [f for f in (entry["features"] or "").split(",") if f]
            out.append(entry)
        return out

    def taught_version(self, database: str) -> tuple[int, str]:
        """How many entries ``database`` has and the newest one's time: what a cached index of
        them is checked against before each run."""
        rows = self._rows("SELECT COUNT(*), COALESCE(MAX(created), ''), COALESCE(MIN(id), ''), COALESCE(MAX(id), '') "
                          "FROM sqlchorus_taught WHERE database = ?", (database,))
        count, *marks = rows[0] if rows else (0, "", "", "")
        return int(count), "|".join(str(m) for m in marks)

    def taught_databases(self) -> list[tuple[str, int, int]]:
        """Each database that has taught entries: its name, its examples and its terms."""
        rows = self._rows("SELECT database, kind, COUNT(*) FROM sqlchorus_taught GROUP BY database, kind ORDER BY database")
        out: dict[str, list[int]] = {}
        for database, kind, count in rows:
            out.setdefault(database, [0, 0])[0 if kind == "example" else 1] += int(count)
        return [(db, n[0], n[1]) for db, n in out.items()]

    def remove_taught(self, ids: list[str]) -> int:
        """Remove the taught entries of ``ids``; how many there were."""
        if not ids:
            return 0
        return self._update(f"DELETE FROM sqlchorus_taught WHERE id IN ({', '.join('?' for _ in ids)})", tuple(ids))

    # -- what the store did not take --------------------------------------------------------------

    def _keep(self, thread_id: str, change: Any, create: bool = True) -> None:
        """Apply ``change`` to the unwritten record of ``thread_id`` (made when ``create``)."""
        with _unwritten_lock:
            kept_all: OrderedDict[str, dict[str, Any]] = self.__dict__.setdefault("_unwritten", OrderedDict())
            kept = kept_all.get(thread_id)
            if kept is None:
                if not create:
                    return
                kept = kept_all[thread_id] = {"thread_id": thread_id, "run": None, "calls": [], "checkpoints": {}}
                while len(kept_all) > KEPT_THREADS:
                    kept_all.popitem(last=False)
            change(kept)
            if not kept["run"] and not kept["calls"] and not kept["checkpoints"]:
                kept_all.pop(thread_id, None)

    def _kept_checkpoint(self, key: tuple[str, str]) -> bool:
        with _unwritten_lock:
            kept = self.__dict__.get("_unwritten", {}).get(key[0])
            return kept is not None and key[1] in kept["checkpoints"]

    def take_unwritten(self, thread_id: str) -> dict[str, Any] | None:
        """What the store did not take of run ``thread_id`` (its record, its model calls, its
        newest checkpoint per namespace), removed from here, for :meth:`write_unwritten` once
        the store is back; None when it took everything."""
        with _unwritten_lock:
            return self.__dict__.get("_unwritten", {}).pop(thread_id, None)

    def write_unwritten(self, kept: dict[str, Any]) -> None:
        """Write what :meth:`take_unwritten` gave (or :meth:`decode_unwritten` read back): the
        run's record, its model calls (after those the store has) and its newest checkpoints,
        each carrying every channel's value. What is written leaves ``kept``, so that a try
        that fails half-way is taken up again without writing anything twice.

        Raises:
            one of ``db_errors``: the store did not take the rest (it stays in ``kept``).
        """
        if kept.get("run"):
            self._save_run(**kept["run"])
            kept["run"] = None
        calls = kept.get("calls") or []
        while calls:
            self.record_call(kept["thread_id"], calls[0])
            calls.pop(0)
        checkpoints = kept.get("checkpoints") or {}
        for namespace in sorted(checkpoints):  # the run's own namespace ("") first
            self._put(*checkpoints[namespace])
            del checkpoints[namespace]

    def _put(self, config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
        """Write one checkpoint, raising what the store raises (``put`` goes on without it)."""
        raise NotImplementedError

    def encode_unwritten(self, kept: dict[str, Any]) -> dict[str, Any]:
        """:meth:`take_unwritten`'s record as JSON, to keep in a file until the store is back;
        checkpoints in the saver's own serialisation."""
        checkpoints = []
        for config, checkpoint, metadata, versions in (kept.get("checkpoints") or {}).values():
            kind, data = self.serde.dumps_typed((checkpoint, metadata))
            checkpoints.append({"config": config, "versions": versions, "type": kind,
                                "data": base64.b64encode(data).decode("ascii")})
        return {"thread_id": kept["thread_id"], "run": json.loads(json.dumps(kept.get("run"), default=str)),
                "calls": json.loads(json.dumps(kept.get("calls") or [], default=str)),
                "checkpoints": checkpoints}

    def decode_unwritten(self, data: dict[str, Any]) -> dict[str, Any]:
        """:meth:`encode_unwritten`'s JSON back as a record for :meth:`write_unwritten`.

        Raises:
            ValueError: ``data`` is not such a record.
        """
        try:
            checkpoints = {}
            for item in data.get("checkpoints") or []:
                checkpoint, metadata = self.serde.loads_typed((item["type"], base64.b64decode(item["data"])))
                checkpoints[item["config"]["configurable"].get("checkpoint_ns", "")] = (
                    item["config"], checkpoint, metadata, item["versions"])
            return {"thread_id": str(data["thread_id"]), "run": data.get("run"), "calls": list(data.get("calls") or []),
                    "checkpoints": checkpoints}
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a run's unwritten record ({e})") from e

    # -- runs and their model calls -----------------------------------------------------------

    def save_run(self, thread_id: str, *, question: str, evidence: str, db_path: str | None,
                 db_fingerprint: str | None, settings: dict[str, Any]) -> None:
        """Keep what a run was asked, over which database, with which settings.

        Raises:
            one of ``db_errors``: the store did not take it; it is kept for
            :meth:`take_unwritten` all the same.
        """
        record = {"thread_id": thread_id, "question": question, "evidence": evidence, "db_path": db_path,
                  "db_fingerprint": db_fingerprint, "settings": settings}
        try:
            self._save_run(**record)
        except self.db_errors:
            self._keep(thread_id, lambda kept: kept.__setitem__("run", record))
            raise

    def _save_run(self, thread_id: str, *, question: str, evidence: str, db_path: str | None,
                  db_fingerprint: str | None, settings: dict[str, Any]) -> None:
        self._write(
            "INSERT INTO sqlchorus_runs VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (thread_id) DO UPDATE SET "
            "created = excluded.created, question = excluded.question, evidence = excluded.evidence, "
            "db_path = excluded.db_path, db_fingerprint = excluded.db_fingerprint, settings = excluded.settings",
            (thread_id, _now(), question, evidence, db_path, db_fingerprint, json.dumps(settings, default=str)),
        )

    def run(self, thread_id: str) -> dict[str, Any]:
        """What :meth:`save_run` kept of ``thread_id``.

        Raises:
            UnknownRunError: no such run in this store.
        """
        thread_id = self.resolve_run(thread_id)
        rows = self._rows(
            "SELECT created, question, evidence, db_path, db_fingerprint, settings FROM sqlchorus_runs WHERE thread_id = ?",
            (thread_id,),
        )
        created, question, evidence, db_path, fingerprint, settings = rows[0]
        return {"run_id": thread_id, "created": created, "question": question, "evidence": evidence,
                "db_path": db_path, "db_fingerprint": fingerprint, "settings": json.loads(settings)}

    def resolve_run(self, run: str) -> str:
        """The id of the run named by ``run``: its id, any unique start of it (as ``trace show``
        takes them), or any unique part of it.

        Raises:
            UnknownRunError: no run, or several, start so.
        """
        if self._rows("SELECT 1 FROM sqlchorus_runs WHERE thread_id = ?", (run,)):
            return run
        escaped = run.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        found: list[str] = []
        # A start of the id first; else any part of it (its last characters are the distinctive ones).
        for pattern in (escaped + "%", "%" + escaped + "%"):
            found = [row[0] for row in self._rows(
                "SELECT thread_id FROM sqlchorus_runs WHERE thread_id LIKE ? ESCAPE '\\' ORDER BY created LIMIT 6",
                (pattern,),
            )] if run else []
            if found:
                break
        if len(found) == 1:
            return found[0]
        if found:
            shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
            raise UnknownRunError(f"{run!r} names several runs in {self.path} ({shown}): give more of the id.")
        raise UnknownRunError(f"No run {run!r} in {self.path}.")

    def keep_call(self, thread_id: str, call: dict[str, Any]) -> None:
        """Keep a model call the store did not take, for :meth:`take_unwritten` (at most
        :data:`KEPT_CALLS` per run: a replay calls the model for the others)."""
        self._keep(thread_id, lambda kept: kept["calls"].append(call) if len(kept["calls"]) < KEPT_CALLS else None)

    def record_call(self, thread_id: str, call: dict[str, Any]) -> None:
        """Keep one model call of ``thread_id``: its key, role, node, messages, parameters,
        answer and usage. A run's calls are made by one process, so the next number is its own."""
        seq = self._rows("SELECT COALESCE(MAX(seq), -1) + 1 FROM sqlchorus_calls WHERE thread_id = ?",
                         (thread_id,))[0][0]
        self._write(
            "INSERT INTO sqlchorus_calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (thread_id, seq, call["key"], call["role"], call["node"], json.dumps(call["messages"], default=str),
             json.dumps(call["params"], default=str), call["answer"], json.dumps(call["usage"], default=str)),
        )

    def calls(self, thread_id: str) -> list[dict[str, Any]]:
        """The model calls kept for ``thread_id``, in the order they were made."""
        rows = self._rows(
            "SELECT seq, key, role, node, messages, params, answer, usage FROM sqlchorus_calls WHERE thread_id = ? ORDER BY seq",
            (thread_id,),
        )
        return [
            {"seq": seq, "key": key, "role": role, "node": node, "messages": json.loads(messages),
             "params": json.loads(params), "answer": answer, "usage": json.loads(usage)}
            for seq, key, role, node, messages, params, answer, usage in rows
        ]

    # -- runs a server started ------------------------------------------------------------------

    def set_status(self, thread_id: str, status: str, *, owner: str | None = None, question: str | None = None,
                   database: str | None = None, kind: str | None = None, parent: str | None = None,
                   result: dict[str, Any] | None = None, trace: str | None = None,
                   lease_s: float | None = None) -> None:
        """Record that run ``thread_id`` is ``status`` (one of :data:`RUN_STATUSES`); the first
        record of a run names its owner (the server running it), question, database and kind
        (``ask`` or ``resume``, with the run it resumes as ``parent``). ``lease_s``: how long the
        run counts as alive without its owner renewing it (:meth:`renew`)."""
        if status not in RUN_STATUSES:
            raise ValueError(f"Unknown run status {status!r}.")
        result_text = json.dumps(result, default=str) if result is not None else None
        lease = _now(lease_s) if lease_s is not None else None
        if question is not None:
            # Everything at once: the first record, or (written again after the store was
            # away) the whole of a run's end, whether or not its first record got there.
            self._write(
                "INSERT INTO sqlchorus_status (thread_id, status, owner, updated, question, database, kind, parent, "
                "result, trace, lease_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (thread_id) DO UPDATE "
                "SET status = excluded.status, owner = excluded.owner, updated = excluded.updated, "
                "result = COALESCE(excluded.result, sqlchorus_status.result), "
                "trace = COALESCE(excluded.trace, sqlchorus_status.trace), lease_until = excluded.lease_until",
                (thread_id, status, owner or "", _now(), question, database or "", kind or "ask", parent,
                 result_text, trace, lease),
            )
            return
        self._write(
            "UPDATE sqlchorus_status SET status = ?, updated = ?, result = COALESCE(?, result), "
            "trace = COALESCE(?, trace), lease_until = COALESCE(?, lease_until) WHERE thread_id = ?",
            (status, _now(), result_text, trace, lease, thread_id),
        )

    def renew(self, thread_ids: list[str], lease_s: float) -> None:
        """Say that the runs ``thread_ids`` are still alive, for ``lease_s`` more seconds."""
        for start in range(0, len(thread_ids), 500):
            chunk = thread_ids[start:start + 500]
            marks = ", ".join("?" * len(chunk))
            self._write(f"UPDATE sqlchorus_status SET lease_until = ? WHERE thread_id IN ({marks}) "
                        "AND status IN ('queued', 'running')", (_now(lease_s), *chunk))

    def end_stale(self, thread_id: str, status: str, result: dict[str, Any], stale_after_s: float) -> bool:
        """Record ``status`` for ``thread_id`` if it is unfinished and its lease ran out (or, for a
        run recorded without one, it was last updated ``stale_after_s`` ago); whether it was."""
        cutoff = _now(-stale_after_s)
        return self._update(
            "UPDATE sqlchorus_status SET status = ?, cancel = 1, updated = ?, result = ? WHERE thread_id = ? "
            "AND status IN ('queued', 'running') AND (lease_until < ? OR (lease_until IS NULL AND updated < ?))",
            (status, _now(), json.dumps(result), thread_id, _now(), cutoff),
        ) > 0

    def claim_resume(self, thread_id: str, seen: str | None, claimant: str) -> bool:
        """Make ``claimant`` the resume of ``thread_id``, if its resume is still ``seen`` (None:
        none): of two servers resuming a run at once, one claims it; whether this one did."""
        return self._update(
            "UPDATE sqlchorus_status SET resume_claim = ? WHERE thread_id = ? AND COALESCE(resume_claim, '') = ?",
            (claimant, thread_id, seen or ""),
        ) > 0

    def forget_status(self, thread_id: str) -> None:
        """Remove the status record of a run that never started."""
        self._write("DELETE FROM sqlchorus_status WHERE thread_id = ?", (thread_id,))

    def status(self, thread_id: str) -> dict[str, Any] | None:
        """The status record of ``thread_id`` (without its trace), or None when no server ran it."""
        rows = self._rows(
            "SELECT status, owner, updated, question, database, kind, parent, cancel, result, lease_until, "
            "resume_claim FROM sqlchorus_status WHERE thread_id = ?", (thread_id,),
        )
        if not rows:
            return None
        status, owner, updated, question, database, kind, parent, cancel, result, lease, claim = rows[0]
        return {"run_id": thread_id, "status": status, "owner": owner, "updated": updated, "question": question,
                "database": database, "kind": kind, "parent": parent, "cancel_requested": bool(cancel),
                "result": json.loads(result) if result else None, "lease_until": lease, "resume_claim": claim}

    def request_cancel(self, thread_id: str) -> bool:
        """Ask the server running ``thread_id`` to stop it; False when it is not running anywhere."""
        running = self._rows("SELECT status FROM sqlchorus_status WHERE thread_id = ?", (thread_id,))
        if not running or running[0][0] in FINISHED:
            return False
        self._write("UPDATE sqlchorus_status SET cancel = 1 WHERE thread_id = ?", (thread_id,))
        return True

    def cancel_requested(self, thread_id: str) -> bool:
        """Whether a server asked for ``thread_id`` to stop."""
        rows = self._rows("SELECT cancel FROM sqlchorus_status WHERE thread_id = ?", (thread_id,))
        return bool(rows and rows[0][0])

    def trace(self, thread_id: str) -> str | None:
        """The trace (JSON lines) kept with ``thread_id`` when it ended, or None."""
        rows = self._rows("SELECT trace FROM sqlchorus_status WHERE thread_id = ?", (thread_id,))
        return rows[0][0] if rows else None

    # -- retention (see sqlchorus.runs.retention) -------------------------------------------------

    CHECKPOINT_TABLES: tuple[str, ...] = ()
    """The saver's own tables holding a thread's rows, by ``thread_id``."""
    VALUE_SOURCES: tuple[str, ...] = ()
    """Queries of the serialised checkpoints that may refer to a stored value by its digest."""
    RECORD_TABLES = ("sqlchorus_calls", "sqlchorus_runs", "sqlchorus_status")

    def _batch(self, statements: list[tuple[str, tuple]]) -> None:
        """Run ``statements`` in one transaction."""
        raise NotImplementedError

    def run_ids_by_age(self) -> list[tuple[str, str]]:
        """Every run the store knows, with when it was made (ISO, UTC), newest first: those
        :meth:`save_run` kept by their ``created``; a run only a server recorded (a resume,
        whose checkpoints are its parent's thread) by its status's last ``updated``."""
        rows = self._rows(
            "SELECT thread_id, created FROM sqlchorus_runs UNION ALL "
            "SELECT thread_id, updated FROM sqlchorus_status "
            "WHERE thread_id NOT IN (SELECT thread_id FROM sqlchorus_runs) ORDER BY 2 DESC, 1 DESC"
        )
        return [(row[0], row[1]) for row in rows]

    def run_links(self) -> dict[str, tuple[str, str | None]]:
        """The status and ``parent`` (the run a resume goes on from) of every run a server started."""
        return {row[0]: (row[1], row[2]) for row in self._rows("SELECT thread_id, status, parent FROM sqlchorus_status")}

    def delete_runs(self, thread_ids: list[str]) -> None:
        """Remove every row of the runs ``thread_ids``: their checkpoints, pending writes and
        records. The values their checkpoints referred to stay until :meth:`collect_values`."""
        tables = (*self.CHECKPOINT_TABLES, *self.RECORD_TABLES)
        for start in range(0, len(thread_ids), _CHUNK):
            chunk = tuple(thread_ids[start:start + _CHUNK])
            marks = ", ".join("?" * len(chunk))
            # Small transactions: a server sharing the store waits for one chunk at most.
            self._batch([(f"DELETE FROM {table} WHERE thread_id IN ({marks})", chunk) for table in tables])

    def _orphans(self, referred: set[str]) -> list[str]:
        known = [row[0] for row in self._rows("SELECT digest FROM sqlchorus_values")]
        return [digest for digest in known if digest not in referred]

    def _referred(self, sql: str, params: tuple = ()) -> set[str]:
        found: set[str] = set()
        for (data,) in self._rows(sql, params):
            if data is not None:
                found.update(m.decode() for m in _DIGEST.findall(data.encode() if isinstance(data, str) else bytes(data)))
        return found

    def collect_values(self) -> int:
        """Remove the stored values no checkpoint refers to any more; how many went."""
        if not self._rows("SELECT 1 FROM sqlchorus_values LIMIT 1"):
            return 0
        referred: set[str] = set()
        for sql in self.VALUE_SOURCES:
            referred |= self._referred(sql)
        orphans = self._orphans(referred)
        self._delete_values(orphans)
        return len(orphans)

    def _delete_values(self, digests: list[str]) -> None:
        for start in range(0, len(digests), _CHUNK):
            chunk = tuple(digests[start:start + _CHUNK])
            self._batch([(f"DELETE FROM sqlchorus_values WHERE digest IN ({', '.join('?' * len(chunk))})", chunk)])

    def used_bytes(self) -> int | None:
        """Bytes the store's rows take, to measure what a prune frees; None when not measurable."""
        return None

    def compact(self, vacuum: bool = False) -> None:
        """Give the space of removed rows back (``vacuum``: all of it, rewriting the store)."""

    def statuses(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest ``limit`` runs any server started, newest first (without results)."""
        rows = self._rows(
            "SELECT thread_id, status, owner, updated, question, database, kind, parent FROM sqlchorus_status "
            "ORDER BY updated DESC, thread_id DESC LIMIT ?", (int(limit),),
        )
        return [{"run_id": r[0], "status": r[1], "owner": r[2], "updated": r[3], "question": r[4],
                 "database": r[5], "kind": r[6], "parent": r[7]} for r in rows]


class CheckpointDamagedError(CheckpointFileError):
    """The checkpoint file is damaged (SQLite reads a malformed page or log): what it kept cannot
    be read, and nothing more is written to it."""

    kind = "checkpoints_damaged"
    http_status = 409


_DAMAGE = ("malformed", "not a database", "disk i/o error", "database corrupt")


@contextlib.contextmanager
def _undamaged(path: Path) -> Iterator[None]:
    """Turn SQLite's report of a damaged file (a page or a write-ahead log another program
    overwrote) into one clear error that names the file and says how to recover it, instead of
    a bare ``sqlite3.DatabaseError`` deep in a request."""
    try:
        yield
    except sqlite3.DatabaseError as e:
        if not any(m in str(e).lower() for m in _DAMAGE):  # a lock, a full disk: not damage
            raise
        raise CheckpointDamagedError(
            f"The checkpoint file {path} is damaged ({e}); its runs cannot be read. Stop the programs "
            f"using it, keep a copy, and recover what it holds with: sqlite3 {path} .recover | sqlite3 "
            f"{path.with_name(path.stem + '-recovered.sqlite')}"
        ) from e


class RunCheckpoints(RunRecords, SqliteSaver):
    """LangGraph's SQLite checkpointer over ``path``, storing each large state value once.

    Raises:
        CheckpointFileError: the file cannot be opened as a checkpoint file.
    """

    db_errors = (sqlite3.Error,)
    CHECKPOINT_TABLES = ("checkpoints", "writes")
    VALUE_SOURCES = ("SELECT checkpoint FROM checkpoints",)

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Nodes run in LangGraph's worker threads; the saver's own lock serialises use.
            conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=LOCK_TIMEOUT_S)
            conn.execute("PRAGMA journal_mode=WAL")
            # WAL with NORMAL sync never corrupts the file; a power cut may lose the last steps.
            conn.execute("PRAGMA synchronous=NORMAL")
        except (sqlite3.Error, OSError) as e:
            raise CheckpointFileError(f"Cannot open the checkpoint file {self.path}: {e}") from e
        super().__init__(conn)
        self.failed = None
        try:
            self.setup()
            with self.lock:
                conn.executescript(_TABLES)
                have = {row[1] for row in conn.execute("PRAGMA table_info(sqlchorus_status)")}
                for column, sql_type in STATUS_COLUMNS.items():
                    if column not in have:
                        conn.execute(f"ALTER TABLE sqlchorus_status ADD COLUMN {column} {sql_type}")
                conn.commit()
        except sqlite3.Error as e:
            conn.close()
            raise CheckpointFileError(f"{self.path} is not a usable checkpoint file: {e}") from e

    def close(self) -> None:
        self.conn.close()

    # -- writing ----------------------------------------------------------------------------

    def put(self, config, checkpoint, metadata, new_versions):
        return self._going_on(lambda versions: self._put(config, checkpoint, metadata, versions), config, checkpoint,
                              metadata, new_versions)

    def _put(self, config, checkpoint, metadata, versions):
        values = dict(checkpoint.get("channel_values") or {})
        stored: dict[str, tuple[str, bytes]] = {}
        for key, value in values.items():
            kind, data = self.serde.dumps_typed(value)
            if len(data) >= VALUE_MIN_BYTES:
                digest = self._store(kind, data)
                stored[digest] = (kind, data)
                values[key] = {_REF: digest}
        written = super().put(config, {**checkpoint, "channel_values": values}, metadata, versions)
        if stored:
            self._keep_stored(stored)
        return written

    def put_writes(self, config, writes, task_id, task_path=""):
        self._going_on(lambda: super(RunCheckpoints, self).put_writes(config, writes, task_id, task_path), config)

    def _rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self.lock, _undamaged(self.path):
            return self.conn.execute(sql, params).fetchall()

    def _write(self, sql: str, params: tuple = ()) -> None:
        with self.lock:
            self.conn.execute(sql, params)
            self.conn.commit()

    def _update(self, sql: str, params: tuple = ()) -> int:
        with self.lock:
            changed = self.conn.execute(sql, params).rowcount
            self.conn.commit()
        return changed

    def _store(self, kind: str, data: bytes) -> str:
        digest = hashlib.sha256(kind.encode() + b"\0" + data).hexdigest()
        with self.lock:
            self.conn.execute(
                "INSERT OR IGNORE INTO sqlchorus_values (digest, type, value) VALUES (?, ?, ?)", (digest, kind, data)
            )
            self.conn.commit()
        return digest

    def _keep_stored(self, stored: dict[str, tuple[str, bytes]]) -> None:
        """Store again any value of a checkpoint just written that a prune's collection (another
        thread's or program's) removed between :meth:`_store` and the checkpoint's write: the
        collection could not see the checkpoint yet, and the checkpoint must not lose it."""
        digests = tuple(stored)
        with self.lock:
            present = {row[0] for row in self.conn.execute(
                f"SELECT digest FROM sqlchorus_values WHERE digest IN ({', '.join('?' * len(digests))})", digests)}
        for digest in set(digests) - present:
            self._store(*stored[digest])

    # -- retention --------------------------------------------------------------------------

    def _batch(self, statements: list[tuple[str, tuple]]) -> None:
        with self.lock:
            try:
                for sql, params in statements:
                    self.conn.execute(sql, params)
                self.conn.commit()
            except BaseException:
                self.conn.rollback()
                raise

    def collect_values(self) -> int:
        """Remove the stored values no checkpoint refers to any more; how many went.

        The checkpoints are read a page at a time, so that the runs writing meanwhile wait for a
        page, not for the whole file; the removal itself then looks again, in the transaction
        that removes, at the checkpoints written since (they come after the last row read), and
        :meth:`put` stores again a value removed under a checkpoint it was writing.
        """
        if not self._rows("SELECT 1 FROM sqlchorus_values LIMIT 1"):
            return 0
        referred: set[str] = set()
        last = 0
        while True:
            with self.lock:
                page = self.conn.execute(
                    "SELECT rowid, checkpoint FROM checkpoints WHERE rowid > ? ORDER BY rowid LIMIT 200", (last,)
                ).fetchall()
            if not page:
                break
            for rowid, data in page:
                referred.update(m.decode() for m in _DIGEST.findall(bytes(data)))
                last = rowid
        orphans = self._orphans(referred)
        if not orphans:
            return 0
        with self.lock:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                for (data,) in self.conn.execute("SELECT checkpoint FROM checkpoints WHERE rowid > ?", (last,)):
                    referred.update(m.decode() for m in _DIGEST.findall(bytes(data)))
                orphans = [digest for digest in orphans if digest not in referred]
                for start in range(0, len(orphans), _CHUNK):
                    chunk = orphans[start:start + _CHUNK]
                    self.conn.execute(f"DELETE FROM sqlchorus_values WHERE digest IN ({', '.join('?' * len(chunk))})",
                                      chunk)
                self.conn.commit()
            except BaseException:
                self.conn.rollback()
                raise
        return len(orphans)

    def used_bytes(self) -> int | None:
        with self.lock:
            size = self.conn.execute("PRAGMA page_size").fetchone()[0]
            pages = self.conn.execute("PRAGMA page_count").fetchone()[0]
            free = self.conn.execute("PRAGMA freelist_count").fetchone()[0]
        return int((pages - free) * size)

    def compact(self, vacuum: bool = False) -> None:
        """Without ``vacuum``, pages freed by removed rows are reused by the next runs (and, in a
        file a vacuum made incremental, given back at once); with it, the file is rewritten at
        its new size, and made incremental so that later prunes give space back without one."""
        with self.lock:
            self.conn.commit()
            if vacuum:
                self.conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
                self.conn.execute("VACUUM")
            else:
                self.conn.execute("PRAGMA incremental_vacuum").fetchall()
            self.conn.commit()
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    # -- reading ----------------------------------------------------------------------------

    def get_tuple(self, config) -> CheckpointTuple | None:
        with _undamaged(self.path):
            return self._restore(super().get_tuple(config))

    def list(self, config, *, filter=None, before=None, limit=None) -> Iterator[CheckpointTuple]:
        # The saver holds its lock while its own listing runs: read it all, then restore.
        with _undamaged(self.path):
            items = list(super().list(config, filter=filter, before=before, limit=limit))
        for item in items:
            with _undamaged(self.path):
                restored = self._restore(item)
            yield restored

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
        with self.lock:
            calls = self.conn.execute(
                "SELECT COALESCE(SUM(LENGTH(messages) + LENGTH(answer) + LENGTH(params) + LENGTH(usage)), 0) "
                "FROM sqlchorus_calls WHERE thread_id = ?", (thread_id,),
            ).fetchone()[0]
        return int(own + writes + shared + calls)


class CallLog:
    """The model calls of one run: kept as they are made, and served again on replay.

    Args:
        store: the checkpoint file.
        thread_id: the run's id.
        replay: serve the answers already kept for this run (in the order they were made, per
            request) instead of calling the model; a request the run never made, because an
            edit changed its input, goes to the model.
    """

    def __init__(self, store: RunCheckpoints, thread_id: str, *, replay: bool = False):
        self.store = store
        self.thread_id = thread_id
        self._lock = threading.Lock()
        self._answers: dict[str, list[tuple[str, dict[str, Any] | None]]] = {}
        self._supplied: list[str] = []
        self.live = False  # while True, every call goes to the model: a fresh sample, not a kept one
        if replay:
            for call in store.calls(thread_id):
                usage = call.get("usage")
                self._answers.setdefault(call["key"], []).append(
                    (call["answer"], usage if isinstance(usage, dict) else None))
        self.served = 0

    def supply(self, text: str) -> None:
        """Answer the next call, whatever it asks, with ``text``."""
        with self._lock:
            self._supplied.append(text)

    def answer(self, key: str) -> tuple[str, str, dict[str, Any] | None] | None:
        """A supplied answer, else the kept answer to request ``key`` next in turn, or None; with
        how it came, ``typed`` (supplied) or ``replayed`` (kept), and the usage the kept call
        recorded (its tokens; None for a typed answer)."""
        with self._lock:
            if self._supplied:
                self.served += 1
                return self._supplied.pop(0), "typed", None
            queue = self._answers.get(key)
            if not queue or self.live:
                return None
            self.served += 1
            text, usage = queue.pop(0)
            return text, "replayed", usage

    def record(self, call: dict[str, Any]) -> None:
        """Keep one call (see :meth:`RunCheckpoints.record_call`); a file that cannot take it
        costs the recording, not the run."""
        # A run's parallel nodes (generators) record from their own threads: the next number is
        # read and written under one lock, or two calls would take the same and one be lost.
        with self._lock:
            if self.store.away:  # kept for when the store is back, with the run's end
                self.store.keep_call(self.thread_id, call)
                return
            try:
                self.store.record_call(self.thread_id, call)
            except self.store.db_errors:
                self.store.keep_call(self.thread_id, call)


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and _REF in value
