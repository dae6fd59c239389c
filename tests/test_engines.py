"""One way to name a database, and questions answered over DuckDB (in process) and PostgreSQL (a
server of the test's own) through the same pipeline: the trace and the checkpoints say which
engine and which database, never a password, and the database is as it was."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from conftest import spider_loader
from servers import allow_writable_role, postgres_of_a_test
from sqlchorus import Session
from sqlchorus.config.settings import Settings
from sqlchorus.core.trace_file import read_spans
from sqlchorus.runs.databases import database_ids
from sqlchorus.testing import oracle_model
from sqlchorus.tools.engines.opening import database_key, display_name, duckdb_path, engine_of

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "How many singers are from France?"
GOLD = {QUESTION: "SELECT count(*) FROM singer WHERE country = 'France'"}
GOLD_POSTGRES = {QUESTION: """SELECT count(*) FROM singer WHERE "Country" = 'France'"""}
"""PostgreSQL folds unquoted names to lower case: Spider's capitalised columns are quoted."""
SECRET = "s3cret-pass"



@pytest.mark.parametrize("name,engine", [
    ("shop.sqlite", "sqlite"), ("/data/shop.db", "sqlite"), ("shop.duckdb", "duckdb"), ("x.DDB", "duckdb"),
    ("duckdb:///data/shop.bin", "duckdb"), ("postgresql://me@db.example/shop", "postgresql"),
    ("postgres://me@db.example:5433/shop", "postgresql"),
])
def test_a_database_is_named_the_same_way_everywhere(name, engine):
    assert engine_of(name) == engine


def test_a_name_shows_no_password_and_files_resolve():
    url = f"postgresql://me:{SECRET}@db.example:5432/shop"
    assert SECRET not in display_name(url) and SECRET not in database_key(url)
    assert "db.example" in display_name(url)
    assert duckdb_path("duckdb:///data/shop.bin") == Path("/data/shop.bin")
    ids = database_ids([url, "/data/other.duckdb", "/data/third.sqlite"])
    assert list(ids) == ["shop", "other", "third"] and ids["shop"] == url
    # A URL that leaves the host to libpq keeps its empty authority when shown.
    assert display_name("postgresql:///shop") == "postgresql:///shop"
    assert display_name(f"postgresql://me:{SECRET}@/shop?host=/run/pg") == "postgresql://me@/shop?host=/run/pg"


def _ask(db: str, folder: Path, gold: dict[str, str] = GOLD) -> tuple:
    settings = Settings(model=oracle_model(gold.get), trace_dir=str(folder / "traces"),
                        checkpoints=str(folder / "checkpoints.sqlite"), value_cache_dir=str(folder / "values"),
                        cache=False)
    with Session(settings) as session:
        result = session.ask(QUESTION, db)
    spans = read_spans(result.trace_path)
    return result, spans


def _everything_written(folder: Path) -> str:
    return "".join(p.read_bytes().decode("utf-8", "replace") for p in folder.rglob("*") if p.is_file())


def test_a_question_over_duckdb(spider, tmp_path):
    spider_loader().load_database(spider("concert_singer"), duckdb_path=tmp_path / "db")
    db = tmp_path / "db" / "concert_singer.duckdb"
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    result, spans = _ask(str(db), tmp_path / "run")
    assert result.ok and result.rows == [[4]], result.error
    root = next(s for s in spans if not s.get("parent_id"))
    assert root["attributes"]["db.system.name"] == "duckdb"
    assert root["attributes"]["sqlchorus.database"] == str(db.resolve())
    statements = [s for s in spans if s["name"] == "sql"]
    assert statements and all(s["attributes"]["db.system.name"] == "duckdb" for s in statements)
    assert any(p.suffix == ".sqlite" for p in (tmp_path / "run" / "values").iterdir())  # its value index
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in db.parent.iterdir()) == ["concert_singer.duckdb"]


@pytest.fixture(scope="module")
def postgres():
    # The test server's role is its superuser: let open, as an administrator would.
    with allow_writable_role():
        yield from postgres_of_a_test()


@pytest.mark.slow
def test_a_question_over_postgresql_names_it_without_its_password(spider, postgres, tmp_path):
    spider_loader().load_database(spider("concert_singer"), postgres_url=postgres.url())
    # The server trusts local users: the password is taken and ignored, and must show nowhere.
    url = postgres.url("concert_singer").replace("sqlchorus@", f"sqlchorus:{SECRET}@")
    result, spans = _ask(url, tmp_path / "run", GOLD_POSTGRES)
    assert result.ok and result.rows == [[4]], result.error
    root = next(s for s in spans if not s.get("parent_id"))
    assert root["attributes"]["db.system.name"] == "postgresql"
    assert root["attributes"]["sqlchorus.database"] == postgres.url("concert_singer")
    assert SECRET not in _everything_written(tmp_path / "run")
    assert SECRET not in json.dumps(result.to_dict(), default=str)
