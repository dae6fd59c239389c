"""Reading models' answers: SQL, lists and schema links, from fixture files of answer/expected pairs."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, Pair, load_pairs
from sqlchorus.tools.models.parsing import extract_list, extract_schema_links, extract_sql, schema_links_as_written

# A case without an expected part expects None: the answer holds nothing to read.
SQL = load_pairs(FIXTURES / "parsing" / "extract_sql.txt")
LISTS = load_pairs(FIXTURES / "parsing" / "extract_list.txt")
LINKS = load_pairs(FIXTURES / "parsing" / "extract_schema_links.txt")
WRITTEN = load_pairs(FIXTURES / "parsing" / "schema_links_as_written.txt")


def ids(pairs: list[Pair]) -> list[str]:
    return [p.name for p in pairs]


def from_json(expected: str | None):
    return None if expected is None else json.loads(expected)


@pytest.mark.parametrize("pair", SQL, ids=ids(SQL))
def test_extract_sql(pair: Pair):
    assert extract_sql(pair.input) == pair.expected


@pytest.mark.parametrize("pair", LISTS, ids=ids(LISTS))
def test_extract_list(pair: Pair):
    assert extract_list(pair.input) == from_json(pair.expected)


@pytest.mark.parametrize("pair", LINKS, ids=ids(LINKS))
def test_extract_schema_links(pair: Pair):
    got = extract_schema_links(pair.input)
    assert (None if got is None else [list(p) for p in got]) == from_json(pair.expected)


@pytest.mark.parametrize("pair", WRITTEN, ids=ids(WRITTEN))
def test_schema_links_as_written(pair: Pair):
    assert schema_links_as_written(pair.input) == pair.expected
