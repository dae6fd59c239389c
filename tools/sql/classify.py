"""DIN-SQL's class of a SQL query: EASY, NON-NESTED or NESTED.

DIN-SQL routes a question to one of three prompts by the class of the query it needs. Given a
known query (a gold query, or a scripted model's answer), :func:`classify_sql` says which class
the paper's rules put it in: NESTED with a sub-query or set operation, NON-NESTED with more than
one table reference, else EASY.
"""

from __future__ import annotations

from sqlglot import exp

from sqlchorus.tools.sql import text as sql_text

CLASSES: tuple[str, ...] = ("EASY", "NON-NESTED", "NESTED")
FALLBACK_CLASS = "NON-NESTED"
"""The class of a query that cannot be read, and of an answer without a label: its join-aware
prompt suits the most questions."""


def classify_sql(sql: str, dialect: str = "sqlite") -> str:
    """DIN-SQL's class of ``sql`` (in sqlglot's ``dialect``); a query sqlglot cannot parse is the
    general case."""
    try:
        tree = sql_text.parse_one(sql, dialect=dialect)
    except Exception:  # any parse failure, whatever sqlglot raises
        return FALLBACK_CLASS
    if tree.find(exp.Subquery, exp.Union, exp.Intersect, exp.Except) is not None:
        return "NESTED"
    if len(list(tree.find_all(exp.Table))) > 1:
        return "NON-NESTED"
    return "EASY"
