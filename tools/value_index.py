"""A value index: find the database values a question refers to, typos included, at any size.

CHASE-SQL and CHESS look question keywords up in a MinHash LSH index over every text value of the
database, then re-rank the candidates by edit distance. CHESS builds that index with one datasketch
``MinHash`` object per value (3-grams, 100 permutations) and a ``MinHashLSH`` at threshold 0.01,
which means 100 bands of one row: every value sharing one min-hash with a keyword is a candidate,
and the whole structure lives in Python dicts that are pickled to disk. That is why it costs minutes
and gigabytes. This index keeps the idea, adds a lookup that cannot miss a one-edit typo, and
changes the machinery:

* **Four lookups, one posting table.** Every distinct value is reachable by 64-bit keys of four
  kinds: its whole normalised form (case folded, accents and punctuation removed: the exact
  lookup); each word of a multi-word value (so ``York`` finds ``New York``); the two halves of
  the value and of each of its words (the one-edit lookup); and the bands of its MinHash
  signature (the LSH lookup).
* **One-edit lookup (pigeonhole halves).** A token of length ``L`` is keyed by its first
  ``L // 2`` characters and, separately, by the rest, each key tagged with ``L`` and the side. One
  insertion, deletion or substitution leaves one half intact, at the start or at the end of the
  typed word, so the keyword's keys for token lengths ``n - 1``, ``n`` and ``n + 1`` find every
  token within one edit, whatever its 3-grams: ``cjat`` finds ``cat``, ``NhY`` finds ``NY`` and
  ``Wiard`` finds ``Ward``, whose padded 3-gram Jaccard similarities (0.17, 0, 0.29) MinHash
  rarely catches; ``dSummer`` finds ``Summer Show`` through its word. Two keys per token, six per
  keyword.
* **MinHash LSH**, computed in bulk with numpy, for what lies further than one edit
  (``European`` for ``Europe``, two typos in a long name): padded character 3-grams hashed from
  code points, permuted with datasketch's affine32 scheme (its MurmurHash3 pre-mix and its
  permutations for the seed). The signatures equal what ``datasketch.MinHash(hashfunc=
  shingle_hash32)`` produces value by value, and the band keys select the same candidates as
  ``datasketch.MinHashLSH(params=(b, r))`` over them (tests check both). 16 permutations in 8
  bands of 2 rows; the values with most band hits are kept, which ranks candidates by estimated
  Jaccard similarity instead of accepting everything above a threshold.
* **Keyword forms.** A keyword in the plural also looks up its singular (``cats``, ``catts``
  find ``cat``), and a name of capitalised words its initials (``United Kingdom`` finds ``UK``;
  ``United States``, ``USA`` as one letter more).
* **Storage is one SQLite file** per database content, in a cache folder: the values, 64 to a
  row (``vals``), and the postings, each a 64-bit integer (the key's top 33 bits, then the value
  id), sorted and cut into buckets by their top bits (``post``: one row per bucket, a
  little-endian array). A query reads the few buckets its keys fall in and binary-searches them;
  nothing is unpickled, so a file from anywhere is safe to open, and loading costs nothing.
  Postings are made a batch of values at a time and spilled to scratch files by key range past
  :data:`SPILL_POSTINGS`, so memory stays flat whatever the database size. A key keeps at most
  :data:`MAX_POSTINGS` values.
* **Cost**: ``benchmarks/values.py`` measures the build against CHESS's settings on the same
  values in the same run, the recall of gold literals with and without one typo per keyword, what
  each lookup adds, and how many values a search returns.
* **Why no FTS5 trigram table**: the index is queried through
  :class:`~sqlchorus.tools.database.GuardedDatabase` like every other database, and its
  authorizer refuses the ``sqlite_master`` access an FTS5 virtual table makes when it is
  connected.

The file format is versioned (:data:`FORMAT_VERSION`, in the file name and in ``meta``): an index
of another version is never found by :meth:`ValueIndex.load_or_build` (it builds a new one) and
:meth:`ValueIndex.open` refuses it with a message saying to rebuild it.

Which values are indexed (the documented rule; skipped columns are listed in ``index.skipped``):
text values of every column of every ordinary table, read as ``SELECT DISTINCT`` in key order,
a page at a time, up to ``max_values_per_column`` per column. Values longer than
:data:`MAX_VALUE_CHARS` are not indexed (questions do not quote paragraphs). A column is skipped
when a sample of its text values averages more than :data:`FREE_TEXT_AVG_CHARS` characters (free
text) or when nearly all sampled values are hexadecimal or UUID identifiers (nobody types them
with a typo). Views are skipped (their values come from tables) and so are virtual tables.

Retrieval: each keyword is normalised and looked up the four ways at once, all keywords of a
search together (one read of the posting buckets, one of the values). Keywords that are only digits or shorter than three characters
are looked up exactly, so numbers cannot flood the result; stop words alone are ignored.
Candidates are scored 0-100 with rapidfuzz: 100 for an exact match, 99 for a match after
normalisation, otherwise the better of the edit-distance ratio with the whole value and with the
best window of as many words, slightly discounted for partial matches (at most 98, so exact
matches always rank first). An optional embedding function blends in cosine similarity for the
fuzzy cases.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import sqlite3
import string
import time
import unicodedata
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rapidfuzz import fuzz

from sqlchorus.tools.cache import default_cache_dir as cache_root
from sqlchorus.tools.database import GuardedDatabase, SqlError
from sqlchorus.tools.errors import SqlchorusError

FORMAT_VERSION = 2
NUM_PERM = 16
BANDS = 8
ROWS = NUM_PERM // BANDS
SEED = 1
MAX_VALUE_CHARS = 200
FREE_TEXT_AVG_CHARS = 80
SAMPLE_ROWS = 1000
PAGE_SIZE = 100_000
HASH_BATCH = 16_384
VALUES_PER_CHUNK = 64
"""Values per row of the ``vals`` table (:data:`HASH_BATCH` is a multiple of it)."""
LSH_CANDIDATES = 50
"""Values kept per keyword from the LSH lookup, those with most band hits first."""
WORD_CANDIDATES = 200
"""Values kept per keyword from the word lookup."""
EDIT_CANDIDATES = 300
"""Values kept per keyword from the one-edit lookup (0 turns it off)."""
MAX_POSTINGS = 1000
"""Values kept per key when the index is built (the first in value order)."""
BUCKET_POSTINGS = 256
"""Postings per bucket of the ``post`` table, on average."""
SPILL_POSTINGS = 2_000_000
"""Postings held in memory while building before they are spilled to scratch files."""
PARTITION_BITS = 4
SINGULAR_PENALTY = 2.0
"""How much lower a match of a plural keyword's singular scores than the same match of the
keyword itself."""
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
_ASCII_SPACES = bytes(c if chr(c).isalnum() else 32 for c in range(128)).ljust(256, b" ")
_U32 = np.uint32
_U64 = np.uint64
_FMIX32 = (16, 0x85EBCA6B, 13, 0xC2B2AE35, 16)
_FMIX64 = (33, 0xFF51AFD7ED558CCD, 33, 0xC4CEB9FE1A85EC53, 33)

# Key kinds of the one-edit and exact lookups, mixed into every key with the token's length.
_EXACT, _WORD, _PREFIX, _SUFFIX = 1, 2, 3, 4
_POLY_BASE = 0x100000001B3
_KIND_MIX = 0x9E3779B97F4A7C15

ProgressFn = Callable[[int, int], None]
Embedder = Callable[[list[str]], Sequence[Sequence[float]]]


# -- normalisation and hashing ----------------------------------------------------------------


def normalize(text: str) -> str:
    """Case-fold, strip accents and punctuation, collapse spaces: ``"  O'Brien-Café "`` ->
    ``"o brien cafe"``."""
    if text.isascii():
        return " ".join(text.lower().encode("ascii").translate(_ASCII_SPACES).decode("ascii").split())
    text = unicodedata.normalize("NFKD", text.casefold())
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


def _codepoints(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")


def _shingle_codes(codepoints: np.ndarray, positions: np.ndarray) -> np.ndarray:
    cp = codepoints.astype(_U64)
    return (cp[positions] << _U64(42)) | (cp[positions + 1] << _U64(21)) | cp[positions + 2]


def shingle_hash32(shingle: bytes | str) -> int:
    """The 32-bit hash of one 3-character shingle, as the bulk path computes it.

    Usable as datasketch's ``hashfunc``: ``MinHash(num_perm, hashfunc=shingle_hash32)`` fed with
    :func:`shingles` gives the same signature as :func:`signatures`.
    """
    text = shingle.decode("utf-8") if isinstance(shingle, bytes) else shingle
    code = _shingle_codes(_codepoints(text), np.array([0]))
    return int(_fmix(code, 64)[0] >> _U64(32))


def shingles(norm: str) -> list[bytes]:
    """Padded character 3-grams of a normalised value (the sets the MinHash summarises)."""
    padded = f" {norm} "
    return [padded[i:i + 3].encode("utf-8") for i in range(len(padded) - 2)]


@functools.cache
def _permutations(num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's affine32 permutations for :data:`SEED` (``MinHash(num_perm, seed)
    .permutations``), drawn the way it draws them, without importing it."""
    gen = np.random.RandomState(SEED)
    a = gen.randint(0, 1 << 31, num_perm, dtype=_U32) * _U32(2) + _U32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=_U32)
    return a, b


def signatures(norms: Sequence[str], num_perm: int = NUM_PERM) -> np.ndarray:
    """MinHash signatures of many normalised values at once, shape ``(len(norms), num_perm)``.

    Every value must be non-empty. Work is vectorised over all shingles of the batch, so the
    cost per value is a few numpy element operations rather than a Python object.
    """
    if not norms:
        return np.zeros((0, num_perm), dtype=_U32)
    padded = [f" {n} " for n in norms]
    lengths = np.fromiter((len(p) for p in padded), dtype=np.int64, count=len(padded))
    cps = _codepoints("".join(padded))
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    counts = lengths - 2
    seg = np.concatenate(([0], np.cumsum(counts)[:-1]))
    within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(seg, counts)
    positions = np.repeat(starts, counts) + within
    hv = (_fmix(_shingle_codes(cps, positions), 64) >> _U64(32)).astype(_U32)
    hv = _fmix(hv, 32)
    a, b = _permutations(num_perm)
    with np.errstate(over="ignore"):
        permuted = a[:, None] * hv[None, :]  # one row per permutation: reduceat runs along rows
        permuted += b[:, None]
    return np.ascontiguousarray(np.minimum.reduceat(permuted, seg, axis=1).T)


def band_keys(sigs: np.ndarray, bands: int = BANDS) -> np.ndarray:
    """One signed 64-bit key per (value, band): a hash of the band's index and its rows."""
    n, num_perm = sigs.shape
    rows = num_perm // bands
    by_band = sigs[:, :bands * rows].reshape(n, bands, rows).astype(_U64)
    with np.errstate(over="ignore"):
        keys = np.broadcast_to(np.arange(bands, dtype=_U64) * _U64(0x9E3779B97F4A7C15), (n, bands))
    for j in range(rows):
        keys = _fmix(keys ^ by_band[:, :, j], 64)
    return np.ascontiguousarray(keys).view(np.int64)


_powers_cache = np.ones(1, dtype=_U64)


def _powers(n: int) -> np.ndarray:
    """``_POLY_BASE ** i`` modulo 2**64 for ``i < n`` (at least)."""
    global _powers_cache
    powers = _powers_cache
    if len(powers) < n:
        with np.errstate(over="ignore"):
            steps = np.full(max(n, 2 * len(powers), MAX_VALUE_CHARS + 8), _POLY_BASE, dtype=_U64)
            steps[0] = 1
            powers = np.cumprod(steps, dtype=_U64)
        _powers_cache = powers
    return powers


def _segment_keys(cps: np.ndarray, lengths: np.ndarray, tags: np.ndarray) -> np.ndarray:
    """One key per segment of ``cps`` (consecutive, ``lengths`` long, every length >= 1): a
    polynomial hash of its code points, mixed with its ``tag`` (kind and token length)."""
    if len(lengths) == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    within = np.arange(len(cps), dtype=np.int64) - np.repeat(starts, lengths)
    powers = _powers(int(lengths.max()))
    with np.errstate(over="ignore"):
        sums = np.add.reduceat(cps.astype(_U64) * powers[within], starts)
        mixed = _fmix(tags.astype(_U64) * _U64(_KIND_MIX) + lengths.astype(_U64), 64)
    return _fmix(sums ^ mixed, 64).view(np.int64)


def _tags(kind: int, token_lengths: np.ndarray | int) -> np.ndarray:
    return np.asarray((kind << 32) + np.asarray(token_lengths, dtype=np.int64), dtype=np.int64)


def string_keys(strings: Sequence[str], kind: int) -> np.ndarray:
    """Keys of whole strings (non-empty): the exact and word lookups' keys."""
    if not strings:
        return np.zeros(0, dtype=np.int64)
    lengths = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
    return _segment_keys(_codepoints("".join(strings)), lengths, _tags(kind, lengths))


def half_keys(tokens: Sequence[str]) -> np.ndarray:
    """The one-edit keys of tokens (each at least 2 characters), shape ``(len(tokens), 2)``: the
    first ``L // 2`` characters and the rest, each tagged with the side and ``L``."""
    if not tokens:
        return np.zeros((0, 2), dtype=np.int64)
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    heads = lengths // 2
    halves = np.empty(2 * len(tokens), dtype=np.int64)
    halves[0::2], halves[1::2] = heads, lengths - heads
    tags = np.empty(2 * len(tokens), dtype=np.int64)
    tags[0::2], tags[1::2] = _tags(_PREFIX, lengths), _tags(_SUFFIX, lengths)
    return _segment_keys(_codepoints("".join(tokens)), halves, tags).reshape(-1, 2)


def query_half_keys(token: str) -> list[int]:
    """The keys under which a token within one edit of ``token`` is stored.

    A stored token of length ``L`` (``n - 1``, ``n`` or ``n + 1`` for a query of length ``n``)
    within one edit keeps one half intact: its first ``L // 2`` characters start the query, or
    its last ``L - L // 2`` characters end it.
    """
    n = len(token)
    parts: list[str] = []
    tags: list[int] = []
    for length in (n - 1, n, n + 1):
        if length < 2:
            continue
        head = length // 2
        parts += [token[:head], token[n - (length - head):]]
        tags += [(_PREFIX << 32) + length, (_SUFFIX << 32) + length]
    if not parts:
        return []
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    return _segment_keys(_codepoints("".join(parts)), lengths,
                         np.asarray(tags, dtype=np.int64)).tolist()


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
    collated: bool = False  # the table declares a collation: only SQLite sorts and compares it


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
                plans.append(_ColumnPlan(name, row[1], "COLLATE" in (sql or "").upper()))
    return plans, skipped


def _column_pages(db: GuardedDatabase, plan: _ColumnPlan, limit: int, timeout_s: float
                  ) -> tuple[str | None, Iterable[list[str]]]:
    """Why a column is not indexed (None when it is), and its pages of distinct text values.

    A sample of the column's text values (the first :data:`SAMPLE_ROWS` in table order)
    decides. When the sample holds every text value of the column, the page is made from it,
    as SQLite would make it (distinct, 1 to :data:`MAX_VALUE_CHARS` characters, in binary
    order), without reading the column again.
    """
    col, tbl = _quote(plan.column), _quote(plan.table)
    sample = db.lookup(
        f"SELECT {col} FROM {tbl} WHERE typeof({col}) = 'text' LIMIT {SAMPLE_ROWS + 1}",
        timeout_s=timeout_s, max_rows=SAMPLE_ROWS + 1,
    )
    complete = not sample.truncated and len(sample.rows) <= SAMPLE_ROWS
    values = [r[0] for r in sample.rows[:SAMPLE_ROWS]]
    if not values:
        return None, ()
    avg = sum(len(v) for v in values) / len(values)
    if avg > FREE_TEXT_AVG_CHARS:
        return f"free text (sampled values average {avg:.0f} characters)", ()
    ids = sum(1 for v in values if _HEX_ID.match(v))
    if len(values) >= 20 and ids >= 0.95 * len(values):
        return "identifiers (hexadecimal or UUID values)", ()
    if complete and not plan.collated:
        page = sorted({v for v in values if 1 <= _sqlite_length(v) <= MAX_VALUE_CHARS})[:limit]
        return None, [page] if page else ()
    return None, _pages(db, plan, limit, timeout_s)


def _sqlite_length(text: str) -> int:
    """SQLite's ``length()`` of a text value: its characters before the first NUL."""
    nul = text.find("\x00")
    return len(text) if nul < 0 else nul


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
CREATE TABLE vals (chunk INTEGER PRIMARY KEY, col_ids BLOB, ends BLOB, text TEXT);
CREATE TABLE post (bucket INTEGER PRIMARY KEY, postings BLOB);
"""


_VID_BITS = 31
_VID_MASK = (1 << _VID_BITS) - 1


def _pack(keys: np.ndarray, vids: np.ndarray) -> np.ndarray:
    """Postings as single sortable integers: the key's top 33 bits, then the value id (31 bits).

    Sorting them sorts by key, then by value id. Keys that agree in their top 33 bits share
    postings: a query key meets another stored key that way with a chance of 2**-33 per stored
    key, and then finds a value it does not name, one more candidate, which scoring drops.
    """
    with np.errstate(over="ignore"):
        high = keys.view(_U64) & _U64(~_VID_MASK & 0xFFFFFFFFFFFFFFFF)
    return high | vids.astype(_U64)


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


# -- the index ----------------------------------------------------------------------------------


@dataclass
class _Lookup:
    """One keyword's keys, by lookup."""

    keyword: str
    norm: str
    singular: str | None
    acronym: str | None
    exact: list[int]
    words: list[int]
    halves: list[int]
    bands: list[int]


def singular(norm: str) -> str | None:
    """``norm`` with its last word put in the singular by English plural rules (``cities`` ->
    ``city``, ``boxes`` -> ``box``, ``volvos`` -> ``volvo``), or None when it does not look
    plural. Questions say "cats" where the column holds "cat"."""
    head, _, last = norm.rpartition(" ")
    if len(last) < 4 or not last.isalpha() or not last.endswith("s") or \
            last.endswith(("ss", "us", "is")):
        return None
    if last.endswith("ies") and len(last) > 4:
        last = last[:-3] + "y"
    elif last.endswith(("ches", "shes", "sses", "xes", "zes")):
        last = last[:-2]
    else:
        last = last[:-1]
    return f"{head} {last}" if head else last


def acronym(keyword: str) -> str | None:
    """The initials of a name of two to four capitalised words, stop words left out (``United
    States of America`` -> ``usa``, ``New York`` -> ``ny``), or None."""
    words = [w for w in _WORDS.findall(keyword) if w.casefold() not in STOPWORDS]
    if not 2 <= len(words) <= 4 or not all(w[0].isupper() and w.isalpha() for w in words):
        return None
    return normalize("".join(w[0] for w in words)) or None


def _lookup(keyword: str) -> _Lookup | None:
    norm = normalize(keyword)
    if not norm or all(w in STOPWORDS for w in norm.split(" ")):
        return None
    if len(norm) < 3 or norm.replace(" ", "").isdigit():
        return _Lookup(keyword, norm, None, None, string_keys([norm], _EXACT).tolist(), [], [], [])
    one = singular(norm)
    forms = [norm] if one is None else [norm, one]
    initials = acronym(keyword)
    if initials is not None:
        # The acronym itself, and codes one letter longer that begin with it (US -> USA).
        forms += [initials] + [initials + letter for letter in string.ascii_lowercase]
    words = [w for w in norm.split(" ") if w not in STOPWORDS and len(w) > 1] or [norm]
    return _Lookup(keyword, norm, one, initials, string_keys(forms, _EXACT).tolist(),
                   string_keys(words, _WORD).tolist(),
                   [key for form in forms[:2 if one else 1] for key in query_half_keys(form)],
                   band_keys(signatures([norm])).ravel().tolist())


_CHUNK = 500  # parameters per statement
_WORDS = re.compile(r"\w+")


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
            ``max_values_per_column`` it was built with, ``build_seconds``, ``bytes_on_disk``,
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
        single value; a damaged file, or one of another format at that name, is rebuilt.

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
        for keyword, col_id, value, score in self._scored(keywords):
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

    def _scored(self, keywords: list[str]) -> list[tuple[str, int, str, float]]:
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
            if self.embedder is not None and scored:
                scored = self._blend(lk.keyword, scored)
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


def _damaged(path: Path, what: str) -> ValueError:
    return ValueError(f"{path}: {what} of the value index is damaged; rebuild it "
                      "(sqlchorus index --rebuild).")


def _candidates(lk: _Lookup, postings: dict[int, np.ndarray]) -> list[int]:
    """The value ids one keyword's lookups return, each lookup within its own bound."""
    empty = np.zeros(0, dtype=np.int32)
    picked: list[np.ndarray] = [postings.get(k, empty) for k in lk.exact]
    if lk.words and WORD_CANDIDATES > 0:
        picked.append(np.unique(np.concatenate([postings.get(k, empty) for k in lk.words]))
                      [:WORD_CANDIDATES])
    if lk.halves and EDIT_CANDIDATES > 0:
        picked.append(np.unique(np.concatenate([postings.get(k, empty) for k in lk.halves]))
                      [:EDIT_CANDIDATES])
    if lk.bands and LSH_CANDIDATES > 0:
        hits = np.concatenate([postings.get(k, empty) for k in lk.bands])
        if len(hits):
            vids, counts = np.unique(hits, return_counts=True)
            picked.append(vids[np.argsort(-counts, kind="stable")[:LSH_CANDIDATES]])
    return np.unique(np.concatenate(picked)).tolist()


def _rank_key(hit: dict[str, Any]) -> tuple[float, float, int, str]:
    # Among equal scores (casing variants score alike), the spelling closest to the keyword as
    # typed comes first, then the shorter value.
    return (-hit["score"], -fuzz.ratio(hit["keyword"], hit["value"]), len(hit["value"]),
            hit["value"])


def score_value(keyword: str, knorm: str, value: str, vnorm: str,
                knorm_singular: str | None = None, initials: str | None = None) -> float:
    """Score 0-100 of ``value`` for ``keyword``; exact 100, normalised-equal 99, fuzzy <= 98.

    ``knorm_singular`` (see :func:`singular`) is scored too, :data:`SINGULAR_PENALTY` lower:
    "cats" finds "cat" at 96, and "catts" finds it as "catt" would. ``initials`` (see
    :func:`acronym`) match a value equal to them (98) or one letter longer and beginning with
    them (``us`` for ``usa``: 80, the edit-distance ratio).
    """
    if value == keyword:
        return 100.0
    if vnorm == knorm:
        return 99.0
    score = _fuzzy(knorm, vnorm)
    if knorm_singular is not None:
        score = max(score, _fuzzy(knorm_singular, vnorm) - SINGULAR_PENALTY)
    if initials is not None and vnorm.startswith(initials) and len(vnorm) <= len(initials) + 1:
        score = max(score, min(98.0, fuzz.ratio(initials, vnorm)))
    return score


def _fuzzy(knorm: str, vnorm: str) -> float:
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
