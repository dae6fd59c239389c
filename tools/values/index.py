"""The :class:`ValueIndex`: build, reuse or open a database's index file, and search it.

The file format is versioned (:data:`FORMAT_VERSION`, in the file name and in ``meta``): an index
of another version is never found by :meth:`ValueIndex.load_or_build` (it builds a new one) and
:meth:`ValueIndex.open` refuses it with a message saying to rebuild it.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sqlchorus.tools.engines.sqlite import Database, GuardedDatabase, SqlError
from sqlchorus.tools.errors import SqlchorusError
from sqlchorus.tools.values.building import ProgressFn, _write_index, write_index
from sqlchorus.tools.values.hashing import _U64, normalize
from sqlchorus.tools.values.lookup import _candidates, _lookup
from sqlchorus.tools.values.parameters import (
    DEFAULT_MAX_VALUES,
    DEFAULT_THRESHOLD,
    FORMAT_VERSION,
)
from sqlchorus.tools.values.parts import BuildPlan, ColumnPart, plan_build
from sqlchorus.tools.values.scoring import Embedder, _rank_key, score_value
from sqlchorus.tools.values.storage import _VID_MASK, _index_path, _pack

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
        for keyword, col_id, value, score in self._scored(keywords, embedder or self.embedder):
            if score < threshold:
                continue
            slot = best.get((col_id, value))
            if slot is None or score > slot["score"]:
                best[(col_id, value)] = {"value": value, "score": round(score, 2),
                                         "keyword": keyword}
        per_column: dict[str, list[dict[str, Any]]] = {}
        for (col_id, _), hit in best.items():
            per_column.setdefault(self.columns[col_id], []).append(hit)
        ranked = {name: sorted(hits, key=_rank_key)[:top_k] for name, hits in per_column.items()}
        return dict(sorted(ranked.items(), key=lambda kv: -kv[1][0]["score"]))

    def _scored(self, keywords: list[str], embedder: Embedder | None = None) -> list[tuple[str, int, str, float]]:
        lookups = [found for found in map(_lookup, dict.fromkeys(k for k in keywords
                                                                 if k and k.strip()))
                   if found is not None]
        if not lookups:
            return []
        postings = self._postings({key for lk in lookups
                                   for key in (*lk.exact, *lk.words, *lk.halves, *lk.bands)})
        wanted = [(lk, _candidates(lk, postings)) for lk in lookups]
        values = self._values({vid for _, vids in wanted for vid in vids})
        # Keywords overlap (1- to 3-grams), so one value comes back for many: normalised once.
        norms = {vid: normalize(text) for vid, (_, text) in values.items()}
        out: list[tuple[str, int, str, float]] = []
        for lk, vids in wanted:
            scored = [(values[v][0], values[v][1],
                       score_value(lk.keyword, lk.norm, values[v][1], norms[v], lk.singular, lk.acronym))
                      for v in vids if v in values]
            if embedder is not None and scored:
                scored = _blend(embedder, lk.keyword, scored)
            out.extend((lk.keyword, col_id, value, score) for col_id, value, score in scored)
        return out

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        # Fixed statements of sqlchorus's own over its own file, on the guarded connection
        # (authorizer and limits as for any lookup), without parsing each variant of the IN list.
        with self._db.locked():
            return self._db.introspection_connection().execute(sql, tuple(params)).fetchall()

    def _postings(self, keys: set[int]) -> dict[int, np.ndarray]:
        """The value ids stored under each of ``keys`` (absent keys are left out)."""
        if not keys:
            return {}
        wanted = np.array(sorted(keys), dtype=np.int64)
        low = _pack(wanted, np.zeros(len(wanted), dtype=np.int64))
        high = low | _U64(_VID_MASK)
        buckets = (low >> self._shift).astype(np.int64)
        unique = np.unique(buckets).tolist()
        found: dict[int, np.ndarray] = {}
        for at in range(0, len(unique), _CHUNK):
            chunk = unique[at:at + _CHUNK]
            sql = f"SELECT bucket, postings FROM post WHERE bucket IN ({', '.join('?' * len(chunk))})"
            for bucket, blob in self._rows(sql, chunk):
                if not isinstance(blob, bytes) or len(blob) % 8:
                    raise _damaged(self.path, f"posting bucket {bucket}")
                packed = np.frombuffer(blob, dtype="<u8")
                mine = buckets == bucket
                lo = np.searchsorted(packed, low[mine], side="left").tolist()
                hi = np.searchsorted(packed, high[mine], side="right").tolist()
                for key, a, b in zip(wanted[mine].tolist(), lo, hi):
                    if b > a:
                        found[key] = (packed[a:b] & _U64(_VID_MASK)).astype(np.int32)
        return found

    def _values(self, vids: set[int]) -> dict[int, tuple[int, str]]:
        """``{value id: (column id, value)}`` for the ids given."""
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
                if not isinstance(cblob, bytes) or not isinstance(eblob, bytes) or \
                        not isinstance(text, str) or len(cblob) != len(eblob) or len(cblob) % 4:
                    raise _damaged(self.path, f"value chunk {chunk}")
                col_ids = np.frombuffer(cblob, dtype="<i4")
                ends = np.frombuffer(eblob, dtype="<i4")
                for vid in wanted.get(chunk, ()):
                    i = vid - chunk * self._chunk
                    if i >= len(ends):
                        raise _damaged(self.path, f"value chunk {chunk}")
                    col_id = int(col_ids[i])
                    if col_id in self.columns:
                        out[vid] = (col_id, text[int(ends[i - 1]) if i else 0:int(ends[i])])
        return out


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
