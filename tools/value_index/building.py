"""Writing an index file.

Values are stored and keyed :data:`HASH_BATCH` at a time across columns; their postings are
spilled to scratch files by key range past :data:`SPILL_POSTINGS`, then sorted and written bucket
by bucket. The file is written under a scratch name and renamed into place when complete.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sqlchorus.tools.database import GuardedDatabase, SqlError
from sqlchorus.tools.value_index.hashing import (
    _EXACT,
    _U64,
    _WORD,
    band_keys,
    half_keys,
    normalize,
    signatures,
    string_keys,
)
from sqlchorus.tools.value_index.parameters import (
    BANDS,
    BUCKET_POSTINGS,
    FORMAT_VERSION,
    HASH_BATCH,
    MAX_POSTINGS,
    NUM_PERM,
    PARTITION_BITS,
    SPILL_POSTINGS,
    STOPWORDS,
    VALUES_PER_CHUNK,
)
from sqlchorus.tools.value_index.reading import _column_pages, _count_beyond, _text_columns
from sqlchorus.tools.value_index.storage import _SCHEMA, _VID_BITS, _pack

ProgressFn = Callable[[int, int], None]


@dataclass
class _Postings:
    """Packed postings (:func:`_pack`) gathered while building, then written sorted, bucket by
    bucket. Past :data:`SPILL_POSTINGS` of them in memory, they are split by their top bits into
    scratch files, each sorted and written on its own at the end, so memory stays flat."""

    scratch: Path
    parts: list[np.ndarray] = field(default_factory=list)
    in_memory: int = 0
    total: int = 0
    spilled: bool = False

    def add(self, keys: np.ndarray, vids: np.ndarray) -> None:
        self.parts.append(_pack(keys, vids))
        self.in_memory += len(keys)
        self.total += len(keys)
        if self.in_memory > SPILL_POSTINGS:
            self._spill()

    def _taken(self) -> np.ndarray:
        packed = np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=_U64)
        self.parts, self.in_memory = [], 0
        return packed

    def _file(self, part: int) -> Path:
        return self.scratch / f"{part:02d}.bin"

    def _spill(self) -> None:
        packed = self._taken()
        self.scratch.mkdir(parents=True, exist_ok=True)
        part = (packed >> _U64(64 - PARTITION_BITS)).astype(np.uint8)
        for p in range(1 << PARTITION_BITS):
            mine = packed[part == p]
            if len(mine):
                with open(self._file(p), "ab") as f:
                    mine.astype("<u8", copy=False).tofile(f)
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
    """Sort postings, drop repeated ones, keep :data:`MAX_POSTINGS` per key (the lowest value
    ids), and insert one ``post`` row per bucket."""
    if not len(packed):
        return
    packed = np.sort(packed)
    if len(packed) > 1:
        packed = packed[np.concatenate(([True], packed[1:] != packed[:-1]))]
    keys = packed >> _U64(_VID_BITS)
    first = np.ones(len(keys), dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    run_start = np.maximum.accumulate(np.where(first, np.arange(len(keys)), 0))
    packed = packed[(np.arange(len(keys)) - run_start) < MAX_POSTINGS].astype("<u8")
    buckets = (packed >> _U64(64 - bits)).astype(np.int64)
    cuts = np.flatnonzero(np.diff(buckets)) + 1
    starts = np.concatenate(([0], cuts)).tolist()
    ends = np.concatenate((cuts, [len(packed)])).tolist()
    out.executemany("INSERT INTO post VALUES (?, ?)", (
        (int(buckets[s]), packed[s:e].tobytes()) for s, e in zip(starts, ends)
    ))


@dataclass
class _Batch:
    """Values waiting to be stored and keyed, :data:`HASH_BATCH` at a time, across columns."""

    out: sqlite3.Connection
    postings: _Postings
    col_ids: list[int] = field(default_factory=list)
    values: list[str] = field(default_factory=list)
    norms: list[str] = field(default_factory=list)
    stored: int = 0

    def add(self, col_id: int, page: list[str]) -> int:
        """Queue a page of one column's values; returns how many were kept (not empty once
        normalised)."""
        norms = list(map(normalize, page))
        if not all(norms):
            page = [v for v, n in zip(page, norms) if n]
            norms = [n for n in norms if n]
        kept = len(norms)
        self.col_ids.extend([col_id] * kept)
        self.values.extend(page)
        self.norms.extend(norms)
        while len(self.values) >= HASH_BATCH:
            self.flush(HASH_BATCH)
        return kept

    def flush(self, size: int | None = None) -> None:
        size = len(self.values) if size is None else size
        if size == 0:
            return
        col_ids, values, norms = self.col_ids[:size], self.values[:size], self.norms[:size]
        del self.col_ids[:size], self.values[:size], self.norms[:size]
        first = self.stored
        self.stored += size
        _store_values(self.out, first, col_ids, values)
        self.postings.add(*_keys_of(first, norms))


def _store_values(out: sqlite3.Connection, first: int, col_ids: list[int], values: list[str]) -> None:
    """Values with ids from ``first`` (a multiple of :data:`VALUES_PER_CHUNK`), in chunks."""
    rows = []
    for at in range(0, len(values), VALUES_PER_CHUNK):
        part = values[at:at + VALUES_PER_CHUNK]
        ends = np.cumsum(np.fromiter(map(len, part), dtype=np.int64, count=len(part)))
        rows.append(((first + at) // VALUES_PER_CHUNK,
                     np.asarray(col_ids[at:at + VALUES_PER_CHUNK], dtype="<i4").tobytes(),
                     ends.astype("<i4").tobytes(), "".join(part)))
    out.executemany("INSERT INTO vals VALUES (?, ?, ?, ?)", rows)


def _keys_of(first: int, norms: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Every key of values ``first, first + 1, ...`` (normalised as ``norms``), with the value
    id of each."""
    words: list[str] = []
    word_ids: list[int] = []
    tokens: list[str] = []
    token_ids: list[int] = []
    for vid, norm in enumerate(norms, start=first):
        if len(norm) > 1:
            tokens.append(norm)
            token_ids.append(vid)
        if " " in norm:
            for word in set(norm.split(" ")):
                if word not in STOPWORDS:
                    words.append(word)
                    word_ids.append(vid)
                    if len(word) > 1:
                        tokens.append(word)
                        token_ids.append(vid)
    ids = np.arange(first, first + len(norms), dtype=np.int32)
    keys = np.concatenate((string_keys(norms, _EXACT), string_keys(words, _WORD),
                           half_keys(tokens).ravel(), band_keys(signatures(norms)).ravel()))
    vids = np.concatenate((ids, np.asarray(word_ids, dtype=np.int32),
                           np.repeat(np.asarray(token_ids, dtype=np.int32), 2),
                           np.repeat(ids, BANDS)))
    return keys, vids


def _write_index(db: GuardedDatabase, target: Path, fingerprint: str, max_values_per_column: int,
                 progress: ProgressFn | None, timeout_s: float) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    # Unique per build: two threads or processes building the same index never share a file.
    scratch = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    scratch.unlink(missing_ok=True)
    spill = scratch.with_name(scratch.name + ".d")
    started = time.perf_counter()
    out = sqlite3.connect(scratch, isolation_level=None)
    try:
        # A scratch file renamed into place at the end: no journal needed for crash safety.
        out.execute("PRAGMA journal_mode = OFF")
        out.execute("PRAGMA synchronous = OFF")
        out.executescript(_SCHEMA)
        out.execute("BEGIN")
        postings = _Postings(spill)
        batch = _Batch(out, postings)
        plans, skipped = _text_columns(db)
        for done, plan in enumerate(plans, start=1):
            try:
                reason, pages = _column_pages(db, plan, max_values_per_column, timeout_s)
                if reason:
                    skipped.append({"table": plan.table, "column": plan.column, "reason": reason})
                    continue
                col_id = done
                n_values = 0
                for page in pages:
                    n_values += batch.add(col_id, page)
                if n_values == 0:
                    continue
                truncated = n_values >= max_values_per_column and _count_beyond(
                    db, plan, max_values_per_column, timeout_s)
                if truncated:
                    skipped.append({
                        "table": plan.table, "column": plan.column,
                        "reason": f"truncated: more than {max_values_per_column} distinct values; "
                                  f"the first {max_values_per_column} in key order are indexed",
                    })
                out.execute("INSERT INTO cols VALUES (?, ?, ?, ?, ?)",
                            (col_id, plan.table, plan.column, n_values, int(truncated)))
            except SqlError as e:
                skipped.append({"table": plan.table, "column": plan.column,
                                "reason": f"unreadable: {e.message}"})
            finally:
                if progress is not None:
                    progress(done, len(plans))
        batch.flush()
        out.executemany("INSERT INTO skipped VALUES (?, ?, ?)",
                        [(s["table"], s["column"], s["reason"]) for s in skipped])
        bucket_bits = postings.write(out)
        meta = {
            "format_version": FORMAT_VERSION, "fingerprint": fingerprint,
            "database": str(db.path), "num_perm": NUM_PERM, "bands": BANDS,
            "values": batch.stored, "postings": postings.total, "bucket_bits": bucket_bits,
            "values_per_chunk": VALUES_PER_CHUNK, "max_postings": MAX_POSTINGS,
            "max_values_per_column": max_values_per_column,
            "build_seconds": round(time.perf_counter() - started, 4),
        }
        out.executemany("INSERT INTO meta VALUES (?, ?)", [(k, str(v)) for k, v in meta.items()])
        out.execute("COMMIT")
        out.close()
        os.replace(scratch, target)
    except BaseException:
        out.close()
        scratch.unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(spill, ignore_errors=True)
