"""Reading what a model wrote: SQL, lists, schema links, plans, classes, examples and verdicts.

Models wrap their answers in prose, markdown fences and headings, and sometimes return nothing
usable. Each parser here takes whatever text came back and returns either a clean value or None
(never raises), so a node can say clearly that the model gave no answer.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from sqlchorus.tools.engines.sqlite import NotAQueryError, check_single_query
from sqlchorus.tools.schema.links import dotted_column

_FENCE = re.compile(r"```[ \t]*(?:sql|sqlite|SQL)?[ \t]*\n?(.*?)```", re.DOTALL)
# What a prompt asks the answer's query to follow: CHASE-SQL's fixer ``Final Answer``, the
# generators' ``**Final Optimized SQL Query:**``, DIN-SQL's ``FIXED SQL``. A marker ends in a
# colon, or stands alone at the end of its line (``### Final Answer`` above a fence).
_FINAL = re.compile(
    r"(?im)\b(?:final(?:[ \t]+(?:optimi[sz]ed|corrected|fixed))?(?:[ \t]+sql)?[ \t]+(?:answer|query)"
    r"|final[ \t]+sql|(?:corrected|fixed)(?:[ \t]+sql)?[ \t]+query|fixed[ \t]+sql)\b"
    r"(?:[ \t*_]*:|[ \t*_#]*$)[ \t*_]*"
)
_HEADINGS = ("sql query", "sql")
_HEADING = re.compile(
    r"(?im)^[ \t>*#_-]*(?:" + "|".join(re.escape(h) for h in _HEADINGS) + r")[ \t*_]*:[ \t*_]*"
)
_QUERY_START = re.compile(r"(?is)\b(SELECT|WITH)\b")
# What precedes a SELECT that is part of a larger query rather than the start of one: a set
# operation (``... INTERSECT SELECT``), a parenthesis (a subquery, or the body of a CTE
# ``WITH c AS (...) SELECT``), or ``AS`` of a CTE.
_INSIDE_QUERY = re.compile(r"(?is)(?:\b(?:UNION|INTERSECT|EXCEPT|ALL|DISTINCT|AS)|[()])\s*$")


def extract_sql(text: str | None) -> str | None:
    """The answer's SQL query, or None.

    When the answer has a final-answer marker (``Final Answer:``, ``**Final Optimized SQL
    Query:**``, ``Fixed SQL:``, see ``_FINAL``) with text after it, its query is the first one
    after the last marker that is followed by one, fenced or not, and there is none if no query
    follows a marker: models quote the failing query, or write each sub-question's SQL, before
    the final one, so what precedes the marker is never the answer. Without such a marker it is
    the last fenced block, else the text after the last ``SQL:`` heading, else the last
    ``SELECT``/``WITH`` statement in the text. A candidate counts only if it parses as exactly
    one query.
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
    for match in reversed(list(_FINAL.finditer(text))):
        found.extend(_after_marker(text[match.end():]))
    if any(c.strip() for c in found):
        return found
    # Markers only at the very end ("... that is my final answer"): the answer is above them.
    fences = _FENCE.findall(text)
    found.extend(reversed(fences))
    headings = list(_HEADING.finditer(text))
    for match in reversed(headings):
        rest = text[match.end():]
        fenced = _FENCE.match(rest.lstrip())
        found.append(fenced.group(1) if fenced else rest)
    starts = [m.start() for m in _QUERY_START.finditer(text) if not _INSIDE_QUERY.search(text, 0, m.start())]
    for start in reversed(starts):
        found.append(text[start:])
    return found


def _after_marker(rest: str) -> list[str]:
    """Where the query after a final-answer marker may be, nearest first: right after it
    (fenced or not), then the first fence after it, then each ``SELECT``/``WITH`` after it."""
    fenced = _FENCE.match(rest.lstrip())
    found = [fenced.group(1) if fenced else rest]
    found.extend(_FENCE.findall(rest))
    found.extend(rest[m.start():] for m in _QUERY_START.finditer(rest))
    return found


def _unwrap(text: str) -> str:
    """``text`` without the backquotes of markdown (inline code, a fence's remains) around it; a
    backquote that belongs to the query (MySQL's quoted name at its end: ``... ORDER BY `rank```)
    stays."""
    text = text.strip().lstrip("`")  # a query starts with a word, never a backquote
    body = text.rstrip("`")
    # Names are quoted in pairs: the last backquote is the query's own when the text before it
    # holds an odd number of them (it closes a name); the rest are markdown's.
    own = body.count("`") % 2
    return (body + "`" * own if len(text) > len(body) else text).strip()


def _clean(candidate: str) -> str:
    sql = _unwrap(candidate)
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
    sql = _unwrap("\n".join(lines))
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


_OTHER_DIALECTS = ("mysql", "postgres", "duckdb")
"""The engines' dialects a candidate is read in when SQLite's reading fails: a query in the
engine's own SQL (MySQL's ``GROUP_CONCAT(x SEPARATOR ',')``, DuckDB's lambdas) is still a query."""


def _is_query(sql: str) -> bool:
    for dialect in ("sqlite", *_OTHER_DIALECTS):
        try:
            check_single_query(sql, dialect=dialect)
        except NotAQueryError:
            continue
        return True
    return False


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
# A ``table.column`` item as prose writes it: the table bare or quoted, the column everything
# after the dot (BIRD's ``frpm.Free Meal Count (K-12)``, ``Laboratory.T-BIL``).
_COMPARISON = re.compile(r"!=|<>|<=|>=|=|<|>")
_CLOSING = {"'": "'", '"': '"', "`": "`", "[": "]"}
_OPENS_AFTER = " \t\r\n,=.(<>!["


def extract_schema_links(text: str | None) -> list[tuple[str, str]] | None:
    """``(table, column)`` pairs from a DIN-SQL ``Schema_links: [...]`` answer, or None.

    Join conditions (``a.x = b.y``) contribute both sides; values and ``table.*`` keep the table
    with column ``*``. Names keep their spaces, brackets and dashes, quoted in backticks, double
    quotes or brackets or not (:func:`dotted_column`).
    """
    rest = _after_last_links(text)
    if rest is None:
        return None
    masked = _mask_quoted(rest)
    end = masked.find("]")
    body, masked = (rest[:end], masked[:end]) if end != -1 else (rest, masked)
    pairs: list[tuple[str, str]] = []
    for item, masked_item in _split(body, masked, ","):
        for side, _ in _split(item, masked_item, _COMPARISON):
            pair = dotted_column(side)
            if pair is not None:
                pairs.append(pair)
    return pairs or None


def _mask_quoted(text: str) -> str:
    """``text`` with its quoted names and strings (``'..'``, ``".."``, ```..```, ``[..]``),
    quotes included, blanked out, so that commas, brackets and operators in them split nothing.

    A quote opens only where a name or value starts (``O'Brien`` holds none), and one that never
    closes is an ordinary character.
    """
    out = list(text)
    i = 0
    while i < len(text):
        close = _CLOSING.get(text[i])
        if close is None or (i > 0 and text[i - 1] not in _OPENS_AFTER):
            i += 1
            continue
        j = i + 1
        while True:
            j = text.find(close, j)
            if j == -1 or close == "]" or text[j + 1: j + 2] != close:
                break
            j += 2  # a doubled quote is the quote character itself
        if j == -1:
            i += 1
            continue
        out[i: j + 1] = "\0" * (j - i + 1)
        i = j + 1
    return "".join(out)


def _split(text: str, masked: str, sep: str | re.Pattern[str]) -> list[tuple[str, str]]:
    """``text`` split where ``masked`` (its :func:`_mask_quoted` form) has ``sep``, with the
    masked parts alongside."""
    pattern = sep if isinstance(sep, re.Pattern) else re.compile(re.escape(sep))
    parts, start = [], 0
    for match in pattern.finditer(masked):
        parts.append((text[start:match.start()], masked[start:match.start()]))
        start = match.end()
    parts.append((text[start:], masked[start:]))
    return parts


def _after_last_links(text: str | None) -> str | None:
    """What follows the last ``Schema_links: [`` of ``text``, or None when there is none."""
    match = None
    for match in _SCHEMA_LINKS.finditer(text or ""):
        pass
    return (text or "")[match.end():] if match is not None else None


def schema_links_as_written(text: str | None) -> str | None:
    """The last ``Schema_links: [...]`` list of a DIN-SQL answer as the model wrote it, brackets
    included (``[head.*,head.age,56]``), or None when there is none or it is empty.

    Its cell values (``56``, ``'Alabama'``, ``Fall``) are kept, which :func:`extract_schema_links`
    leaves out. A list the answer never closes ends at its line's end and is closed.
    """
    rest = _after_last_links(text)
    if rest is None:
        return None
    end = _mask_quoted(rest).find("]")
    body = rest[:end] if end != -1 else rest.split("\n", 1)[0]
    body = body.strip()
    return f"[{body}]" if body else None


_EXACT = re.compile(r'^[\s"\'*`(\[]*(?:candidate\s+)?([AB])[\s"\'*`)\].:]*$', re.IGNORECASE)
_NAMED = re.compile(r"\bcandidate\s+([AB])\b", re.IGNORECASE)
_STATED = re.compile(r"\b(?:answer|choice|correct one|correct query)\s*(?:is\s*:?|:)\s*[\"'*`]*([AB])\b", re.IGNORECASE)


def parse_verdict(text: str) -> str | None:
    """``"A"`` or ``"B"`` from the selection model's answer, or None when it names neither."""
    text = (text or "").strip()
    last = text.splitlines()[-1].strip() if text else ""
    for candidate in (text, last):
        if m := _EXACT.match(candidate):
            return m.group(1).upper()
    for pattern in (_STATED, _NAMED):
        found = {m.group(1).upper() for m in pattern.finditer(text)}
        if len(found) == 1:
            return found.pop()
    return None


_BRACKETED = re.compile(r"\[\[(.+?)\]\]", re.DOTALL)
_NUMBERED = re.compile(r"(?im)^\s*(?:[-*]\s*)?(?:step\s*)?(\d+)\s*[.:)]\s*(.+?)\s*$")
_STEP_PREFIX = re.compile(r"(?i)^\s*step\s*\d+\s*[:.)-]\s*")


def parse_plan(text: str | None) -> list[str]:
    """The step instructions of a plan answer, without their ``Step N:`` prefixes."""
    if not text:
        return []
    items = _BRACKETED.findall(text)
    if not items:
        items = [m.group(2) for m in _NUMBERED.finditer(text)]
    steps = [" ".join(_STEP_PREFIX.sub("", item).split()) for item in items]
    return [s for s in steps if s]


_LABEL = re.compile(r'(?i)label\s*:\s*"?\s*(NON-NESTED|NESTED|EASY)\b')
_CLASSIFIED = re.compile(r'(?i)classified\s+as\s*"?\s*(NON-NESTED|NESTED|EASY)\b')
_TABLES = re.compile(r"(?i)needs?\s+these\s+tables\s*=\s*(\[[^\]]*\])")
_SUBS = re.compile(r"(?i)answer\s+to\s+the\s+(?:sub-)?questions?\s*=\s*(\[[^\]]*\])")


def parse_classification(text: str | None) -> dict[str, Any] | None:
    """``{"label", "tables", "sub_questions"}`` from a classification answer, or None without a label.

    The last ``Label:`` wins (else the last ``classified as``); empty sub-questions (DIN-SQL
    writes ``[""]`` for none) are dropped.
    """
    if not text:
        return None
    labels = _LABEL.findall(text) or _CLASSIFIED.findall(text)
    if not labels:
        return None
    tables = _TABLES.findall(text)
    subs = _SUBS.findall(text)
    return {
        "label": labels[-1].upper(),
        "tables": [t.strip("'\" ") for t in tables[-1].strip("[]").split(",") if t.strip("'\" ")] if tables else [],
        "sub_questions": [s for s in (extract_list(subs[-1]) or []) if s.strip('"\' ')] if subs else [],
    }


_PAIR = re.compile(
    r'"input"\s*:\s*"(?P<q>(?:[^"\\]|\\.)*)"\s*,?\s*"output"\s*:\s*"(?P<s>(?:[^"\\]|\\.)*)"', re.DOTALL
)


def parse_examples(text: str, limit: int) -> list[dict[str, str]]:
    """``{"question", "sql"}`` pairs from ``"input": ..., "output": ...`` text, ``limit`` at most."""
    found = []
    for m in _PAIR.finditer(text or ""):
        try:
            question = json.loads(f'"{m["q"]}"')
            sql = json.loads(f'"{m["s"]}"')
        except json.JSONDecodeError:
            question, sql = m["q"], m["s"]
        question, sql = " ".join(question.split()), " ".join(sql.split())
        if question and sql:
            found.append({"question": question, "sql": sql})
        if len(found) >= limit:
            break
    return found


_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def parse_links(text: str | None) -> dict[str, list[str]] | None:
    """The ``{"table": ["column", ...]}`` object of a linking answer, or None.

    Takes the last brace-delimited object that parses as JSON (or as a Python literal); a
    table given a single column name as a string keeps it.
    """
    if not text:
        return None
    starts = [m.start() for m in re.finditer(r"\{", text)]
    for start in reversed(starts):
        match = _OBJECT.match(text, start)
        if not match:
            continue
        chunk = match.group(0)
        for end in range(len(chunk), 0, -1):
            if chunk[end - 1] != "}":
                continue
            value = _literal(chunk[:end])
            if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
                out: dict[str, list[str]] = {}
                for table, columns in value.items():
                    if isinstance(columns, str):
                        columns = [columns]
                    if not isinstance(columns, (list, tuple)):
                        break
                    out[table] = [str(c) for c in columns]
                else:
                    return out
    return None


def _literal(chunk: str) -> Any:
    try:
        return json.loads(chunk)
    except ValueError:
        pass
    try:
        return ast.literal_eval(chunk)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
