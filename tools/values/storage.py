"""The index file: where it lives and how it is laid out.

Its name in the cache folder comes from the database's content fingerprint and the settings that
make two indexes incompatible; inside, the tables of :data:`_SCHEMA`, and the postings packed one
integer each (:func:`_pack`), which the builder writes and the index reads.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import numpy as np

from sqlchorus.tools.folders import default_cache_dir as cache_root
from sqlchorus.tools.engines.sqlite import Database, SqlError
from sqlchorus.tools.engines.catalog import quote_identifier
from sqlchorus.tools.values.hashing import _U64
from sqlchorus.tools.values.parameters import BANDS, FORMAT_VERSION, MAX_VALUE_CHARS, NUM_PERM

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
    """``values`` in the sqlchorus cache folder (:func:`sqlchorus.tools.folders.default_cache_dir`)."""
    return cache_root() / "values"


def content_fingerprint(db: Database) -> str:
    """A key for the content of ``db``: :func:`database_fingerprint` of its file (SQLite,
    DuckDB), else, for a database on a server, a digest of where it is (without secrets), its
    tables' and columns' names and types, and each table's row count. The latter misses an edit
    that keeps every row count (an UPDATE): rebuild the index after one (``sqlchorus index
    --rebuild``)."""
    if db.path is not None:
        return database_fingerprint(db.path)
    digest = hashlib.blake2b(digest_size=16)
    digest.update(db.location.encode())
    for table in db.read_structure():
        columns = ",".join(f"{c.name} {c.type}" for c in table.columns)
        try:
            count = db.lookup(f"SELECT count(*) FROM {quote_identifier(table.name)}", timeout_s=30.0).rows[0][0]
        except SqlError:
            count = None
        digest.update(f"{table.name}({columns}):{count};".encode())
    return digest.hexdigest()


def index_path(db: Database, cache_dir: str | os.PathLike[str] | None = None) -> tuple[Path, str]:
    """The index file of ``db``'s content, and that content's fingerprint.

    The name holds what makes two indexes incompatible (the content and the hashing), not how
    many values per column were read: that is a choice of whoever built the index, kept in its
    metadata, so an index built by ``sqlchorus index --max-values N`` is the one ``ask`` finds.
    """
    fp = content_fingerprint(db)
    settings = f"v{FORMAT_VERSION}:p{NUM_PERM}:b{BANDS}:{MAX_VALUE_CHARS}"
    key = hashlib.blake2b(f"{fp}:{settings}".encode(), digest_size=12).hexdigest()
    folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    safe_name = re.sub(r"[^\w.-]", "_", db.name)[:40] or "db"
    return folder / f"{safe_name}-{key}.sqlite", fp


_index_path = index_path


_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE cols (id INTEGER PRIMARY KEY, tbl TEXT, col TEXT, n_values INTEGER,
                   truncated INTEGER, first_vid INTEGER, max_chars INTEGER);
CREATE TABLE skipped (tbl TEXT, col TEXT, reason TEXT);
CREATE TABLE vals (chunk INTEGER PRIMARY KEY, col_ids BLOB, ends BLOB, text TEXT);
CREATE TABLE post (bucket INTEGER PRIMARY KEY, postings BLOB);
"""


_VID_BITS = 31
_VID_MASK = (1 << _VID_BITS) - 1


def sort_postings(packed: np.ndarray) -> np.ndarray:
    """``np.sort(packed)`` of packed postings (:func:`_pack`), in a new array, several times
    faster: numpy's stable sort of 16-bit integers is a radix sort, which puts the postings in
    the order of their top 16 bits (a hash's, spread evenly) in linear time; the few that share
    those bits are then put in order by the stable sort of the whole (timsort), which has little
    to do on an input so nearly sorted.

    >>> packed = np.array([3 << 62, 5, 1 << 62, 4], dtype=np.uint64)
    >>> sort_postings(packed).tolist() == sorted(packed.tolist())
    True
    """
    order = np.argsort((packed >> _U64(48)).astype(np.uint16), kind="stable")
    ordered = packed[order]
    ordered.sort(kind="stable")
    return ordered


def _pack(keys: np.ndarray, vids: np.ndarray) -> np.ndarray:
    """Postings as single sortable integers: the key's top 33 bits, then the value id (31 bits).

    Sorting them sorts by key, then by value id. Keys that agree in their top 33 bits share
    postings: a query key meets another stored key that way with a chance of 2**-33 per stored
    key, and then finds a value it does not name, one more candidate, which scoring drops.
    """
    with np.errstate(over="ignore"):
        high = keys.view(_U64) & _U64(~_VID_MASK & 0xFFFFFFFFFFFFFFFF)
    return high | vids.astype(_U64)
