"""A database's value index built on a Ray cluster, column by column, byte for byte as locally.

The build is the local one cut in two (:mod:`sqlchorus.tools.values.parts`): the command's
process (the driver) plans it (the columns and their ids, from the catalogue), the cluster's
workers compute the columns' parts (reading each column's distinct values, normalising, keying:
nearly all the time), and the driver merges the parts in column order into the file
(:class:`~sqlchorus.tools.values.IndexWriter`), under the name a local build gives it, so
``ask`` finds it. The file holds nothing that depends on where or in what order a part was made,
so it is the local build's file, byte for byte.

**Columns, not row ranges.** A task is a run of consecutive columns. A column is not cut into
row ranges because its values are not rows: a column contributes its *distinct* text values in
key order (``SELECT DISTINCT ... ORDER BY``), the first ``max_values_per_column`` of them. A
range of rows holds values that other ranges hold too and in another order, and which values
make the first N is known only once the whole column is sorted, so row ranges would change the
values, their ids and the file. Ranges of *keys* would keep the order, but their bounds are known
only by sorting the column first, which is the reading itself. Columns are enough in practice:
each is at most ``max_values_per_column`` values (100 000 by default), so a large database has
many columns of bounded size; a database of one huge column (``--max-values`` far past the
default) builds at the speed of one worker.

**Where a worker reads.** A database on a server (PostgreSQL, MySQL) is opened by its URL from
wherever the worker runs. A SQLite or DuckDB file is read in place when the same path on the
worker's node holds the same bytes (a shared file system, or the driver's own machine); else the
driver's copy, put once in Ray's object store, is written once per node into the node's cache
folder, named by its content's digest (:mod:`.staging`), and reused by every later task and
build there. A SQLite file with a write-ahead log not yet checkpointed is shipped as a snapshot
(SQLite's backup), so the workers read what the driver reads.

**Tasks.** About :data:`TASKS_PER_CPU` tasks per CPU of the cluster, so that a slow column does
not leave the other CPUs idle at the end; results wait in the object store until the merge
reaches them, so the driver holds one task's parts at a time. Progress counts columns done as
tasks end, in any order. Ray re-runs a task whose worker died; an error that is not a statement's
(a database that does not open on a node) ends the build with one line (:class:`ClusterError`).

Ray is imported only inside the functions that need it.
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlchorus.cluster import staging
from sqlchorus.cluster.connect import ClusterError, cluster, parse_address, ray_module
from sqlchorus.tools.engines.sqlite import Database
from sqlchorus.tools.engines.opening import open_database
from sqlchorus.tools.values import (
    DEFAULT_MAX_VALUES,
    BuildPlan,
    ColumnPart,
    PartsSource,
    ProgressFn,
    ValueIndex,
)

TASKS_PER_CPU = 4
"""Tasks per logical CPU of the cluster (fewer when there are fewer columns)."""
TASK_CPUS = 1.0
"""Logical CPUs a task takes: reading and hashing use one core."""


@dataclass(frozen=True)
class DatabaseSource:
    """How a worker opens the database: plain data sent with every task.

    Attributes:
        url: a server's URL (PostgreSQL, MySQL), secrets included: opened as it is.
        allow_writable_role: open it even as a role that could write, as the driver chose
            (a worker's environment need not say so).
        path: a file's path on the driver, where a worker first looks on its own node.
        engine: ``sqlite`` or ``duckdb``, for a file.
        digest: the file's content digest (:func:`staging.content_digest`), the name of its
            copy in a node's cache.
        size: its size in bytes.
        shipped: the file's bytes in the object store, in a tuple so that Ray hands the task
            the reference, not the bytes: a node that has the file never fetches them.
        in_place: False ships the file even to a node whose same path holds the same bytes
            (a check of the shipping path).
    """

    url: str | None = None
    allow_writable_role: bool = False
    path: str | None = None
    engine: str = "sqlite"
    digest: str = ""
    size: int = 0
    shipped: tuple[Any, ...] = ()
    in_place: bool = True

    @property
    def display(self) -> str:
        """The database as a message shows it (a URL without its password)."""
        return staging.display(self.url if self.url else self.path)


# -- the driver ---------------------------------------------------------------------------------


def build_index_on_cluster(database: Database, address: str, *, source: str | None = None,
                           cache_dir: str | os.PathLike[str] | None = None,
                           max_values_per_column: int | None = None, rebuild: bool = False,
                           progress: ProgressFn | None = None, timeout_s: float = 300.0,
                           cpus: int | None = None) -> ValueIndex:
    """``sqlchorus index --ray ADDRESS``: the cached index of ``database``'s content, or one
    built on the cluster at ``address``, exactly as :meth:`ValueIndex.load_or_build` (or
    :meth:`ValueIndex.build` with ``rebuild``) would here.

    The cluster is joined only when there is something to build: an index already cached is
    opened without it.

    Args:
        database: the database, open here (its catalogue plans the build; its content names
            the index).
        address: as ``--ray`` takes it (:mod:`.connect`).
        source: what the workers open for a database on a server: its URL as given, password
            included (``database`` keeps none). Files need none.
        cpus: for ``local``, the CPUs of the cluster started for this build.
        cache_dir, max_values_per_column, progress, timeout_s: as for
            :meth:`ValueIndex.load_or_build`.

    Raises:
        ClusterAddressError: ``address`` is not one (bad input).
        ClusterError: no cluster at ``address``, or a worker cannot read the database.
    """
    parse_address(address)  # a malformed address is said even when nothing is built
    if not rebuild:
        found = ValueIndex.cached(database, cache_dir, max_values_per_column=max_values_per_column)
        if found is not None:
            return found
    with cluster(address, cpus=cpus):
        return ValueIndex.build(database, cache_dir=cache_dir,
                                max_values_per_column=max_values_per_column or DEFAULT_MAX_VALUES,
                                progress=progress, timeout_s=timeout_s,
                                parts=cluster_parts(database, source=source))


def cluster_parts(database: Database, *, source: str | None = None,
                  in_place: bool = True) -> PartsSource:
    """The ``parts`` of :meth:`ValueIndex.build` computed on the Ray cluster this process is
    connected to (:func:`.connect.cluster`): given the plan, the parts in column order.

    Args:
        source: a server's URL with its password, when ``database`` is on a server.
        in_place: False ships a file to every node, even one whose same path holds it.
    """

    def parts(plan: BuildPlan, progress: ProgressFn | None) -> Iterator[ColumnPart]:
        with _source(database, source, in_place=in_place) as where:
            yield from _run_tasks(where, plan, progress)

    return parts


@contextlib.contextmanager
def _source(database: Database, url: str | None, *, in_place: bool) -> Iterator[DatabaseSource]:
    """Where the workers find ``database``: its URL, or its file put in the object store."""
    if database.path is None:
        if not url:
            raise ClusterError(f"The workers need the URL of {database.location} to open it "
                               "(with its password, which the open database does not keep).")
        # The driver's choice, made as open_database makes it (the command line sets the
        # variable from --allow-writable-role), travels with the URL.
        flag = os.environ.get("SQLCHORUS_ALLOW_WRITABLE_ROLE", "").strip().lower()
        yield DatabaseSource(url=url, allow_writable_role=flag in ("1", "true", "yes", "on"))
        return
    ray = _connected()
    path = Path(database.path)
    with tempfile.TemporaryDirectory(prefix="sqlchorus-index-") as scratch:
        file = _readable_copy(path, database.engine, Path(scratch))
        digest, size = staging.content_digest(file), file.stat().st_size
        try:
            ref = ray.put(file.read_bytes())
        except OSError as e:
            raise ClusterError(f"Cannot read {path} to send it to the cluster: {e}") from None
        yield DatabaseSource(path=str(path), engine=database.engine, digest=digest, size=size,
                             shipped=(ref,), in_place=in_place)


def _readable_copy(path: Path, engine: str, scratch: Path) -> Path:
    """The file whose bytes hold what the driver reads: the database file itself, or, for a
    SQLite file whose write-ahead log holds commits not yet in it, a snapshot of both."""
    wal = path.with_name(path.name + ("-wal" if engine == "sqlite" else ".wal"))
    if not (wal.is_file() and wal.stat().st_size > 0):
        return path
    if engine != "sqlite":
        raise ClusterError(f"{path} has a write-ahead log ({wal.name}) not yet in the file: "
                           "run CHECKPOINT on it with DuckDB, or build without --ray.")
    snapshot = scratch / path.name
    try:
        with contextlib.closing(sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)) as src, \
                contextlib.closing(sqlite3.connect(snapshot)) as dst:
            src.backup(dst)
    except sqlite3.Error as e:
        raise ClusterError(f"Cannot take a snapshot of {path} (it has a write-ahead log): "
                           f"{e}") from None
    return snapshot


def _connected() -> Any:
    ray = ray_module()
    if not ray.is_initialized():
        raise ClusterError("Not connected to a Ray cluster: build inside `with cluster(address):`.")
    return ray


def task_groups(col_ids: range, cpus: float) -> list[range]:
    """Consecutive columns cut into about :data:`TASKS_PER_CPU` tasks per CPU.

    >>> task_groups(range(1, 11), 2)
    [range(1, 3), range(3, 5), range(5, 7), range(7, 9), range(9, 11)]
    >>> task_groups(range(1, 4), 8)
    [range(1, 2), range(2, 3), range(3, 4)]
    >>> task_groups(range(1, 1), 2)
    []
    """
    per_task = max(1, math.ceil(len(col_ids) / max(1, round(TASKS_PER_CPU * cpus))))
    return [col_ids[at:at + per_task] for at in range(0, len(col_ids), per_task)]


def _run_tasks(source: DatabaseSource, plan: BuildPlan,
               progress: ProgressFn | None) -> Iterator[ColumnPart]:
    """The plan's parts, computed by tasks on the cluster, given in column order as they come."""
    ray = _connected()
    total = len(plan.columns)
    cpus = float(ray.cluster_resources().get("CPU", 0.0))
    if cpus < TASK_CPUS:
        raise ClusterError(f"The Ray cluster offers {cpus:g} CPU: a task of the build needs "
                           f"{TASK_CPUS:g}. Add a node with CPUs, or build without --ray.")
    groups = task_groups(plan.col_ids, cpus)
    task = ray.remote(_parts_task).options(num_cpus=TASK_CPUS, scheduling_strategy="SPREAD")
    refs = [task.remote(source, plan, list(group)) for group in groups]
    size = {ref: len(group) for ref, group in zip(refs, groups)}
    pending = set(refs)
    done = 0
    if progress is not None:
        progress(0, total)
    try:
        for ref in refs:
            # Each wait ends a task (it blocks until one ends), so this runs len(refs) times in all.
            while ref in pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for finished in ready:
                    pending.discard(finished)
                    done += size[finished]
                    if progress is not None:
                        progress(done, total)
            try:
                parts = ray.get(ref)
            except ray.exceptions.RayError as e:
                raise ClusterError(f"A worker could not index {source.display}: "
                                   f"{_cause(e)}") from None
            yield from parts
            del parts  # the next task's parts come into memory only after these are written
    finally:
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref)


def _cause(error: BaseException) -> str:
    """The first line of what a task raised."""
    cause = getattr(error, "cause", None)
    error = cause if isinstance(cause, BaseException) else error
    text = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
    return text or type(error).__name__


# -- the workers --------------------------------------------------------------------------------


def _parts_task(source: DatabaseSource, plan: BuildPlan, col_ids: list[int]) -> list[ColumnPart]:
    """A task: the parts of columns ``col_ids``, from the database this node opens itself."""
    if source.url:
        database = open_database(source.url, prestart=False, workers=1,
                                 allow_writable_role=source.allow_writable_role)
    else:
        name = _node_file(source)
        if source.engine == "duckdb":
            name = f"duckdb://{name}"  # a copy keeps the file's name, whatever its suffix
        database = open_database(name, prestart=False, workers=1)
    try:
        return plan.parts(database, col_ids)
    finally:
        database.close()


_FOUND: dict[tuple[str, bool], tuple[str, int, int]] = {}
"""This worker process's files by digest, with their size and time when found: a later task
skips hashing a file of a gigabyte again."""


def _node_file(source: DatabaseSource) -> str:
    """The path of the database file on this node: the driver's path when it holds the same
    bytes, else this node's copy, fetched from the object store by the first task that needs
    it while the node's other tasks wait (one transfer per node)."""
    key = (source.digest, source.in_place)
    known = _FOUND.get(key)
    if known is not None:
        path, size, mtime = known
        with contextlib.suppress(OSError):
            stat = os.stat(path)
            if (stat.st_size, stat.st_mtime_ns) == (size, mtime):
                return path
    assert source.path is not None, "a file's source has its path"
    with _node_lock(source.digest):
        found = None
        if source.in_place:
            found = staging.find_local(source.path, source.digest, source.size)
        else:
            shipped = staging.node_cache() / source.digest / Path(source.path).name
            if shipped.is_file() and shipped.stat().st_size == source.size:
                found = str(shipped)
        if found is None:
            ray = ray_module()
            found = staging.keep_shipped(source.path, source.digest, ray.get(source.shipped[0]))
    stat = os.stat(found)
    _FOUND[key] = (found, stat.st_size, stat.st_mtime_ns)
    return found


@contextlib.contextmanager
def _node_lock(digest: str) -> Iterator[None]:
    """Held by one process of this node at a time, for one database (a lock file in the node's
    cache folder); where ``fcntl`` is missing, no lock (two tasks may then both fetch a copy,
    and the second keeps the first's)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    folder = staging.node_cache()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{digest}.lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
