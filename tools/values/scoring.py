"""Scoring and ranking a keyword's candidate values, and the optional local embedder.

Candidates are scored 0-100 with rapidfuzz: 100 for an exact match, 99 for a match after
normalisation, otherwise the better of the edit-distance ratio with the whole value and with the
best window of as many words, slightly discounted for partial matches (at most 98, so exact
matches always rank first). An optional embedding function blends in cosine similarity for the
fuzzy cases: CHASE-SQL (after CHESS) re-ranks its LSH candidates by embedding similarity and edit
distance. :func:`load_local_embedder` makes one from a sentence-transformers model already on
disk (``Settings.value_embedder``); it never downloads one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rapidfuzz import fuzz

from sqlchorus.tools.errors import SqlchorusError
from sqlchorus.tools.values.parameters import SINGULAR_PENALTY

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
