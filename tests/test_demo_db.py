"""The bundled demo database: reproducible, well-formed, messy on purpose, and answerable."""

from __future__ import annotations

import sqlite3

import pytest
import sqlglot
from sqlglot import exp

from build_demo_db import PAGE_SIZE, TABLES, build_demo_db, main
from sqlchorus.runs.demo import demo_db_path, load_demo_questions
from sqlchorus.tools.engines.sqlite import GuardedDatabase

QUESTIONS = load_demo_questions()

# The SQLite header records the library version that last wrote the file (offset 96, 4 bytes);
# it is the one part of the file that legitimately depends on the machine.
_LIBRARY_VERSION = slice(96, 100)

# (child table, column) -> (parent table, column)
FOREIGN_KEYS = {
    ("products", "category_id"): ("categories", "category_id"),
    ("products", "supplier_id"): ("suppliers", "supplier_id"),
    ("orders", "customer_id"): ("customers", "customer_id"),
    ("orders", "store_id"): ("stores", "store_id"),
    ("order_items", "order_id"): ("orders", "order_id"),
    ("order_items", "product_id"): ("products", "product_id"),
}
PRIMARY_KEYS = {
    "stores": ["store_id"],
    "categories": ["category_id"],
    "suppliers": ["supplier_id"],
    "products": ["product_id"],
    "customers": ["customer_id"],
    "orders": ["order_id"],
    "order_items": ["order_id", "line_no"],
}
ROW_COUNTS = {  # table -> (fewest, most) rows
    "stores": (5, 12),
    "categories": (6, 12),
    "suppliers": (4, 10),
    "products": (30, 60),
    "customers": (40, 100),
    "orders": (100, 250),
    "order_items": (150, 450),
}

# Each kind of deliberate mess, as a query whose single value must reach a minimum.
VARIANTS = [
    ("customer city casing",
     "SELECT COUNT(DISTINCT city) FROM customers WHERE LOWER(city) = 'new york'", 3),
    ("shipping city casing",
     "SELECT COUNT(DISTINCT ship_city) FROM orders WHERE LOWER(ship_city) = 'new york'", 3),
    ("city misspelling",
     "SELECT COUNT(DISTINCT ship_city) FROM orders WHERE ship_city IN "
     "('San Francisco', 'san francisco', 'San Fransisco')", 2),
    ("city accent",
     "SELECT COUNT(DISTINCT city) FROM customers WHERE city IN ('Montréal', 'Montreal')", 2),
    ("duplicated category",
     "SELECT COUNT(*) FROM categories WHERE name IN ('Home & Garden', 'home and garden')", 2),
    ("products in both category spellings",
     "SELECT COUNT(DISTINCT c.name) FROM products AS p JOIN categories AS c "
     "ON p.category_id = c.category_id WHERE LOWER(c.name) LIKE 'home%garden'", 2),
    ("product names one letter apart",
     "SELECT COUNT(*) FROM products WHERE name IN ('Desk Organizer', 'Desk Organiser')", 2),
    ("product names differing by a suffix",
     "SELECT COUNT(*) FROM products WHERE name LIKE 'Wireless Mouse%'", 2),
    ("product names differing by a plural",
     "SELECT COUNT(*) FROM products WHERE name IN ('Plant Pot', 'Plant Pots')", 2),
    ("accented and plain customer names",
     "SELECT COUNT(*) FROM customers WHERE (first_name = 'José' AND last_name = 'García') "
     "OR (first_name = 'Jose' AND last_name = 'Garcia')", 2),
    ("status casing",
     "SELECT COUNT(DISTINCT status) FROM orders WHERE LOWER(status) = 'delivered'", 3),
    ("missing emails", "SELECT COUNT(*) FROM customers WHERE email IS NULL", 1),
    ("online orders without a store", "SELECT COUNT(*) FROM orders WHERE store_id IS NULL", 1),
    ("orders not shipped", "SELECT COUNT(*) FROM orders WHERE shipped_on IS NULL", 1),
    ("products never sold",
     "SELECT COUNT(*) FROM products WHERE product_id NOT IN (SELECT product_id FROM order_items)",
     1),
]

# Typing and consistency rules: each query counts the rows that break one; it must be zero.
INVARIANTS = [
    ("prices are REAL",
     "SELECT COUNT(*) FROM products WHERE typeof(unit_price) <> 'real'"),
    ("line prices are REAL",
     "SELECT COUNT(*) FROM order_items WHERE typeof(unit_price) <> 'real'"),
    ("quantities are positive INTEGERs",
     "SELECT COUNT(*) FROM order_items WHERE typeof(quantity) <> 'integer' OR quantity < 1"),
    ("order dates are ISO text",
     "SELECT COUNT(*) FROM orders WHERE typeof(order_date) <> 'text' "
     "OR date(order_date) IS NOT order_date"),
    ("shipping dates are ISO text",
     "SELECT COUNT(*) FROM orders WHERE shipped_on IS NOT NULL AND date(shipped_on) <> shipped_on"),
    ("shipped after ordered",
     "SELECT COUNT(*) FROM orders WHERE shipped_on IS NOT NULL AND shipped_on <= order_date"),
    ("unshipped statuses have no shipping date",
     "SELECT COUNT(*) FROM orders WHERE LOWER(status) IN ('pending', 'cancelled') "
     "AND shipped_on IS NOT NULL"),
    ("join dates are ISO text",
     "SELECT COUNT(*) FROM customers WHERE date(joined_on) IS NOT joined_on"),
]


@pytest.fixture(scope="module")
def db():
    with GuardedDatabase(demo_db_path()) as guarded:
        yield guarded


def _scalar(db: GuardedDatabase, sql: str):
    result = db.execute(sql)
    assert len(result.rows) == 1 and len(result.rows[0]) == 1, sql
    return result.rows[0][0]


def _contents(path) -> dict[str, list[tuple]]:
    with GuardedDatabase(path) as guarded:
        out = {"sqlite_master": guarded.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name").rows}
        for table in TABLES:
            out[table] = guarded.execute(f"SELECT * FROM {table} ORDER BY 1, 2").rows
        return out


# -- reproducibility ---------------------------------------------------------------------------


def test_rebuild_matches_packaged_file(tmp_path):
    packaged = demo_db_path().read_bytes()
    rebuilt = build_demo_db(tmp_path / "demo.sqlite").read_bytes()
    assert _contents(tmp_path / "demo.sqlite") == _contents(demo_db_path()), (
        "the packaged demo database no longer matches scripts/build_demo_db.py; "
        "rebuild it with `python scripts/build_demo_db.py`"
    )
    masked = bytearray(packaged)
    masked[_LIBRARY_VERSION] = rebuilt[_LIBRARY_VERSION]
    assert bytes(masked) == rebuilt, (
        f"same rows, different bytes (packaged by SQLite "
        f"{int.from_bytes(packaged[_LIBRARY_VERSION], 'big')}, running "
        f"{sqlite3.sqlite_version}); rebuild with `python scripts/build_demo_db.py`"
    )


def test_same_seed_gives_identical_bytes_and_another_seed_does_not(tmp_path):
    first = build_demo_db(tmp_path / "a" / "demo.sqlite", seed=11).read_bytes()
    second = build_demo_db(tmp_path / "b" / "demo.sqlite", seed=11).read_bytes()
    other = build_demo_db(tmp_path / "c" / "demo.sqlite", seed=12).read_bytes()
    assert first == second
    assert first != other


def test_build_replaces_an_existing_file_and_leaves_nothing_else(tmp_path):
    target = tmp_path / "demo.sqlite"
    target.write_bytes(b"not a database")
    main([str(target)])
    assert target.read_bytes()[:16] == b"SQLite format 3\x00"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.sqlite"]


def test_file_format_is_small_fixed_page_and_not_wal():
    data = demo_db_path().read_bytes()
    assert len(data) < 200 * 1024
    assert int.from_bytes(data[16:18], "big") == PAGE_SIZE
    # Header bytes 18 and 19 are 2 in WAL mode and 1 with a rollback journal.
    assert data[18:20] == b"\x01\x01"


# -- schema and rows ---------------------------------------------------------------------------


def _pragma(db: GuardedDatabase, pragma: str, table: str) -> list[tuple]:
    with db.locked():
        return db.introspection_connection().execute(f"PRAGMA {pragma}({table})").fetchall()


def test_tables(db):
    names = db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").rows
    assert sorted(TABLES) == [n for (n,) in names]


@pytest.mark.parametrize("table", sorted(PRIMARY_KEYS))
def test_primary_keys(db, table):
    info = _pragma(db, "table_info", table)  # cid, name, type, notnull, default, pk
    keys = [name for _, name, _, _, _, pk in sorted(info, key=lambda r: r[5]) if pk]
    assert keys == PRIMARY_KEYS[table]


def test_foreign_keys_are_declared(db):
    declared = {}
    for table in TABLES:
        # id, seq, table, from, to, on_update, on_delete, match
        for _, _, parent, child_col, parent_col, *_ in _pragma(db, "foreign_key_list", table):
            declared[(table, child_col)] = (parent, parent_col)
    assert declared == FOREIGN_KEYS


@pytest.mark.parametrize("child", sorted(FOREIGN_KEYS), ids=lambda k: ".".join(k))
def test_foreign_keys_hold(db, child):
    table, column = child
    parent, key = FOREIGN_KEYS[child]
    orphans = _scalar(
        db,
        f"SELECT COUNT(*) FROM {table} AS c LEFT JOIN {parent} AS p ON c.{column} = p.{key} "
        f"WHERE c.{column} IS NOT NULL AND p.{key} IS NULL",
    )
    assert orphans == 0


def test_row_counts_in_range(db):
    counts = {t: _scalar(db, f"SELECT COUNT(*) FROM {t}") for t in TABLES}
    for table, (low, high) in ROW_COUNTS.items():
        assert low <= counts[table] <= high, (table, counts[table])
    assert 300 <= sum(counts.values()) <= 800


@pytest.mark.parametrize("kind,sql,minimum", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_messy_variants_exist(db, kind, sql, minimum):
    assert _scalar(db, sql) >= minimum


@pytest.mark.parametrize("rule,sql", INVARIANTS, ids=[i[0] for i in INVARIANTS])
def test_invariants(db, rule, sql):
    assert _scalar(db, sql) == 0


# -- the demo questions ------------------------------------------------------------------------


def test_question_file_shape():
    assert 12 <= len(QUESTIONS) <= 20
    assert all(set(q) == {"question", "sql", "evidence"} for q in QUESTIONS)
    assert all(isinstance(v, str) for q in QUESTIONS for v in q.values())
    assert len({q["question"] for q in QUESTIONS}) == len(QUESTIONS)


def test_sample_question_is_simple():
    tree = sqlglot.parse_one(QUESTIONS[0]["sql"], read="sqlite")
    assert not list(tree.find_all(exp.Join))
    assert len(list(tree.find_all(exp.Select))) == 1


@pytest.mark.parametrize(
    "feature,node",
    [("join", exp.Join), ("group by", exp.Group), ("having", exp.Having),
     ("order by", exp.Order), ("limit", exp.Limit), ("lower()", exp.Lower),
     ("null test", exp.Is)],
)
def test_questions_cover(feature, node):
    trees = [sqlglot.parse_one(q["sql"], read="sqlite") for q in QUESTIONS]
    assert any(tree.find(node) for tree in trees), feature


def test_questions_cover_nesting():
    trees = [sqlglot.parse_one(q["sql"], read="sqlite") for q in QUESTIONS]
    assert any(len(list(tree.find_all(exp.Select))) > 1 for tree in trees)


@pytest.mark.parametrize("item", QUESTIONS, ids=[q["question"] for q in QUESTIONS])
def test_gold_sql_answers(db, item):
    result = db.execute(item["sql"])
    assert result.rows and not result.truncated
    first = result.rows[0]
    # An answer of NULL or 0 would make a useless demo question.
    assert any(v not in (None, 0) for v in first), first
