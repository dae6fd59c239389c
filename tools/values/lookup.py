"""What a keyword is looked up by, and the candidate values those lookups return.

A keyword's keys: its normalised form, and its singular, initials and (for several words) the
words written together as other exact forms (see :func:`singular` and :func:`acronym`); its
words; its halves (the one-edit lookup); its MinHash bands. The word, one-edit and LSH lookups
each keep their candidates within a bound (:data:`WORD_CANDIDATES`, :data:`EDIT_CANDIDATES`,
:data:`LSH_CANDIDATES`; 0 turns one off). Its words also look up the names of columns of few
values (the column-name lookup, in :mod:`.index`).

Retrieval: the keywords of a search are normalised and keyed together (one numpy pass for all
their keys), their postings read at once, and their candidates chosen from those postings in one
vectorised pass (:func:`_candidates`), so a search costs a handful of array operations however
many keywords it has. Keywords that are only digits or shorter than three characters are looked
up exactly, so numbers cannot flood the result; stop words alone are ignored.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from sqlchorus.tools.values.hashing import (
    _EXACT,
    _U64,
    _WORD,
    band_keys,
    normalize,
    query_half_parts,
    signatures,
    sorted_unique,
    tagged_keys,
    unique_counts,
)
from sqlchorus.tools.values.parameters import (
    EDIT_CANDIDATES,
    LSH_CANDIDATES,
    STOPWORDS,
    WORD_CANDIDATES,
)
from sqlchorus.tools.values.storage import _VID_MASK, _pack

_WORDS = re.compile(r"\w+")
_EXACT_KIND, _WORD_KIND, _HALF_KIND, _BAND_KIND = 0, 1, 2, 3
_EXACT_TAG, _WORD_TAG = _EXACT << 32, _WORD << 32  # plus the length: see hashing._tags


@dataclass
class _Lookup:
    """One keyword: its forms, and the words that may name a column."""

    keyword: str
    norm: str
    singular: str | None
    acronym: str | None
    names: list[str] = field(default_factory=list)


@dataclass
class _Keys:
    """Every key of a search's lookups, as parallel arrays: the lookup it belongs to, its kind
    (exact, word, one-edit, band) and the key."""

    owner: np.ndarray
    kind: np.ndarray
    key: np.ndarray

    def of(self, lookup: int, kind: int) -> list[int]:
        return self.key[(self.owner == lookup) & (self.kind == kind)].tolist()


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


def _lookups(keywords: Iterable[str]) -> tuple[list[_Lookup], _Keys]:
    """The lookups of the distinct, non-blank keywords (stop words alone give none) and all
    their keys, computed in one pass."""
    lookups: list[_Lookup] = []
    parts: list[str] = []
    tags: list[int] = []
    owner: list[int] = []
    kind: list[int] = []
    band_norms: list[str] = []
    band_owner: list[int] = []
    for keyword in dict.fromkeys(keywords):
        if not keyword or keyword.isspace():
            continue
        norm = normalize(keyword)
        split = norm.split(" ")
        if not norm or STOPWORDS.issuperset(split):
            continue
        at = len(lookups)
        if len(norm) < 3 or norm.replace(" ", "").isdigit():
            parts.append(norm)
            tags.append(_EXACT_TAG + len(norm))
            owner.append(at)
            kind.append(_EXACT_KIND)
            lookups.append(_Lookup(keyword, norm, None, None))
            continue
        one = singular(norm)
        forms = [norm] if one is None else [norm, one]
        words = [w for w in split if len(w) > 1 and w not in STOPWORDS] or [norm]
        if len(split) > 1:
            # "north carolina" for "NorthCarolina": the words written together, exactly or
            # within one edit.
            forms.append(norm.replace(" ", ""))
        edited = len(forms)
        initials = None if keyword.islower() else acronym(keyword)
        if initials is not None:
            # The acronym itself, and codes one letter longer that begin with it (US -> USA).
            forms += [initials] + [initials + letter for letter in string.ascii_lowercase]
        parts += forms
        tags += [_EXACT_TAG + len(f) for f in forms]
        parts += words
        tags += [_WORD_TAG + len(w) for w in words]
        halves = 0
        for form in forms[:edited]:
            half_parts, half_tags = query_half_parts(form)
            parts += half_parts
            tags += half_tags
            halves += len(half_parts)
        owner += [at] * (len(forms) + len(words) + halves)
        kind += [_EXACT_KIND] * len(forms) + [_WORD_KIND] * len(words) + [_HALF_KIND] * halves
        band_norms.append(norm)
        band_owner.append(at)
        names = [w for w in words if len(w) >= 3 and not w.isdigit()]
        if one is not None:
            names.append(one.rpartition(" ")[2])
        lookups.append(_Lookup(keyword, norm, one, initials, list(dict.fromkeys(names))))

    keys = tagged_keys(parts, tags)
    owners = np.asarray(owner, dtype=np.int64)
    kinds = np.asarray(kind, dtype=np.int64)
    if band_norms:
        bands = band_keys(signatures(band_norms))
        keys = np.concatenate((keys, bands.ravel()))
        owners = np.concatenate((owners, np.repeat(np.asarray(band_owner, dtype=np.int64),
                                                   bands.shape[1])))
        kinds = np.concatenate((kinds, np.full(bands.size, _BAND_KIND, dtype=np.int64)))
    return lookups, _Keys(owners, kinds, keys)


def _candidates(keyed: _Keys, packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The candidates of every lookup, as ``(lookup index, value id)`` arrays sorted by both.

    ``packed`` holds (at least) every posting of the keys, sorted (see
    :func:`~sqlchorus.tools.values.storage._pack`). Each lookup keeps every value of its
    exact keys; of its word, one-edit and band keys, the :data:`WORD_CANDIDATES`,
    :data:`EDIT_CANDIDATES` and :data:`LSH_CANDIDATES` values that most of those keys hit (the
    lower id first among equals).
    """
    none = np.zeros(0, dtype=np.int64)
    owner, kinds, keys = keyed.owner, keyed.kind, keyed.key
    if not len(keys) or not len(packed):
        return none, none
    low = _pack(keys, np.zeros(len(keys), dtype=np.int64))
    starts = np.searchsorted(packed, low, side="left")
    ends = np.searchsorted(packed, low | _U64(_VID_MASK), side="right")
    counts = ends - starts
    total = int(counts.sum())
    if total == 0:
        return none, none
    # Every posting of every entry, flattened: positions start, start + 1, ... of each range.
    offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(total)
    vids = (packed[offsets] & _U64(_VID_MASK)).astype(np.int64)
    entry = np.repeat(np.arange(len(keys)), counts)
    code = (owner[entry] << 34) | (kinds[entry] << 32) | vids
    unique, hits = unique_counts(code)
    group = unique >> 32  # (lookup, kind)
    kind = group & 3
    # Within each lookup, most keys hit first, then the lower id: the values that share most
    # words, halves or bands with the keyword, the ones most like it.
    order = np.lexsort((unique, -hits, group))
    rank = np.empty(len(unique), dtype=np.int64)
    rank[order] = _rank_in_group(group[order])
    caps = np.array([np.iinfo(np.int64).max, WORD_CANDIDATES, EDIT_CANDIDATES, LSH_CANDIDATES],
                    dtype=np.int64)
    chosen = unique[rank < caps[kind]]
    pairs = sorted_unique(((chosen >> 34) << 32) | (chosen & 0xFFFFFFFF))
    return pairs >> 32, pairs & 0xFFFFFFFF


def _rank_in_group(group: np.ndarray) -> np.ndarray:
    """The position of each element within its run of equal ``group`` values (0, 1, ...)."""
    if not len(group):
        return np.zeros(0, dtype=np.int64)
    first = np.ones(len(group), dtype=bool)
    first[1:] = group[1:] != group[:-1]
    starts = np.flatnonzero(first)
    return np.arange(len(group)) - np.repeat(starts, np.diff(np.append(starts, len(group))))
