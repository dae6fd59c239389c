"""Spider hardness (easy / medium / hard / extra) from SQL text, without Spider's parser.

The Spider scorer (``evaluation.py``) parses the gold query into its own ``sql`` dictionary and
counts three things on the *top-level* query only:

component1
    one each for a non-empty WHERE, GROUP BY, ORDER BY and LIMIT; one per table beyond the first
    in FROM (joins; a subquery in FROM is a table too); one per ``OR`` and one per ``LIKE``
    (``NOT LIKE`` included) among the conditions of the JOIN ... ON clauses, WHERE and HAVING.
component2
    one per condition operand that is a subquery (in ON, WHERE or HAVING; a BETWEEN with two
    subqueries counts two) plus one for an INTERSECT, UNION or EXCEPT. Subqueries in FROM and
    anything nested deeper do not count.
others
    one if more than one "aggregate" is found, one for more than one SELECT item, one for more
    than one WHERE condition, one for more than one GROUP BY column. The aggregate count is, by
    the scorer's own construction: SELECT items whose value starts with an aggregate function,
    GROUP BY columns that are aggregates, aggregates among the (at most two) operands of each
    ORDER BY key, and - because the scorer tests the first field of each condition, which is its
    NOT flag - every negated condition in WHERE and HAVING, plus every AND/OR joining HAVING
    conditions. We reproduce those counts as the official hardness defines them.

Then: easy if c1 <= 1, others == 0, c2 == 0; medium if (others <= 2, c1 <= 1, c2 == 0) or
(c1 <= 2, others < 2, c2 == 0); hard if (others > 2, c1 <= 2, c2 == 0) or (2 < c1 <= 3,
others <= 2, c2 == 0) or (c1 <= 1, others == 0, c2 <= 1); extra otherwise.

For a compound query (``A UNION B``) the scorer's parser reads ``A`` as the top-level query and
everything after the set operator, including a trailing ORDER BY / LIMIT, as the nested one, so
here the top level is the leftmost SELECT. Conditions are flattened left to right into the
scorer's alternating ``cond, 'and'|'or', cond`` list (parentheses are flattened too).

:func:`hardness_from_spider_sql` applies the same rules to the ``sql`` dictionary that Spider's
``dev.json`` carries; it is the reference the text-based :func:`spider_hardness` is tested
against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from sqlchorus.tools.sql import text as sql_text
from sqlchorus.tools.sql.hardness_rules import (
    HARDNESS_LEVELS,
    HardnessCounts,
    classify_hardness,
    hardness_counts_from_spider_sql,
    hardness_from_spider_sql,
)
from sqlchorus.tools.sql.errors import SqlError

__all__ = [
    "HARDNESS_LEVELS",
    "HardnessCounts",
    "spider_hardness",
    "hardness_counts",
    "hardness_from_spider_sql",
    "hardness_counts_from_spider_sql",
    "classify_hardness",
]

_AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div)


# -- from SQL text ---------------------------------------------------------------------------


@dataclass
class _Condition:
    negated: bool
    like: bool
    subqueries: int


def _unparen(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _flatten(node: exp.Expr | None, out: list[Any]) -> list[Any]:
    """Append ``cond, 'and'|'or', cond, ...`` for a boolean expression, left to right."""
    if node is None:
        return out
    node = _unparen(node)
    if isinstance(node, (exp.And, exp.Or)):
        _flatten(node.this, out)
        out.append("and" if isinstance(node, exp.And) else "or")
        _flatten(node.expression, out)
        return out
    out.append(_condition(node))
    return out


def _condition(node: exp.Expr) -> _Condition:
    negated = False
    while isinstance(node, exp.Not):
        negated = not negated
        node = _unparen(node.this)
    if node.args.get("negate"):
        negated = True
    like = isinstance(node, exp.Like)
    # Operands other than the left-hand value: only these can be subqueries in Spider's grammar.
    if isinstance(node, exp.Between):
        operands = [node.args.get("low"), node.args.get("high")]
    elif isinstance(node, exp.In):
        operands = [node.args.get("query"), *node.args.get("expressions", [])]
    elif isinstance(node, exp.Exists):
        operands = [node.this]
    else:
        operands = [node.args.get("expression")]
    subqueries = sum(
        1 for o in operands if o is not None and isinstance(_unparen(o), (exp.Subquery, exp.Query))
    )
    return _Condition(negated=negated, like=like, subqueries=subqueries)


def _conditions(flat: list[Any]) -> list[_Condition]:
    return flat[::2]


def _is_aggregate(node: exp.Expr | None) -> bool:
    return node is not None and isinstance(_unparen(node), _AGGREGATES)


def _value_operands(node: exp.Expr) -> list[exp.Expr]:
    """The (at most two) column units of a Spider ``val_unit``: an arithmetic node's two sides,
    or the value itself."""
    node = _unparen(node)
    if isinstance(node, _ARITHMETIC):
        return [node.this, node.expression]
    return [node]


def _leading_operand(node: exp.Expr) -> exp.Expr:
    node = _unparen(node)
    while isinstance(node, _ARITHMETIC):
        node = _unparen(node.this)
    return node


def _top_select(tree: exp.Expr) -> exp.Select | None:
    node = tree
    while True:
        if isinstance(node, exp.SetOperation):
            node = node.this
        elif isinstance(node, exp.Subquery):
            node = node.this
        else:
            break
    return node if isinstance(node, exp.Select) else None


def hardness_counts(sql: str, dialect: str = "sqlite") -> HardnessCounts:
    """The three Spider component counts of ``sql``, read in sqlglot's ``dialect``.

    Raises:
        ValueError: the text does not parse as one query of ``dialect``.
    """
    try:
        tree = sql_text.parse_one(sql, dialect=dialect)
    except SqlError as e:
        raise ValueError(f"cannot parse SQL for hardness: {e}") from e
    select = _top_select(tree)
    if select is None:
        raise ValueError("hardness needs a SELECT query")

    from_ = select.args.get("from_")
    joins = select.args.get("joins") or []
    table_units = (1 if from_ is not None else 0) + len(joins)

    on_flat: list[Any] = []
    for join in joins:
        on = join.args.get("on")
        if on is None:
            continue
        if on_flat:
            on_flat.append("and")
        _flatten(on, on_flat)
    where = select.args.get("where")
    where_flat = _flatten(where.this if where is not None else None, [])
    having = select.args.get("having")
    having_flat = _flatten(having.this if having is not None else None, [])
    group = select.args.get("group")
    group_items = list(group.expressions) if group is not None else []
    order = select.args.get("order")
    order_items = [o.this for o in order.expressions] if order is not None else []

    # Sliced per clause, as the scorer does: each list alternates condition, conjunction.
    conjunctions = on_flat[1::2] + where_flat[1::2] + having_flat[1::2]
    all_conds = _conditions(on_flat) + _conditions(where_flat) + _conditions(having_flat)

    c1 = 0
    c1 += bool(where_flat) + bool(group_items) + bool(order_items)
    c1 += select.args.get("limit") is not None
    c1 += max(table_units - 1, 0)
    c1 += sum(1 for tok in conjunctions if tok == "or")
    c1 += sum(1 for c in all_conds if c.like)

    c2 = sum(c.subqueries for c in all_conds)
    c2 += isinstance(_unwrap_query(tree), exp.SetOperation)

    aggs = sum(1 for e in select.expressions if _is_aggregate(_leading_operand(_strip_alias(e))))
    aggs += sum(1 for c in _conditions(where_flat) if c.negated)
    aggs += sum(1 for g in group_items if _is_aggregate(g))
    aggs += sum(1 for o in order_items for v in _value_operands(o) if _is_aggregate(v))
    aggs += sum(1 for c in _conditions(having_flat) if c.negated)
    aggs += len(having_flat[1::2])
    others = 0
    others += aggs > 1
    others += len(select.expressions) > 1
    others += len(where_flat) > 1
    others += len(group_items) > 1
    return HardnessCounts(component1=c1, component2=c2, others=others)


def _unwrap_query(tree: exp.Expr) -> exp.Expr:
    while isinstance(tree, exp.Subquery):
        tree = tree.this
    return tree


def _strip_alias(node: exp.Expr) -> exp.Expr:
    return node.this if isinstance(node, exp.Alias) else node


def spider_hardness(sql: str, dialect: str = "sqlite") -> str:
    """Spider hardness of a query given as text: ``easy``, ``medium``, ``hard`` or ``extra``.

    Raises:
        ValueError: the text does not parse as one SELECT query of ``dialect``.
    """
    return hardness_counts(sql, dialect).hardness
