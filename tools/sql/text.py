"""Parsing SQL text within bounds.

Every path that parses SQL a model wrote or a user gave (the guard's check, LIST's decomposer and
verifier, selection, few-shot links, hardness, query plans) parses it here, so one set of
limits holds everywhere: at most :data:`MAX_SQL_CHARS` characters and :data:`MAX_SQL_TOKENS`
tokens (sqlglot parses about 20,000 tokens a second, so a parse ends in a fraction of a second),
and brackets nested at most :data:`MAX_NESTING` deep (sqlglot recurses about sixteen frames a
level, so deeper text ends in a ``RecursionError``, sooner when the caller's own stack is deep). Text over a limit is refused with a typed
error before sqlglot sees it; a ``RecursionError`` that still happens becomes one too.
"""

from __future__ import annotations

import re
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import SqlglotError

from sqlchorus.tools.sql.errors import NotAQueryError, SqlTooDeepError, SqlTooLongError

MAX_SQL_CHARS = 20_000
"""The longest SQL text run or parsed (the longest gold query of BIRD dev has 1,446). The guard's
worker holds the same figure (:data:`sqlchorus.tools.engines.sqlite_guard.MAX_SQL_CHARS`): it runs as a
script that imports nothing of the package."""

MAX_SQL_TOKENS = 4_000
"""Tokens at most (the longest gold query of BIRD dev has 389)."""

MAX_NESTING = 20
"""Brackets nested at most (gold queries of Spider and BIRD nest a handful deep; sqlglot still
parses 24 levels from a stack already 400 frames deep)."""

_TOKEN = re.compile(r"\w+|[^\w\s]")
_QUOTED = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`[^`]*`|\[[^\]]*\]")


def check_bounds(text: str) -> None:
    """Refuse text longer, with more tokens, or nested deeper than any query needs.

    Raises:
        SqlTooLongError, SqlTooDeepError.
    """
    if len(text) > MAX_SQL_CHARS:
        raise SqlTooLongError(
            f"The SQL text has {len(text):,} characters; at most {MAX_SQL_CHARS:,} are accepted.", sql=text[:200]
        )
    depth = deepest = 0
    for ch in _QUOTED.sub("''", text):  # brackets inside literals and quoted names do not nest
        if ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth -= 1
    if deepest > MAX_NESTING:
        raise SqlTooDeepError(
            f"The SQL text nests brackets {deepest} deep; at most {MAX_NESTING} are accepted.", sql=text[:200]
        )
    tokens = sum(1 for _ in _TOKEN.finditer(text))
    if tokens > MAX_SQL_TOKENS:
        raise SqlTooLongError(
            f"The SQL text has {tokens:,} tokens; at most {MAX_SQL_TOKENS:,} are accepted.", sql=text[:200]
        )


def parse(text: str, *, dialect: str = "sqlite") -> list[exp.Expr]:
    """The statements of ``text``, parsed within bounds.

    Raises:
        SqlTooLongError, SqlTooDeepError: over a bound.
        NotAQueryError: the text does not parse.
    """
    check_bounds(text)
    try:
        return [s for s in sqlglot.parse(text, read=dialect) if s is not None]
    except SqlglotError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise NotAQueryError(f"The SQL does not parse: {first}", sql=text) from e
    except RecursionError as e:
        raise SqlTooDeepError("The SQL text nests too deeply to be read.", sql=text[:200]) from e


def parse_one(text: str, *, dialect: str = "sqlite") -> exp.Expr:
    """The one statement of ``text``, parsed within bounds.

    Raises:
        SqlTooLongError, SqlTooDeepError: over a bound.
        NotAQueryError: the text does not parse, or holds no statement or several.
    """
    statements = parse(text, dialect=dialect)
    if len(statements) != 1:
        raise NotAQueryError(f"Expected exactly one statement, found {len(statements)}.", sql=text)
    return statements[0]


# -- writing -------------------------------------------------------------------------------------


class MySQLAndMariaDB(MySQL):
    """sqlglot's MySQL, writing what MariaDB reads too: ``x REGEXP y`` for sqlglot's
    ``REGEXP_LIKE(x, y)``, a function of MySQL 8 that MariaDB lacks (it calls it as a stored
    function of the database, which the guard refuses), and which MySQL reads as the same test.

    Done where a tree is written rather than in a generator of its own: sqlglot's compiled
    build (``sqlglot[c]``) does not let a Python class extend its MySQL generator.

    >>> tree = parse_one("SELECT a REGEXP 'x', NOT (b REGEXP (c REGEXP 'y'))", dialect="sqlite")
    >>> tree.sql(dialect=MySQLAndMariaDB())
    "SELECT a REGEXP 'x', NOT (b REGEXP (c REGEXP 'y'))"
    """

    def generate(self, expression: exp.Expr, copy: bool = True, **opts: Any) -> str:
        tree = expression.copy() if copy else expression
        # Deepest first (the reverse of breadth-first): an inner test is text by the time the
        # one around it is written.
        for node in reversed(list(tree.find_all(exp.RegexpLike))):
            if node.args.get("flag") is not None:
                continue
            text = (f"{self.generate(node.this, copy=False, **opts)} REGEXP "
                    f"{self.generate(node.expression, copy=False, **opts)}")
            if node is tree:
                return text
            node.replace(exp.Var(this=text))
        return super().generate(tree, copy=False, **opts)


_MYSQL = MySQLAndMariaDB()


def writer(dialect: str) -> str | Dialect:
    """What to write SQL of ``dialect`` (sqlglot's name) with, for ``Expression.sql(dialect=...)``:
    the dialect itself, but MySQL's as both MySQL and MariaDB read it (:class:`MySQLAndMariaDB`)."""
    return _MYSQL if dialect == "mysql" else dialect
