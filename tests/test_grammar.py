"""The schema grammar: which queries it admits, from fixture files of accepted and rejected SQL."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, spider_db
from sqlchorus.tools.database import GuardedDatabase
from sqlchorus.tools.grammar import GrammarSyntaxError, matches, parse_grammar, schema_grammar
from sqlchorus.tools.schema import Column, DatabaseSchema, Table, introspect

CASES = sorted((FIXTURES / "grammar").glob("*.json"))


def _schema(db: str) -> DatabaseSchema:
    if db == "demo":
        from sqlchorus.demo import demo_db_path

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


def test_every_spider_schema_gives_a_grammar_llama_cpp_accepts(spider):
    import glob

    llama_cpp = pytest.importorskip("llama_cpp")
    paths = sorted(glob.glob(str(spider("concert_singer").parent.parent / "*" / "*.sqlite")))
    assert paths
    for path in paths:
        with GuardedDatabase(path) as database:
            grammar = schema_grammar(introspect(database, sample_values=0))
        parse_grammar(grammar)
        assert llama_cpp.LlamaGrammar.from_string(grammar, verbose=False) is not None
