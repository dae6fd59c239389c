"""Reading models' answers: SQL, lists and schema links, from fixture files of answer/expected pairs."""

from __future__ import annotations

import json
import re

import pytest

from conftest import FIXTURES
from sqlchorus.tools.parsing import extract_list, extract_schema_links, extract_sql


def load_pairs(name: str) -> list[tuple[str, str, str]]:
    """``(case name, input, expected)`` from ``### name`` / ``--- expected`` blocks."""
    text = (FIXTURES / "parsing" / name).read_text()
    cases = []
    for block in re.split(r"^### ", text, flags=re.M)[1:]:
        title, _, body = block.partition("\n")
        given, _, expected = body.partition("--- expected\n")
        cases.append((title.strip(), given.rstrip("\n"), expected.strip()))
    return cases


def ids(cases):
    return [c[0] for c in cases]


SQL = load_pairs("extract_sql.txt")
LISTS = load_pairs("extract_list.txt")
LINKS = load_pairs("extract_schema_links.txt")


@pytest.mark.parametrize("name,given,expected", SQL, ids=ids(SQL))
def test_extract_sql(name, given, expected):
    assert extract_sql(given) == (None if expected == "NONE" else expected)


@pytest.mark.parametrize("name,given,expected", LISTS, ids=ids(LISTS))
def test_extract_list(name, given, expected):
    assert extract_list(given) == (None if expected == "NONE" else json.loads(expected))


@pytest.mark.parametrize("name,given,expected", LINKS, ids=ids(LINKS))
def test_extract_schema_links(name, given, expected):
    got = extract_schema_links(given)
    assert (None if got is None else [list(p) for p in got]) == (None if expected == "NONE" else json.loads(expected))
