"""What a keyword is looked up by, and the candidate values those lookups return.

A keyword's keys: its normalised form, and its singular and initials as other exact forms (see
:func:`singular` and :func:`acronym`); its words; its halves (the one-edit lookup); its MinHash
bands. The word, one-edit and LSH lookups each keep their candidates within a bound
(:data:`WORD_CANDIDATES`, :data:`EDIT_CANDIDATES`, :data:`LSH_CANDIDATES`; 0 turns one off).

Retrieval: each keyword is normalised and looked up the four ways at once, all keywords of a
search together (one read of the posting buckets, one of the values). Keywords that are only
digits or shorter than three characters are looked up exactly, so numbers cannot flood the
result; stop words alone are ignored.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

import numpy as np

from sqlchorus.tools.values.hashing import (
    _EXACT,
    _WORD,
    band_keys,
    normalize,
    query_half_keys,
    signatures,
    string_keys,
)
from sqlchorus.tools.values.parameters import (
    EDIT_CANDIDATES,
    LSH_CANDIDATES,
    STOPWORDS,
    WORD_CANDIDATES,
)

_WORDS = re.compile(r"\w+")


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
