"""Result comparators against golden cases of the official Spider and BIRD semantics."""

from __future__ import annotations

import json
import uuid
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from sqlchorus.tools.sql.compare import (
    bird_result_eq,
    normalise_rows,
    normalise_value,
    spider_order_matters,
    spider_postprocess,
    spider_remove_distinct,
    spider_replace_cur_year,
    spider_result_eq,
)

FIXTURES = Path(__file__).parent / "fixtures" / "compare"


def _cases(name: str) -> list[dict]:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def _rows(rows: list[list]) -> list[tuple]:
    return [tuple(r) for r in rows]


@pytest.mark.parametrize("case", _cases("spider_rows.json"), ids=lambda c: c["name"])
def test_spider_result_eq(case):
    got = spider_result_eq(_rows(case["gold"]), _rows(case["pred"]), case["order_matters"])
    assert got is case["expected"]


@pytest.mark.parametrize("case", _cases("bird_rows.json"), ids=lambda c: c["name"])
def test_bird_result_eq(case):
    assert bird_result_eq(_rows(case["gold"]), _rows(case["pred"])) is case["expected"]


@pytest.mark.parametrize("case", _cases("spider_text.json"), ids=lambda c: c["sql"])
def test_spider_text_conventions(case):
    assert spider_remove_distinct(case["sql"]) == case["remove_distinct"]
    assert spider_order_matters(case["sql"]) is case["order_matters"]


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT a FROM t WHERE b > = 3 AND c < = 2 AND d ! = 1",
         "SELECT a FROM t WHERE b >= 3 AND c <= 2 AND d != 1"),
        ("SELECT a FROM t WHERE b >= 3", "SELECT a FROM t WHERE b >= 3"),
    ],
)
def test_spider_postprocess(sql, expected):
    assert spider_postprocess(sql) == expected


def test_spider_replace_cur_year():
    sql = "SELECT a FROM t WHERE year(CURDATE( ))  - b > 3"
    assert spider_replace_cur_year(sql) == "SELECT a FROM t WHERE 2020- b > 3"


def test_spider_column_permutation_search_is_not_fooled_by_shared_values():
    # Every column holds the same set of values, so pruning keeps every permutation; only the
    # row-wise check can decide.
    gold = [(1, 2, 3, 4), (2, 3, 4, 1), (3, 4, 1, 2), (4, 1, 2, 3)]
    shifted = [(r[1], r[2], r[3], r[0]) for r in gold]
    scrambled = [(1, 3, 2, 4), (2, 4, 3, 1), (3, 1, 4, 2), (4, 2, 1, 3)]
    assert spider_result_eq(gold, shifted, order_matters=False)
    assert spider_result_eq(gold, scrambled, order_matters=False)
    assert not spider_result_eq(gold, [(1, 1, 1, 1)] * 4, order_matters=False)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None), (7, 7), (2.5, 2.5), ("a", "a"), (b"\x00", b"\x00"),
        (True, 1), (False, 0),
        (Decimal("10"), 10), (Decimal("3.0000"), 3), (Decimal("2.5"), 2.5),
        (Decimal("-0.125"), -0.125), (Decimal("NaN"), None),
        (datetime(2018, 3, 9, 19, 3, 21), "2018-03-09 19:03:21"),
        (datetime(2018, 3, 9, 19, 3, 21, 500000), "2018-03-09 19:03:21.500000"),
        (datetime(2018, 3, 9, 19, 3, 21, tzinfo=timezone.utc), "2018-03-09 19:03:21+00:00"),
        (date(2018, 3, 9), "2018-03-09"), (time(7, 5), "07:05:00"),
        (memoryview(b"ab"), b"ab"), (bytearray(b"ab"), b"ab"),
        (uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
        (timedelta(days=2), "2 days, 0:00:00"),
        ([1, Decimal("2"), [True]], (1, 2, (1,))), ({"b": 1, "a": 2}, '{"a": 2, "b": 1}'),
    ],
    ids=repr,
)
def test_normalise_value(value, expected):
    got = normalise_value(value)
    if expected is None and value is not None:
        assert got != got  # NaN stays a float NaN
    else:
        assert got == expected and type(got) is type(expected)


def test_normalised_engine_rows_compare_like_sqlite_rows():
    sqlite_rows = [(1, "2018-03-09 19:03:21", 2.5, 3)]
    engine_rows = [(True, datetime(2018, 3, 9, 19, 3, 21), Decimal("2.50"), Decimal("3"))]
    assert not spider_result_eq(sqlite_rows, engine_rows, order_matters=False)
    assert normalise_rows(engine_rows) == sqlite_rows
    assert spider_result_eq(sqlite_rows, normalise_rows(engine_rows), order_matters=True)
    assert bird_result_eq(sqlite_rows, normalise_rows(engine_rows))
