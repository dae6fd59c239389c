"""The keys of values and keywords, computed for many strings at once with numpy.

Normalisation; padded character 3-grams and their MinHash signatures, and the band keys of the
LSH lookup; the whole-string keys of the exact and word lookups; the half-token keys of the
one-edit lookup. Every key is a signed 64-bit integer.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence

import numpy as np

from sqlchorus.tools.values.parameters import BANDS, MAX_VALUE_CHARS, NUM_PERM, SEED

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
