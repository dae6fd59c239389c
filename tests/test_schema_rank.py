"""Lexical schema linking: the tables and columns a question names, with no model call."""

from __future__ import annotations

import pytest

from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.schema.introspect import introspect
from sqlchorus.tools.schema.rank import rank_schema


@pytest.fixture(scope="module")
def schema():
    from sqlchorus.runs.demo import demo_db_path

    with GuardedDatabase(demo_db_path()) as db:
        return introspect(db, sample_values=0)


@pytest.mark.parametrize("question,tables", [
    ("How many customers do we have?", {"customers"}),
    ("What are the five most expensive products?", {"products"}),
    ("How many suppliers are there?", {"suppliers"}),
])
def test_the_named_table_is_linked(schema, question, tables):
    assert set(rank_schema(schema, question)) == tables


def test_a_retrieved_value_links_its_column(schema):
    values = {"customers.city": [{"value": "Boston", "score": 100.0}]}
    links = rank_schema(schema, "Who lives in Boston?", values)
    assert "city" in links["customers"]


def test_keys_and_a_bridge_table_come_along(schema):
    """Stores and order items share no key: the orders table that joins them comes along."""
    links = rank_schema(schema, "Which store sold the most items in total?")
    assert set(links) == {"stores", "order_items", "orders"}
    assert {"store_id", "order_id"} <= set(links["orders"]) and "store_id" in links["stores"]


def test_nothing_matching_links_the_largest_table(schema):
    # order_items holds the most rows of the demo database, well ahead of the next (orders).
    rows = sorted((t.row_count, t.name) for t in schema.tables)
    assert rows[-1][1] == "order_items" and rows[-1][0] > rows[-2][0]
    links = rank_schema(schema, "Hello there")
    assert list(links) == ["order_items"]
    assert links["order_items"][:2] == ["order_id", "line_no"]  # its key comes along
