"""The schema grammar: which queries it admits, from fixture files of accepted and rejected SQL."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, spider_db
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.models.grammar import GrammarSyntaxError, matches, parse_grammar, schema_grammar
from sqlchorus.tools.engines.catalog import Column, DatabaseSchema, Table
from sqlchorus.tools.schema.introspect import introspect

CASES = sorted((FIXTURES / "grammar").glob("*.json"))


def _schema(db: str) -> DatabaseSchema:
    if db == "demo":
        from sqlchorus.runs.demo import demo_db_path

        path = demo_db_path()
    else:
        path = spider_db(db.removeprefix("spider:"))
        if not path.exists():
            pytest.skip(f"{path} not found")
    with GuardedDatabase(path) as database:
        return introspect(database, sample_values=0)


def _cases():
    for path in CASES:
        spec = json.loads(path.read_text(encoding="utf-8"))
        for sql in spec["accept"]:
            yield pytest.param(spec["db"], sql, True, id=f"{path.stem}-accept-{sql[:40]}")
        for sql in spec["reject"]:
            yield pytest.param(spec["db"], sql, False, id=f"{path.stem}-reject-{sql[:40]}")


@pytest.mark.parametrize("db,sql,expected", list(_cases()))
def test_grammar_admits_exactly_the_fixture_queries(db, sql, expected):
    assert matches(schema_grammar(_schema(db)), sql) is expected


def test_grammar_is_deterministic_and_quotes_awkward_names():
    schema = DatabaseSchema("odd", [
        Table("order", [Column("group", "TEXT"), Column("unit price", "REAL"), Column('say "hi"', "TEXT")]),
        Table("Lines", [Column("ID", "INTEGER")]),
    ])
    grammar = schema_grammar(schema)
    assert grammar == schema_grammar(schema)
    assert matches(grammar, 'SELECT "group", "unit price" FROM "order"')
    assert matches(grammar, 'SELECT "say ""hi""" FROM "order"')
    assert matches(grammar, "SELECT id FROM lines")
    assert not matches(grammar, "SELECT group FROM order")
    assert not matches(grammar, 'SELECT "unit_price" FROM "order"')


def test_empty_schema_is_refused():
    with pytest.raises(ValueError, match="no tables"):
        schema_grammar(DatabaseSchema("empty", []))


def test_parser_rejects_broken_grammar():
    with pytest.raises(GrammarSyntaxError, match="undefined rule"):
        parse_grammar('root ::= "a" missing\n')
    with pytest.raises(GrammarSyntaxError, match="no root"):
        parse_grammar('start ::= "a"\n')


@pytest.mark.slow
def test_every_spider_schema_gives_grammars_the_local_runtime_accepts(spider):
    """Both grammars of every Spider schema are accepted by llama.cpp: each constrains a
    two-token answer of the local model without error."""
    import glob

    from langchain_core.messages import HumanMessage

    from sqlchorus.core.local_model import LocalModelError, local_runtime
    from sqlchorus.core.models import resolve_model
    from sqlchorus.tools.models.grammar import scoped_grammar

    if local_runtime() is None:
        pytest.skip("no local runtime is installed (pip install 'sqlchorus[local]')")
    try:
        model = resolve_model("local:smollm2", max_tokens=2)
    except Exception as e:  # the model file is missing
        pytest.skip(str(e))
    paths = sorted(glob.glob(str(spider("concert_singer").parent.parent / "*" / "*.sqlite")))
    assert paths
    try:
        for path in paths:
            with GuardedDatabase(path) as database:
                schema = introspect(database, sample_values=0)
            for grammar in (schema_grammar(schema), scoped_grammar(schema)):
                parse_grammar(grammar)
                try:
                    reply = model.invoke([HumanMessage("Write a query.")], grammar=grammar)
                except LocalModelError as e:
                    pytest.fail(f"{path}: llama.cpp refused the grammar: {e}")
                assert reply.content.upper().startswith("S"), (path, reply.content)
    finally:
        model.close()


def test_the_scoped_grammar_admits_only_columns_of_the_tables_in_from():
    from sqlchorus.runs.demo import demo_db_path
    from sqlchorus.tools.models.grammar import scoped_grammar

    with GuardedDatabase(demo_db_path()) as db:
        schema = introspect(db, sample_values=0)
    grammar = scoped_grammar(schema)
    admitted = [
        "SELECT COUNT(*) FROM customers",
        "SELECT first_name, last_name FROM customers WHERE email IS NULL",
        "SELECT name, unit_price FROM products ORDER BY unit_price DESC LIMIT 5",
        "SELECT COUNT(*) FROM orders JOIN customers ON orders.customer_id = customers.customer_id "
        "WHERE customers.city = 'Boston'",
        "SELECT status, COUNT(*) FROM orders GROUP BY status HAVING COUNT(*) > 10;",
    ]
    refused = [
        "SELECT unit_price FROM customers",  # a column of another table
        "SELECT customers.city FROM orders JOIN products ON orders.order_id = products.product_id",  # no such key
        "SELECT * FROM customers WHERE customer_id IN (1, 2)",  # literal lists are left out
        "SELECT * FROM customers; DROP TABLE customers",
    ]
    assert all(matches(grammar, q) for q in admitted)
    assert not any(matches(grammar, q) for q in refused)
    only_orders = scoped_grammar(schema, ["orders"])
    assert matches(only_orders, "SELECT COUNT(*) FROM orders")
    assert not matches(only_orders, "SELECT COUNT(*) FROM customers")


SPIDER_CASE = DatabaseSchema("concert", [
    Table("singer", [Column("Singer_ID", "int"), Column("Name", "text"), Column("Country", "text"),
                     Column("user", "text")]),
])


@pytest.mark.parametrize("sql,sqlite,postgres", [
    # SQLite and DuckDB: a plain name bare, in the schema's spelling or lower case.
    ('SELECT "Name" FROM singer WHERE "Country" = \'France\'', False, True),
    ("SELECT Name FROM singer WHERE Country = 'France'", True, False),  # PostgreSQL reads name, country
    ("SELECT name FROM singer", True, False),
    ('SELECT "user" FROM singer', False, True),
    ("SELECT user FROM singer", True, False),  # PostgreSQL's user is the role, not the column
    ('SELECT count(*) FROM singer AS T1 WHERE T1."Singer_ID" > 3', False, True),
    ("SELECT count(*) FROM singer AS T1 WHERE T1.singer_id > 3", True, False),
])
def test_each_dialect_admits_the_names_it_would_resolve(sql, sqlite, postgres):
    assert matches(schema_grammar(SPIDER_CASE), sql) is sqlite
    assert matches(schema_grammar(SPIDER_CASE, dialect="duckdb"), sql) is sqlite  # case-insensitive too
    assert matches(schema_grammar(SPIDER_CASE, dialect="postgres"), sql) is postgres
