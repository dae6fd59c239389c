"""BIRD column names with spaces, brackets and dashes (``Free Meal Count (K-12)``) through every
schema view: read from a linking answer however it quotes them, then kept by the column- and
table-filtered views, generate_synthetic's examples over the linked columns, a narrowed schema
and DIN-SQL's links text. Schema only: BIRD's databases are not needed."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_schema import data_dir, load_tables_json

from conftest import run_generator
from sqlchorus.config.settings import ROLES, Settings
from sqlchorus.core.context import Context
from sqlchorus.nodes.generate_synthetic import generate_synthetic
from sqlchorus.nodes.link_schema import link_schema
from sqlchorus.testing import ScriptedChatModel, prompt_text
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.examples.fewshot import sql_links
from sqlchorus.tools.models.parsing import extract_schema_links
from sqlchorus.tools.engines.catalog import DatabaseSchema
from sqlchorus.tools.schema.introspect import introspect, schema_only_database
from sqlchorus.tools.schema.links import schema_links_text
from sqlchorus.tools.schema.narrow import column_count, narrow_schema, rank_columns
from sqlchorus.tools.schema.views import SCHEMA_FORMATS, render_view, resolve_links

COLUMN = "Free Meal Count (K-12)"
NOT_LINKED = "Free Meal Count (Ages 5-17)"  # a column of the same table the gold query does not use
STYLES = {
    "bare": lambda name: name,
    "backticks": lambda name: f"`{name}`",
    "double quotes": lambda name: f'"{name}"',
    "brackets": lambda name: f"[{name}]",
}


@pytest.fixture(scope="module")
def schools(tmp_path_factory) -> tuple[Path, DatabaseSchema]:
    entry = load_tables_json("bird/dev_tables.json")["california_schools"]
    path = schema_only_database(entry, tmp_path_factory.mktemp("bird") / "california_schools.sqlite")
    with GuardedDatabase(path) as db:
        return path, introspect(db)


@pytest.fixture(scope="module")
def gold(schools) -> dict:
    path = data_dir() / "bird" / "dev.json"
    if not path.exists():
        pytest.skip(f"bird/dev.json not found under {data_dir()}")
    questions = json.loads(path.read_text(encoding="utf-8"))
    ex = next(q for q in questions if q["db_id"] == "california_schools" and f"`{COLUMN}`" in q["SQL"])
    links = sql_links(ex["SQL"], schools[1])
    assert COLUMN in links["frpm"] and NOT_LINKED not in links["frpm"]
    return {**ex, "links": links}


def linking_answer(links: dict[str, list[str]], style: str) -> str:
    quote = STYLES[style]
    items = [f"{quote(t)}.{quote(c)}" for t, cols in links.items() for c in cols]
    return "Let's think step by step.\nSo the Schema_links are:\nSchema_links: [" + ",".join(items) + ",'Alameda']"


def run_link_schema(path: Path, answer: str, question: str, level: str) -> dict:
    settings = Settings(trace_dir=None, cache=False, linking="model", schema_level=level)
    model = ScriptedChatModel(lambda messages: answer)
    with GuardedDatabase(path) as db:
        context = Context(db=db, models={r: model for r in ROLES}, settings=settings, schema=introspect(db))
        state = {"question": question, "evidence": "", "values": {}}
        return link_schema(state, SimpleNamespace(context=context))


@pytest.mark.parametrize("level", ["columns", "tables"])
@pytest.mark.parametrize("style", STYLES)
def test_link_schema_keeps_the_column_in_its_view(schools, gold, style, level):
    update = run_link_schema(schools[0], linking_answer(gold["links"], style), gold["question"], level)
    assert update["links"] == gold["links"]
    assert COLUMN in update["schema_view"]
    assert (NOT_LINKED in update["schema_view"]) == (level == "tables")


@pytest.mark.parametrize("level", ["columns", "tables"])
@pytest.mark.parametrize("fmt", SCHEMA_FORMATS)
def test_every_filtered_view_shows_the_column(schools, gold, fmt, level):
    text = render_view(schools[1], fmt, level=level, links=gold["links"])
    assert COLUMN in text and "satscores" not in text
    if fmt == "json":
        assert COLUMN in json.loads(text)["tables"]["frpm"]["columns"]


def test_quoted_table_and_column_resolve_as_one_link(schools):
    raw = {"frpm": [f"`frpm`.`{COLUMN}`", '"frpm"."Enrollment (K-12)"', "frpm.County Name", "[School Name]"]}
    assert resolve_links(schools[1], raw) == {
        "frpm": ["County Name", "School Name", "Enrollment (K-12)", COLUMN],
    }


def test_synthetic_examples_over_the_linked_columns_see_the_column(schools, gold):
    seen = []

    def respond(messages):
        seen.append(prompt_text(messages))
        return "**Final Optimized SQL Query:**\nSELECT 1"

    run_generator(
        generate_synthetic, schools[0], ScriptedChatModel(respond), question=gold["question"],
        links=gold["links"], synthetic_feature_examples=0, synthetic_schema_examples=1,
    )
    target = seen[0].split("###Table creation statements###")[-1]
    assert COLUMN in target and NOT_LINKED not in target


def test_narrowing_keeps_the_linked_column_first(schools, gold):
    schema, links = schools[1], gold["links"]
    ranked = rank_columns(schema, f"{gold['question']} {gold['evidence']}", None, links)
    linked = sum(len(cols) for cols in links.values())
    assert ("frpm", COLUMN) in ranked[:linked]
    narrowing = narrow_schema(schema, ranked, lambda part: column_count(part) <= linked + 1, linked=linked)
    kept = {c.name for t in narrowing.schema.tables if t.name == "frpm" for c in t.columns}
    assert COLUMN in kept and NOT_LINKED not in kept and narrowing.left_out_links == []


def test_din_links_text_reads_back(schools, gold):
    text = schema_links_text(schools[1], gold["links"])
    assert f"frpm.{COLUMN}" in text
    raw: dict[str, list[str]] = {}
    for table, column in extract_schema_links(f"Schema_links: {text}"):
        raw.setdefault(table, []).append(column)
    assert resolve_links(schools[1], raw) == gold["links"]
