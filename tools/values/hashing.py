"""The keys of values and keywords, computed for many strings at once with numpy.

Normalisation; padded character 3-grams and their MinHash signatures, and the band keys of the
LSH lookup; the whole-string keys of the exact and word lookups; the half-token keys of the
one-edit lookup; every key of a batch of values at once (:func:`value_keys`). Every key is a
signed 64-bit integer.
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from collections.abc import Sequence

import numpy as np

from sqlchorus.tools.values.parameters import BANDS, NUM_PERM, SEED, STOPWORDS

_NON_ALNUM = re.compile(r"[^\w]+|_+")
_ASCII_SPACES = bytes(c if chr(c).isalnum() else 32 for c in range(128)).ljust(256, b" ")
# The same table, but NUL (which separates the values of a batch) is kept.
_ASCII_SPACES_KEEP_NUL = b"\x00" + _ASCII_SPACES[1:]
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


def normalize_many(texts: Sequence[str]) -> list[str]:
    """:func:`normalize` of every text, done by the C string methods over the texts joined by
    NUL, which costs a fraction of a call per text: the ASCII ones in one pass (lowered,
    translated, split again), the others in another (case-folded, decomposed, marks removed).
    Texts holding a NUL of their own are done one by one. Same results as
    ``list(map(normalize, texts))``.

    >>> normalize_many(["  O'Brien-Café ", "New_York", "Ærø", "a\\x00b"])
    ['o brien cafe', 'new york', 'ærø', 'a b']
    """
    if not texts:
        return []
    joined = "\x00".join(texts)
    if joined.count("\x00") == len(texts) - 1:
        if joined.isascii():
            return _normalize_ascii(joined)
        ascii_ = [text.isascii() for text in texts]
        plain = iter(_normalize_ascii("\x00".join(itertools.compress(texts, ascii_)))
                     if any(ascii_) else ())
        other = iter(_normalize_unicode("\x00".join(
            [text for text, a in zip(texts, ascii_) if not a])))
        return [next(plain) if a else next(other) for a in ascii_]
    out: list[str] = [""] * len(texts)
    plain_at: list[int] = []
    for i, text in enumerate(texts):
        if text.isascii() and "\x00" not in text:
            plain_at.append(i)
        else:
            out[i] = normalize(text)
    if plain_at:
        for i, norm in zip(plain_at, _normalize_ascii("\x00".join([texts[i] for i in plain_at]))):
            out[i] = norm
    return out


_COMBINING: set[str] = set()  # the marks met so far
_NOT_COMBINING: set[str] = set()  # the other non-ASCII characters met so far
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_NON_ALNUM_KEEP_NUL = re.compile(r"[^\w\x00]+|_+")


def _normalize_unicode(joined: str) -> list[str]:
    """The normalised forms of NUL-joined texts (none holding a NUL of its own), as
    :func:`normalize` makes each: case folding and NFKD go character by character (a NUL
    starts a new sequence of marks), so the joined text can be done at once."""
    text = unicodedata.normalize("NFKD", joined.casefold())
    found = set(_NON_ASCII.findall(text))
    for ch in found - _NOT_COMBINING - _COMBINING:
        (_COMBINING if unicodedata.combining(ch) else _NOT_COMBINING).add(ch)
    marks = found & _COMBINING
    if marks:
        text = _marks_pattern(marks).sub("", text)
    text = _NON_ALNUM_KEEP_NUL.sub(" ", text)
    return [" ".join(part.split()) for part in text.split("\x00")]


# The combining marks of the Combining Diacritical Marks block, as ranges (all of it but U+034F,
# the grapheme joiner, which is not one): the marks of most accented text, in a pattern that
# compiles as fast as one of a few characters.
_BLOCK_MARKS = frozenset(ch for ch in map(chr, range(0x300, 0x370)) if unicodedata.combining(ch))
_BLOCK_CLASS = "\u0300-\u034e\u0350-\u036f"
_marks: tuple[frozenset[str], re.Pattern[str]] = (_BLOCK_MARKS, re.compile(f"[{_BLOCK_CLASS}]"))


def _marks_pattern(marks: set[str]) -> re.Pattern[str]:
    """A pattern matching every one of ``marks`` (combining marks), and other marks met before:
    one pattern for all the text normalised, compiled again only when a mark outside it comes
    (compiling a pattern per batch of values cost more than normalising them). Read and replaced
    as one tuple, so threads never pair a pattern with another's marks."""
    global _marks
    known, pattern = _marks
    if not marks <= known:
        known = known | marks
        extra = "".join(sorted(map(re.escape, known - _BLOCK_MARKS)))
        pattern = re.compile(f"[{_BLOCK_CLASS}{extra}]")
        _marks = (known, pattern)
    return pattern


def _normalize_ascii(joined: str) -> list[str]:
    """The normalised forms of NUL-joined ASCII texts (none holding a NUL of its own)."""
    data = joined.encode("ascii").lower().translate(_ASCII_SPACES_KEEP_NUL)
    while b"  " in data:  # each pass halves every run of spaces
        data = data.replace(b"  ", b" ")
    data = data.replace(b" \x00", b"\x00").replace(b"\x00 ", b"\x00").strip(b" ")
    return data.decode("ascii").split("\x00")


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)``. Written out because the first ``np.unique`` of a process imports
    ``numpy.ma``, which costs more than a whole search."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def unique_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_counts=True)`` (see :func:`sorted_unique`)."""
    ordered = np.sort(values)
    if not len(ordered):
        return ordered, np.zeros(0, dtype=np.int64)
    first = np.empty(len(ordered), dtype=bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    return ordered[starts], np.diff(np.append(starts, len(ordered)))


def _fmix(values: np.ndarray, width: int) -> np.ndarray:
    """MurmurHash3's finaliser of each of ``values``, done in place: ``values`` is an array the
    caller made for it and gives up (every caller passes a fresh result). In place, a batch's
    mixing makes one array, not eight, and so asks the system for less new memory."""
    # Arrays only: numpy wraps unsigned array arithmetic silently (a scalar would warn).
    s1, m1, s2, m2, s3 = _FMIX32 if width == 32 else _FMIX64
    dtype = values.dtype.type
    shifted = values >> dtype(s1)
    values ^= shifted
    values *= dtype(m1)
    np.right_shift(values, dtype(s2), out=shifted)
    values ^= shifted
    values *= dtype(m2)
    np.right_shift(values, dtype(s3), out=shifted)
    values ^= shifted
    return values


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


# datasketch's affine32 permutations of 16 for seed 1 (``MinHash(16, seed=1).permutations``):
# drawing them takes numpy.random, whose import and generator cost more than indexing a small
# database. Tests check them against datasketch and against the draw below.
_PERMUTATIONS_16_SEED_1 = (
    (3582191691, 4270784983, 1892572953, 3715639441, 982527, 1100580627, 2597016983, 4286725387,
     1260623519, 2027988865, 793182497, 3406602499, 1599963033, 3332127887, 2968344027,
     1458107385),
    (1704103302, 4018109721, 2314200242, 3634877716, 1800426750, 1345499493, 2942995346,
     2252917204, 878115723, 1904615676, 3771485674, 986026652, 117628829, 2295290254,
     2879636018, 3925436996),
)


@functools.cache
def _permutations(num_perm: int, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's affine32 permutations (``MinHash(num_perm, seed).permutations``)."""
    if (num_perm, seed) == (16, 1):
        a, b = _PERMUTATIONS_16_SEED_1
        return np.array(a, dtype=_U32), np.array(b, dtype=_U32)
    return _draw_permutations(num_perm, seed)


def _draw_permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The permutations drawn the way datasketch draws them, without importing it."""
    gen = np.random.RandomState(seed)
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
    # Each value padded with a space on both sides, all in one string.
    lengths = np.fromiter(map(len, norms), dtype=np.int64, count=len(norms)) + 2
    cps = _codepoints(" " + "  ".join(norms) + " ")
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    counts = lengths - 2
    seg = np.concatenate(([0], np.cumsum(counts)[:-1]))
    within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(seg, counts)
    positions = np.repeat(starts, counts) + within
    hv = (_fmix(_shingle_codes(cps, positions), 64) >> _U64(32)).astype(_U32)
    hv = _fmix(hv, 32)
    a, b = _permutations(num_perm)
    permuted = a[:, None] * hv[None, :]  # one row per permutation: reduceat runs along rows
    permuted += b[:, None]
    return np.ascontiguousarray(np.minimum.reduceat(permuted, seg, axis=1).T)


def band_keys(sigs: np.ndarray, bands: int = BANDS) -> np.ndarray:
    """One signed 64-bit key per (value, band): a hash of the band's index and its rows."""
    n, num_perm = sigs.shape
    rows = num_perm // bands
    by_band = sigs[:, :bands * rows].reshape(n, bands, rows).astype(_U64)
    keys = np.broadcast_to(np.arange(bands, dtype=_U64) * _U64(0x9E3779B97F4A7C15), (n, bands))
    for j in range(rows):
        keys = _fmix(keys ^ by_band[:, :, j], 64)
    return np.ascontiguousarray(keys).view(np.int64)


_POLY_INVERSE = pow(_POLY_BASE, -1, 1 << 64)  # the base is odd: it has an inverse modulo 2**64
_powers_cache = (np.ones(1, dtype=_U64), np.ones(1, dtype=_U64))


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``_POLY_BASE ** i`` and its inverse, modulo 2**64, for ``i < n`` (at least). Read and
    replaced as one tuple, so threads never pair one cache's powers with another's inverses."""
    global _powers_cache
    powers, inverses = _powers_cache
    if len(powers) < n:
        size = max(n, 2 * len(powers), 1024)
        with np.errstate(over="ignore"):
            steps = np.full(size, _POLY_BASE, dtype=_U64)
            steps[0] = 1
            powers = np.cumprod(steps, dtype=_U64)
            steps.fill(_POLY_INVERSE)
            steps[0] = 1
            inverses = np.cumprod(steps, dtype=_U64)
        _powers_cache = (powers, inverses)
    return powers, inverses


def _segment_keys(cps: np.ndarray, lengths: np.ndarray, tags: np.ndarray) -> np.ndarray:
    """One key per segment of ``cps`` (consecutive, ``lengths`` long, every length >= 1): a
    polynomial hash of its code points (``sum(cp[j] * base ** (j - start))`` modulo 2**64),
    mixed with its ``tag`` (kind and token length).

    The sums come from one running sum of ``cp[j] * base ** j`` over all the segments: a
    segment's is the difference of two of its values, times the inverse of ``base ** start``.

    >>> keys = _segment_keys(_codepoints("abcab"), np.array([3, 2]), np.array([7, 7]))
    >>> bool(keys[0] != keys[1]), bool(_segment_keys(_codepoints("ab"), np.array([2]), np.array([7]))[0] == keys[1])
    (True, True)
    """
    if len(lengths) == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    if int(ends[-1]) > RUN_CHARS:  # whole segments at a time, so the powers cached stay small
        cuts = np.searchsorted(ends, np.arange(RUN_CHARS, int(ends[-1]), RUN_CHARS), side="right")
        bounds = [0, *sorted(set(cuts.tolist()) - {0, len(lengths)}), len(lengths)]
        starts = [0, *ends.tolist()]
        return np.concatenate([
            _run_keys(cps[starts[a]:starts[b]], lengths[a:b], tags[a:b])
            for a, b in zip(bounds, bounds[1:])])
    return _run_keys(cps, lengths, tags)


RUN_CHARS = 1 << 16
"""Code points hashed from one running sum at most (more when one segment is longer): the
powers of the base and their inverses are cached up to about that many."""


def _run_keys(cps: np.ndarray, lengths: np.ndarray, tags: np.ndarray) -> np.ndarray:
    """:func:`_segment_keys` of segments that fill ``cps`` exactly, from one running sum."""
    n = len(cps)
    powers, inverses = _powers(n + 1)
    terms = cps.astype(_U64)
    terms *= powers[:n]
    running = np.empty(n + 1, dtype=_U64)
    running[0] = 0
    np.cumsum(terms, out=running[1:])
    ends = np.cumsum(lengths)
    starts = ends - lengths
    sums = running[ends] - running[starts]
    sums *= inverses[starts]
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
    return _halves(_codepoints("".join(tokens)), lengths)


def _halves(cps: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """:func:`half_keys` of the consecutive tokens of ``cps``, ``lengths`` long (each >= 2)."""
    if len(lengths) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    heads = lengths // 2
    halves = np.empty(2 * len(lengths), dtype=np.int64)
    halves[0::2], halves[1::2] = heads, lengths - heads
    tags = np.empty(2 * len(lengths), dtype=np.int64)
    tags[0::2], tags[1::2] = _tags(_PREFIX, lengths), _tags(_SUFFIX, lengths)
    return _segment_keys(cps, halves, tags).reshape(-1, 2)


def _subset(cps: np.ndarray, lengths: np.ndarray, keep: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """The code points and lengths of the segments of ``cps`` that ``keep`` selects."""
    if keep.all():  # the common case for values: none of one character
        return cps, lengths
    return cps[np.repeat(keep, lengths)], lengths[keep]


def query_half_parts(token: str) -> tuple[list[str], list[int]]:
    """The strings and tags whose keys (:func:`tagged_keys`) are :func:`query_half_keys`."""
    n = len(token)
    parts: list[str] = []
    tags: list[int] = []
    for length in (n - 1, n, n + 1):
        if length < 2:
            continue
        head = length // 2
        parts += [token[:head], token[n - (length - head):]]
        tags += [(_PREFIX << 32) + length, (_SUFFIX << 32) + length]
    return parts, tags


def query_half_keys(token: str) -> list[int]:
    """The keys under which a token within one edit of ``token`` is stored.

    A stored token of length ``L`` (``n - 1``, ``n`` or ``n + 1`` for a query of length ``n``)
    within one edit keeps one half intact: its first ``L // 2`` characters start the query, or
    its last ``L - L // 2`` characters end it.
    """
    parts, tags = query_half_parts(token)
    return tagged_keys(parts, tags).tolist()


def tagged_keys(parts: Sequence[str], tags: Sequence[int]) -> np.ndarray:
    """Keys of non-empty strings, each with its own tag (``kind << 32`` plus a length): the
    exact, word and one-edit keys of many keywords computed in one call."""
    if not parts:
        return np.zeros(0, dtype=np.int64)
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    return _segment_keys(_codepoints("".join(parts)), lengths, np.asarray(tags, dtype=np.int64))


@functools.cache
def _stopword_keys() -> np.ndarray:
    return np.sort(string_keys(sorted(STOPWORDS), _WORD))


def _word_lengths(spaces: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The lengths of the words of normalised values written one after another (no separator),
    given where their spaces are and where each value ends: a word ends at a space or at its
    value's end, counted here among the characters that are not spaces.

    >>> _word_lengths(np.array([2, 5]), np.array([9, 11]))  # "ab cd efg" + "hi"
    array([2, 2, 3, 2])
    """
    space_ends = spaces - np.arange(len(spaces))
    value_ends = ends - np.searchsorted(spaces, ends)
    word_ends = np.sort(np.concatenate((space_ends, value_ends)))
    return np.diff(word_ends, prepend=0)


def value_keys(norms: Sequence[str], first: int) -> tuple[np.ndarray, np.ndarray]:
    """Every key of the values ``first, first + 1, ...`` (normalised as ``norms``, none empty),
    and the value id of each: the exact key of each value; the word key of each word of a
    multi-word value (stop words left out); the one-edit keys of each value and of each of those
    words, when at least 2 characters long; the LSH band keys of each value.

    All of it is computed over the batch's joined code points; no Python work per value beyond
    measuring and splitting the strings. A word repeated in one value gives repeated postings,
    which the writer drops.
    """
    n = len(norms)
    ids = np.arange(first, first + n, dtype=np.int32)
    if n == 0:
        return np.zeros(0, dtype=np.int64), ids
    lengths = np.fromiter(map(len, norms), dtype=np.int64, count=n)
    cps = _codepoints("".join(norms))
    exact = _segment_keys(cps, lengths, _tags(_EXACT, lengths))

    ends = np.cumsum(lengths)
    is_space = cps == 32
    counts = np.add.reduceat(is_space.astype(np.int64), ends - lengths) + 1  # words per value
    word_lengths = _word_lengths(np.flatnonzero(is_space), ends)
    word_cps = cps[~is_space]  # the words' code points, one after another
    word_ids = np.repeat(ids, counts)
    word_all = _segment_keys(word_cps, word_lengths, _tags(_WORD, word_lengths))
    stop = _stopword_keys()
    is_stop = stop[np.minimum(np.searchsorted(stop, word_all), len(stop) - 1)] == word_all
    kept = np.repeat(counts > 1, counts) & ~is_stop

    long_values = lengths > 1
    value_halves = _halves(*_subset(cps, lengths, long_values))
    long_words = kept & (word_lengths > 1)
    word_halves = _halves(*_subset(word_cps, word_lengths, long_words))
    bands = band_keys(signatures(norms))
    keys = np.concatenate((exact, word_all[kept], value_halves.ravel(), word_halves.ravel(),
                           bands.ravel()))
    vids = np.concatenate((ids, word_ids[kept], np.repeat(ids[long_values], 2),
                           np.repeat(word_ids[long_words], 2), np.repeat(ids, bands.shape[1])))
    return keys, vids
