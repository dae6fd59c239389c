"""Reading what a model wrote: SQL, Python-style lists, schema links.

Models wrap their answers in prose, markdown fences and headings, and sometimes return nothing
usable. Each parser here takes whatever text came back and returns either a clean value or None
(never raises), so a node can say clearly that the model gave no answer.
"""

from __future__ import annotations

import ast
import re

from sqlchorus.tools.database import NotAQueryError, check_single_query

_FENCE = re.compile(r"```[ \t]*(?:sql|sqlite|SQL)?[ \t]*\n?(.*?)```", re.DOTALL)
_HEADINGS = (
    "final optimized sql query",
    "final sql query",
    "final answer",
    "final sql",
    "sql query",
    "sql",
)
_HEADING = re.compile(
    r"(?im)^[ \t>*#_-]*(?:" + "|".join(re.escape(h) for h in _HEADINGS) + r")[ \t*_]*:[ \t*_]*"
)
_QUERY_START = re.compile(r"(?is)\b(SELECT|WITH)\b")


def extract_sql(text: str | None) -> str | None:
    """The last well-formed SQL query in a model's answer, or None.

    Looks, in order, at fenced code blocks, text after a heading such as ``Final Answer:`` or
    ``**Final Optimized SQL Query:**``, and finally any ``SELECT``/``WITH`` statement in the text.
    A candidate counts only if it parses as exactly one query.
    """
    if not text or not text.strip():
        return None
    for candidate in _candidates(text):
        sql = _clean(candidate)
        if sql and _is_query(sql):
            return sql
    return None


def _candidates(text: str) -> list[str]:
    found: list[str] = []
    fences = _FENCE.findall(text)
    found.extend(reversed(fences))
    headings = list(_HEADING.finditer(text))
    for match in reversed(headings):
        rest = text[match.end():]
        fenced = _FENCE.match(rest.lstrip())
        found.append(fenced.group(1) if fenced else rest)
    starts = [m.start() for m in _QUERY_START.finditer(text)]
    for start in reversed(starts):
        found.append(text[start:])
    return found


def _clean(candidate: str) -> str:
    sql = candidate.strip().strip("`").strip()
    if sql.lower().startswith(("sql\n", "sqlite\n")):
        sql = sql.split("\n", 1)[1]
    # Prose after the query: stop at the first blank line or markdown line that is not SQL.
    lines: list[str] = []
    for line in sql.splitlines():
        stripped = line.strip()
        if not stripped:
            if lines:
                break
            continue
        if stripped.startswith(("**", "#", "* ", "- ", "```")) and lines:
            break
        lines.append(line.rstrip())
    sql = "\n".join(lines).strip().strip("`").strip()
    sql = sql.rstrip(";").strip()
    if sql.startswith("**") or sql.startswith("*"):
        sql = sql.strip("*").strip()
    return _trim_to_query(sql)


def _trim_to_query(sql: str) -> str:
    """Drop a trailing sentence that shares the line with the query, if the query parses without it."""
    if _is_query(sql):
        return sql
    match = _QUERY_START.search(sql)
    if match and match.start() > 0:
        sql = sql[match.start():]
        if _is_query(sql):
            return sql
    for stop in (". ", "\n"):
        if stop in sql:
            head = sql.rsplit(stop, 1)[0].rstrip(";").strip()
            if head and _is_query(head):
                return head
    return sql


def _is_query(sql: str) -> bool:
    try:
        check_single_query(sql)
    except NotAQueryError:
        return False
    return True


_LIST = re.compile(r"\[[^\[\]]*\]", re.DOTALL)


def extract_list(text: str | None) -> list[str] | None:
    """The last Python-style list of strings in a model's answer, or None."""
    if not text:
        return None
    for match in reversed(_LIST.findall(text)):
        try:
            value = ast.literal_eval(match)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            value = _loose_items(match)
        if isinstance(value, (list, tuple)):
            items = [str(v).strip() for v in value if str(v).strip()]
            if items:
                return _dedupe(items)
    return None


def _loose_items(bracketed: str) -> list[str]:
    inner = bracketed.strip()[1:-1]
    return [part.strip().strip("'\"").strip() for part in inner.split(",")]


def _dedupe(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


_SCHEMA_LINKS = re.compile(r"(?i)schema[ _]links\s*[:;]\s*\[")
_DOTTED = re.compile(r"[`\"\[]?([A-Za-z_][\w ]*?)[`\"\]]?\.[`\"\[]?([\w *]+?)[`\"\]]?$")


def extract_schema_links(text: str | None) -> list[tuple[str, str]] | None:
    """``(table, column)`` pairs from a DIN-SQL ``Schema_links: [...]`` answer, or None.

    Join conditions (``a.x = b.y``) contribute both sides; values and ``table.*`` keep the table
    with column ``*``.
    """
    if not text:
        return None
    match = None
    for match in _SCHEMA_LINKS.finditer(text):
        pass
    if match is None:
        return None
    body = text[match.end():]
    end = body.find("]")
    body = body[:end] if end != -1 else body
    pairs: list[tuple[str, str]] = []
    for item in body.split(","):
        for side in item.split("="):
            side = side.strip().strip("'\"")
            dotted = _DOTTED.match(side)
            if dotted:
                pairs.append((dotted.group(1).strip(), dotted.group(2).strip()))
    return pairs or None
