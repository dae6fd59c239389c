"""Gold columns that survive schema-link parsing and every schema view, over BIRD dev.

For each of BIRD dev's 1,534 gold queries, the gold columns are sqlglot's columns of the query,
resolved against the database's schema (:func:`sqlchorus.tools.examples.fewshot.sql_links`, built from
``dev_tables.json``; no database is needed). A linking model that names exactly those columns
writes them in DIN-SQL's ``Schema_links: [...]`` list; models write a name with spaces, brackets or
dashes bare (``frpm.Free Meal Count (K-12)``, as DIN-SQL's examples and the scripted oracle do)
or quoted in backticks, double quotes or brackets, so each query is written in all four ways.

A query counts when every gold column survives, for every way of writing it:

* ``extraction``: :func:`~sqlchorus.tools.models.parsing.extract_schema_links`, then
  :func:`~sqlchorus.tools.schema.views.resolve_links`, as ``link_schema`` reads a linking answer;
* ``columns_view`` / ``tables_view``: the ``columns`` and ``tables`` levels of
  :func:`~sqlchorus.tools.schema.views.render_view` (read back from its JSON format), which the
  generators, the fixer and generate_synthetic's examples over the linked columns see;
* ``narrowing``: the linked columns ranked first by
  :func:`~sqlchorus.tools.schema.narrow.rank_columns` and kept by
  :func:`~sqlchorus.tools.schema.narrow.subset`, as a narrowed view keeps them;
* ``links_text``: the links written as DIN-SQL's ``Schema_links`` by
  :func:`~sqlchorus.tools.schema.links.schema_links_text` (what DIN-SQL's generator is shown when
  no model wrote its own list) and read again.

Prints ONE JSON line: ``queries``, ``queries_with_quoted_columns`` (a gold column that is not a
plain identifier), ``queries_with_bracket_or_dash_columns`` (one with more than letters, digits,
underscores and spaces), ``all_survive``, the same count per stage, and per way of writing the
names (``all_survive_by_style``).

    python benchmarks/column_parsing.py [--parsing FILE]

``--parsing FILE`` reads schema links with the ``extract_schema_links`` of another copy of
``sqlchorus/tools/models/parsing.py``, for example the committed one::

    git show HEAD:tools/models/parsing.py > /tmp/parsing_head.py
    python benchmarks/column_parsing.py --parsing /tmp/parsing_head.py
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.examples.fewshot import sql_links
from sqlchorus.tools.models.parsing import extract_schema_links
from sqlchorus.tools.engines.catalog import DatabaseSchema
from sqlchorus.tools.schema.introspect import introspect, schema_only_database
from sqlchorus.tools.schema.links import schema_links_text
from sqlchorus.tools.schema.narrow import rank_columns, subset
from sqlchorus.tools.schema.views import render_view, resolve_links

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_WORDS_AND_SPACES = re.compile(r"[\w ]+\Z")
STAGES = ("extraction", "columns_view", "tables_view", "narrowing", "links_text")
STYLES = ("bare", "backticks", "double quotes", "brackets")


def data_dir() -> Path:
    default = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    return Path(os.environ.get("SQLCHORUS_DATA", default))


def _quoted(name: str, style: str) -> str:
    if style == "bare" or _PLAIN.match(name):
        return name
    if style == "backticks":
        return "`" + name.replace("`", "``") + "`"
    if style == "double quotes":
        return '"' + name.replace('"', '""') + '"'
    return "[" + name + "]"


def links_answer(gold: dict[str, list[str]], style: str) -> str:
    """A DIN-SQL linking answer naming exactly ``gold``'s columns (a table alone as ``t.*``)."""
    items = []
    for table, columns in gold.items():
        for column in columns or ["*"]:
            items.append(f"{_quoted(table, style)}.{column if column == '*' else _quoted(column, style)}")
    return "So the Schema_links are:\nSchema_links: [" + ",".join(items) + "]"


def read_links(extract: Callable, schema: DatabaseSchema, text: str) -> dict[str, list[str]]:
    """Links read from an answer the way ``link_schema`` reads them."""
    raw: dict[str, list[str]] = {}
    for table, column in extract(text) or []:
        raw.setdefault(table, [])
        if column != "*":
            raw[table].append(column)
    return resolve_links(schema, raw)


def shown(schema: DatabaseSchema, level: str, links: dict[str, list[str]]) -> set[tuple[str, str]]:
    if not links:
        return set()  # a view without links falls back to the whole schema: nothing was kept
    view = json.loads(render_view(schema, "json", level=level, links=links, sample_values=0))
    return {(t, c) for t, entry in view["tables"].items() for c in entry["columns"]}


def narrowed(schema: DatabaseSchema, question: str, links: dict[str, list[str]]) -> set[tuple[str, str]]:
    ranked = rank_columns(schema, question, None, links)
    linked = sum(len(cols) for cols in links.values())
    keep: dict[str, list[str]] = {t: [] for t in links}
    for table, column in ranked[:linked]:
        keep.setdefault(table, []).append(column)
    part = subset(schema, keep)
    return {(t.name, c.name) for t in part.tables for c in t.columns}


def load_extract(path: str | None) -> Callable:
    if not path:
        return extract_schema_links
    spec = importlib.util.spec_from_file_location("parsing_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.extract_schema_links


def schemas(bird: Path, folder: Path) -> dict[str, DatabaseSchema]:
    out = {}
    for entry in json.loads((bird / "dev_tables.json").read_text(encoding="utf-8")):
        path = schema_only_database(entry, folder / f"{entry['db_id']}.sqlite")
        with GuardedDatabase(path) as db:
            out[entry["db_id"]] = introspect(db)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parsing", help="a copy of sqlchorus/tools/models/parsing.py to read schema links with")
    args = parser.parse_args()
    extract = load_extract(args.parsing)
    bird = data_dir() / "bird"
    if not (bird / "dev.json").exists():
        sys.exit(f"No BIRD dev set at {bird}: set SQLCHORUS_DATA.")
    questions = json.loads((bird / "dev.json").read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        by_db = schemas(bird, Path(tmp))
    counts = dict.fromkeys(STAGES, 0)
    complete = quoted = special = 0
    by_style = dict.fromkeys(STYLES, 0)
    for ex in questions:
        schema = by_db[ex["db_id"]]
        gold = sql_links(ex["SQL"], schema)
        pairs = {(t, c) for t, cols in gold.items() for c in cols}
        quoted += any(not _PLAIN.match(c) for _, c in pairs)
        special += any(not _WORDS_AND_SPACES.match(c) for _, c in pairs)
        survived = dict.fromkeys(STAGES, True)
        for style in STYLES:
            links = read_links(extract, schema, links_answer(gold, style))
            got = {(t, c) for t, cols in links.items() for c in cols}
            question = f"{ex['question']} {ex.get('evidence') or ''}"
            checks = {
                "extraction": got,
                "columns_view": shown(schema, "columns", links),
                "tables_view": shown(schema, "tables", links),
                "narrowing": narrowed(schema, question, links),
                "links_text": {
                    (t, c)
                    for t, cols in read_links(extract, schema, "Schema_links: " + schema_links_text(schema, links)).items()
                    for c in cols
                },
            }
            for stage, kept in checks.items():
                survived[stage] &= pairs <= kept
            by_style[style] += all(pairs <= kept for kept in checks.values())
        for stage in STAGES:
            counts[stage] += survived[stage]
        complete += all(survived.values())
    print(json.dumps({
        "queries": len(questions),
        "queries_with_quoted_columns": quoted,
        "queries_with_bracket_or_dash_columns": special,
        "all_survive": complete,
        **{f"{stage}_survive": n for stage, n in counts.items()},
        "all_survive_by_style": by_style,
        "parsing": args.parsing or "sqlchorus.tools.models.parsing",
    }))


if __name__ == "__main__":
    main()
