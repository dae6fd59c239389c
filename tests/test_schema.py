"""Schema introspection and schema-only databases.

Fixture databases are SQL scripts in ``tests/fixtures/views/databases/<name>.sql``; the expected
introspection of each is ``<name>.schema.json`` beside it, and a folder ``<name>/`` beside it,
when present, is copied next to the built database (that is where description files are found).
Regenerate the expected files after an intended change with::

    SQLCHORUS_REGEN=1 .venv/bin/python -m pytest tests/test_schema.py tests/test_views.py
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.engines.catalog import DatabaseSchema
from sqlchorus.tools.schema.introspect import introspect, read_description_csv, schema_only_database, schema_only_ddl

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "views"
DATABASES = FIXTURES / "databases"
REGEN = os.environ.get("SQLCHORUS_REGEN") == "1"
SPIDER_DBS = ("concert_singer", "world_1", "car_1")
BIRD_DBS = (
    "california_schools", "card_games", "codebase_community", "debit_card_specializing",
    "european_football_2", "financial", "formula_1", "student_club", "superhero",
    "thrombosis_prediction", "toxicology",
)


def data_dir() -> Path:
    default = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    return Path(os.environ.get("SQLCHORUS_DATA", default)).resolve()


def build_fixture_db(name: str, folder: Path) -> Path:
    """Run ``<name>.sql`` into ``folder/<name>.sqlite`` and copy its side folder next to it."""
    path = folder / f"{name}.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript((DATABASES / f"{name}.sql").read_text(encoding="utf-8"))
    conn.execute("PRAGMA user_version = 1")  # writes the header even when the script is empty
    conn.commit()
    conn.close()
    side = DATABASES / name
    if side.is_dir():
        for child in side.iterdir():
            shutil.copytree(child, folder / child.name)
    return path


def check_golden(path: Path, text: str) -> None:
    if REGEN:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path.name} is missing; run with SQLCHORUS_REGEN=1 to write it"
    assert text == path.read_text(encoding="utf-8")


def structure(schema: DatabaseSchema) -> dict:
    """Tables, columns, primary keys and foreign keys, lower-cased, for comparisons."""
    return {
        t.name.lower(): {
            "columns": [c.name.lower() for c in t.columns],
            "pk": sorted(c.name.lower() for c in t.columns if c.primary_key),
            "fks": sorted(
                (f.column.lower(), f.ref_table.lower(), f.ref_column.lower())
                for f in t.foreign_keys
            ),
        }
        for t in schema.tables
    }


def tables_json_structure(entry: dict) -> dict:
    tables = entry["table_names_original"]
    columns = entry["column_names_original"]
    out: dict = {
        t.lower(): {"columns": [], "pk": [], "fks": []}
        for t in tables
        if not t.lower().startswith("sqlite_")
    }

    def owner(i: int) -> str:
        return tables[columns[i][0]].lower()

    for t_idx, name in columns:
        if t_idx >= 0 and tables[t_idx].lower() in out:
            out[tables[t_idx].lower()]["columns"].append(name.lower())
    for item in entry["primary_keys"]:
        for i in item if isinstance(item, list) else [item]:
            out[owner(i)]["pk"].append(columns[i][1].lower())
    for a, b in entry["foreign_keys"]:
        fk = (columns[a][1].lower(), owner(b), columns[b][1].lower())
        if fk not in out[owner(a)]["fks"]:
            out[owner(a)]["fks"].append(fk)
    for table in out.values():
        table["pk"].sort()
        table["fks"].sort()
    return out


def load_tables_json(relative: str) -> dict[str, dict]:
    path = data_dir() / relative
    if not path.exists():
        pytest.skip(f"{relative} not found under {data_dir()}")
    with open(path, encoding="utf-8") as f:
        return {entry["db_id"]: entry for entry in json.load(f)}


# -- fixture databases ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.stem for p in DATABASES.glob("*.sql")))
def test_introspection_matches_expected(name, tmp_path):
    path = build_fixture_db(name, tmp_path)
    with GuardedDatabase(path) as db:
        schema = introspect(db)
    text = json.dumps(schema.to_dict(), indent=2, ensure_ascii=False) + "\n"
    check_golden(DATABASES / f"{name}.schema.json", text)
    assert DatabaseSchema.from_dict(json.loads(text)) == schema


def test_explicit_descriptions_dir_and_sample_options(tmp_path):
    (tmp_path / "db").mkdir()
    path = build_fixture_db("concerts", tmp_path / "db")
    moved = tmp_path / "elsewhere"
    shutil.move(str(tmp_path / "db" / "database_description"), moved)
    with GuardedDatabase(path) as db:
        bare = introspect(db, sample_values=0)
        described = introspect(db, descriptions_dir=moved, sample_values=1, max_sample_chars=10)
    singer = bare.table("singer")
    assert all(c.samples == [] and c.description is None for c in singer.columns)
    singer = described.table("SINGER")
    assert singer.column("name").description == "The singer\u2019s stage name"
    assert singer.column("biography").samples == ["Born in Be\u2026"]
    assert all(len(c.samples) <= 1 for c in singer.columns)
    with GuardedDatabase(path) as db, pytest.raises(FileNotFoundError):
        introspect(db, descriptions_dir=tmp_path / "missing")


def test_sqlite_utils_under_the_guard_issues_only_reads(tmp_path):
    """Introspection must not need anything the guard refuses, and must leave the file as is."""
    path = build_fixture_db("concerts", tmp_path)
    before = path.read_bytes()
    with GuardedDatabase(path) as db:
        first = introspect(db)
        second = introspect(db)
    assert first == second
    assert path.read_bytes() == before


# -- benchmark databases ----------------------------------------------------------------------


@pytest.mark.parametrize("db_id", SPIDER_DBS)
def test_spider_introspection_matches_tables_json(db_id):
    entry = load_tables_json("spider/tables.json")[db_id]
    path = data_dir() / "spider" / "database" / db_id / f"{db_id}.sqlite"
    if not path.exists():
        pytest.skip(f"{path} not found")
    with GuardedDatabase(path) as db:
        schema = introspect(db)
        for table in schema.tables:
            count = db.execute(f'SELECT count(*) FROM "{table.name}"').rows[0][0]
            assert table.row_count == count
            for column in table.columns:
                assert len(column.samples) <= 3
                assert len(set(map(repr, column.samples))) == len(column.samples)
    expected = tables_json_structure(entry)
    got = structure(schema)
    # Spider's tables.json lists only the first column of a compound primary key.
    for name, table in got.items():
        assert set(expected[name].pop("pk")) <= set(table.pop("pk")), name
    assert got == expected


@pytest.mark.parametrize("db_id", BIRD_DBS)
def test_bird_schema_only_database_with_descriptions(db_id, tmp_path):
    entry = load_tables_json("bird/dev_tables.json")[db_id]
    descriptions = data_dir() / "bird" / "dev_databases" / db_id / "database_description"
    path = schema_only_database(entry, tmp_path / f"{db_id}.sqlite")
    with GuardedDatabase(path) as db:
        schema = introspect(db, descriptions_dir=descriptions)
    assert structure(schema) == tables_json_structure(entry)
    assert all(t.row_count == 0 for t in schema.tables)
    # Every non-empty description in the CSV files reached its column.
    for csv_path in sorted(descriptions.glob("*.csv")):
        table = schema.table(csv_path.stem.strip())
        assert table is not None, csv_path.name
        seen = set()
        for row in read_description_csv(csv_path):
            key = row["original_column_name"].strip().lower()
            column = table.column(key)
            if column is None or key in seen:
                continue
            seen.add(key)
            text = row.get("column_description", "").strip()
            assert (column.description or "") == text.replace("\r\n", "\n")


def test_bird_description_spot_checks(tmp_path):
    """Known texts, including ones from cp1252-encoded files, arrive decoded and complete."""
    entries = load_tables_json("bird/dev_tables.json")
    cases = json.loads((FIXTURES / "bird_descriptions.json").read_text(encoding="utf-8"))
    schemas: dict[str, DatabaseSchema] = {}
    for case in cases:
        db_id = case["db"]
        if db_id not in schemas:
            path = schema_only_database(entries[db_id], tmp_path / f"{db_id}.sqlite")
            folder = data_dir() / "bird" / "dev_databases" / db_id / "database_description"
            with GuardedDatabase(path) as db:
                schemas[db_id] = introspect(db, descriptions_dir=folder)
        column = schemas[db_id].table(case["table"]).column(case["column"])
        assert case["contains"] in (getattr(column, case["field"]) or ""), case


@pytest.mark.slow
def test_every_spider_schema_builds_and_introspects(tmp_path):
    entries = load_tables_json("spider/tables.json")
    for db_id, entry in entries.items():
        path = schema_only_database(entry, tmp_path / f"{db_id}.sqlite")
        with GuardedDatabase(path) as db:
            assert structure(introspect(db)) == tables_json_structure(entry), db_id


def test_schema_only_ddl_edge_cases(tmp_path):
    entry = {
        "db_id": "edge",
        "table_names_original": ["order", "Two Words", "ORDER", "sqlite_sequence", "lonely"],
        "column_names_original": [
            [-1, "*"], [0, "id"], [0, "group"], [0, 'we"ird'], [1, "id"], [1, "order id"],
            [1, "ID"], [2, "x"], [3, "name"],
        ],
        "column_types": ["text", "number", "text", "others", "number", "number", "text", "text",
                         "text"],
        "primary_keys": [[4, 5], 1],
        "foreign_keys": [[5, 1], [5, 1], [6, 1]],
    }
    statements = schema_only_ddl(entry)
    assert len(statements) == 2  # the duplicate "ORDER", sqlite_sequence and "lonely" are left out
    path = schema_only_database(entry, tmp_path / "edge.sqlite")
    schema_only_database(entry, path)  # an existing file is replaced
    with GuardedDatabase(path) as db:
        schema = introspect(db)
    assert structure(schema) == {
        "order": {"columns": ["id", "group", 'we"ird'], "pk": ["id"], "fks": []},
        "two words": {
            "columns": ["id", "order id"],
            "pk": ["id", "order id"],
            "fks": [("id", "order", "id"), ("order id", "order", "id")],
        },
    }
    assert schema.table("order").column('we"ird').type == ""


def test_enormous_schema(tmp_path):
    """Hundreds of tables and a table at SQLite's 2,000-column limit still introspect."""
    path = tmp_path / "big.sqlite"
    conn = sqlite3.connect(path)
    for i in range(300):
        conn.execute(
            f"CREATE TABLE t{i} (id INTEGER PRIMARY KEY, name TEXT, "
            f"ref INTEGER REFERENCES t{max(i - 1, 0)} (id))"
        )
        conn.execute(f"INSERT INTO t{i} VALUES (1, 'n{i}', 1)")
    conn.execute("CREATE TABLE wide (" + ", ".join(f"c{i} INTEGER" for i in range(1999)) + ")")
    conn.execute("INSERT INTO wide VALUES (" + ", ".join(str(i) for i in range(1999)) + ")")
    conn.commit()
    conn.close()
    with GuardedDatabase(path) as db:
        schema = introspect(db)
    assert len(schema.tables) == 301
    assert sum(len(t.columns) for t in schema.tables) == 300 * 3 + 1999
    wide = schema.table("wide")
    assert [c.samples for c in wide.columns[:3]] == [[0], [1], [2]]
    assert schema.table("t7").foreign_keys[0].ref_table == "t6"
