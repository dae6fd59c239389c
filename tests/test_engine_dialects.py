"""The pipeline reads each engine's SQL in that engine's dialect: LIST's step-wise verification
(decomposition, join counts), the same-query test of the fixer and LIST, and selection's schema
links; checked on DuckDB in process and on a PostgreSQL server of the test's own."""

from __future__ import annotations

import pytest

from conftest import spider_db, spider_loader
from servers import postgres_of_a_test
from sqlchorus.tools.engines.duckdb import DuckDatabase
from sqlchorus.tools.engines.postgres import PostgresDatabase
from sqlchorus.tools.schema.introspect import introspect
from sqlchorus.tools.candidates.selection import tables_and_columns
from sqlchorus.tools.steps.verify import same_query, verify_sql

JOINED = ('SELECT T1."Fname" FROM "Student" AS T1 JOIN "Has_Pet" AS T2 ON T1."StuID" = T2."StuID" '
          'JOIN "Pets" AS T3 ON T2."PetID" = T3."PetID" WHERE T3."PetType" = \'dog\'')
CROSS = 'SELECT T1."Fname" FROM "Student" AS T1 JOIN "Pets" AS T2 ON 1 = 1'
"""Every student paired with every pet: 34 x 3 rows, a join without a condition."""


def _pets() -> str:
    path = spider_db("pets_1")
    if not path.exists():
        pytest.skip("Spider database pets_1 is not there")
    return path


@pytest.fixture(scope="module")
def duck(tmp_path_factory):
    target = tmp_path_factory.mktemp("duck") / "pets_1.duckdb"
    spider_loader().load_database(_pets(), duckdb_path=target)
    with DuckDatabase(target) as db:
        yield db


@pytest.fixture(scope="module")
def postgres():
    yield from postgres_of_a_test()


@pytest.fixture(scope="module")
def pg(postgres):
    spider_loader().load_database(_pets(), postgres_url=postgres.url())
    with PostgresDatabase(postgres.url("pets_1"), allow_writable_role=True) as db:
        yield db


def _verify_joins(db) -> None:
    schema = introspect(db)
    good = verify_sql(JOINED, db, schema=schema)
    assert good["ok"] and good["sub_queries"] >= 3, good
    cross = verify_sql(CROSS, db, schema=schema)
    assert cross["kind"] in ("cross_join", "growth"), cross  # the join's rows were counted
    assert "34" in cross["error"] and "3" in cross["error"], cross


def test_list_verifies_step_by_step_on_duckdb(duck):
    _verify_joins(duck)


@pytest.mark.slow
def test_list_verifies_step_by_step_on_postgresql(pg):
    _verify_joins(pg)
    # PostgreSQL's own syntax decomposes and runs step by step; read as SQLite it does not parse.
    regex = """SELECT "Fname" FROM "Student" WHERE "Fname" ~ '^L' AND "Age" = ANY(ARRAY[18, 19, 20])"""
    verdict = verify_sql(regex, pg, schema=introspect(pg))
    assert verdict["ok"], verdict
    assert not same_query(regex, regex.replace("~", "!~"), "postgres")


def test_same_query_and_schema_links_read_the_dialect():
    pg_sql = """SELECT "Fname" FROM "Student" WHERE "Fname" ~ '^L'"""
    assert same_query(pg_sql, """select  "Fname" from "Student"\nwhere "Fname" ~ '^L';""", "postgres")
    assert tables_and_columns(pg_sql, _schema_of_students(), "postgres") == {"Student": ["Fname"]}
    assert tables_and_columns(pg_sql, _schema_of_students()) == {}  # SQLite's reading fails


def _schema_of_students():
    from sqlchorus.tools.engines.catalog import Column, DatabaseSchema, Table

    return DatabaseSchema("pets", [Table("Student", [Column("StuID", "int"), Column("Fname", "text")])])


def test_hardness_and_class_of_an_engines_sql():
    from sqlchorus.tools.sql.classify import classify_sql
    from sqlchorus.tools.sql.hardness import spider_hardness

    sql = """SELECT "Fname" FROM "Student" WHERE "Fname" ~ '^L' AND "Age" = ANY(ARRAY[18, 19])"""
    assert spider_hardness(sql, "postgres") == "medium"
    with pytest.raises(ValueError):
        spider_hardness(sql)  # not SQLite's
    assert classify_sql(sql, "postgres") == "EASY"
