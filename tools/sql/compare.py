"""Execution-result comparison with the semantics of the official benchmark scorers.

Two comparators, one per benchmark, each a pure function of two row lists. Rows are tuples of the
values SQLite returns (``None``, ``int``, ``float``, ``str``, ``bytes``). Values compare with Python
equality, exactly as the official scripts do: there is no float tolerance, ``1 == 1.0`` holds (and
the two hash alike, so sets and counters agree), and ``'1' != 1``.

BIRD (``evaluation_ex.py`` of the BIRD dev and mini-dev evaluations)
    ``set(predicted) == set(gold)``: rows are compared as *sets* of tuples. Duplicates and row
    order are ignored; column order matters (a row is a tuple). Two empty results are equal.
    The per-query time limit and the error rule live in :mod:`sqlchorus.evaluation.scoring`.

Spider test-suite evaluation (``result_eq`` in ``exec_eval.py`` of test-suite-sql-eval)
    Rows are compared as *bags* (multisets). Row order matters only when the gold query contains
    ``order by`` (decided by the caller, see :func:`spider_order_matters`). Columns may appear in
    any order: the prediction is correct if some permutation of its columns makes the two results
    equal. In detail, and in this order:

    1. two empty results are equal, whatever their columns;
    2. different row counts are unequal;
    3. different column counts (read from the first row) are unequal;
    4. a quick rejection: each row is turned into a sorted tuple of its values, sorted by the key
       ``str(value) + str(type(value))``; these row-sorted tuples must be equal as lists when order
       matters, and equal as *sets* otherwise. The key makes ``1`` and ``1.0`` sort differently,
       so a row mixing them with other values can be rejected here although the plain rows are
       equal. The official scorer behaves the same way and we keep that;
    5. a search over column permutations: column ``j`` of the prediction can stand for column
       ``i`` of the gold only if every value in it occurs in gold column ``i``. A permutation
       passes when the permuted prediction equals the gold as a list (order matters) or as a
       bag (otherwise).

    The official scorer prunes permutations with 20 randomly sampled rows; pruning is sound (it
    only drops permutations that cannot succeed), so pruning with every row, as we do, gives the
    same verdict deterministically, and the backtracking search avoids enumerating the full
    product of candidate columns.

Results of other engines (PostgreSQL through psycopg, DuckDB, MySQL and MariaDB through PyMySQL) are
first put into those terms by
:func:`normalise_rows`, value by value (:func:`normalise_value`), as SQLite would have returned
the same data, so that both comparators keep their meaning:

* ``bool`` -> ``int`` 0/1 (SQLite stores booleans as integers);
* ``Decimal`` -> ``int`` when integral, else ``float`` (SQLite has no exact decimals: its
  ``SUM`` of integers is an integer, its ``AVG`` a float; ``1 == 1.0`` keeps the two equal);
  NaN and infinities -> ``float``;
* ``datetime`` -> ``'YYYY-MM-DD HH:MM:SS'`` (``.ffffff`` only when there are microseconds),
  ``date`` -> ``'YYYY-MM-DD'``, ``time`` -> ``'HH:MM:SS'``: the ISO text Spider's databases hold
  in their DATETIME columns; a time zone, when there is one, stays in the text (``+00:00``);
* ``memoryview`` / ``bytearray`` -> ``bytes``;
* ``UUID``, ``timedelta`` (intervals) and anything else unknown -> its ``str``;
* lists and tuples (arrays) -> tuples of normalised values, dicts (JSON) -> their JSON text, so
  every value stays hashable for the bag and set comparisons.

``None``, ``int``, ``float``, ``str`` and ``bytes`` pass unchanged, so SQLite's own rows are left
as they are.

The text conventions of the Spider scorer (DISTINCT removal, ``> =`` repair, ``YEAR(CURDATE())``,
the ``order by`` test) are here too, as functions on SQL text, so :mod:`sqlchorus.evaluation.scoring` applies
them exactly where the official pipeline does.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

Row = tuple[Any, ...]

__all__ = [
    "bird_result_eq",
    "spider_result_eq",
    "spider_order_matters",
    "spider_remove_distinct",
    "spider_postprocess",
    "spider_replace_cur_year",
    "normalise_value",
    "normalise_rows",
]


# -- other engines' values -------------------------------------------------------------------

_PLAIN = (type(None), int, float, str, bytes)


def normalise_value(value: Any) -> Any:
    """One value of PostgreSQL, DuckDB or MySQL as SQLite would hold it (rules in the module docstring)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, Decimal):
        if not value.is_finite():
            return float(value)
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (date, time)):
        return value.isoformat()
    if isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    if isinstance(value, (list, tuple)):
        return tuple(normalise_value(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def normalise_rows(rows: Sequence[Sequence[Any]]) -> list[Row]:
    """Every value of every row through :func:`normalise_value`; rows become tuples."""
    return [tuple(normalise_value(v) for v in row) for row in rows]


# -- BIRD ------------------------------------------------------------------------------------


def bird_result_eq(gold: Sequence[Row], pred: Sequence[Row]) -> bool:
    """BIRD execution match: the two results are equal as sets of row tuples."""
    return set(map(tuple, pred)) == set(map(tuple, gold))


# -- Spider test-suite -----------------------------------------------------------------------


def _row_sort_key(value: Any) -> str:
    return str(value) + str(type(value))


def _unordered_row(row: Row) -> Row:
    return tuple(sorted(row, key=_row_sort_key))


def _quick_accept(gold: Sequence[Row], pred: Sequence[Row], order_matters: bool) -> bool:
    g = [_unordered_row(r) for r in gold]
    p = [_unordered_row(r) for r in pred]
    return g == p if order_matters else set(g) == set(p)


def _column_permutations(gold: Sequence[Row], pred: Sequence[Row]) -> Iterator[tuple[int, ...]]:
    """Yield every injective column mapping gold column i -> pred column perm[i] that survives
    the value-membership pruning, in lexicographic order."""
    n = len(gold[0])
    gold_values = [{row[i] for row in gold} for i in range(n)]
    pred_values = [{row[j] for row in pred} for j in range(n)]
    allowed = [
        [j for j in range(n) if pred_values[j] <= gold_values[i]] for i in range(n)
    ]
    chosen: list[int] = []
    used = [False] * n

    def extend(i: int) -> Iterator[tuple[int, ...]]:
        if i == n:
            yield tuple(chosen)
            return
        for j in allowed[i]:
            if not used[j]:
                used[j] = True
                chosen.append(j)
                yield from extend(i + 1)
                chosen.pop()
                used[j] = False

    return extend(0)


def spider_result_eq(gold: Sequence[Row], pred: Sequence[Row], order_matters: bool) -> bool:
    """Spider test-suite execution match (bag semantics, column permutations allowed).

    Args:
        gold: rows of the gold query.
        pred: rows of the predicted query.
        order_matters: compare rows in order (the gold query has ORDER BY).
    """
    gold = [tuple(r) for r in gold]
    pred = [tuple(r) for r in pred]
    if not gold and not pred:
        return True
    if len(gold) != len(pred):
        return False
    n = len(gold[0])
    if len(pred[0]) != n:
        return False
    if not _quick_accept(gold, pred, order_matters):
        return False
    gold_bag = None if order_matters else Counter(gold)
    for perm in _column_permutations(gold, pred):
        permuted = pred if n == 1 else [tuple(row[j] for j in perm) for row in pred]
        if order_matters:
            if permuted == gold:
                return True
        elif Counter(permuted) == gold_bag:
            return True
    return False


# -- Spider text conventions -----------------------------------------------------------------

_CUR_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.IGNORECASE)
_DISTINCT_WORD = re.compile(r"\bdistinct\b", re.IGNORECASE)
# Where a DISTINCT keyword is certainly its own token: between these characters (or the ends).
_TOKEN_EDGE = frozenset(" \t\r\n(),")


def spider_postprocess(sql: str) -> str:
    """Join comparison operators split by a space (``> =`` to ``>=``), as the Spider scorer does."""
    return sql.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")


def spider_replace_cur_year(sql: str) -> str:
    """Replace ``YEAR(CURDATE())`` with 2020, as the Spider scorer does before executing."""
    return _CUR_YEAR.sub("2020", sql)


def spider_remove_distinct(sql: str) -> str:
    """Delete every DISTINCT keyword token, also inside aggregates (``count(DISTINCT x)``).

    The Spider scorer does this to both queries unless it is run with ``--keep_distinct``, so a
    prediction is neither rewarded nor punished for DISTINCT. String literals and quoted
    identifiers are tokens of their own and are left alone.

    Tokens are SQLite's as sqlglot reads them. Most queries need no tokenizer: without the
    word there is nothing to delete, and a query whose only quoting is plain string literals
    and double-quoted or backquoted names is split here; anything else (comments, ``[name]``,
    doubled quotes in a name, a keyword glued to other characters) goes to sqlglot's tokenizer.
    """
    if "distinct" not in sql.lower():
        return sql
    spans = _distinct_spans(sql)
    if spans is None:
        spans = _distinct_token_spans(sql)
    if not spans:
        return sql
    pieces, last = [], 0
    for start, end in spans:
        pieces.append(sql[last:start])
        last = end
    pieces.append(sql[last:])
    return "".join(pieces)


def _distinct_spans(sql: str) -> list[tuple[int, int]] | None:
    """The spans of the DISTINCT keyword outside quotes, or None when only a tokenizer can say."""
    if "--" in sql or "/*" in sql or "[" in sql:
        return None
    spans: list[tuple[int, int]] = []
    i, n = 0, len(sql)
    while i < n:
        quote = sql[i]
        if quote in "'\"`":
            if i > 0 and (sql[i - 1].isalnum() or sql[i - 1] in "_$@:#?'\"`"):
                # A prefixed literal (x'..', n'..') or quotes glued together, a doubled quote
                # inside a quoted name among them (its second half is glued to its first).
                return None
            end = sql.find(quote, i + 1)
            if quote == "'":
                while end != -1 and sql.startswith("''", end):
                    end = sql.find("'", end + 2)
            if end == -1:
                return None
            i = end + 1
            continue
        j = i
        while j < n and sql[j] not in "'\"`":
            j += 1
        segment = sql[i:j]
        lowered = segment.lower()
        found = [m.span() for m in _DISTINCT_WORD.finditer(segment)]
        if lowered.count("distinct") != len(found):
            return None
        for start, end in found:
            before = segment[start - 1] if start > 0 else " "
            after = segment[end] if end < len(segment) else " "
            if before not in _TOKEN_EDGE or after not in _TOKEN_EDGE:
                return None
            spans.append((i + start, i + end))
        i = j
    return spans


def _distinct_token_spans(sql: str) -> list[tuple[int, int]]:
    from sqlglot import Dialect
    from sqlglot.errors import TokenError
    from sqlglot.tokens import TokenType

    try:
        tokens = Dialect.get_or_raise("sqlite").tokenize(sql)
    except TokenError:
        return [m.span() for m in _DISTINCT_WORD.finditer(sql)]
    return [(t.start, t.end + 1) for t in tokens if t.token_type == TokenType.DISTINCT]


def spider_order_matters(gold_sql: str) -> bool:
    """The Spider scorer compares rows in order when the (processed) gold text contains
    ``order by`` with exactly one space, anywhere, case-insensitively."""
    return "order by" in gold_sql.lower()
