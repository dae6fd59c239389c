"""Taught examples and glossary entries: what a user has verified about their own database.

A *taught example* is a question and the SQL a user verified for it on one database (from the
debugger, the viewer, a server or ``sqlchorus teach``); a *glossary entry* is a term of that
database's world and what it means, in words and optionally as a SQL expression. Both are kept
per database in the run store (:mod:`sqlchorus.core.checkpoints`); this module holds what works
on them without a store: their skeletons, their retrieval, and their text in prompts.

Retrieval follows DAIL-SQL: an example is scored by how close its question is to the one asked
(TF-IDF cosine of their words, or of their embeddings) and by how close its SQL's skeleton is to
the skeleton the question's wording asks for (:func:`sqlchorus.tools.examples.fewshot.question_features`,
the question having no SQL yet). The index is a set of postings lists in numpy arrays, so that a
question against 10,000 examples costs a few array additions, not a loop in Python.

>>> index = TaughtIndex([
...     {"id": "a", "question": "How many singers are there?", "sql": "SELECT count(*) FROM singer"},
...     {"id": "b", "question": "List the names of stadiums", "sql": "SELECT name FROM stadium"},
... ])
>>> [ex["id"] for ex in index.top("How many singers do we have?", 1)]
['a']
>>> sql_skeleton("SELECT name FROM singer WHERE age > 30 ORDER BY age DESC LIMIT 1")
'SELECT _ FROM _ WHERE _ > _ ORDER BY _ DESC LIMIT _'
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
from rapidfuzz import fuzz
from sqlglot import exp

from sqlchorus.tools.sql import text as sql_text
from sqlchorus.tools.errors import SqlchorusError
from sqlchorus.tools.examples.fewshot import HINT_BONUS, TEXT_WEIGHT, _words, question_features, sql_features

EXAMPLE = "example"
TERM = "term"
KINDS = (EXAMPLE, TERM)
"""The two kinds of taught entry: a verified question–SQL pair, a glossary term."""

TAUGHT_SHOTS = 3
"""Taught examples a prompt shows at most, ahead of its shipped examples."""
TAUGHT_TOKENS = 1500
"""Tokens the taught examples of one prompt take at most: past it, the least similar are left
out, so that the schema keeps the room the prompt budget gave it."""
MIN_SCORE = 0.05
"""An example scoring less than this shares nothing with the question: it is never shown."""
TERM_SCORE = 88.0
"""The lowest fuzzy score (0-100) at which a question names a glossary term or a close variant."""


class TaughtError(SqlchorusError, ValueError):
    """A taught example or glossary entry that cannot be kept: said in one line."""

    kind = "taught"
    http_status = 422


class DuplicateTaughtError(TaughtError):
    """The same question (or term) is taught already on that database."""

    kind = "already_taught"
    http_status = 409


def entry_id(database: str, kind: str, question: str) -> str:
    """The id of a taught entry: the same question (or term) taught twice on one database has the
    same id, which is how a duplicate is refused.

    >>> entry_id("/data/a.sqlite", "example", "How  many singers?") == entry_id("/data/a.sqlite", "example", "how many singers?")
    True
    """
    key = "\x1f".join((database, kind, " ".join(question.lower().split())))
    return ("t" if kind == TERM else "e") + hashlib.sha256(key.encode()).hexdigest()[:9]


# -- skeletons -----------------------------------------------------------------------------------


@lru_cache(maxsize=65536)
def sql_skeleton(sql: str, dialect: str = "sqlite") -> str:
    """DAIL-SQL's skeleton of a query: its keywords and operators, every table, column, alias and
    value masked as ``_``. Two queries of one skeleton differ only in what they name.

    SQL that does not parse has its words masked instead, so that it still has a skeleton.
    """
    try:
        tree = sql_text.parse_one(sql, dialect=dialect)
    except Exception:  # a skeleton is analysis only
        return re.sub(r"\b(?!(?:SELECT|FROM|WHERE|GROUP|BY|ORDER|HAVING|LIMIT|JOIN|ON|AS|AND|OR|NOT|IN|"
                      r"UNION|INTERSECT|EXCEPT|DESC|ASC|DISTINCT|COUNT|SUM|AVG|MIN|MAX|LIKE|BETWEEN)\b)\w+",
                      "_", " ".join(sql.upper().split()))

    def mask(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column):
            return exp.column("_")
        if isinstance(node, exp.Table):
            return exp.to_table("_")
        if isinstance(node, exp.Literal):
            return exp.var("_")
        if isinstance(node, exp.TableAlias) or (isinstance(node, exp.Identifier) and isinstance(node.parent, exp.Alias)):
            return exp.to_identifier("_")
        return node

    masked = tree.transform(mask)
    for alias in list(masked.find_all(exp.Alias)):
        alias.replace(alias.this)
    return " ".join(masked.sql(dialect=dialect).upper().replace("AS _", "").split())


# -- retrieval -----------------------------------------------------------------------------------


class TaughtIndex:
    """Taught examples ranked by their similarity to a question (DAIL-SQL's question and skeleton
    similarity), built once per store version.

    Each example is a mapping with ``question``, ``sql``, and optionally ``hint``/``evidence``,
    ``id`` and ``features`` (its SQL's skeleton features, computed when absent). The score is
    ``TEXT_WEIGHT`` times the texts' cosine plus the rest times the cosine of the skeleton
    features the question's wording suggests and the example's SQL has, plus ``HINT_BONUS`` when
    both have a hint or neither has: the shipped pool's retriever's score
    (:class:`~sqlchorus.tools.examples.fewshot.Retriever`), so that taught and shipped examples compare.

    Args:
        examples: the examples, in the order ties keep.
        embed: texts to vectors; given, the texts' cosine is that of their embeddings.
    """

    def __init__(self, examples: Sequence[Mapping[str, Any]], embed: Any = None):
        self.examples = [dict(ex) for ex in examples]
        n = len(self.examples)
        self.embed = embed
        counts = [Counter(_words(_text(ex))) for ex in self.examples]
        df: Counter[str] = Counter()
        for c in counts:
            df.update(c.keys())
        self._n = n
        self._idf = {w: math.log((1 + n) / (1 + d)) + 1.0 for w, d in df.items()}
        postings: dict[str, tuple[list[int], list[float]]] = {}
        for i, c in enumerate(counts):
            for word, weight in self._weigh(c).items():
                rows, weights = postings.setdefault(word, ([], []))
                rows.append(i)
                weights.append(weight)
        self._postings = {w: (np.asarray(r, dtype=np.int64), np.asarray(v, dtype=np.float64))
                          for w, (r, v) in postings.items()}
        groups: dict[frozenset[str], int] = {}
        group_of = np.zeros(n, dtype=np.int64)
        for i, ex in enumerate(self.examples):
            features = ex.get("features")
            features = frozenset(features) if features is not None else sql_features(ex.get("sql") or "")
            group_of[i] = groups.setdefault(features, len(groups))
        self._groups = list(groups)
        self._group_of = group_of
        self._hinted = np.asarray([bool(_hint(ex)) for ex in self.examples], dtype=bool)
        self._asked = [" ".join(ex["question"].lower().split()) for ex in self.examples]
        self._embedded: Any = None

    def __len__(self) -> int:
        return self._n

    def _weigh(self, counts: Counter[str]) -> dict[str, float]:
        unseen = math.log(1 + self._n) + 1.0
        vector = {w: (1 + math.log(k)) * self._idf.get(w, unseen) for w, k in counts.items()}
        norm = math.sqrt(sum(v * v for v in vector.values())) or 1.0
        return {w: v / norm for w, v in vector.items()}

    def scores(self, question: str, evidence: str = "") -> np.ndarray:
        """Every example's score for the question, in the examples' order."""
        text = f"{question} {evidence or ''}".strip()
        similarity = np.zeros(self._n, dtype=np.float64)
        if self.embed is not None and self._n:
            if self._embedded is None:
                vectors = np.asarray(self.embed([_text(ex) for ex in self.examples]), dtype=np.float64)
                self._embedded = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            query = np.asarray(self.embed([text])[0], dtype=np.float64)
            similarity = self._embedded @ (query / max(float(np.linalg.norm(query)), 1e-12))
        else:
            for word, weight in self._weigh(Counter(_words(text))).items():
                posting = self._postings.get(word)
                if posting is not None:
                    similarity[posting[0]] += weight * posting[1]
        wanted = question_features(question, evidence or "")
        skeleton = np.asarray([_set_cosine(wanted, g) for g in self._groups] or [0.0], dtype=np.float64)
        score = TEXT_WEIGHT * similarity + (1 - TEXT_WEIGHT) * skeleton[self._group_of]
        score += HINT_BONUS * (self._hinted == bool((evidence or "").strip()))
        return score

    def ranked(self, question: str, k: int, evidence: str = "") -> list[tuple[float, dict[str, Any]]]:
        """The ``k`` best examples with their scores, best first; the question itself (an example
        of the same wording) and examples that share nothing with it are never among them."""
        if k <= 0 or not self._n:
            return []
        score = self.scores(question, evidence)
        asked = " ".join(question.lower().split())
        take = min(self._n, k + 1)
        best = np.argpartition(-score, take - 1)[:take] if take < self._n else np.arange(self._n)
        # Ties keep the examples' order: a question always gets the same examples.
        order = sorted(best.tolist(), key=lambda i: (-round(float(score[i]), 9), i))
        has_hint = bool((evidence or "").strip())
        out = []
        for i in order:
            own = score[i] - (HINT_BONUS if self._hinted[i] == has_hint else 0.0)
            if self._asked[i] == asked or own < MIN_SCORE:
                continue
            out.append((float(score[i]), dict(self.examples[i])))
            if len(out) == k:
                break
        return out

    def top(self, question: str, k: int, evidence: str = "") -> list[dict[str, Any]]:
        """The ``k`` most similar examples, most similar first (see :meth:`ranked`)."""
        return [ex for _, ex in self.ranked(question, k, evidence)]


def _hint(example: Mapping[str, Any]) -> str:
    return (example.get("hint") or example.get("evidence") or "").strip()


def _text(example: Mapping[str, Any]) -> str:
    return f"{example['question']} {_hint(example)}".strip()


def _set_cosine(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / math.sqrt(len(a) * len(b)) if a and b else 0.0


# -- glossary ------------------------------------------------------------------------------------


def _phrase(text: str) -> str:
    return " ".join(_words(text))


def glossary_matches(question: str, entries: Sequence[Mapping[str, Any]], evidence: str = "") -> list[dict[str, Any]]:
    """The glossary entries the question (or its hint) names, by their term or a close variant of
    it (plural for singular, a word's ending, a small misspelling), in the entries' order.

    >>> entries = [{"question": "active customer", "hint": "status = 'A'"}, {"question": "churn", "hint": "left"}]
    >>> [e["question"] for e in glossary_matches("How many active customers are in Texas?", entries)]
    ['active customer']
    """
    text = _phrase(f"{question} {evidence or ''}")
    if not text:
        return []
    out = []
    for entry in entries:
        term = _phrase(entry["question"]) or " ".join(entry["question"].lower().split())
        if not term:
            continue
        if term in text or fuzz.partial_ratio(term, text) >= TERM_SCORE and _whole_words(term, text):
            out.append(dict(entry))
    return out


def _whole_words(term: str, text: str) -> bool:
    """Whether each word of ``term`` is close to some word of ``text``: a partial match inside one
    longer word ("art" in "start") is not a mention."""
    words = text.split()
    return all(any(fuzz.ratio(w, t) >= TERM_SCORE - 8 for t in words) for w in term.split())


def glossary_hint(entries: Sequence[Mapping[str, Any]]) -> str:
    """The hint the glossary entries give, one sentence each, as BIRD's evidence is written.

    >>> glossary_hint([{"question": "active customer", "hint": "not closed", "sql": "closed_at IS NULL"}])
    'active customer means not closed (as SQL: closed_at IS NULL)'
    """
    parts = []
    for entry in entries:
        meaning = (entry.get("hint") or "").strip().rstrip(".")
        expression = (entry.get("sql") or "").strip()
        part = f"{entry['question']} means {meaning}" if meaning else f"{entry['question']} is"
        if expression:
            part += f" (as SQL: {expression})" if meaning else f" {expression}"
        parts.append(part)
    return "; ".join(parts)


def without_glossary(hint: str, entries: Sequence[Mapping[str, Any]]) -> str:
    """``hint`` without what :func:`glossary_hint` added for any of ``entries``: a run's hint
    carries the glossary entries its question named, which are not the user's own hint.

    >>> entry = {"question": "veteran", "hint": "older than 40", "sql": ""}
    >>> without_glossary("in 2020; veteran means older than 40", [entry])
    'in 2020'
    """
    out = hint
    for entry in entries:
        piece = glossary_hint([entry])
        out = out.replace(f"; {piece}", "")
        if out.startswith(piece):
            out = out[len(piece):].lstrip("; ")
    return out.strip()


# -- in prompts ----------------------------------------------------------------------------------


def provenance(example: Mapping[str, Any]) -> str:
    """Where a taught example came from, as a prompt's comment and a trace show it:
    ``taught example e1a2b3c4d (from run 20261129-...)``."""
    run = f" from run {example['run_id']}" if example.get("run_id") else ""
    source = f" via {example['source']}" if example.get("source") else ""
    return f"taught example {example.get('id', '?')}{run}{source}"
