"""Scoring and ranking a keyword's candidate values, and the optional local embedder.

Candidates are scored 0-100 with rapidfuzz: 100 for an exact match, 99 for a match after
normalisation, otherwise the better of the edit-distance ratio with the whole value and with the
best window of as many words, slightly discounted for partial matches (at most 98, so exact
matches always rank first). :func:`score_pairs` scores every (keyword, value) pair of a search
at once, with rapidfuzz's pairwise ``cpdist`` over the whole values and over every word window;
:func:`score_value` is the same score for one pair. An optional embedding function blends
in cosine similarity for the fuzzy cases: CHASE-SQL (after CHESS) re-ranks its LSH candidates by
embedding similarity and edit distance. :func:`load_local_embedder` makes one from a
sentence-transformers model already on disk (``Settings.value_embedder``); it never downloads
one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rapidfuzz import fuzz, process

from sqlchorus.tools.errors import SqlchorusError
from sqlchorus.tools.values.parameters import SINGULAR_PENALTY

if TYPE_CHECKING:
    from sqlchorus.tools.values.lookup import _Lookup

Embedder = Callable[[list[str]], Sequence[Sequence[float]]]


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


def score_pairs(lookups: list[_Lookup], owners: Sequence[int], values: Sequence[str],
                norms: Sequence[str]) -> np.ndarray:
    """:func:`score_value` of each pair: the keyword of ``lookups[owners[i]]`` and
    ``values[i]`` (normalised as ``norms[i]``)."""
    n = len(owners)
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    pair_lookups = [lookups[i] for i in owners]
    knorms = [lk.norm for lk in pair_lookups]
    scores = _fuzzy_pairs(knorms, norms)
    with_singular = [i for i, lk in enumerate(pair_lookups) if lk.singular is not None]
    if with_singular:
        singulars = [pair_lookups[i].singular or "" for i in with_singular]
        again = _fuzzy_pairs(singulars, [norms[i] for i in with_singular]) - SINGULAR_PENALTY
        scores[with_singular] = np.maximum(scores[with_singular], again)
    for i, lk in enumerate(pair_lookups):
        initials, vnorm = lk.acronym, norms[i]
        if initials is not None and vnorm.startswith(initials) and len(vnorm) <= len(initials) + 1:
            scores[i] = max(scores[i], min(98.0, fuzz.ratio(initials, vnorm)))
        if values[i] == lk.keyword:
            scores[i] = 100.0
        elif vnorm == lk.norm:
            scores[i] = 99.0
    return scores


def _fuzzy_pairs(knorms: Sequence[str], vnorms: Sequence[str]) -> np.ndarray:
    """:func:`_fuzzy` of each pair, the ratios computed by rapidfuzz over all pairs at once: of
    the whole values, and of every window of a value with more words than its keyword."""
    scores = process.cpdist(knorms, vnorms, scorer=fuzz.ratio, dtype=np.float64, workers=1)
    queries: list[str] = []
    windows: list[str] = []
    owner: list[int] = []
    factor = np.zeros(len(knorms), dtype=np.float64)
    words_in: dict[str, int] = {}
    for i, (knorm, vnorm) in enumerate(zip(knorms, vnorms)):
        m = words_in.get(knorm)
        if m is None:
            m = words_in[knorm] = knorm.count(" ") + 1
        if vnorm.count(" ") < m:
            continue
        vwords = vnorm.split(" ")
        spans = vwords if m == 1 else [" ".join(vwords[j:j + m])
                                       for j in range(len(vwords) - m + 1)]
        windows += spans
        queries += [knorm] * len(spans)
        owner += [i] * len(spans)
        factor[i] = 0.9 + 0.1 * len(knorm) / len(vnorm)
    if windows:
        best = np.zeros(len(knorms), dtype=np.float64)
        np.maximum.at(best, owner, process.cpdist(queries, windows, scorer=fuzz.ratio,
                                                  dtype=np.float64, workers=1))
        scores = np.maximum(scores, best * factor)
    return np.minimum(scores, 98.0)


class EmbedderError(SqlchorusError, ValueError):
    """The embedding model asked for cannot be used: the optional package is not installed, or
    the folder holds no sentence-transformers model. The message says which, and what to do."""

    kind = "value_embedder"


def load_local_embedder(model: str) -> Embedder:
    """An embedding function from a sentence-transformers model in the folder ``model``.

    Never downloads: the model must already be on disk (``local_files_only``), so a run never
    reaches the network for it.

    Raises:
        EmbedderError: ``sentence-transformers`` is not installed (the ``embeddings`` extra), the
            folder does not exist, or the model in it cannot be loaded.
    """
    path = Path(model).expanduser()
    if not path.is_dir():
        raise EmbedderError(
            f"The value embedder {model!r} is not a folder: give the folder of a sentence-transformers "
            "model already on disk (sqlchorus never downloads one)."
        )
    try:
        from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]
    except ImportError:
        raise EmbedderError(
            "The value embedder needs the optional sentence-transformers package: "
            "pip install 'sqlchorus[embeddings]'."
        ) from None
    try:
        encoder = SentenceTransformer(str(path), local_files_only=True)
    except Exception as e:  # whatever the library raises for a folder that is not its model
        raise EmbedderError(f"The value embedder in {str(path)!r} could not be loaded: {e}") from e
    return lambda texts: encoder.encode(list(texts), normalize_embeddings=True)
