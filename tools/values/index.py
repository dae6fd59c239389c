"""The :class:`ValueIndex`: build, reuse or open a database's index file, and search it.

The file format is versioned (:data:`FORMAT_VERSION`, in the file name and in ``meta``): an index
of another version is never found by :meth:`ValueIndex.load_or_build` (it builds a new one) and
:meth:`ValueIndex.open` refuses it with a message saying to rebuild it.
"""

from __future__ import annotations

import os
import re
import sqlite3
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rapidfuzz.distance import Levenshtein

from sqlchorus.tools.engines.sqlite import Database, GuardedDatabase, SqlError
from sqlchorus.tools.errors import SqlchorusError
from sqlchorus.tools.values.building import ProgressFn, _write_index, write_index
from sqlchorus.tools.values.hashing import _U64, normalize, normalize_many, sorted_unique
from sqlchorus.tools.values.lookup import _candidates, _Lookup, _lookups
from sqlchorus.tools.values.parameters import (
    DEFAULT_MAX_VALUES,
    DEFAULT_THRESHOLD,
    FLAG_CHARS,
    FLAG_SCORE,
    FLAG_VALUES,
    FORMAT_VERSION,
    MEMORY_BYTES,
    STOPWORDS,
)
from sqlchorus.tools.values.parts import BuildPlan, ColumnPart, plan_build
from sqlchorus.tools.values.scoring import Embedder, _rank_key, score_pairs
from sqlchorus.tools.values.storage import _index_path, _pack

_CHUNK = 500  # parameters per statement

PartsSource = Callable[[BuildPlan, ProgressFn | None], Iterable[ColumnPart]]
"""Computes a build's parts elsewhere (see :meth:`ValueIndex.build`): given the plan and the
progress callback, the part of every planned column, in any order."""


class IndexFormatError(SqlchorusError, ValueError):
    """A value index file of another format version: it must be rebuilt."""

    kind = "index_format"


class ValueIndex:
    """The distinct text values of a database, searchable by keyword with typos.

    Build or reuse one with :meth:`load_or_build`; open a file with :meth:`open`.

    Attributes:
        path: the index file.
        skipped: columns not indexed (or indexed in part), each ``{"table", "column", "reason"}``.
        stats: ``values``, ``columns``, ``skipped`` and ``truncated`` (columns indexed in part),
            ``max_values_per_column`` it was built with, ``build_seconds`` (what this build
            took; 0.0 for a file reused or opened, which does not store it), ``bytes_on_disk``,
            ``from_cache`` (True when an existing file was reused), ``fingerprint``.
        embedder: optional function from texts to vectors; when set, fuzzy scores are blended
            with cosine similarity.

    Raises:
        ValueError: the file is not a value index of this version (an older one must be rebuilt).
    """

    def __init__(self, path: str | os.PathLike[str], *, from_cache: bool = False,
                 embedder: Embedder | None = None):
        self.path = Path(path)
        # Its own file, opened read-only under the guard's authorizer like any database.
        self._db = GuardedDatabase(self.path, max_bytes=64 * 1024 * 1024, max_rows=10_000_000,
                                  prestart=False)
        try:
            meta = dict(self._rows("SELECT key, value FROM meta"))
            version = meta.get("format_version")
            if version != str(FORMAT_VERSION):
                raise IndexFormatError(
                    f"{self.path} is a value index of format {version}, not {FORMAT_VERSION}: it "
                    "was built by another version of sqlchorus. Rebuild it (sqlchorus index "
                    "--rebuild, or delete the file)."
                )
            self._shift = _U64(64 - int(meta["bucket_bits"]))
            self._chunk = int(meta["values_per_chunk"])
            n_values = int(meta["values"])
            self.columns: dict[int, str] = {
                cid: f"{tbl}.{col}" for cid, tbl, col in
                self._rows("SELECT id, tbl, col FROM cols ORDER BY id")
            }
            self.skipped = [{"table": t, "column": c, "reason": r}
                            for t, c, r in self._rows("SELECT tbl, col, reason FROM skipped")]
            truncated = self._rows("SELECT count(*) FROM cols WHERE truncated")[0][0]
            self._names = _ColumnNames(self._rows(
                "SELECT id, col, first_vid, n_values FROM cols "
                f"WHERE NOT truncated AND n_values <= {FLAG_VALUES} "
                f"AND max_chars <= {FLAG_CHARS}"))
        except IndexFormatError:
            self._db.close()
            raise
        except (sqlite3.Error, KeyError, ValueError) as e:
            self._db.close()
            raise ValueError(f"{self.path} is not a value index ({e}).") from e
        self.meta = meta
        self.stats: dict[str, Any] = {
            "values": n_values,
            "columns": len(self.columns),
            "skipped": len(self.skipped),
            "truncated": truncated,
            "max_values_per_column": int(meta.get("max_values_per_column", DEFAULT_MAX_VALUES)),
            "build_seconds": float(meta.get("build_seconds", 0.0)),
            "bytes_on_disk": self.path.stat().st_size,
            "from_cache": from_cache,
            "fingerprint": meta.get("fingerprint"),
        }
        self.embedder = embedder
        self._memory: _InMemory | None = None
        self._loading = threading.Lock()

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def build(cls, db: Database, *, cache_dir: str | os.PathLike[str] | None = None,
              max_values_per_column: int = DEFAULT_MAX_VALUES, progress: ProgressFn | None = None,
              timeout_s: float = 300.0, parts: PartsSource | None = None) -> ValueIndex:
        """Build the index of ``db`` into the cache folder (replacing any previous one).

        Args:
            db: the database, read only through its guarded lookups.
            cache_dir: folder of index files; default :func:`default_cache_dir`.
            max_values_per_column: distinct values read per column at most; columns cut short
                are listed in ``skipped``.
            progress: called as ``progress(columns_done, columns_total)``.
            timeout_s: time budget of each read statement.
            parts: where the columns' parts are computed, when not here: called with the
                build's :class:`BuildPlan` and ``progress``, it gives one :class:`ColumnPart`
                per planned column, in any order (:mod:`sqlchorus.cluster.index_build` computes
                them on a Ray cluster). The file is the same, byte for byte, as without it.
        """
        started = time.perf_counter()
        target, fingerprint = _index_path(db, cache_dir)
        if parts is None:
            _write_index(db, target, fingerprint, max_values_per_column, progress, timeout_s)
        else:
            plan = plan_build(db, max_values_per_column=max_values_per_column, timeout_s=timeout_s)
            write_index(target, plan, parts(plan, progress), fingerprint=fingerprint,
                        database=str(db.path))
        built = cls(target, from_cache=False)
        # Not in the file, which holds nothing that differs between two builds of one content.
        built.stats["build_seconds"] = round(time.perf_counter() - started, 4)
        return built

    @classmethod
    def cached(cls, db: Database, cache_dir: str | os.PathLike[str] | None = None, *,
               max_values_per_column: int | None = None) -> ValueIndex | None:
        """The cached index of this database content, if there is one to reuse, else None.

        A damaged file, or one of another format, at the index's name is removed (a build
        replaces it). ``max_values_per_column`` as for :meth:`load_or_build`.
        """
        target, _ = _index_path(db, cache_dir)
        if not target.exists():
            return None
        try:
            found = cls(target, from_cache=True)
        except (SqlError, ValueError):
            target.unlink(missing_ok=True)  # damaged or foreign file: rebuild it
            return None
        wanted = max_values_per_column
        if wanted is None or found.stats["max_values_per_column"] == wanted:
            return found
        found.close()
        return None

    @classmethod
    def load_or_build(cls, db: Database, cache_dir: str | os.PathLike[str] | None = None,
                      *, max_values_per_column: int | None = None,
                      progress: ProgressFn | None = None, timeout_s: float = 300.0,
                      parts: PartsSource | None = None) -> ValueIndex:
        """Reuse the cached index of this database content, or build it.

        The cache key is :func:`database_fingerprint` of the file plus the index format, so a
        changed database gets a fresh index and an unchanged one is opened without reading a
        single value; a damaged file, or one of another format at that name, is rebuilt.

        Args:
            max_values_per_column: None reuses the index of this content whatever number of
                values per column built it (and builds with :data:`DEFAULT_MAX_VALUES` when there
                is none); a number reuses only an index built with it, and replaces another.
            parts: as for :meth:`build`.
        """
        found = cls.cached(db, cache_dir, max_values_per_column=max_values_per_column)
        if found is not None:
            return found
        return cls.build(db, cache_dir=cache_dir,
                         max_values_per_column=max_values_per_column or DEFAULT_MAX_VALUES,
                         progress=progress, timeout_s=timeout_s, parts=parts)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> ValueIndex:
        """Open an existing index file.

        Raises:
            ValueError: the file is not a value index of this format.
        """
        return cls(path, from_cache=True)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ValueIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- retrieval ------------------------------------------------------------------------------

    def search(self, keywords: list[str], *, top_k: int = 5, threshold: float = DEFAULT_THRESHOLD,
               embedder: Embedder | None = None) -> dict[str, list[dict[str, Any]]]:
        """The values best matching any keyword, per column.

        Args:
            keywords: words or phrases from the question (any case, typos allowed).
            top_k: values kept per column.
            threshold: lowest score (0-100) kept.
            embedder: blends embedding similarity into the fuzzy scores for this search, in
                place of the index's own ``embedder`` (one index serves every run, whatever
                embedder each run's settings name).

        Returns:
            ``{"table.column": [{"value", "score", "keyword"}, ...]}``, each list best first and
            the columns ordered by their best score.
        """
        best: dict[tuple[int, str], dict[str, Any]] = {}
        for keyword, col_id, value, score in self._scored(keywords, threshold,
                                                          embedder or self.embedder):
            slot = best.get((col_id, value))
            if slot is None or score > slot["score"]:
                best[(col_id, value)] = {"value": value, "score": round(score, 2),
                                         "keyword": keyword}
        per_column: dict[str, list[dict[str, Any]]] = {}
        for (col_id, _), hit in best.items():
            per_column.setdefault(self.columns[col_id], []).append(hit)
        ranked = {name: sorted(hits, key=_rank_key)[:top_k] for name, hits in per_column.items()}
        return dict(sorted(ranked.items(), key=lambda kv: -kv[1][0]["score"]))

    def _scored(self, keywords: list[str], threshold: float = 0.0, embedder: Embedder | None = None
                ) -> list[tuple[str, int, str, float]]:
        """``(keyword, column id, value, score)`` of every candidate scoring ``threshold`` or
        more."""
        lookups, keyed = _lookups(keywords)
        if not lookups:
            return []
        self._load()
        owners, vids = _candidates(keyed, self._fetch(sorted_unique(keyed.key)))
        named = self._names.pairs(lookups)
        if named:
            extra = np.array(sorted(named), dtype=np.int64).reshape(-1, 2)
            merged = sorted_unique(np.concatenate(((owners << 32) | vids,
                                                   (extra[:, 0] << 32) | extra[:, 1])))
            owners, vids = merged >> 32, merged & 0xFFFFFFFF
        values = self._values(set(vids.tolist()))
        pairs = [(o, v) for o, v in zip(owners.tolist(), vids.tolist()) if v in values]
        if not pairs:
            return []
        # Keywords overlap (1- to 3-grams), so one value comes back for many: normalised once,
        # and once for all searches of an index in memory.
        norm_of = self._memory.norms if self._memory is not None else {}
        missing = [v for v in values if v not in norm_of]
        norm_of.update(zip(missing, normalize_many([values[v][1] for v in missing])))
        scores = score_pairs(lookups, [o for o, _ in pairs], [values[v][1] for _, v in pairs],
                             [norm_of[v] for _, v in pairs])
        if named:
            scores = np.maximum(scores, [FLAG_SCORE if pair in named else 0.0 for pair in pairs])
        if embedder is None:
            kept = np.flatnonzero(scores >= threshold).tolist()
            return [(lookups[pairs[i][0]].keyword, *values[pairs[i][1]], s)
                    for i, s in zip(kept, scores[kept].tolist())]
        by_lookup: dict[int, list[tuple[int, str, float]]] = {}
        for (o, v), score in zip(pairs, scores.tolist()):
            by_lookup.setdefault(o, []).append((*values[v], score))
        out: list[tuple[str, int, str, float]] = []
        for o, scored in by_lookup.items():
            keyword = lookups[o].keyword
            out.extend((keyword, col_id, value, score)
                       for col_id, value, score in _blend(embedder, keyword, scored)
                       if score >= threshold)
        return out

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        # Fixed statements of sqlchorus's own over its own file, on the guarded connection
        # (authorizer and limits as for any lookup), without parsing each variant of the IN list.
        with self._db.locked():
            return self._db.introspection_connection().execute(sql, tuple(params)).fetchall()

    def _load(self) -> None:
        """Read an index of at most :data:`MEMORY_BYTES` into memory, once: its searches then
        read no statement at all. A larger one is read a few buckets and chunks a search."""
        if self._memory is not None or self.stats["bytes_on_disk"] > MEMORY_BYTES:
            return
        with self._loading:
            if self._memory is not None:
                return
            postings = self._fetch(None)
            col_ids: list[int] = []
            texts: list[str] = []
            for chunk, cblob, eblob, text in self._rows(
                    "SELECT chunk, col_ids, ends, text FROM vals ORDER BY chunk"):
                cols, ends = _chunk_arrays(self.path, chunk, cblob, eblob, text)
                if chunk * self._chunk != len(texts):
                    raise _damaged(self.path, f"value chunk {chunk}")
                bounds = [0, *ends]
                texts += [text[a:b] for a, b in zip(bounds, bounds[1:])]
                col_ids += cols
            self._memory = _InMemory(postings, col_ids, texts, {})

    def _fetch(self, keys: np.ndarray | None) -> np.ndarray:
        """Every posting of the buckets that ``keys`` (sorted) fall in, as one sorted array:
        the buckets split the posting space by its top bits, so they are read in bucket order
        and joined, and each key's postings are then a range found by binary search. ``None``:
        every bucket; an index in memory holds them all already."""
        if self._memory is not None:
            return self._memory.postings
        blobs: list[bytes] = []
        if keys is None:
            for bucket, blob in self._rows("SELECT bucket, postings FROM post ORDER BY bucket"):
                if not isinstance(blob, bytes) or len(blob) % 8:
                    raise _damaged(self.path, f"posting bucket {bucket}")
                blobs.append(blob)
            return np.frombuffer(b"".join(blobs), dtype="<u8")
        if not len(keys):
            return np.zeros(0, dtype=_U64)
        buckets = sorted_unique(_pack(keys, np.zeros(len(keys), dtype=np.int64)) >> self._shift)
        wanted = buckets.astype(np.int64).tolist()
        for at in range(0, len(wanted), _CHUNK):
            chunk = wanted[at:at + _CHUNK]
            sql = ("SELECT bucket, postings FROM post "
                   f"WHERE bucket IN ({', '.join('?' * len(chunk))}) ORDER BY bucket")
            for bucket, blob in self._rows(sql, chunk):
                if not isinstance(blob, bytes) or len(blob) % 8:
                    raise _damaged(self.path, f"posting bucket {bucket}")
                blobs.append(blob)
        return np.frombuffer(b"".join(blobs), dtype="<u8")

    def _values(self, vids: set[int]) -> dict[int, tuple[int, str]]:
        """``{value id: (column id, value)}`` for the ids given."""
        if self._memory is not None:
            cols, texts = self._memory.col_ids, self._memory.texts
            return {vid: (cols[vid], texts[vid]) for vid in vids
                    if vid < len(texts) and cols[vid] in self.columns}
        wanted: dict[int, list[int]] = {}
        for vid in vids:
            wanted.setdefault(vid // self._chunk, []).append(vid)
        chunks = sorted(wanted)
        out: dict[int, tuple[int, str]] = {}
        for at in range(0, len(chunks), _CHUNK):
            part = chunks[at:at + _CHUNK]
            sql = ("SELECT chunk, col_ids, ends, text FROM vals "
                   f"WHERE chunk IN ({', '.join('?' * len(part))})")
            for chunk, cblob, eblob, text in self._rows(sql, part):
                col_ids, ends = _chunk_arrays(self.path, chunk, cblob, eblob, text)
                for vid in wanted.get(chunk, ()):
                    i = vid - chunk * self._chunk
                    if i >= len(ends):
                        raise _damaged(self.path, f"value chunk {chunk}")
                    col_id = col_ids[i]
                    if col_id in self.columns:
                        out[vid] = (col_id, text[ends[i - 1] if i else 0:ends[i]])
        return out


@dataclass
class _InMemory:
    """An index read whole: every posting, sorted, and each value's column and text, by value
    id; the normalised texts of the values searches have met so far."""

    postings: np.ndarray
    col_ids: list[int]
    texts: list[str]
    norms: dict[int, str]


def _chunk_arrays(path: Path, chunk: Any, cblob: Any, eblob: Any, text: Any
                  ) -> tuple[array, array]:
    """The column ids and value ends of one ``vals`` row (little-endian 32-bit integers),
    checked. Python arrays, not numpy's: a search reads one row per candidate, and making a
    numpy array costs more than the row itself."""
    if not isinstance(cblob, bytes) or not isinstance(eblob, bytes) or \
            not isinstance(text, str) or len(cblob) != len(eblob) or len(cblob) % 4:
        raise _damaged(path, f"value chunk {chunk}")
    cols, ends = array("i", cblob), array("i", eblob)
    if sys.byteorder == "big":
        cols.byteswap()
        ends.byteswap()
    if ends and ends[-1] != len(text):
        raise _damaged(path, f"value chunk {chunk}")
    return cols, ends


class _ColumnNames:
    """The column-name lookup: the columns of at most :data:`FLAG_VALUES` distinct values of at
    most :data:`FLAG_CHARS` characters (flags and codes such as ``IsOfficial`` = ``T``/``F``,
    ``Sex`` = ``F``/``M``), found by a keyword's word that is one of the words of the column's
    name (``official``, ``sex``), or within one edit of it when both have four letters or more. Such values are rarely spelt in a question
    and cannot be found by spelling; the question names the column instead. Each of the
    column's values is then a candidate of the keyword, scored at least :data:`FLAG_SCORE`."""

    def __init__(self, rows: list[tuple[Any, ...]]):
        self._columns: dict[str, list[tuple[int, int]]] = {}  # name word -> (first id, count)
        for _, name, first_vid, n_values in rows:
            if first_vid is None:
                continue
            for word in _name_words(name):
                self._columns.setdefault(word, []).append((int(first_vid), int(n_values)))
        # The one-edit lookup's halves (see .hashing), as strings: a word within one edit of a
        # name word shares one of its halves, at the same length.
        self._halves: dict[tuple[str, int, int], set[str]] = {}
        for word in self._columns:
            if len(word) >= 4:
                head = len(word) // 2
                self._halves.setdefault((word[:head], len(word), 0), set()).add(word)
                self._halves.setdefault((word[head:], len(word), 1), set()).add(word)

    def _named(self, word: str) -> set[str]:
        """The name words equal to ``word``, or within one edit of it (both four letters or
        more)."""
        found = {word} if word in self._columns else set()
        n = len(word)
        if n >= 4 and self._halves:
            for length in (n - 1, n, n + 1):
                head = length // 2
                for key in ((word[:head], length, 0), (word[n - (length - head):], length, 1)):
                    found.update(w for w in self._halves.get(key, ())
                                 if Levenshtein.distance(word, w, score_cutoff=1) <= 1)
        return found

    def pairs(self, lookups: list[_Lookup]) -> set[tuple[int, int]]:
        """``(lookup index, value id)`` of every value of a column that a lookup's word names."""
        out: set[tuple[int, int]] = set()
        if not self._columns:
            return out
        named: dict[str, set[str]] = {}  # the n-gram keywords of a question share their words
        for i, lk in enumerate(lookups):
            spans: set[tuple[int, int]] = set()
            for word in lk.names:
                if word not in named:
                    named[word] = self._named(word)
                spans.update(span for name in named[word] for span in self._columns[name])
            out.update((i, vid) for first, count in spans for vid in range(first, first + count))
        return out


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _name_words(name: str) -> list[str]:
    """The words of a column's name that a question may use: ``IsOfficial`` -> ``official``,
    ``Hight_definition_TV`` -> ``hight``, ``definition``."""
    return [w for w in normalize(_CAMEL.sub(" ", name)).split(" ")
            if len(w) >= 3 and w not in STOPWORDS and not w.isdigit()]


def _blend(embedder: Embedder, keyword: str, scored: list[tuple[int, str, float]]) -> list[tuple[int, str, float]]:
    """Fuzzy scores (below 99) blended with the cosine similarity of keyword and value: 0.8 of
    the edit-distance score and up to 20 points of similarity, at most 98, so exact and
    normalised matches still rank first."""
    fuzzy = [i for i, (_, _, s) in enumerate(scored) if s < 99.0]
    if not fuzzy:
        return scored
    vectors = np.asarray(embedder([keyword] + [scored[i][1] for i in fuzzy]), dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1)
    norms[norms == 0] = 1.0
    cos = (vectors[1:] @ vectors[0]) / (norms[1:] * norms[0])
    out = list(scored)
    for i, c in zip(fuzzy, cos):
        col_id, value, s = out[i]
        out[i] = (col_id, value, min(98.0, 0.8 * s + 20.0 * max(float(c), 0.0)))
    return out


def _damaged(path: Path, what: str) -> ValueError:
    return ValueError(f"{path}: {what} of the value index is damaged; rebuild it "
                      "(sqlchorus index --rebuild).")
