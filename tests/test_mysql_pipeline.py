"""The pipeline speaks MySQL: its SQL read in sqlglot's MySQL dialect (LIST's verification, the
fixer's and LIST's same-query test, selection's schema links, hardness and DIN-SQL's class), the
grammar for local models quoting with backticks, the prompts naming MySQL, SQLite's SQL carried
into MySQL's where it means otherwise there; and a question asked through `sqlchorus ask` of a
MariaDB server the test starts, with every generator of the full preset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import spider_db, spider_loader
from servers import mariadb_of_a_test
from sqlchorus import prompts
from sqlchorus.runs.databases import database_ids
from sqlchorus.tools.sql.classify import classify_sql
from sqlchorus.tools.models.grammar import matches, schema_grammar
from sqlchorus.tools.sql.hardness import spider_hardness
from sqlchorus.tools.models.parsing import extract_sql
from sqlchorus.tools.engines.catalog import Column, DatabaseSchema, ForeignKey, Table
from sqlchorus.tools.candidates.selection import tables_and_columns
from sqlchorus.tools.sql.errors import DatabaseOpenError
from sqlchorus.tools.sql.transpile import sqlite_names, transpile
from sqlchorus.tools.steps.verify import same_query

BIN = Path(sys.executable).parent / "sqlchorus"
QUESTION = "How many singers are from France?"
READER, SECRET = "pipeline_reader", "pipe-Pw-5r2k"
GENERATORS = {"divide_conquer", "query_plan", "synthetic", "din", "nrep", "list"}

FACTORIES = '''
from sqlchorus.testing import oracle_model

GOLD = {"How many singers are from France?": "SELECT count(*) FROM `singer` WHERE `Country` = 'France'"}


def oracle():
    return oracle_model(GOLD.get, name="oracle")
'''

MYSQL_ONLY = "SELECT `Fname` FROM `Student` WHERE `Fname` REGEXP '^L' AND `Age` DIV 2 = 9"
"""MySQL's own spelling (backquoted names, REGEXP, DIV): read as SQLite's it means other things
or nothing."""


def _schema() -> DatabaseSchema:
    return DatabaseSchema("pets", [
        Table("Student", [Column("StuID", "int"), Column("Fname", "varchar(255)"), Column("Age", "int"),
                          Column("rank", "int")]),
        Table("Has_Pet", [Column("StuID", "int"), Column("PetID", "int")],
              foreign_keys=[ForeignKey("StuID", "Student", "StuID")]),
    ])


def test_same_query_schema_links_hardness_and_class_read_mysql():
    assert same_query(MYSQL_ONLY, MYSQL_ONLY.replace("SELECT", "select").replace(" WHERE ", "\nwhere  ") + ";", "mysql")
    assert not same_query(MYSQL_ONLY, MYSQL_ONLY.replace("DIV 2", "DIV 3"), "mysql")
    assert tables_and_columns(MYSQL_ONLY, _schema(), "mysql") == {"Student": ["Age", "Fname"]}
    assert spider_hardness(MYSQL_ONLY, "mysql") == "medium"
    assert classify_sql(MYSQL_ONLY, "mysql") == "EASY"


def test_the_grammar_quotes_names_with_backticks():
    grammar = schema_grammar(_schema(), dialect="mysql")
    assert matches(grammar, "SELECT Fname, `rank` FROM Student WHERE Age > 20")
    assert matches(grammar, "SELECT fname FROM Student")  # columns match in any case
    assert not matches(grammar, "SELECT Fname FROM student")  # tables only as the schema spells them
    assert not matches(grammar, 'SELECT "rank" FROM Student')  # a string in MySQL, not a column
    assert not matches(grammar, "SELECT rank FROM Student")  # a reserved word there


def test_a_query_ending_in_a_backquoted_name_is_read_whole():
    assert extract_sql("Result:\n```sql\nSELECT * FROM `singer` ORDER BY `rank`\n```") == \
        "SELECT * FROM `singer` ORDER BY `rank`"
    assert extract_sql("SQL: `SELECT `Name` FROM `singer``") == "SELECT `Name` FROM `singer`"
    # MySQL's own syntax, which SQLite's reading does not take, is still a query.
    assert extract_sql("Final Answer: SELECT GROUP_CONCAT(`Name` SEPARATOR ', ') FROM `singer`") == \
        "SELECT GROUP_CONCAT(`Name` SEPARATOR ', ') FROM `singer`"


def test_the_prompts_name_mysql_and_its_quoting():
    text = prompts.for_dialect(prompts.load("generate_divide_conquer"), "mysql")
    assert "SQLite" not in text and "use only MySQL functions" in text and "backticks" in text
    assert "STRFTIME" not in text and "DATE_FORMAT" in text


def test_sqlite_sql_is_carried_into_mysql_meaning_what_it_meant(spider):
    names = sqlite_names(spider("concert_singer"))
    sql = transpile("SELECT avg(age), count(*) / 2 FROM singer AS T1 WHERE t1.name LIKE '%a%' AND "
                    "t1.singer_id IN (SELECT singer_id FROM singer_in_concert LIMIT 3)", "mysql", names)
    assert "AVG(CAST(`Age` AS DOUBLE))" in sql  # not a decimal of four places
    assert "COUNT(*) DIV 2" in sql  # SQLite divides integers as integers
    assert "T1.`Name`" in sql and "t1." not in sql  # a table alias is case-sensitive there
    assert "LOWER(T1.`Name`) LIKE LOWER('%a%')" in sql  # SQLite's LIKE ignores case
    assert "IN (SELECT * FROM (SELECT" in sql  # MySQL refuses LIMIT in an IN subquery
    # Few-shot examples are carried idiomatically: quotes only where MySQL needs them.
    assert transpile("SELECT name FROM singer WHERE age / 2 > 10", "mysql", names, idiomatic=True) == \
        "SELECT name FROM singer WHERE age DIV 2 > 10"


def test_an_example_plan_is_sqlites_plan_written_in_mysqls_sql():
    from sqlchorus.tools.engines.query_plan import plan_for_schema

    ddl = "CREATE TABLE visit (visit_id INTEGER PRIMARY KEY, visit_date TEXT, fee REAL);"
    sql = "SELECT count(*) FROM visit WHERE strftime('%Y', visit_date) = '2021' AND fee > 100"
    plan = plan_for_schema(ddl, sql, written=transpile(sql, "mysql", idiomatic=True), dialect="mysql")
    assert "Keep only rows where DATE_FORMAT(visit_date, '%Y') = '2021'" in plan
    assert "STRFTIME" not in plan.upper() and "Read the visit table row by row" in plan


def test_a_mysql_database_is_known_by_its_name_and_must_have_one(tmp_path, monkeypatch):
    ids = database_ids(["mysql://me@db.example/shop", "mariadb://me@db.example:3307/my%20db"])
    assert list(ids) == ["shop", "my db"]
    monkeypatch.setenv("HOME", str(tmp_path))  # no option file to name a database
    with pytest.raises(DatabaseOpenError, match="names no database"):
        database_ids(["mysql://me@db.example/"])
    (tmp_path / ".my.cnf").write_text("[client]\ndatabase = from_file\n", encoding="utf-8")
    assert list(database_ids(["mysql://me@db.example/"])) == ["from_file"]


# -- on a server ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def maria():
    for name in ("concert_singer", "pets_1"):
        if not spider_db(name).exists():
            pytest.skip(f"Spider database {name} not found")
    for server in mariadb_of_a_test():
        for name in ("concert_singer", "pets_1"):
            spider_loader().load_database(spider_db(name), mysql_url=server.url(""))
        server.reader("concert_singer", READER, SECRET)
        server.reader("pets_1", READER + "2", SECRET)
        yield server


def _checksums(server, database: str) -> dict[str, object]:
    tables = [r[0] for r in server.admin_sql(
        f"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{database}' ORDER BY 1")[0]]
    return {t: server.admin_sql(f"CHECKSUM TABLE `{database}`.`{t}` EXTENDED")[0][0][1] for t in tables}


@pytest.mark.slow
def test_list_verifies_step_by_step_on_mariadb(maria):
    from sqlchorus.tools.engines.mysql import MySQLDatabase
    from sqlchorus.tools.schema.introspect import introspect
    from sqlchorus.tools.steps.verify import verify_sql

    url = f"mysql://{READER}2:{SECRET}@127.0.0.1:{maria.port}/pets_1"
    with MySQLDatabase(url) as db:
        schema = introspect(db)
        joined = ("SELECT T1.`Fname` FROM `Student` AS T1 JOIN `Has_Pet` AS T2 ON T1.`StuID` = T2.`StuID` "
                  "JOIN `Pets` AS T3 ON T2.`PetID` = T3.`PetID` WHERE T3.`PetType` = 'dog'")
        good = verify_sql(joined, db, schema=schema)
        assert good["ok"] and good["sub_queries"] >= 3, good
        cross = verify_sql("SELECT T1.`Fname` FROM `Student` AS T1 JOIN `Pets` AS T2 ON 1 = 1", db, schema=schema)
        assert cross["kind"] in ("cross_join", "growth"), cross  # the join's rows were counted
        assert "34" in cross["error"] and "3" in cross["error"], cross
        own = verify_sql("SELECT `Fname` FROM `Student` WHERE `Fname` REGEXP '^L' AND `Age` DIV 2 = 9", db,
                         schema=schema)
        assert own["ok"], own


@pytest.mark.slow
def test_every_generator_answers_over_mariadb_through_the_cli(maria, tmp_path):
    (tmp_path / "mysql_pipeline_factories.py").write_text(FACTORIES, encoding="utf-8")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MYSQL_PWD", "SQLCHORUS_ALLOW_WRITABLE_ROLE")}
    env.update(PYTHONPATH=str(tmp_path), HOME=str(home), NO_COLOR="1",
               SQLCHORUS_VALUE_CACHE_DIR=str(tmp_path / "values"))
    before = _checksums(maria, "concert_singer")
    out = subprocess.run(
        [str(BIN), "ask", QUESTION, "--db", f"mysql://{READER}:{SECRET}@127.0.0.1:{maria.port}/concert_singer",
         "--model", "python:mysql_pipeline_factories:oracle", "--preset", "full", "--no-cache", "--json",
         "--trace-dir", str(tmp_path / "traces")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == "" and SECRET not in out.stdout
    answer = json.loads(out.stdout)
    assert answer["rows"] == [[4]] and answer["errors"] == []
    by_generator = {c["generator"]: c for c in answer["candidates"]}
    assert set(by_generator) == GENERATORS
    assert all(c["status"] == "ok" for c in answer["candidates"]), answer["candidates"]
    steps = by_generator["list"]["meta"]["list"]
    assert steps["complete"] and steps["steps_verified"] >= 2  # LIST's steps ran on the server
    assert _checksums(maria, "concert_singer") == before
