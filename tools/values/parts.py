"""The expensive half of a build, column by column, wherever the database can be read.

A build is two halves. This module is the first: for one column, read its distinct text values
through the guarded database (:mod:`.reading`), normalise them and compute every key of each
(:mod:`.hashing`). That is nearly all of a build's time, and it depends on nothing but the
database's content and the column, so it can run in this process or in another one, on another
machine that opens the same database (:mod:`sqlchorus.cluster.index_build`), for any subset of
the columns and in any order. Its result, a :class:`ColumnPart`, is plain picklable data: the
values as one string and their lengths, and the postings as one numpy array.

The second half, :mod:`.building`, merges the parts in column order and writes the file. Value
ids are given there, by position: a value's id is the number of values of the columns before its
own plus its place in its column, which only the merge knows. So a part's postings hold ids
counted from its column's first value, and the merge adds the column's offset; a key depends only
on the value's text, so a part is the same whoever computes it.

What is read is decided once, by :func:`plan_build` on the machine that writes the file: the
columns, their ids (their place in the plan, from 1) and the settings every reader must share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from sqlchorus.tools.engines.sqlite import Database, SqlError
from sqlchorus.tools.values.hashing import _U64, normalize_many, value_keys
from sqlchorus.tools.values.parameters import DEFAULT_MAX_VALUES, HASH_BATCH
from sqlchorus.tools.values.reading import (
    ColumnPlan,
    _ColumnRead,
    _count_beyond,
    _read_columns,
    _text_columns,
)
from sqlchorus.tools.values.storage import _pack, sort_postings


@dataclass
class ValueBlock:
    """Some consecutive values of one column (a page of its reading), with their postings.

    Attributes:
        first: the place of the block's first value in its column (0 for the column's first).
        text: the values, concatenated (the ``vals`` table stores them so).
        lengths: each value's length in characters (``int32``).
        postings: every key of every value, packed with the value's place in its column
            (:func:`~sqlchorus.tools.values.storage._pack`), sorted (``uint64``).
    """

    first: int
    text: str
    lengths: np.ndarray
    postings: np.ndarray

    def __len__(self) -> int:
        return len(self.lengths)


BlockSink = Callable[[ValueBlock], None]
"""Where a column's blocks go as they are made, when they are not kept in its part (the local
build writes them at once, so that memory stays flat whatever the column's size)."""


@dataclass
class ColumnPart:
    """One column's share of an index: what :mod:`.building` needs to write it, as plain data.

    Attributes:
        col_id: the column's id in the file: its place in the plan, from 1.
        table, column: its name.
        text, lengths, postings: its values and their postings, as in :class:`ValueBlock`
            (empty when they went to a sink instead).
        n_values: how many values were kept (those that are not empty once normalised).
        indexed: the column is listed in the file (it has values and they were all read).
        truncated: more distinct values than ``max_values_per_column``: the first are indexed.
        reason: the line listed in ``skipped`` for it (skipped, truncated, unreadable), or None.

    A column whose reading failed half-way (``unreadable``) keeps the values read before the
    failure: they have ids and postings like any other, but no listed column names them, so a
    search never returns them. A build that streams values to the file as they are read (the
    local one) cannot take them back, and a part must make the same file as that build.
    """

    col_id: int
    table: str
    column: str
    text: str = ""
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    postings: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=_U64))
    n_values: int = 0
    indexed: bool = False
    truncated: bool = False
    reason: str | None = None

    @property
    def block(self) -> ValueBlock:
        """The part's values as one block (from the column's first value)."""
        return ValueBlock(0, self.text, self.lengths, self.postings)


@dataclass(frozen=True)
class BuildPlan:
    """What a build reads, decided once where the file is written, the same for every reader.

    Attributes:
        columns: the columns to read, in order; the column at place ``i`` has id ``i + 1``.
        skipped: columns left out before any value is read (BLOB columns, virtual tables), each
            ``{"table", "column", "reason"}``; listed first in the file's ``skipped``.
        max_values_per_column: distinct values read per column at most.
        timeout_s: time budget of each read statement.
    """

    columns: tuple[ColumnPlan, ...]
    skipped: tuple[dict[str, str], ...] = ()
    max_values_per_column: int = DEFAULT_MAX_VALUES
    timeout_s: float = 300.0

    @property
    def col_ids(self) -> range:
        """Every column's id, in order."""
        return range(1, len(self.columns) + 1)

    def part(self, db: Database, col_id: int, sink: BlockSink | None = None) -> ColumnPart:
        """The part of column ``col_id``, read from ``db`` (this plan's database, or a copy).

        Args:
            sink: receives the column's blocks as they are made, instead of the part keeping
                them (the part then holds only the column's outcome).

        Raises:
            IndexError: no column has that id.
        """
        return next(self.read_parts(db, [col_id], lambda _: sink))

    def parts(self, db: Database, col_ids: Iterable[int]) -> list[ColumnPart]:
        """The parts of the columns ``col_ids``, read from ``db``: one worker's share."""
        return list(self.read_parts(db, col_ids))

    def read_parts(self, db: Database, col_ids: Iterable[int],
                   sink_for: Callable[[int], BlockSink | None] | None = None
                   ) -> Iterator[ColumnPart]:
        """The parts of the columns ``col_ids``, in that order, read from ``db`` as they are
        asked for. Consecutive columns of one table are read together (a small table in one
        statement); a part is the same however its column was read.

        Args:
            sink_for: the sink of each column's blocks (see :meth:`part`), by column id.

        Raises:
            IndexError: a column id that no column has (before anything is read).
        """
        ids = list(col_ids)
        for col_id in ids:
            if not 1 <= col_id <= len(self.columns):
                raise IndexError(f"no column {col_id} in a plan of {len(self.columns)} columns")
        reads = _read_columns(db, [self.columns[i - 1] for i in ids],
                              self.max_values_per_column, self.timeout_s)
        # Columns read whole in one page (most columns of most databases) are keyed together,
        # up to HASH_BATCH values at a time: a call of value_keys costs about as much as keying
        # a few hundred values, whatever its size. A part is the same either way.
        waiting: list[tuple[int, _ColumnRead, list[str]]] = []
        held = 0

        def flush() -> Iterator[ColumnPart]:
            nonlocal held
            if not waiting:
                return
            blocks = value_blocks([page for _, _, page in waiting])
            for (col_id, read, _), block in zip(waiting, blocks):
                yield column_part(db, read, col_id, self.max_values_per_column, self.timeout_s,
                                  None if sink_for is None else sink_for(col_id), block)
            waiting.clear()
            held = 0

        for col_id, read in zip(ids, reads):
            page = _one_page(read)
            if page is None or len(page) > HASH_BATCH:
                yield from flush()
                yield column_part(db, read, col_id, self.max_values_per_column, self.timeout_s,
                                  None if sink_for is None else sink_for(col_id))
                continue
            if held + len(page) > HASH_BATCH:
                yield from flush()
            waiting.append((col_id, read, page))
            held += len(page)
        yield from flush()


def _one_page(read: _ColumnRead) -> list[str] | None:
    """The column's values when they are already read, as one page (none when it is skipped or
    could not be read); None when its pages are read as its part is made."""
    if read.error is not None or read.reason:
        return []
    if not isinstance(read.pages, (list, tuple)) or len(read.pages) > 1:
        return None
    return read.pages[0] if read.pages else []


def plan_build(db: Database, *, max_values_per_column: int = DEFAULT_MAX_VALUES,
               timeout_s: float = 300.0) -> BuildPlan:
    """The plan of a build of ``db``'s index: its text columns, from its catalogue.

    Raises:
        SqlError: the catalogue cannot be read.
    """
    columns, skipped = _text_columns(db)
    return BuildPlan(tuple(columns), tuple(skipped), max_values_per_column, timeout_s)


def column_part(db: Database, read: _ColumnRead, col_id: int, max_values_per_column: int,
                timeout_s: float, sink: BlockSink | None = None,
                keyed: ValueBlock | None = None) -> ColumnPart:
    """Normalise and key one column's distinct text values, as ``read`` reads them (see
    :class:`ColumnPart`); ``keyed``: the block of its one page, already made
    (:func:`value_blocks`).

    A statement that fails (:class:`SqlError`: a timeout, a value too large) makes the column
    ``unreadable``, not the build: the other columns are still indexed.
    """
    plan = read.plan
    part = ColumnPart(col_id, plan.table, plan.column)
    blocks: list[ValueBlock] = []
    keep = blocks.append if sink is None else sink
    try:
        if read.error is not None:
            raise read.error
        if read.reason:
            part.reason = read.reason
            return part
        # Lazily made: each block's first value is the count of the values kept before it.
        made = ([keyed] if keyed is not None else
                (value_block(page[at:at + HASH_BATCH], part.n_values)
                 for page in read.pages for at in range(0, len(page), HASH_BATCH)))
        for block in made:
            if len(block):
                part.n_values += len(block)
                keep(block)
        if part.n_values == 0:
            return part
        truncated = read.known_truncated()
        if truncated is None:
            truncated = part.n_values >= max_values_per_column and _count_beyond(
                db, plan, max_values_per_column, timeout_s)
        part.truncated = truncated
        part.indexed = True
        if part.truncated:
            part.reason = (f"truncated: more than {max_values_per_column} distinct values; "
                           f"the first {max_values_per_column} in key order are indexed")
    except SqlError as e:
        part.indexed, part.truncated = False, False
        part.reason = f"unreadable: {e.message}"
    finally:
        if blocks:
            part.text = "".join(b.text for b in blocks)
            part.lengths = np.concatenate([b.lengths for b in blocks])
            part.postings = np.sort(np.concatenate([b.postings for b in blocks]), kind="stable")
    return part


def value_blocks(pages: list[list[str]]) -> list[ValueBlock]:
    """``[value_block(page, 0) for page in pages]``, each page the first of its column, keyed in
    one call (at most :data:`HASH_BATCH` values in all, for the same reason as a block's).

    >>> pages = [["New York", "!!", "Paris"], [], ["Oslo"]]
    >>> together, alone = value_blocks(pages), [value_block(p, 0) for p in pages]
    >>> [(b.text, b.lengths.tolist(), b.postings.tolist()) for b in together] == [
    ...     (b.text, b.lengths.tolist(), b.postings.tolist()) for b in alone]
    True
    """
    return _keyed(pages, [0] * len(pages))


def value_block(page: list[str], first: int) -> ValueBlock:
    """The block of some consecutive values of one column (at most :data:`HASH_BATCH` at a
    time, so that the arrays of their keys stay in cache), the first being value ``first`` of
    its column: the values not empty once normalised, and all their postings.

    >>> block = value_block(["New York", "!!", "Paris"], 10)
    >>> block.text, block.lengths.tolist(), block.first
    ('New YorkParis', [8, 5], 10)
    >>> sorted(set((block.postings & 0x7FFFFFFF).tolist()))  # the values' places in the column
    [10, 11]
    >>> bool((block.postings[1:] >= block.postings[:-1]).all())
    True
    """
    return _keyed([page], [first])[0]


def _keyed(pages: list[list[str]], firsts: list[int]) -> list[ValueBlock]:
    """The block of each page, its first value being value ``firsts[i]`` of its column, every
    page's values keyed in one :func:`value_keys` call."""
    kept: list[list[str]] = []
    norms: list[str] = []
    for page in pages:
        page_norms = normalize_many(page)
        if not all(page_norms):
            page = [v for v, n in zip(page, page_norms) if n]
            page_norms = [n for n in page_norms if n]
        kept.append(page)
        norms += page_norms
    starts = np.zeros(len(kept) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, kept), dtype=np.int64, count=len(kept)), out=starts[1:])
    keys, vids = value_keys(norms, 0)
    if len(kept) > 1:  # each page's postings together, in the order of its values
        order = np.argsort(vids, kind="stable")
        keys, vids = keys[order], vids[order]
    cuts = np.searchsorted(vids, starts).tolist()
    blocks = []
    for i, (page, first) in enumerate(zip(kept, firsts)):
        a, b = cuts[i], cuts[i + 1]
        postings = _pack(keys[a:b], vids[a:b] - np.int32(starts[i] - first))
        blocks.append(ValueBlock(
            first, "".join(page), np.fromiter(map(len, page), dtype=np.int32, count=len(page)),
            # Sorted where the block is made (in parallel, on a cluster): the merge only merges.
            sort_postings(postings)))
    return blocks
