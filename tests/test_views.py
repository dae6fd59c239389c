"""Schema views: golden files per format and level, determinism, shuffling, link resolution.

Golden files: ``tests/fixtures/views/<fmt>-<level>.txt`` render the ``concerts`` fixture database
with the links and values below; ``tests/fixtures/views/<db>/<fmt>.txt`` render other fixture
databases in full. Regenerate them after an intended change with::

    SQLCHORUS_REGEN=1 .venv/bin/python -m pytest tests/test_views.py
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest
from test_schema import (
    BIRD_DBS,
    FIXTURES,
    build_fixture_db,
    check_golden,
    data_dir,
    load_tables_json,
    structure,
)

from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.engines.catalog import DatabaseSchema
from sqlchorus.tools.schema.introspect import introspect, schema_only_database
from sqlchorus.tools.schema.views import LEVELS, SCHEMA_FORMATS, render_view, resolve_links

LINKS = {
    "Concert": ["YEAR", "bogus"],
    "singer": ["name"],
    "ticket": ["price"],
    '"order details"': [],
    "nope": ["x"],
}
VALUES = {"Singer.Country": ["France"], "concert.venue": ["Olympia"]}


def fixture_schema(name: str, folder: Path) -> DatabaseSchema:
    folder.mkdir(parents=True, exist_ok=True)
    with GuardedDatabase(build_fixture_db(name, folder)) as db:
        return introspect(db)


@pytest.fixture(scope="module")
def concerts(tmp_path_factory) -> DatabaseSchema:
    return fixture_schema("concerts", tmp_path_factory.mktemp("concerts"))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("fmt", SCHEMA_FORMATS)
def test_golden_views(concerts, fmt, level):
    text = render_view(concerts, fmt, level=level, links=LINKS, values=VALUES)
    check_golden(FIXTURES / f"{fmt}-{level}.txt", text + "\n")


@pytest.mark.parametrize("fmt", SCHEMA_FORMATS)
@pytest.mark.parametrize("name", ["quoting", "empty"])
def test_golden_views_of_other_databases(name, fmt, tmp_path):
    schema = fixture_schema(name, tmp_path)
    check_golden(FIXTURES / name / f"{fmt}.txt", render_view(schema, fmt) + "\n")


def test_shuffled_golden(concerts):
    text = render_view(concerts, "m-schema", shuffle_seed=7)
    check_golden(FIXTURES / "m-schema-full-shuffle7.txt", text + "\n")


@pytest.mark.parametrize("fmt", SCHEMA_FORMATS)
def test_rendering_is_deterministic(concerts, fmt):
    rebuilt = DatabaseSchema.from_dict(json.loads(json.dumps(concerts.to_dict())))
    first = render_view(concerts, fmt, level="columns", links=LINKS, values=VALUES)
    assert render_view(rebuilt, fmt, level="columns", links=LINKS, values=VALUES) == first
    for seed in (0, 1, 2):
        a = render_view(concerts, fmt, shuffle_seed=seed)
        assert a == render_view(rebuilt, fmt, shuffle_seed=seed)


@pytest.mark.parametrize("fmt", ["ddl", "m-schema", "mac-schema", "markdown"])
def test_shuffle_permutes_tables_and_columns(concerts, fmt):
    plain = render_view(concerts, fmt)
    outputs = [render_view(concerts, fmt, shuffle_seed=seed) for seed in range(6)]
    assert any(text != plain for text in outputs)
    for text in outputs:
        # Same lines in another order, up to the commas between items (and DDL comments,
        # which follow the comma).
        assert sorted(_items(text)) == sorted(_items(plain))


def _items(text: str) -> list[str]:
    return [line.split(" -- ")[0].rstrip(",") for line in text.splitlines()]


def test_shuffle_keeps_each_table_whole(concerts):
    data = json.loads(render_view(concerts, "json", shuffle_seed=3))
    plain = json.loads(render_view(concerts, "json"))
    assert set(data["tables"]) == set(plain["tables"])
    for name, table in data["tables"].items():
        assert sorted(table["columns"]) == sorted(plain["tables"][name]["columns"])
        columns = plain["tables"][name]["columns"]
        assert table["columns"] == {k: columns[k] for k in table["columns"]}


@pytest.mark.parametrize("level", ["tables", "columns"])
@pytest.mark.parametrize("links", [None, {}, {"nope": ["x"]}])
def test_filtered_level_without_links_is_the_full_schema(concerts, level, links):
    for fmt in SCHEMA_FORMATS:
        assert render_view(concerts, fmt, level=level, links=links) == render_view(concerts, fmt)


def test_resolve_links_cases(concerts):
    cases = json.loads((FIXTURES / "links.json").read_text(encoding="utf-8"))
    for case in cases:
        assert resolve_links(concerts, case["links"]) == case["expected"], case["why"]


def test_sample_values_option(concerts):
    assert "Examples" not in render_view(concerts, "m-schema", sample_values=0)
    one = render_view(concerts, "m-schema", sample_values=1)
    assert "(singer_id:INTEGER, Primary Key, Examples: [1])" in one


def test_unknown_format_or_level(concerts):
    with pytest.raises(ValueError, match="schema format"):
        render_view(concerts, "yaml")
    with pytest.raises(ValueError, match="schema level"):
        render_view(concerts, "ddl", level="rows")
    assert render_view(concerts, "M_Schema") == render_view(concerts, "m-schema")


@pytest.mark.parametrize("name", ["concerts", "quoting"])
def test_ddl_view_recreates_the_schema(name, tmp_path):
    schema = fixture_schema(name, tmp_path / "src")
    _assert_ddl_round_trip(schema, tmp_path)


@pytest.mark.parametrize("db_id", ["concert_singer", "world_1", "car_1"])
def test_ddl_view_of_spider_databases_recreates_the_schema(db_id, tmp_path):
    path = data_dir() / "spider" / "database" / db_id / f"{db_id}.sqlite"
    if not path.exists():
        pytest.skip(f"{path} not found")
    with GuardedDatabase(path) as db:
        schema = introspect(db)
    _assert_ddl_round_trip(schema, tmp_path)


def _assert_ddl_round_trip(schema: DatabaseSchema, tmp_path: Path) -> None:
    path = tmp_path / "copy.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(render_view(schema, "ddl"))
    conn.close()
    with GuardedDatabase(path) as db:
        copy = introspect(db)
    assert structure(copy) == structure(schema)
    assert [[c.type.upper() for c in t.columns] for t in copy.tables] == [
        [c.type.upper() for c in t.columns] for t in schema.tables
    ]


def test_json_view_matches_the_schema(concerts):
    data = json.loads(render_view(concerts, "json", values=VALUES))
    assert data["database"] == "concerts"
    assert list(data["tables"]) == [t.name for t in concerts.tables]
    for table in concerts.tables:
        entry = data["tables"][table.name]
        assert list(entry["columns"]) == [c.name for c in table.columns]
        assert entry["keys"]["primary_key"] == table.primary_key
        assert [tuple(fk.values()) for fk in entry["foreign_keys"]] == [
            (fk.column, fk.ref_table, fk.ref_column) for fk in table.foreign_keys
        ]
    assert data["tables"]["singer"]["columns"]["country"]["matched_values"] == ["France"]


@pytest.mark.parametrize("db_id", BIRD_DBS)
def test_bird_views_show_every_column(db_id, tmp_path):
    entry = load_tables_json("bird/dev_tables.json")[db_id]
    folder = data_dir() / "bird" / "dev_databases" / db_id / "database_description"
    with GuardedDatabase(schema_only_database(entry, tmp_path / "db.sqlite")) as db:
        schema = introspect(db, descriptions_dir=folder)
    rng = random.Random(db_id)
    links = {t.name: [c.name for c in rng.sample(t.columns, 1)] for t in schema.tables[:2]}
    for fmt in SCHEMA_FORMATS:
        full = render_view(schema, fmt)
        for table in schema.tables:
            for column in table.columns:
                assert column.name in full
        narrow = render_view(schema, fmt, level="columns", links=links)
        assert len(narrow) < len(full)
        if fmt == "json":
            assert set(json.loads(narrow)["tables"]) == set(links)
