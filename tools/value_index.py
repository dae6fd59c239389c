"""A value index: find the database values a question refers to, cheaply, at any size.

CHASE-SQL and CHESS look question keywords up in a MinHash LSH index over every text value of the
database, then re-rank the candidates by edit distance. CHESS builds that index with one datasketch
``MinHash`` object per value (3-grams, 100 permutations) and a ``MinHashLSH`` at threshold 0.01,
which means 100 bands of one row: every value sharing one min-hash with a keyword is a candidate,
and the whole structure lives in Python dicts that are pickled to disk. That is why it costs minutes
and gigabytes. This index keeps the idea and changes the machinery:

* **Storage is one SQLite file** per database content, in a cache folder. Nothing is unpickled, so
  a file from anywhere is safe to open, and loading costs nothing: queries read the B-trees on disk
  and memory stays flat whatever the database size. The file holds the distinct values
  (``vals``, with a normalised form indexed for exact and case-insensitive lookup), a word table
  (``words``: each word of a multi-word value, so ``York`` finds ``New York``), and the LSH bands
  (``lsh``: one row per value and band, indexed by band key).
* **MinHash is computed in bulk with numpy**, a batch of values at a time: the character 3-grams
  (with a space of padding at each end, so short values and word boundaries get shingles) are
  hashed from code points, and the permutations are datasketch's own (``MinHash(num_perm,
  seed).permutations``, affine32 scheme with its MurmurHash3 pre-mix). The signatures equal what
  ``datasketch.MinHash(hashfunc=shingle_hash32)`` produces value by value (a test checks it), and the
  band table returns the same candidates as ``datasketch.MinHashLSH(params=(b, r))`` over those
  signatures (a test checks that too); only the Python-object-per-value cost is gone.
* **LSH parameters**: 16 permutations in 8 bands of 2 rows. The band hits of a value are counted
  and the values with most hits kept, which ranks candidates by estimated Jaccard similarity
  instead of accepting everything above a threshold. Keyword-to-value Jaccard for a typo is low
  (``frnace``/``france`` is about 0.3 on padded 3-grams), so rows per band must stay small;
  ``benchmarks/values.py`` measures it: on Spider dev, recall@5 of gold literals with one typo
  per keyword is 0.75 with the LSH candidates and 0.23 without them.
* **Cost, measured on a 2-core machine**: 1,000,000 distinct short strings index in 20 to 40 s
  into a 224 MB file, with a resident peak under 200 MB, and a query takes 2 to 3 ms. The CHESS
  settings need 80 to 115 s and 2.4 GB for 100,000 of the same strings, about 30 times longer.
* **Why no FTS5 trigram table**: it builds fast and was the first candidate as a prefilter, but the
  index is queried through :class:`~sqlchorus.tools.database.GuardedDatabase` like every other
  database, and its authorizer refuses the ``sqlite_master`` access an FTS5 virtual table makes when
  it is connected. Plain tables give the same lookups (exact, word, LSH) without weakening the
  guard.

Which values are indexed (the documented rule; skipped columns are listed in ``index.skipped``):
text values of every column of every ordinary table, read as ``SELECT DISTINCT`` in key order,
a page at a time, up to ``max_values_per_column`` per column. Values longer than
:data:`MAX_VALUE_CHARS` are not indexed (questions do not quote paragraphs). A column is skipped
when a sample of its text values averages more than :data:`FREE_TEXT_AVG_CHARS` characters (free
text) or when nearly all sampled values are hexadecimal or UUID identifiers (nobody types them
with a typo). Views are skipped (their values come from tables) and so are virtual tables.

Retrieval: each keyword is normalised (case folded, accents and punctuation removed) and looked up
three ways at once: exact normalised value, exact word of a value, LSH band hits. Keywords that are
only digits or shorter than three characters are looked up exactly, so numbers cannot flood the
result; stop words alone are ignored. Candidates are scored 0-100 with rapidfuzz: 100 for an exact
match, 99 for a match after normalisation, otherwise the better of the edit-distance ratio with the
whole value and with the best window of as many words, slightly discounted for partial matches
(at most 98, so exact matches always rank first). An optional embedding function blends in cosine
similarity for the fuzzy cases.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import time
import unicodedata
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from datasketch import MinHash
from rapidfuzz import fuzz

from sqlchorus.tools.cache import default_cache_dir as cache_root
from sqlchorus.tools.database import GuardedDatabase, SqlError

FORMAT_VERSION = 1
NUM_PERM = 16
BANDS = 8
ROWS = NUM_PERM // BANDS
SEED = 1
MAX_VALUE_CHARS = 200
FREE_TEXT_AVG_CHARS = 80
PAGE_SIZE = 100_000
HASH_BATCH = 25_000
LSH_CANDIDATES = 50
WORD_CANDIDATES = 200
DEFAULT_THRESHOLD = 80.0
DEFAULT_MAX_VALUES = 100_000

STOPWORDS = frozenset(
    """a an and are as at be by did do does for from had has have how i in is it its list me
    many much name names of on or show than that the their them there these they this those
    to was were what when where which who whom whose why with all any each give find tell
    return number count""".split()
)

_HEX_ID = re.compile(r"^(?:[0-9a-fA-F]{16,}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                     r"[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")
_NON_ALNUM = re.compile(r"[^\w]+|_+")
_U32 = np.uint32
_U64 = np.uint64
_FMIX32 = (16, 0x85EBCA6B, 13, 0xC2B2AE35, 16)
_FMIX64 = (33, 0xFF51AFD7ED558CCD, 33, 0xC4CEB9FE1A85EC53, 33)

ProgressFn = Callable[[int, int], None]
Embedder = Callable[[list[str]], Sequence[Sequence[float]]]


# -- normalisation and hashing ----------------------------------------------------------------


def normalize(text: str) -> str:
    """Case-fold, strip accents and punctuation, collapse spaces: ``"  O'Brien-Café "`` ->
    ``"o brien cafe"``."""
    text = text.casefold()
    if not text.isascii():
        text = unicodedata.normalize("NFKD", text)
        text = "".join(ch for ch in text if not unicodedata.combining(ch))
    return " ".join(_NON_ALNUM.sub(" ", text).split())


def _fmix(values: np.ndarray, width: int) -> np.ndarray:
    s1, m1, s2, m2, s3 = _FMIX32 if width == 32 else _FMIX64
    dtype = values.dtype.type
    with np.errstate(over="ignore"):
        values = values ^ (values >> dtype(s1))
        values = values * dtype(m1)
        values = values ^ (values >> dtype(s2))
        values = values * dtype(m2)
        return values ^ (values >> dtype(s3))


def _shingle_codes(codepoints: np.ndarray, positions: np.ndarray) -> np.ndarray:
    cp = codepoints.astype(_U64)
    return (cp[positions] << _U64(42)) | (cp[positions + 1] << _U64(21)) | cp[positions + 2]


def shingle_hash32(shingle: bytes | str) -> int:
    """The 32-bit hash of one 3-character shingle, as the bulk path computes it.

    Usable as datasketch's ``hashfunc``: ``MinHash(num_perm, hashfunc=shingle_hash32)`` fed with
    :func:`shingles` gives the same signature as :func:`signatures`.
    """
    text = shingle.decode("utf-8") if isinstance(shingle, bytes) else shingle
    cps = np.array([ord(c) for c in text], dtype=_U32)
    code = _shingle_codes(cps, np.array([0]))
    return int(_fmix(code, 64)[0] >> _U64(32))


def shingles(norm: str) -> list[bytes]:
    """Padded character 3-grams of a normalised value (the sets the MinHash summarises)."""
    padded = f" {norm} "
    return [padded[i:i + 3].encode("utf-8") for i in range(len(padded) - 2)]


def _permutations(num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    a, b = MinHash(num_perm=num_perm, seed=SEED).permutations
    return a.astype(_U32), b.astype(_U32)


def signatures(norms: Sequence[str], num_perm: int = NUM_PERM) -> np.ndarray:
    """MinHash signatures of many normalised values at once, shape ``(len(norms), num_perm)``.

    Every value must be non-empty. Work is vectorised over all shingles of the batch, so the
    cost per value is a few numpy element operations rather than a Python object.
    """
    if not norms:
        return np.zeros((0, num_perm), dtype=_U32)
    padded = [f" {n} " for n in norms]
    lengths = np.fromiter((len(p) for p in padded), dtype=np.int64, count=len(padded))
    cps = np.frombuffer("".join(padded).encode("utf-32-le"), dtype=_U32)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    counts = lengths - 2
    seg = np.concatenate(([0], np.cumsum(counts)[:-1]))
    within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(seg, counts)
    positions = np.repeat(starts, counts) + within
    hv = (_fmix(_shingle_codes(cps, positions), 64) >> _U64(32)).astype(_U32)
    hv = _fmix(hv, 32)
    a, b = _permutations(num_perm)
    with np.errstate(over="ignore"):
        permuted = hv[:, None] * a[None, :] + b[None, :]
    return np.minimum.reduceat(permuted, seg, axis=0)


def band_keys(sigs: np.ndarray, bands: int = BANDS) -> np.ndarray:
    """One signed 64-bit key per (value, band): a hash of the band's index and its rows."""
    n, num_perm = sigs.shape
    rows = num_perm // bands
    keys = np.empty((n, bands), dtype=_U64)
    for band in range(bands):
        key = np.full(n, (band * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF, dtype=_U64)
        for j in range(band * rows, (band + 1) * rows):
            key = _fmix(key ^ sigs[:, j].astype(_U64), 64)
        keys[:, band] = key
    return keys.view(np.int64)


# -- fingerprints and cache paths ---------------------------------------------------------------

_SAMPLE_BLOCK = 64 * 1024
_SAMPLE_BLOCKS = 16


def database_fingerprint(path: str | os.PathLike[str], *, full: bool = False) -> str:
    """A key for the content of a SQLite file.

    ``full=True`` hashes every byte. The default hashes the size, the modification time, the
    100-byte header (which holds SQLite's file change counter, bumped by every committed write
    in rollback-journal mode) and 16 blocks of 64 KiB spread over the file, plus the size and
    time of a ``-wal`` file if there is one. That reads at most about 1 MiB however large the
    database, and misses only an edit that keeps size, mtime and every sampled block: a copy
    restored with its old mtime after a same-size write outside the sample. Hashing every
    byte costs time in proportion to the file (2 to 4 s per GB here, paid on every ``ask``),
    while the sample costs the same few milliseconds for any size.
    """
    path = Path(path)
    digest = hashlib.blake2b(digest_size=16)
    stat = path.stat()
    with open(path, "rb") as f:
        if full:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        else:
            digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
            digest.update(f.read(100))
            step = max(stat.st_size // _SAMPLE_BLOCKS, _SAMPLE_BLOCK)
            for offset in range(0, stat.st_size, step):
                f.seek(offset)
                digest.update(f.read(_SAMPLE_BLOCK))
    wal = path.with_name(path.name + "-wal")
    if wal.exists():
        w = wal.stat()
        digest.update(f"wal:{w.st_size}:{w.st_mtime_ns}".encode())
    return digest.hexdigest()


def default_cache_dir() -> Path:
    """``values`` in the sqlchorus cache folder (:func:`sqlchorus.tools.cache.default_cache_dir`)."""
    return cache_root() / "values"


def _index_path(db: GuardedDatabase, cache_dir: str | os.PathLike[str] | None) -> tuple[Path, str]:
    """The index file of ``db``'s content, and that content's fingerprint.

    The name holds what makes two indexes incompatible (the content and the hashing), not how
    many values per column were read: that is a choice of whoever built the index, kept in its
    metadata, so an index built by ``sqlchorus index --max-values N`` is the one ``ask`` finds.
    """
    fp = database_fingerprint(db.path)
    settings = f"v{FORMAT_VERSION}:p{NUM_PERM}:b{BANDS}:{MAX_VALUE_CHARS}"
    key = hashlib.blake2b(f"{fp}:{settings}".encode(), digest_size=12).hexdigest()
    folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    safe_name = re.sub(r"[^\w.-]", "_", db.name)[:40] or "db"
    return folder / f"{safe_name}-{key}.sqlite", fp


# -- reading the database -----------------------------------------------------------------------


@dataclass
class _ColumnPlan:
    table: str
    column: str


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _text_columns(db: GuardedDatabase) -> tuple[list[_ColumnPlan], list[dict[str, str]]]:
    plans: list[_ColumnPlan] = []
    skipped: list[dict[str, str]] = []
    tables = db.lookup(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' "
        "AND name NOT LIKE 'sqlite_%' ORDER BY name"
    ).rows
    conn = db.introspection_connection()
    with db.locked():
        for name, sql in tables:
            if (sql or "").lstrip().upper().startswith("CREATE VIRTUAL"):
                skipped.append({"table": name, "column": "*", "reason": "virtual table"})
                continue
            for row in conn.execute(f"PRAGMA table_info({_quote(name)})").fetchall():
                declared = (row[2] or "").upper()
                if "BLOB" in declared:
                    skipped.append({"table": name, "column": row[1], "reason": "BLOB column"})
                    continue
                plans.append(_ColumnPlan(name, row[1]))
    return plans, skipped


def _skip_reason(db: GuardedDatabase, plan: _ColumnPlan, timeout_s: float) -> str | None:
    col, tbl = _quote(plan.column), _quote(plan.table)
    sample = db.lookup(
        f"SELECT {col} FROM {tbl} WHERE typeof({col}) = 'text' LIMIT 1000",
        timeout_s=timeout_s, max_rows=1000,
    ).rows
    if not sample:
        return None
    values = [r[0] for r in sample]
    avg = sum(len(v) for v in values) / len(values)
    if avg > FREE_TEXT_AVG_CHARS:
        return f"free text (sampled values average {avg:.0f} characters)"
    ids = sum(1 for v in values if _HEX_ID.match(v))
    if len(values) >= 20 and ids >= 0.95 * len(values):
        return "identifiers (hexadecimal or UUID values)"
    return None


def _pages(db: GuardedDatabase, plan: _ColumnPlan, limit: int, timeout_s: float
           ) -> Iterable[list[str]]:
    """Distinct text values of one column, a page at a time, in key order (keyset paging)."""
    col, tbl = _quote(plan.column), _quote(plan.table)
    base = (f"SELECT DISTINCT {col} FROM {tbl} WHERE typeof({col}) = 'text' "
            f"AND length({col}) BETWEEN 1 AND {MAX_VALUE_CHARS}")
    last: str | None = None
    remaining = limit
    while remaining > 0:
        size = min(PAGE_SIZE, remaining)
        if last is None:
            sql, params = f"{base} ORDER BY {col} LIMIT {size}", ()
        else:
            sql, params = f"{base} AND {col} > ? ORDER BY {col} LIMIT {size}", (last,)
        rows = db.lookup(sql, parameters=params, timeout_s=timeout_s, max_rows=size,
                          max_bytes=size * MAX_VALUE_CHARS * 4 + 1024).rows
        if not rows:
            return
        page = [r[0] for r in rows]
        yield page
        remaining -= len(page)
        if len(page) < size:
            return
        last = page[-1]


def _count_beyond(db: GuardedDatabase, plan: _ColumnPlan, limit: int, timeout_s: float) -> bool:
    col, tbl = _quote(plan.column), _quote(plan.table)
    rows = db.lookup(
        f"SELECT 1 FROM (SELECT DISTINCT {col} FROM {tbl} WHERE typeof({col}) = 'text' "
        f"AND length({col}) BETWEEN 1 AND {MAX_VALUE_CHARS}) LIMIT 1 OFFSET {limit}",
        timeout_s=timeout_s, max_rows=1,
    ).rows
    return bool(rows)


# -- building -----------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE cols (id INTEGER PRIMARY KEY, tbl TEXT, col TEXT, n_values INTEGER,
                   truncated INTEGER);
CREATE TABLE skipped (tbl TEXT, col TEXT, reason TEXT);
CREATE TABLE vals (id INTEGER PRIMARY KEY, col_id INTEGER, value TEXT, norm TEXT);
CREATE TEMP TABLE words_stage (word TEXT, vid INTEGER);
CREATE TEMP TABLE lsh_stage (key INTEGER, vid INTEGER);
"""
# Postings are staged in a temporary table and copied over sorted into WITHOUT ROWID tables:
# sorted appends are cheap, and the final tables are their own index (half the file size of a
# rowid table plus an index over it).
_INDEXES = """
CREATE INDEX vals_norm ON vals (norm);
CREATE TABLE words (word TEXT, vid INTEGER, PRIMARY KEY (word, vid)) WITHOUT ROWID;
INSERT INTO words SELECT DISTINCT word, vid FROM temp.words_stage ORDER BY word, vid;
DROP TABLE temp.words_stage;
CREATE TABLE lsh (key INTEGER, vid INTEGER, PRIMARY KEY (key, vid)) WITHOUT ROWID;
INSERT INTO lsh SELECT DISTINCT key, vid FROM temp.lsh_stage ORDER BY key, vid;
DROP TABLE temp.lsh_stage;
"""


def _write_index(db: GuardedDatabase, target: Path, fingerprint: str, max_values_per_column: int,
                 progress: ProgressFn | None, timeout_s: float) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    # Unique per build: two threads or processes building the same index never share a file.
    scratch = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    scratch.unlink(missing_ok=True)
    started = time.perf_counter()
    out = sqlite3.connect(scratch, isolation_level=None)
    try:
        # A scratch file renamed into place at the end: no journal needed for crash safety.
        out.execute("PRAGMA journal_mode = OFF")
        out.execute("PRAGMA synchronous = OFF")
        out.executescript(_SCHEMA)
        out.execute("BEGIN")
        plans, skipped = _text_columns(db)
        next_id = 1
        for done, plan in enumerate(plans, start=1):
            try:
                reason = _skip_reason(db, plan, timeout_s)
                if reason:
                    skipped.append({"table": plan.table, "column": plan.column, "reason": reason})
                    continue
                col_id = done
                n_values = 0
                for page in _pages(db, plan, max_values_per_column, timeout_s):
                    for at in range(0, len(page), HASH_BATCH):
                        next_id, kept = _write_page(out, col_id, page[at:at + HASH_BATCH],
                                                    next_id)
                        n_values += kept
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
        out.executemany("INSERT INTO skipped VALUES (?, ?, ?)",
                        [(s["table"], s["column"], s["reason"]) for s in skipped])
        out.execute("COMMIT")
        out.executescript(_INDEXES)
        meta = {
            "format_version": FORMAT_VERSION, "fingerprint": fingerprint,
            "database": str(db.path), "num_perm": NUM_PERM, "bands": BANDS,
            "max_values_per_column": max_values_per_column,
            "build_seconds": round(time.perf_counter() - started, 4),
        }
        out.executemany("INSERT INTO meta VALUES (?, ?)", [(k, str(v)) for k, v in meta.items()])
        out.close()
        os.replace(scratch, target)
    except BaseException:
        out.close()
        scratch.unlink(missing_ok=True)
        raise


def _write_page(out: sqlite3.Connection, col_id: int, page: list[str], next_id: int
                ) -> tuple[int, int]:
    vals: list[tuple[int, int, str, str]] = []
    words: list[tuple[str, int]] = []
    for value in page:
        norm = normalize(value)
        if not norm:
            continue
        vals.append((next_id, col_id, value, norm))
        parts = norm.split(" ")
        if len(parts) > 1:
            words.extend((w, next_id) for w in set(parts) if w not in STOPWORDS)
        next_id += 1
    if not vals:
        return next_id, 0
    keys = band_keys(signatures([v[3] for v in vals]))
    ids = np.repeat(np.fromiter((v[0] for v in vals), dtype=np.int64, count=len(vals)), BANDS)
    out.executemany("INSERT INTO vals VALUES (?, ?, ?, ?)", vals)
    out.executemany("INSERT INTO temp.words_stage VALUES (?, ?)", words)
    out.executemany("INSERT INTO temp.lsh_stage VALUES (?, ?)", zip(keys.ravel().tolist(), ids.tolist()))
    return next_id, len(vals)


# -- the index ----------------------------------------------------------------------------------


class ValueIndex:
    """The distinct text values of a database, searchable by keyword with typos.

    Build or reuse one with :meth:`load_or_build`; open a file with :meth:`open`.

    Attributes:
        path: the index file.
        skipped: columns not indexed (or indexed in part), each ``{"table", "column", "reason"}``.
        stats: ``values``, ``columns``, ``skipped`` and ``truncated`` (columns indexed in part),
            ``max_values_per_column`` it was built with, ``build_seconds``, ``bytes_on_disk``,
            ``from_cache`` (True when an existing file was reused), ``fingerprint``.
        embedder: optional function from texts to vectors; when set, fuzzy scores are blended
            with cosine similarity.
    """

    def __init__(self, path: str | os.PathLike[str], *, from_cache: bool = False,
                 embedder: Embedder | None = None):
        self.path = Path(path)
        self._db = GuardedDatabase(self.path, max_bytes=64 * 1024 * 1024, max_rows=10_000_000,
                                  prestart=False)  # its own file, read through lookup() only
        meta = dict(self._db.lookup("SELECT key, value FROM meta").rows)
        if int(meta.get("format_version", -1)) != FORMAT_VERSION:
            self._db.close()
            raise ValueError(f"{self.path} is not a value index of format {FORMAT_VERSION}.")
        self.meta = meta
        self.columns: dict[int, str] = {
            cid: f"{tbl}.{col}" for cid, tbl, col in
            self._db.lookup("SELECT id, tbl, col FROM cols ORDER BY id").rows
        }
        self.skipped = [
            {"table": t, "column": c, "reason": r}
            for t, c, r in self._db.lookup("SELECT tbl, col, reason FROM skipped").rows
        ]
        n_values = self._db.lookup("SELECT count(*) FROM vals").rows[0][0]
        truncated = self._db.lookup("SELECT count(*) FROM cols WHERE truncated").rows[0][0]
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
    def build(cls, db: GuardedDatabase, *, cache_dir: str | os.PathLike[str] | None = None,
              max_values_per_column: int = DEFAULT_MAX_VALUES, progress: ProgressFn | None = None,
              timeout_s: float = 300.0) -> ValueIndex:
        """Build the index of ``db`` into the cache folder (replacing any previous one).

        Args:
            db: the database, read only through its guarded ``execute``.
            cache_dir: folder of index files; default :func:`default_cache_dir`.
            max_values_per_column: distinct values read per column at most; columns cut short
                are listed in ``skipped``.
            progress: called as ``progress(columns_done, columns_total)``.
            timeout_s: time budget of each read statement.
        """
        target, fingerprint = _index_path(db, cache_dir)
        _write_index(db, target, fingerprint, max_values_per_column, progress, timeout_s)
        return cls(target, from_cache=False)

    @classmethod
    def load_or_build(cls, db: GuardedDatabase, cache_dir: str | os.PathLike[str] | None = None,
                      *, max_values_per_column: int | None = None,
                      progress: ProgressFn | None = None, timeout_s: float = 300.0) -> ValueIndex:
        """Reuse the cached index of this database content, or build it.

        The cache key is :func:`database_fingerprint` of the file plus the index format, so a
        changed database gets a fresh index and an unchanged one is opened without reading a
        single value.

        Args:
            max_values_per_column: None reuses the index of this content whatever number of
                values per column built it (and builds with :data:`DEFAULT_MAX_VALUES` when there
                is none); a number reuses only an index built with it, and replaces another.
        """
        target, _ = _index_path(db, cache_dir)
        if target.exists():
            try:
                found = cls(target, from_cache=True)
            except (SqlError, ValueError):
                target.unlink(missing_ok=True)  # damaged or foreign file: rebuild it
            else:
                wanted = max_values_per_column
                if wanted is None or found.stats["max_values_per_column"] == wanted:
                    return found
                found.close()
        return cls.build(db, cache_dir=cache_dir,
                         max_values_per_column=max_values_per_column or DEFAULT_MAX_VALUES,
                         progress=progress, timeout_s=timeout_s)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> ValueIndex:
        """Open an existing index file."""
        return cls(path, from_cache=True)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ValueIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- retrieval ------------------------------------------------------------------------------

    def search(self, keywords: list[str], *, top_k: int = 5,
               threshold: float = DEFAULT_THRESHOLD) -> dict[str, list[dict[str, Any]]]:
        """The values best matching any keyword, per column.

        Args:
            keywords: words or phrases from the question (any case, typos allowed).
            top_k: values kept per column.
            threshold: lowest score (0-100) kept.

        Returns:
            ``{"table.column": [{"value", "score", "keyword"}, ...]}``, each list best first and
            the columns ordered by their best score.
        """
        best: dict[tuple[int, str], dict[str, Any]] = {}
        for keyword in dict.fromkeys(k for k in keywords if k and k.strip()):
            for col_id, value, score in self._score_keyword(keyword):
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

    def _candidates(self, norm: str, exact_only: bool) -> list[tuple[int, str, str]]:
        if exact_only:
            sql = "SELECT col_id, value, norm FROM vals WHERE norm = ?"
            return self._db.lookup(sql, parameters=(norm,)).rows
        words = [w for w in norm.split(" ") if w not in STOPWORDS and len(w) > 1] or [norm]
        keys = band_keys(signatures([norm])).ravel().tolist()
        word_marks = ", ".join("?" * len(words))
        key_marks = ", ".join("?" * len(keys))
        sql = f"""
            SELECT col_id, value, norm FROM vals WHERE id IN (
                SELECT id FROM vals WHERE norm = ?
                UNION SELECT vid FROM (SELECT vid FROM words WHERE word IN ({word_marks})
                                       LIMIT {WORD_CANDIDATES})
                UNION SELECT vid FROM (SELECT vid FROM lsh WHERE key IN ({key_marks})
                                       GROUP BY vid ORDER BY count(*) DESC
                                       LIMIT {LSH_CANDIDATES}))
        """
        return self._db.lookup(sql, parameters=(norm, *words, *keys)).rows

    def _score_keyword(self, keyword: str) -> list[tuple[int, str, float]]:
        norm = normalize(keyword)
        if not norm or all(w in STOPWORDS for w in norm.split(" ")):
            return []
        exact_only = len(norm) < 3 or norm.replace(" ", "").isdigit()
        rows = self._candidates(norm, exact_only)
        scored = [(col_id, value, score_value(keyword, norm, value, vnorm))
                  for col_id, value, vnorm in rows]
        if self.embedder is not None and scored:
            scored = self._blend(keyword, scored)
        return scored

    def _blend(self, keyword: str, scored: list[tuple[int, str, float]]
               ) -> list[tuple[int, str, float]]:
        fuzzy = [i for i, (_, _, s) in enumerate(scored) if s < 99.0]
        if not fuzzy:
            return scored
        vectors = np.asarray(self.embedder([keyword] + [scored[i][1] for i in fuzzy]),  # type: ignore[misc]
                             dtype=np.float64)
        norms = np.linalg.norm(vectors, axis=1)
        norms[norms == 0] = 1.0
        cos = (vectors[1:] @ vectors[0]) / (norms[1:] * norms[0])
        out = list(scored)
        for i, c in zip(fuzzy, cos):
            col_id, value, s = out[i]
            out[i] = (col_id, value, min(98.0, 0.8 * s + 20.0 * max(float(c), 0.0)))
        return out


def _rank_key(hit: dict[str, Any]) -> tuple[float, float, int, str]:
    # Among equal scores (casing variants score alike), the spelling closest to the keyword as
    # typed comes first, then the shorter value.
    return (-hit["score"], -fuzz.ratio(hit["keyword"], hit["value"]), len(hit["value"]),
            hit["value"])


def score_value(keyword: str, knorm: str, value: str, vnorm: str) -> float:
    """Score 0-100 of ``value`` for ``keyword``; exact 100, normalised-equal 99, fuzzy <= 98."""
    if value == keyword:
        return 100.0
    if vnorm == knorm:
        return 99.0
    score = fuzz.ratio(knorm, vnorm)
    kwords, vwords = knorm.split(" "), vnorm.split(" ")
    m = len(kwords)
    if len(vwords) > m:
        window = max(fuzz.ratio(knorm, " ".join(vwords[i:i + m]))
                     for i in range(len(vwords) - m + 1))
        # A keyword that is part of a value is a weaker match than the whole value.
        score = max(score, window * (0.9 + 0.1 * len(knorm) / len(vnorm)))
    return min(float(score), 98.0)


def load_local_embedder(model: str) -> Embedder | None:
    """An embedding function from a locally installed sentence-transformers model, or None.

    Never downloads: the model must already be on disk (``local_files_only``). Returns None when
    the optional ``sentence-transformers`` package or the model is missing.
    """
    try:
        from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        encoder = SentenceTransformer(model, local_files_only=True)
    except Exception:  # a missing or broken model means "no embeddings", not a failure
        return None
    return lambda texts: encoder.encode(list(texts), normalize_embeddings=True)
