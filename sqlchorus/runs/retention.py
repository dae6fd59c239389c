"""How many runs are kept: the oldest runs' trace files and checkpoints removed, by count or age.

Every run leaves a trace file, ``<trace folder>/<run id>.jsonl``, and rows in the checkpoint
store; nothing removes them, and a store grows by tens of kilobytes a run. :func:`prune` keeps the
newest ``keep_runs`` runs and every run younger than ``keep_days`` (a run goes only when it is past
every limit given) and removes the rest: their rows in every table of the store, their trace
files, and then the stored values no remaining checkpoint refers to (values are shared between
runs by digest). A run a server may be working on (queued or running) is never removed, nor a run
that a kept run goes on from (a resume's ``parent``, whose thread holds the resume's checkpoints).

:func:`prune_stores` does the same over several stores at once, counting their runs together:
``sqlchorus prune`` without a store named prunes every store a run may be in (the command line's,
the Python API's, each evaluation's; :mod:`sqlchorus.runs.run_stores`).

``sqlchorus prune`` runs it once; the servers (:class:`~sqlchorus.runs.service.RunService`) run it
when they start and then every :data:`PRUNE_EVERY` finished runs, in a thread of their own
(:class:`Retention`). Library ``ask()`` calls never prune.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from sqlchorus.core.checkpoints import RunRecords, is_database_url
from sqlchorus.core.checkpoints_postgres import open_checkpoints
from sqlchorus.core.tracing import valid_run_id
from sqlchorus.runs.run_stores import RunStore
from sqlchorus.tools.errors import SqlchorusError

PRUNE_EVERY = 50
"""A server prunes again after this many of its runs have finished."""
ACTIVE = frozenset({"queued", "running"})
_log = logging.getLogger(__name__)


class RetentionLimitError(SqlchorusError, ValueError):
    """A prune was asked for without a limit (nothing would go), or with a negative one."""

    kind = "no_retention_limit"


@dataclass
class PruneReport:
    """What a prune removed (with ``dry_run``: would remove)."""

    runs_removed: list[str] = field(default_factory=list)
    """The runs removed, oldest first."""
    trace_files_removed: list[str] = field(default_factory=list)
    runs_kept: int = 0
    protected: list[str] = field(default_factory=list)
    """Runs past the limits kept all the same: queued or running, or the parent of a kept run."""
    values_removed: int = 0
    """Stored values (shared by digest between runs) that no remaining checkpoint referred to."""
    trace_bytes_freed: int = 0
    store_bytes_freed: int | None = None
    """Bytes of rows the store no longer holds; None when not measured (a dry run)."""
    dry_run: bool = False
    store_of: dict[str, str] = field(default_factory=dict)
    """Over several stores (:func:`prune_stores`): the name of the store each removed run was in."""

    @property
    def bytes_freed(self) -> int | None:
        """Trace and store bytes together; None when the store's part was not measured."""
        return None if self.store_bytes_freed is None else self.trace_bytes_freed + self.store_bytes_freed

    def summary(self) -> str:
        """One line saying what went and what stays."""
        verb = "Would remove" if self.dry_run else "Removed"
        freed = self.bytes_freed if self.bytes_freed is not None else self.trace_bytes_freed
        what = "bytes" if self.bytes_freed is not None else "bytes of trace files"
        text = (f"{verb} {len(self.runs_removed)} run(s) and {len(self.trace_files_removed)} trace file(s), "
                f"{self.values_removed} unshared stored value(s), {freed:,} {what}; kept {self.runs_kept} run(s)")
        if self.protected:
            text += f" ({len(self.protected)} past the limits: running, or a kept run's parent)"
        return text + "."


def prune(store: RunRecords | str | Path | None, trace_folder: str | Path | None, *, keep_runs: int | None = None,
          keep_days: float | None = None, dry_run: bool = False, vacuum: bool = False,
          now: datetime | None = None) -> PruneReport:
    """Remove the runs past the limits from ``store`` and ``trace_folder``.

    Args:
        store: the checkpoint store (open, or its SQLite path or ``postgresql://`` URL; a SQLite
            file that does not exist is no store, not one to make), or None.
        trace_folder: the folder of the runs' trace files, or None.
        keep_runs: keep the newest this many runs (None or 0: no limit by count).
        keep_days: keep the runs younger than this many days (None or 0: no limit by age).
        dry_run: remove nothing; say what would go.
        vacuum: also rewrite a SQLite file at its new size (slow, and it locks the file
            meanwhile); without it the freed pages are reused by the next runs.
        now: the time ages count from (default: now).

    A run's age is its record's ``created`` in the store (its status's last update for a run
    only a server recorded); a trace file of no run in the store is aged by its modification
    time. A run of the store with neither a record nor a status (checkpoints only) is kept.

    Raises:
        RetentionLimitError: neither limit is given, or one is negative.
        CheckpointFileError: the store cannot be opened.
    """
    return _prune_places([("", store, trace_folder)], keep_runs=keep_runs, keep_days=keep_days, dry_run=dry_run,
                         vacuum=vacuum, now=now)


def prune_stores(stores: Sequence[RunStore], *, keep_runs: int | None = None, keep_days: float | None = None,
                 dry_run: bool = False, vacuum: bool = False, now: datetime | None = None) -> PruneReport:
    """:func:`prune` over several stores at once (:func:`sqlchorus.runs.run_stores.default_stores`):
    the limits count the runs of them all together, newest first, so ``keep_runs`` keeps the
    newest runs wherever they are; each run removed goes from the store that holds it, and
    :attr:`PruneReport.store_of` names that store.

    Raises:
        RetentionLimitError: neither limit is given, or one is negative.
        CheckpointFileError: a store cannot be opened.
    """
    return _prune_places([(s.name, s.checkpoints, s.traces) for s in stores], keep_runs=keep_runs,
                         keep_days=keep_days, dry_run=dry_run, vacuum=vacuum, now=now)


def _prune_places(places: Sequence[tuple[str, RunRecords | str | Path | None, str | Path | None]], *,
                  keep_runs: int | None, keep_days: float | None, dry_run: bool, vacuum: bool,
                  now: datetime | None) -> PruneReport:
    if (keep_runs is not None and keep_runs < 0) or (keep_days is not None and keep_days < 0):
        raise RetentionLimitError("--keep-runs and --keep-days cannot be negative.")
    keep_runs, keep_days = keep_runs or None, keep_days or None
    if keep_runs is None and keep_days is None:
        raise RetentionLimitError("Say what to keep: --keep-runs N (the newest N runs) and/or --keep-days D "
                                  "(runs younger than D days).")
    opened: list[RunRecords] = []
    stores: list[tuple[str, RunRecords]] = []
    folders: list[tuple[str, Path]] = []
    # Two places may share a trace folder (an evaluation's checkpoints kept elsewhere) or a
    # checkpoint store: each is read once, for the first place that names it.
    seen: set[str] = set()
    try:
        for name, store, folder in places:
            if isinstance(store, (str, Path)):
                key = str(store) if is_database_url(store) else str(Path(store).absolute())
                if key in seen or not (is_database_url(store) or Path(store).is_file()):
                    store = None
                else:
                    seen.add(key)
                    store = open_checkpoints(store)
                    opened.append(store)
            if store is not None:
                stores.append((name, store))
            if folder and all(Path(folder).absolute() != f.absolute() for _, f in folders):
                folders.append((name, Path(folder)))
        return _prune(stores, folders, keep_runs, keep_days, dry_run, vacuum, now or datetime.now(timezone.utc))
    finally:
        for store in opened:
            store.close()


def _prune(stores: list[tuple[str, RunRecords]], folders: list[tuple[str, Path]], keep_runs: int | None,
           keep_days: float | None, dry_run: bool, vacuum: bool, now: datetime) -> PruneReport:
    # Run ids are unique across stores (a time and a random part), so a run's age, links and
    # trace file are one run's wherever each is kept (a debugging session's trace beside another
    # store's checkpoints).
    ages: dict[str, datetime] = {}
    links: dict[str, tuple[str, str | None]] = {}
    where: dict[str, str] = {}
    for name, store in stores:
        for run_id, link in store.run_links().items():
            links.setdefault(run_id, link)
        for run_id, created in store.run_ids_by_age():
            where.setdefault(run_id, name)
            when = _when(created)
            if when is not None:
                ages.setdefault(run_id, when)
    traces: dict[str, Path] = {}
    for name, folder in folders:
        if not folder.is_dir():
            continue
        for path in folder.glob("*.jsonl"):
            if valid_run_id(path.stem) and path.is_file() and path.stem not in traces:
                traces[path.stem] = path
                where.setdefault(path.stem, name)
                if path.stem not in ages and path.stem not in links:
                    ages[path.stem] = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
    newest_first = sorted(ages, key=lambda run: (ages[run], run), reverse=True)
    cutoff = now - timedelta(days=keep_days) if keep_days else None
    within = {run for i, run in enumerate(newest_first)
              if (keep_runs is not None and i < keep_runs) or (cutoff is not None and ages[run] >= cutoff)}
    kept = _kept(within, links)
    removed = [run for run in reversed(newest_first) if run not in kept]
    if stores and removed and not dry_run:
        # A run may have started (a resume of an old run) since the links were read.
        now_links: dict[str, tuple[str, str | None]] = {}
        for _, store in stores:
            for run_id, link in store.run_links().items():
                now_links.setdefault(run_id, link)
        again = _kept(within, now_links)
        removed = [run for run in removed if run not in again]
        kept |= again
    report = PruneReport(dry_run=dry_run, runs_kept=len(newest_first) - len(removed),
                         protected=sorted(run for run in kept - within if run in ages))
    report.runs_removed = removed
    if any(name for name, _ in [*stores, *folders]):  # stores named by prune_stores
        report.store_of = {run: where[run] for run in removed if run in where}
    gone_traces = [traces[run] for run in removed if run in traces]
    report.trace_files_removed = [str(path) for path in gone_traces]
    report.trace_bytes_freed = sum(_size(path) for path in gone_traces)
    if dry_run or not removed:
        report.store_bytes_freed = None if dry_run else 0
        return report
    before = [store.used_bytes() for _, store in stores]
    for _, store in stores:
        store.delete_runs(removed)
    for path in gone_traces:
        path.unlink(missing_ok=True)
    freed: int | None = 0
    for (_, store), used in zip(stores, before):
        report.values_removed += store.collect_values()
        store.compact(vacuum)
        after = store.used_bytes()
        freed = freed + max(0, used - after) if freed is not None and used is not None and after is not None else None
    report.store_bytes_freed = freed
    return report


def _kept(within: set[str], links: dict[str, tuple[str, str | None]]) -> set[str]:
    """``within`` with the runs a server may be working on and, run by run, the parent of every
    kept run (a resume's checkpoints are on its parent's thread, up the chain)."""
    kept = set(within) | {run for run, (status, _) in links.items() if status in ACTIVE}
    todo = list(kept)
    while todo:
        parent = links.get(todo.pop(), ("", None))[1]
        if parent and parent not in kept:
            kept.add(parent)
            todo.append(parent)
    return kept


def _when(stamp: str | None) -> datetime | None:
    try:
        when = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None  # a run that cannot be dated is not removed
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class Retention:
    """A server's pruning: once when it starts, then after every ``every`` finished runs, each
    time in a thread of its own so that no request waits for it; one prune at a time.

    Args:
        store: the server's checkpoint store (or None).
        trace_folder: its trace folder (or None).
        keep_runs, keep_days: as for :func:`prune` (0: no limit); neither given, it never prunes.
    """

    def __init__(self, store: RunRecords | None, trace_folder: str | Path | None, *, keep_runs: int = 0,
                 keep_days: float = 0, every: int = PRUNE_EVERY):
        self.store = store
        self.trace_folder = trace_folder
        self.keep_runs = keep_runs
        self.keep_days = keep_days
        self.every = max(1, every)
        self.enabled = bool(keep_runs or keep_days)
        self.last: PruneReport | None = None
        self._finished = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Prune now, in the background."""
        if not self.enabled:
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return  # the one under way covers this call's runs too
            self._thread = threading.Thread(target=self._prune, name="sqlchorus-retention", daemon=True)
            self._thread.start()

    def finished(self) -> None:
        """Count one finished run (its end stored); every ``every``-th starts a prune."""
        if not self.enabled:
            return
        with self._lock:
            self._finished += 1
            due = self._finished % self.every == 0
        if due:
            self.start()

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for a prune under way (``timeout_s`` at most)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

    def _prune(self) -> None:
        try:
            self.last = prune(self.store, self.trace_folder, keep_runs=self.keep_runs, keep_days=self.keep_days)
            if self.last.runs_removed:
                _log.info("sqlchorus: pruned old runs. %s", self.last.summary())
        except Exception as e:  # noqa: BLE001 - a failed prune costs disk space, never the server
            _log.warning("sqlchorus: pruning old runs failed: %s: %s", type(e).__name__, e)
