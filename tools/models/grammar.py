"""A GBNF grammar, built from a schema, that only lets one SELECT statement out.

Local models (llama.cpp) can constrain sampling with a GBNF grammar: at every step, only tokens
that keep the text inside the grammar may be drawn. :func:`schema_grammar` writes a grammar for
a practical subset of SQLite's SELECT (joins, WHERE with AND/OR/NOT, LIKE, IN, BETWEEN, IS NULL,
subqueries, GROUP BY/HAVING, ORDER BY, LIMIT, UNION/INTERSECT/EXCEPT) in which every table and
column name is one of the schema's, so a small model cannot invent names, write prose, or emit a
second statement.

Design choices:

* Tokens are separated by exactly one space. Optional whitespace would let a small model emit
  spaces until it runs out of tokens; one space also keeps the grammar unambiguous enough to be
  fast to sample from.
* Table aliases are ``T1`` .. ``T9`` (the convention of Spider's gold SQL and of most few-shot
  examples); a qualifier is a real table name or one of these aliases. Output-column aliases
  (``AS name``) are left out, because they would let any identifier through.
* A column may be named without its table or qualified; the grammar does not check that the
  column belongs to a table in FROM (that would need one grammar per join shape). The database
  rejects such queries and the fixer repairs them.
* A query may end with a semicolon, where models like to stop. Lists are bounded (one set
  operation, six output columns, four conditions, five IN values, three GROUP BY or
  ORDER BY keys, ten-digit numbers, LIMIT up to 9999), so a small model that starts repeating
  itself is stopped by the grammar instead of running until its token budget is spent.
* An output column starts with a column or a function call, never a bare literal: a small model
  under a grammar otherwise fills the SELECT list with constants, which run but answer nothing.
* Keywords are accepted in upper or lower case, as small models write either.
* Names that are not plain identifiers, or are SQL keywords, are double-quoted. Each name is
  admitted as the schema spells it and in lower case.
* Per dialect (``dialect``, sqlglot's name of the engine): SQLite and DuckDB match names
  case-insensitively, so the above holds. PostgreSQL folds an unquoted name to lower case, so
  there a name with a capital letter is admitted only double-quoted as the schema spells it
  (``"Country"``), and its reserved words are quoted as well (``"user"``). MySQL (and MariaDB)
  quotes with backticks (a double-quoted word is a string there), its reserved words among the
  quoted (```rank```, ```year_month```); its column names match in any case, its table names only
  as the schema spells them (they are file names on most systems).

:func:`matches` is a small recogniser for the GBNF subset written here (literals, character
classes, rule references, groups, alternatives and ``* + ?``). It lets tests check, without
llama.cpp, which queries a grammar admits.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from sqlglot.dialects.mysql import MySQL

from sqlchorus.tools.errors import SqlchorusError
from sqlchorus.tools.engines.catalog import DatabaseSchema

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Words that must be quoted when used as a name (SQLite keywords a schema is likely to use).
_KEYWORDS = frozenset(
    """
    abort action add after all alter analyze and as asc attach autoincrement before begin between
    by cascade case cast check collate column commit conflict constraint create cross current
    current_date current_time current_timestamp database default deferrable deferred delete desc
    detach distinct drop each else end escape except exclusive exists explain fail for foreign from
    full glob group having if ignore immediate in index indexed initially inner insert instead
    intersect into is isnull join key left like limit match natural no not notnull null of offset
    on or order outer plan pragma primary query raise recursive references regexp reindex release
    rename replace restrict right rollback row savepoint select set table temp temporary then to
    transaction trigger union unique update using vacuum values view virtual when where with
    without
    """.split()
)

# PostgreSQL's reserved words (its documentation's appendix C), quoted there as names besides
# the SQLite keywords above.
_POSTGRES_KEYWORDS = _KEYWORDS | frozenset(
    """
    analyse any array asymmetric both current_catalog current_role current_schema current_user
    do false fetch grant lateral leading localtime localtimestamp only placing returning
    session_user some symmetric trailing true user variadic window
    """.split()
)

# MySQL's and MariaDB's reserved words (sqlglot's list of MySQL's, which follows MySQL's manual,
# and MariaDB's own besides), quoted there as names besides the SQLite keywords above.
_MYSQL_KEYWORDS = _KEYWORDS | frozenset(w.lower() for w in MySQL.Generator.RESERVED_KEYWORDS) | frozenset(
    """
    current_role delete_domain_id do_domain_ids general ignore_domain_ids ignore_server_ids
    master_heartbeat_period offset page_checksum parse_vcol_expr position_columns returning
    ref_system_id slow stats_auto_recalc stats_persistent stats_sample_pages
    """.split()
)

_KEYWORD_RULES = (
    "select", "distinct", "from", "where", "and", "or", "not", "as", "join", "inner", "left", "on",
    "group", "by", "having", "order", "asc", "desc", "limit", "like", "in", "between", "is",
    "null", "union", "all", "intersect", "except",
)

_FUNCTIONS = ("count", "sum", "avg", "min", "max")

_BODY = r"""
root ::= query ";"?
query ::= select (" " setop " " select)?
setop ::= kw-union (" " kw-all)? | kw-intersect | kw-except
select ::= kw-select (" " kw-distinct)? " " items " " kw-from " " source (" " where)? (" " group)? (" " order)? (" " limit)?
items ::= item (", " item (", " item (", " item (", " item (", " item)?)?)?)?)?
item ::= "*" | itemterm ((" + " | " - " | " * " | " / ") term)*
itemterm ::= colref | call | "(" expr ")"
source ::= tableref (" " join)*
tableref ::= table (" " kw-as " " alias)?
join ::= ((kw-inner | kw-left) " ")? kw-join " " tableref " " kw-on " " colref " = " colref
alias ::= "T" [1-9] | "t" [1-9]
where ::= kw-where " " cond
cond ::= pred (logic pred (logic pred (logic pred)?)?)?
logic ::= " " kw-and " " | " " kw-or " "
pred ::= "(" cond ")" | kw-not " " pred | expr " " cmp " " operand | expr (" " kw-not)? " " kw-like " " string | expr (" " kw-not)? " " kw-in " (" (query | literals) ")" | expr " " kw-between " " expr " " kw-and " " expr | expr " " kw-is (" " kw-not)? " " kw-null
operand ::= expr | "(" query ")"
cmp ::= "=" | "!=" | "<>" | "<=" | ">=" | "<" | ">"
expr ::= term ((" + " | " - " | " * " | " / ") term)*
term ::= colref | call | literal | "(" expr ")"
call ::= fn "(" ((kw-distinct " ")? expr | "*") ")"
colref ::= (qualifier ".")? column
qualifier ::= table | alias
literals ::= literal (", " literal (", " literal (", " literal (", " literal)?)?)?)?
literal ::= number | string
number ::= "-"? digits ("." digits)?
digits ::= [0-9] ([0-9] ([0-9] ([0-9] ([0-9] ([0-9] ([0-9] ([0-9] ([0-9] [0-9]?)?)?)?)?)?)?)?)?
string ::= "'" [^'\n]* "'"
group ::= kw-group " " kw-by " " colref (", " colref (", " colref)?)? (" " kw-having " " cond)?
order ::= kw-order " " kw-by " " key (", " key (", " key)?)?
key ::= expr (" " dir)?
dir ::= kw-asc | kw-desc
limit ::= kw-limit " " [1-9] ([0-9] ([0-9] [0-9]?)?)?
"""


def schema_grammar(schema: DatabaseSchema, dialect: str = "sqlite") -> str:
    """A GBNF grammar whose sentences are single SELECT queries over ``schema``'s names, as
    ``dialect`` (``sqlite``, ``duckdb``, ``postgres``, ``mysql``) reads them.

    The result is deterministic: the same schema always gives the same text.

    Raises:
        ValueError: the schema has no tables.
    """
    if not schema.tables:
        raise ValueError(f"Schema {schema.name!r} has no tables to build a grammar from.")
    tables = _unique((t.name for t in schema.tables), dialect, tables=True)
    columns = _unique((c.name for t in schema.tables for c in t.columns), dialect)
    lines = [_BODY.strip()]
    lines.append("table ::= " + " | ".join(_name_literal(n, dialect) for n in tables))
    lines.append("column ::= " + " | ".join(_name_literal(n, dialect) for n in columns) if columns else 'column ::= "rowid"')
    lines.append("fn ::= " + " | ".join(_either_case(f) for f in _FUNCTIONS))
    for word in _KEYWORD_RULES:
        lines.append(f"kw-{word} ::= {_either_case(word)}")
    return "\n".join(lines) + "\n"


_SCOPED_BODY = r"""
root ::= query ";"?
cmp ::= "=" | "!=" | "<>" | "<=" | ">=" | "<" | ">"
logic ::= " " kw-and " " | " " kw-or " "
literal ::= number | string
number ::= "-"? digits ("." digits)?
digits ::= [0-9] ([0-9] ([0-9] ([0-9] ([0-9] ([0-9] ([0-9] ([0-9] ([0-9] [0-9]?)?)?)?)?)?)?)?)?
string ::= "'" [^'\n]* "'"
limit ::= kw-limit " " [1-9] ([0-9] ([0-9] [0-9]?)?)?
dir ::= kw-asc | kw-desc
"""

# One FROM's rules, with {s} its suffix, {col} its column rule's body and {source} its FROM text.
_SCOPED_QUERY = r"""
q{s} ::= kw-select (" " kw-distinct)? " " items{s} " " kw-from " " {source} (" " where{s})? (" " group{s})? (" " order{s})? (" " limit)?
items{s} ::= item{s} (", " item{s} (", " item{s} (", " item{s})?)?)?
item{s} ::= "*" | col{s} | call{s}
call{s} ::= fn "(" ((kw-distinct " ")? col{s} | "*") ")"
col{s} ::= {col}
where{s} ::= kw-where " " cond{s}
cond{s} ::= pred{s} (logic pred{s} (logic pred{s})?)?
pred{s} ::= col{s} " " cmp " " literal | col{s} (" " kw-not)? " " kw-like " " string | col{s} " " kw-between " " literal " " kw-and " " literal | col{s} " " kw-is (" " kw-not)? " " kw-null
group{s} ::= kw-group " " kw-by " " col{s} (" " kw-having " " call{s} " " cmp " " number)?
order{s} ::= kw-order " " kw-by " " (call{s} | col{s}) (" " dir)?
"""


def scoped_grammar(schema: DatabaseSchema, tables: list[str] | None = None, dialect: str = "sqlite") -> str:
    """A GBNF grammar of simpler queries in which every column belongs to a table in FROM.

    FROM is one table, or two tables joined on a foreign key between them (columns then
    qualified with their table's name); each such FROM has its own rules, so a column of another
    table cannot be written. The rest is a plain subset (WHERE of up to three comparisons, LIKE,
    BETWEEN or IS NULL, one GROUP BY key with an optional HAVING, one ORDER BY key, LIMIT) that
    small models can follow; lists of literals are left out, as small models fill them with
    made-up ids.

    Args:
        schema: the database's schema.
        tables: the tables queries may read (linked tables, say); every table when None.
        dialect: as for :func:`schema_grammar`.

    Raises:
        ValueError: none of ``tables`` is in the schema.
    """
    wanted = {t.lower() for t in tables} if tables else None
    chosen = [t for t in schema.tables if wanted is None or t.name.lower() in wanted]
    if not chosen:
        raise ValueError(f"Schema {schema.name!r} has none of the tables {sorted(tables or [])}.")
    names = {t.name for t in chosen}
    lines = [_SCOPED_BODY.strip()]
    alternatives = []
    for i, table in enumerate(chosen):
        suffix = f"-t{i}"
        cols = " | ".join(_name_literal(n, dialect) for n in _unique((c.name for c in table.columns), dialect))
        lines.append(_SCOPED_QUERY.format(s=suffix, col=cols or '"rowid"',
                                          source=_name_literal(table.name, dialect)).strip())
        alternatives.append(f"q{suffix}")
    pair = 0
    for table in chosen:
        for fk in table.foreign_keys:
            if fk.ref_table not in names:
                continue
            other = schema.table(fk.ref_table)
            if other is None:  # a name of the chosen tables, so never
                continue
            suffix = f"-j{pair}"
            pair += 1
            q = functools.partial(_quoted, dialect=dialect)
            qualified = [_gbnf_string(f"{q(t.name)}.{q(c.name)}") for t in (table, other) for c in t.columns]
            source = _gbnf_string(
                f"{q(table.name)} JOIN {q(other.name)} ON "
                f"{q(table.name)}.{q(fk.column)} = {q(other.name)}.{q(fk.ref_column)}"
            )
            lines.append(_SCOPED_QUERY.format(s=suffix, col=" | ".join(qualified), source=source).strip())
            alternatives.append(f"q{suffix}")
    lines.append("query ::= " + " | ".join(alternatives))
    lines.append("fn ::= " + " | ".join(_either_case(f) for f in _FUNCTIONS))
    for word in _KEYWORD_RULES:
        lines.append(f"kw-{word} ::= {_either_case(word)}")
    return "\n".join(lines) + "\n"


def _bare(name: str, dialect: str) -> bool:
    """Whether ``name`` may be written without quotes in ``dialect`` and still mean itself."""
    if dialect == "postgres":  # unquoted names fold to lower case there
        return bool(_PLAIN.match(name)) and name == name.lower() and name not in _POSTGRES_KEYWORDS
    if dialect == "mysql":
        return bool(_PLAIN.match(name)) and name.lower() not in _MYSQL_KEYWORDS
    return bool(_PLAIN.match(name)) and name.lower() not in _KEYWORDS


def _quoted(name: str, dialect: str = "sqlite") -> str:
    if _bare(name, dialect):
        return name
    if dialect == "mysql":  # backticks: without ANSI_QUOTES a double-quoted word is a string
        return "`" + name.replace("`", "``") + "`"
    return '"' + name.replace('"', '""') + '"'


def _unique(names, dialect: str = "sqlite", tables: bool = False) -> list[str]:
    # Each name as the schema spells it and in lower case (SQLite and DuckDB names are
    # case-insensitive and small models tend to write them in lower case; PostgreSQL's quoted
    # names are not, nor MySQL's table names, so there only the schema's spelling). Longest
    # first, then alphabetical: a stable order in which a name comes before any name that is a
    # prefix of it.
    if dialect == "postgres" or (dialect == "mysql" and tables):
        spellings = set(names)
    else:
        spellings = {spelling for name in names for spelling in (name, name.lower())}
    return sorted(spellings, key=lambda n: (-len(n), n))


def _name_literal(name: str, dialect: str = "sqlite") -> str:
    return _gbnf_string(_quoted(name, dialect))


def _either_case(word: str) -> str:
    return f"({_gbnf_string(word.upper())} | {_gbnf_string(word.lower())})"


def _gbnf_string(text: str) -> str:
    escaped = (
        text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
        .replace("\t", "\\t")
    )
    return f'"{escaped}"'


# -- a recogniser for the GBNF subset above ---------------------------------------------------


@dataclass(frozen=True)
class _Lit:
    text: str


@dataclass(frozen=True)
class _Class:
    negated: bool
    ranges: tuple[tuple[str, str], ...]

    def accepts(self, ch: str) -> bool:
        inside = any(lo <= ch <= hi for lo, hi in self.ranges)
        return inside != self.negated


@dataclass(frozen=True)
class _Ref:
    name: str


@dataclass(frozen=True)
class _Alt:
    options: tuple[tuple[object, ...], ...]


@dataclass(frozen=True)
class _Repeat:
    item: object
    low: int
    high: int | None


class GrammarSyntaxError(SqlchorusError, ValueError):
    """Text that is not GBNF of the subset this module reads."""

    kind = "grammar"


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.i = 0

    def rules(self) -> dict[str, _Alt]:
        rules: dict[str, _Alt] = {}
        # Each rule starts at the beginning of a line: "name ::= body", bodies never span lines here.
        for lineno, line in enumerate(self.text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, sep, body = line.partition("::=")
            if not sep or not re.fullmatch(r"[a-zA-Z0-9-]+", name.strip()):
                raise GrammarSyntaxError(f"line {lineno}: not a rule: {line[:60]!r}")
            self.text, self.i = body, 0
            alt = self._alternatives()
            self._space()
            if self.i != len(self.text):
                raise GrammarSyntaxError(f"line {lineno}: unexpected {self.text[self.i:][:20]!r}")
            rules[name.strip()] = alt
        if "root" not in rules:
            raise GrammarSyntaxError("the grammar has no root rule")
        return rules

    def _space(self) -> None:
        while self.i < len(self.text) and self.text[self.i] in " \t":
            self.i += 1

    def _alternatives(self) -> _Alt:
        options = [self._sequence()]
        self._space()
        while self.i < len(self.text) and self.text[self.i] == "|":
            self.i += 1
            options.append(self._sequence())
            self._space()
        return _Alt(tuple(options))

    def _sequence(self) -> tuple[object, ...]:
        items: list[object] = []
        while True:
            self._space()
            if self.i >= len(self.text) or self.text[self.i] in "|)":
                return tuple(items)
            item = self._primary()
            if self.i < len(self.text) and self.text[self.i] in "*+?":
                op = self.text[self.i]
                self.i += 1
                item = _Repeat(item, 1 if op == "+" else 0, 1 if op == "?" else None)
            items.append(item)

    def _primary(self) -> object:
        ch = self.text[self.i]
        if ch == '"':
            return _Lit(self._string())
        if ch == "[":
            return self._char_class()
        if ch == "(":
            self.i += 1
            alt = self._alternatives()
            if self.i >= len(self.text) or self.text[self.i] != ")":
                raise GrammarSyntaxError("unclosed group")
            self.i += 1
            return alt
        match = re.compile(r"[a-zA-Z0-9-]+").match(self.text, self.i)
        if not match:
            raise GrammarSyntaxError(f"unexpected {self.text[self.i:][:20]!r}")
        self.i = match.end()
        return _Ref(match.group())

    def _escape(self) -> str:
        self.i += 1
        ch = self.text[self.i]
        self.i += 1
        return {"n": "\n", "r": "\r", "t": "\t"}.get(ch, ch)

    def _string(self) -> str:
        self.i += 1
        out = []
        while self.text[self.i] != '"':
            if self.text[self.i] == "\\":
                out.append(self._escape())
            else:
                out.append(self.text[self.i])
                self.i += 1
        self.i += 1
        return "".join(out)

    def _char_class(self) -> _Class:
        self.i += 1
        negated = self.text[self.i] == "^"
        if negated:
            self.i += 1
        ranges = []
        while self.text[self.i] != "]":
            lo = self._escape() if self.text[self.i] == "\\" else self._take()
            hi = lo
            if self.text[self.i] == "-" and self.text[self.i + 1] != "]":
                self.i += 1
                hi = self._escape() if self.text[self.i] == "\\" else self._take()
            ranges.append((lo, hi))
        self.i += 1
        return _Class(negated, tuple(ranges))

    def _take(self) -> str:
        ch = self.text[self.i]
        self.i += 1
        return ch


def parse_grammar(text: str) -> Mapping[str, object]:
    """Parse GBNF text (the subset :func:`schema_grammar` writes) into rules.

    Raises:
        GrammarSyntaxError: the text is not such a grammar, or names an undefined rule.
    """
    rules = _Parser(text).rules()
    for name, alt in rules.items():
        for ref in _refs(alt):
            if ref not in rules:
                raise GrammarSyntaxError(f"rule {name!r} refers to undefined rule {ref!r}")
    return rules


def _refs(node: object):
    if isinstance(node, _Ref):
        yield node.name
    elif isinstance(node, _Alt):
        for seq in node.options:
            for item in seq:
                yield from _refs(item)
    elif isinstance(node, _Repeat):
        yield from _refs(node.item)


def matches(grammar: str, text: str) -> bool:
    """Whether ``text`` is a sentence of ``grammar`` (from its ``root`` rule)."""
    return len(text) in _Matcher(_parsed(grammar), text).ends(_Ref("root"), 0)


@lru_cache(maxsize=32)
def _parsed(grammar: str) -> Mapping[str, object]:
    return parse_grammar(grammar)


class _Matcher:
    """All positions where a grammar item can end, starting at a position (memoised per rule)."""

    def __init__(self, rules: Mapping[str, object], text: str):
        self.rules = rules
        self.text = text
        self.memo: dict[tuple[str, int], frozenset[int]] = {}

    def ends(self, node: object, pos: int) -> frozenset[int]:
        if isinstance(node, _Lit):
            return frozenset([pos + len(node.text)]) if self.text.startswith(node.text, pos) else frozenset()
        if isinstance(node, _Class):
            if pos < len(self.text) and node.accepts(self.text[pos]):
                return frozenset([pos + 1])
            return frozenset()
        if isinstance(node, _Ref):
            key = (node.name, pos)
            if key not in self.memo:
                self.memo[key] = frozenset()  # a left-recursive re-entry matches nothing
                self.memo[key] = self.ends(self.rules[node.name], pos)
            return self.memo[key]
        if isinstance(node, _Alt):
            out: set[int] = set()
            for seq in node.options:
                out |= self._sequence(seq, pos)
            return frozenset(out)
        if isinstance(node, _Repeat):
            return self._repeat(node, pos)
        raise TypeError(node)

    def _sequence(self, seq: tuple[object, ...], pos: int) -> set[int]:
        current = {pos}
        for item in seq:
            current = {end for p in current for end in self.ends(item, p)}
            if not current:
                break
        return current

    def _repeat(self, node: _Repeat, pos: int) -> frozenset[int]:
        reached = {pos} if node.low == 0 else set()
        seen = {pos}
        frontier = {pos}
        count = 0
        while frontier and (node.high is None or count < node.high):
            count += 1
            nxt = {end for p in frontier for end in self.ends(node.item, p)}
            if count >= node.low:
                reached |= nxt
                if node.high is None:
                    # A position already expanded can only lead where it led before.
                    nxt -= seen
                    seen |= nxt
            frontier = nxt
        return frozenset(reached)
