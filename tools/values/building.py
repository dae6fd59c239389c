"""Writing an index file: the merge of its columns' parts, the same bytes however they were made.

A build is two halves (see :mod:`.parts`): the columns' parts, read and keyed wherever the
database can be read, and this module's :class:`IndexWriter`, which merges them in column order
on one machine and writes the file. The local build (:func:`_write_index`) is both halves in one
process, each column's values handed to the writer as they are read.

The file holds nothing that differs between two builds of the same content: no time, no build
duration (the index reports a build's seconds without storing them), no order that comes from
hashing or from which part arrived first. Values take their ids by position in column order;
their rows are written in that order; the small tables and the postings, sorted, are written at
the end, in one transaction, in a fixed page size. Two builds, or a build from parts computed in
any order on any machines, give the same bytes, SQLite's file header included (its change
counter counts the transactions, the same number every time).

Postings are spilled to scratch files by key range past :data:`SPILL_POSTINGS`, then sorted and
written bucket by bucket; whether they were spilled does not change a byte. The file is written
under a scratch name and renamed into place when complete.
"""

from __future__ import annotations

import functools
import os
import shutil
import sqlite3
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from sqlchorus.tools.engines.sqlite import Database
from sqlchorus.tools.values.hashing import _U64
from sqlchorus.tools.values.parameters import (
    BANDS,
    BUCKET_POSTINGS,
    FORMAT_VERSION,
    HASH_BATCH,
    MAX_POSTINGS,
    NUM_PERM,
    PARTITION_BITS,
    SPILL_POSTINGS,
    VALUES_PER_CHUNK,
)
from sqlchorus.tools.values.parts import BuildPlan, ColumnPart, ValueBlock, plan_build
from sqlchorus.tools.values.storage import _SCHEMA, _VID_BITS, _VID_MASK, sort_postings

ProgressFn = Callable[[int, int], None]

FILE_PAGE_SIZE = 4096
"""The index file's SQLite page size, set rather than left to the library's default, so that
the file's bytes do not depend on how SQLite was compiled where it is written."""


@dataclass
class _Postings:
    """Packed postings (:func:`_pack`) gathered while building, then written sorted, bucket by
    bucket. Past :data:`SPILL_POSTINGS` of them in memory, they are split by their top bits into
    scratch files, each sorted and written on its own at the end, so memory stays flat.

    They come as sorted runs (a block's postings, sorted where the block was made): a spill cuts
    each run at the partitions' bounds by binary search, and the final sort merges runs (numpy's
    stable sort finds them), several times faster on the one machine that merges than sorting
    all the postings from scratch there.
    """

    scratch: Path
    parts: list[np.ndarray] = field(default_factory=list)
    in_memory: int = 0
    total: int = 0
    spilled: bool = False

    def add(self, packed: np.ndarray) -> None:
        """Add postings, sorted (sorted here when they are not: the file is the same)."""
        if len(packed) > 1 and not bool((packed[1:] >= packed[:-1]).all()):
            packed = sort_postings(packed)
        self.parts.append(packed)
        self.in_memory += len(packed)
        self.total += len(packed)
        if self.in_memory > SPILL_POSTINGS:
            self._spill()

    def _taken(self) -> np.ndarray:
        packed = np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=_U64)
        self.parts, self.in_memory = [], 0
        return packed

    def _file(self, part: int) -> Path:
        return self.scratch / f"{part:02d}.bin"

    def _spill(self) -> None:
        self.scratch.mkdir(parents=True, exist_ok=True)
        bounds = np.arange(1, 1 << PARTITION_BITS, dtype=_U64) << _U64(64 - PARTITION_BITS)
        files: dict[int, Any] = {}
        try:
            for run in self.parts:
                cuts = [0, *np.searchsorted(run, bounds).tolist(), len(run)]
                for p in range(1 << PARTITION_BITS):
                    if cuts[p + 1] > cuts[p]:
                        if p not in files:
                            files[p] = open(self._file(p), "ab")
                        run[cuts[p]:cuts[p + 1]].astype("<u8", copy=False).tofile(files[p])
        finally:
            for f in files.values():
                f.close()
        self.parts, self.in_memory = [], 0
        self.spilled = True

    def write(self, out: sqlite3.Connection) -> int:
        """Write the ``post`` table; returns the bucket bits."""
        bits = PARTITION_BITS
        while (self.total >> bits) > BUCKET_POSTINGS and bits < 64 - _VID_BITS:
            bits += 1
        if not self.spilled:
            _write_buckets(out, self._taken(), bits)
            return bits
        self._spill()
        for p in range(1 << PARTITION_BITS):
            if self._file(p).exists():
                _write_buckets(out, np.fromfile(self._file(p), dtype="<u8"), bits)
        return bits


def _write_buckets(out: sqlite3.Connection, packed: np.ndarray, bits: int) -> None:
    """Sort postings (sorted runs, merged), drop repeated ones, keep :data:`MAX_POSTINGS` per
    key (the lowest value ids), and insert one ``post`` row per bucket.

    ``packed`` is the caller's to give up: it is sorted in place. Few arrays as large as it are
    made (each is memory the system must hand over, page by page, the first time it is
    written): the repeated postings and the keys past the cap are looked for first and cut only
    when found (rarely), the buckets' bounds are found by binary search, and the rows hold
    views of the sorted postings, not copies.
    """
    if not len(packed):
        return
    packed.sort(kind="stable")
    repeated = packed[1:] == packed[:-1]
    if repeated.any():
        packed = packed[np.concatenate(([True], ~repeated))]
    del repeated
    if _has_run_over(packed, MAX_POSTINGS):  # rare: cut those keys
        keys = packed >> _U64(_VID_BITS)
        first = np.ones(len(keys), dtype=bool)
        first[1:] = keys[1:] != keys[:-1]
        run_start = np.maximum.accumulate(np.where(first, np.arange(len(keys)), 0))
        packed = packed[(np.arange(len(keys)) - run_start) < MAX_POSTINGS]
    packed = packed.astype("<u8", copy=False)
    shift = _U64(64 - bits)
    low, high = int(packed[0] >> shift), int(packed[-1] >> shift)
    cuts = [0, *np.searchsorted(packed, np.arange(low + 1, high + 1, dtype=_U64) << shift).tolist(),
            len(packed)]
    data = memoryview(packed.view(np.uint8).data)
    out.executemany("INSERT INTO post VALUES (?, ?)", (
        (low + k, data[8 * cuts[k]:8 * cuts[k + 1]])
        for k in range(high - low + 1) if cuts[k + 1] > cuts[k]
    ))


def _has_run_over(packed: np.ndarray, limit: int, step: int = 8192) -> bool:
    """Whether a key (the bits above the value id) has more than ``limit`` postings in the
    sorted ``packed``: some posting shares its key with the one ``limit`` places after it.
    Compared a slice at a time, so that no array as large as ``packed`` is made.

    >>> _has_run_over(np.array([1 << 31, (1 << 31) + 1, 2 << 31], dtype=np.uint64), 1)
    True
    >>> _has_run_over(np.array([1 << 31, 2 << 31, 3 << 31], dtype=np.uint64), 1)
    False
    """
    for at in range(0, len(packed) - limit, step):
        ahead = packed[at + limit:at + limit + step]
        if bool((((packed[at:at + len(ahead)] ^ ahead) >> _U64(_VID_BITS)) == 0).any()):
            return True
    return False


class IndexWriter:
    """Merges columns' parts into an index file, in column order, whatever order they come in.

    Use it as a context manager: the file appears at ``target`` only after :meth:`commit`; a
    writer left without it (an error) removes its scratch files.

    Parts are added whole (:meth:`add`) or a column at a time as its values are read
    (:meth:`add_block` for each block, then :meth:`end_column`); either way the file is the
    same. A part that comes before its turn waits in memory until the parts before it have come.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     target = Path(folder) / "i.sqlite"
    ...     with IndexWriter(target, BuildPlan(()), fingerprint="f", database="d") as writer:
    ...         writer.commit()
    ...     sorted(p.name for p in Path(folder).iterdir())
    ['i.sqlite']

    Raises:
        ValueError: a part twice, a part of no planned column, more values than value ids
            (2**31 - 1), or a part missing at :meth:`commit`.
    """

    def __init__(self, target: str | os.PathLike[str], plan: BuildPlan, *, fingerprint: str,
                 database: str):
        self.target = Path(target)
        self.plan = plan
        self.fingerprint = fingerprint
        self.database = database
        # Unique per build: two threads or processes building the same index never share a file.
        self.scratch = self.target.with_name(
            f".{self.target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        self.postings = _Postings(self.scratch.with_name(self.scratch.name + ".d"))
        self.stored = 0  # values given an id so far
        self._next = 1  # the column whose values come next
        self._first = 0  # the id of its first value
        self._early: dict[int, ColumnPart] = {}
        self._written = 0  # values whose ``vals`` rows are written
        self._texts: list[str] = []
        self._lengths: list[np.ndarray] = []
        self._col_ids: list[np.ndarray] = []
        self._pending = 0
        self._cols: list[tuple[int, str, str, int, int, int, int]] = []
        self._chars = 0  # the longest value of the column whose turn it is
        self._skipped: list[tuple[str, str, str]] = [
            (s["table"], s["column"], s["reason"]) for s in plan.skipped]
        self._out: sqlite3.Connection | None = None
        self._committed = False

    def __enter__(self) -> IndexWriter:
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.scratch.unlink(missing_ok=True)
        out = sqlite3.connect(self.scratch, isolation_level=None)
        self._out = out
        # A scratch file renamed into place at the end: no journal needed for crash safety.
        out.execute(f"PRAGMA page_size = {FILE_PAGE_SIZE}")
        out.execute("PRAGMA journal_mode = OFF")
        out.execute("PRAGMA synchronous = OFF")
        out.executescript(_SCHEMA)
        out.execute("BEGIN")
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
        if not self._committed:
            self.scratch.unlink(missing_ok=True)
        shutil.rmtree(self.postings.scratch, ignore_errors=True)

    # -- adding -------------------------------------------------------------------------------

    def add(self, part: ColumnPart) -> None:
        """Add one column's part (any column not yet added: parts may come in any order)."""
        self._check(part.col_id)
        if part.col_id != self._next:
            if part.col_id in self._early:
                raise ValueError(f"the part of column {part.col_id} was given twice")
            self._early[part.col_id] = part
            return
        self.add_block(part.col_id, part.block)
        self.end_column(part)
        while self._next in self._early:
            early = self._early.pop(self._next)
            self.add_block(early.col_id, early.block)
            self.end_column(early)

    def add_block(self, col_id: int, block: ValueBlock) -> None:
        """Add values of column ``col_id``, the column whose turn it is (blocks in their order)."""
        if col_id != self._next:
            self._check(col_id)
            raise ValueError(f"values of column {col_id} came in the turn of column {self._next}")
        if not len(block):
            return
        first = self._first + block.first
        if first != self.stored:
            raise ValueError(f"column {col_id}'s values from {block.first} came after "
                             f"{self.stored - self._first} of them")
        if first + len(block) > _VID_MASK:
            raise ValueError(f"more than {_VID_MASK} values: too many for one value index "
                             "(lower --max-values)")
        self.postings.add(block.postings + _U64(self._first))
        self._chars = max(self._chars, int(block.lengths.max()))
        self._texts.append(block.text)
        self._lengths.append(block.lengths)
        self._col_ids.append(np.full(len(block), col_id, dtype="<i4"))
        self._pending += len(block)
        self.stored += len(block)
        if self._pending >= HASH_BATCH:
            self._write_values(final=False)

    def end_column(self, part: ColumnPart) -> None:
        """Record column ``part.col_id`` (listed, or skipped and why) after its values."""
        if part.col_id != self._next:
            self._check(part.col_id)
            raise ValueError(f"column {part.col_id} ended in the turn of column {self._next}")
        if self.stored - self._first != part.n_values:
            raise ValueError(f"column {part.col_id} has {part.n_values} values, but "
                             f"{self.stored - self._first} were added")
        if part.indexed:
            self._cols.append((part.col_id, part.table, part.column, part.n_values,
                               int(part.truncated), self._first, self._chars))
        if part.reason:
            self._skipped.append((part.table, part.column, part.reason))
        self._next += 1
        self._first = self.stored
        self._chars = 0

    def _check(self, col_id: int) -> None:
        if not 1 <= col_id <= len(self.plan.columns):
            raise ValueError(f"no column {col_id} in a plan of {len(self.plan.columns)} columns")
        if col_id < self._next:
            raise ValueError(f"the part of column {col_id} was given twice")

    # -- writing ------------------------------------------------------------------------------

    def _write_values(self, *, final: bool) -> None:
        """Write the ``vals`` rows of the values waiting: every full chunk of
        :data:`VALUES_PER_CHUNK` (and the last, short one when ``final``)."""
        assert self._out is not None, "an IndexWriter is used in a with block"
        n = self._pending
        take = n if final else n - n % VALUES_PER_CHUNK
        if take == 0:
            return
        text = "".join(self._texts)
        lengths = np.concatenate(self._lengths)
        col_ids = np.concatenate(self._col_ids)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        cuts = offsets.tolist()
        # Every value's end within its chunk, and every column id, made as bytes once and sliced
        # a chunk at a time (no array operation a chunk).
        firsts = np.arange(n) // VALUES_PER_CHUNK * VALUES_PER_CHUNK
        ends = (offsets[1:] - offsets[firsts]).astype("<i4").tobytes()
        ids = col_ids.astype("<i4", copy=False).tobytes()
        rows = []
        for at in range(0, take, VALUES_PER_CHUNK):
            end = min(at + VALUES_PER_CHUNK, take)
            rows.append(((self._written + at) // VALUES_PER_CHUNK, ids[4 * at:4 * end],
                         ends[4 * at:4 * end], text[cuts[at]:cuts[end]]))
        self._out.executemany("INSERT INTO vals VALUES (?, ?, ?, ?)", rows)
        self._written += take
        self._texts = [text[cuts[take]:]] if take < n else []
        self._lengths = [lengths[take:]] if take < n else []
        self._col_ids = [col_ids[take:]] if take < n else []
        self._pending = n - take

    def commit(self) -> None:
        """Write what remains, and put the file in place.

        Raises:
            ValueError: a planned column's part never came.
        """
        assert self._out is not None, "an IndexWriter is used in a with block"
        missing = len(self.plan.columns) + 1 - self._next
        if missing:
            raise ValueError(f"the parts of {missing} columns never came (column {self._next} "
                             "first): the index is not written")
        out = self._out
        self._write_values(final=True)
        out.executemany("INSERT INTO cols VALUES (?, ?, ?, ?, ?, ?, ?)", self._cols)
        out.executemany("INSERT INTO skipped VALUES (?, ?, ?)", self._skipped)
        bucket_bits = self.postings.write(out)
        meta = {
            "format_version": FORMAT_VERSION, "fingerprint": self.fingerprint,
            "database": self.database, "num_perm": NUM_PERM, "bands": BANDS,
            "values": self.stored, "postings": self.postings.total, "bucket_bits": bucket_bits,
            "values_per_chunk": VALUES_PER_CHUNK, "max_postings": MAX_POSTINGS,
            "max_values_per_column": self.plan.max_values_per_column,
        }
        out.executemany("INSERT INTO meta VALUES (?, ?)", [(k, str(v)) for k, v in meta.items()])
        out.execute("COMMIT")
        out.close()
        self._out = None
        os.replace(self.scratch, self.target)
        self._committed = True


def write_index(target: str | os.PathLike[str], plan: BuildPlan, parts: Iterable[ColumnPart], *,
                fingerprint: str, database: str) -> None:
    """Write the index file of ``plan`` at ``target`` from its columns' ``parts`` (one per
    planned column, in any order; in column order, none waits in memory).

    ``fingerprint`` is the database content's (:func:`~.storage.content_fingerprint`) and
    ``database`` where it is, both kept in the file's ``meta``.

    Raises:
        ValueError: see :class:`IndexWriter`.
    """
    try:
        with IndexWriter(target, plan, fingerprint=fingerprint, database=database) as writer:
            for part in parts:
                writer.add(part)
            writer.commit()
    finally:
        close = getattr(parts, "close", None)
        if close is not None:  # a generator stopped early (an error): its cleanup runs now
            close()


def _write_index(db: Database, target: Path, fingerprint: str, max_values_per_column: int,
                 progress: ProgressFn | None, timeout_s: float) -> None:
    """The local build: every part computed here, in column order, its values streamed to the
    writer as each page is read (so memory stays flat whatever a column's size)."""
    plan = plan_build(db, max_values_per_column=max_values_per_column, timeout_s=timeout_s)
    with IndexWriter(target, plan, fingerprint=fingerprint, database=str(db.path)) as writer:
        parts = plan.read_parts(db, plan.col_ids,
                                lambda col_id: functools.partial(writer.add_block, col_id))
        for part in parts:
            writer.end_column(part)
            if progress is not None:
                progress(part.col_id, len(plan.columns))
        writer.commit()
