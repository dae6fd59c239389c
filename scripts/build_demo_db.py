"""Build the bundled demo database: a small, deliberately messy retail shop.

``build_demo_db`` writes the SQLite file that ships as ``sqlchorus/data/demo.sqlite`` and that
``make demo`` and the tests ask questions of. Run ``python scripts/build_demo_db.py [PATH]`` to
rebuild it. This is a build script: it is not part of the installed package.

Design choices:

* The data is generated, not copied from a benchmark, from ``random.Random(seed)`` alone, so the
  same seed always gives the same rows.
* The text values are messy on purpose, because value retrieval and joins only matter when the
  literal in the question is not the literal in the table: city names in several casings
  (``New York`` / ``new york`` / ``NEW YORK``), product names one letter or a suffix apart, a
  duplicated category (``Home & Garden`` / ``home and garden``), accented and unaccented names
  (``José`` / ``Jose``), order statuses in mixed case, and NULLs where a value is unknown. The
  variants a question may depend on are written unconditionally; randomness only adds more.
* The file is byte-for-byte reproducible, so the committed copy can be checked against this
  script: fixed page size, rollback journal (never WAL), one transaction, rows inserted in a fixed
  order, then ``VACUUM``. The only bytes that depend on the machine are the header field at
  offset 96, where SQLite records the version of the library that wrote the file.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import tempfile
import unicodedata
from datetime import date, timedelta
from pathlib import Path
from typing import Any

PAGE_SIZE = 4096
SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE stores (
    store_id    INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    city        TEXT NOT NULL,
    state       TEXT,
    opened_on   TEXT
);
CREATE TABLE categories (
    category_id INTEGER PRIMARY KEY,
    name        TEXT NOT NULL
);
CREATE TABLE suppliers (
    supplier_id INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    country     TEXT,
    email       TEXT
);
CREATE TABLE products (
    product_id   INTEGER PRIMARY KEY,
    name         TEXT NOT NULL,
    category_id  INTEGER NOT NULL REFERENCES categories (category_id),
    supplier_id  INTEGER REFERENCES suppliers (supplier_id),
    unit_price   REAL NOT NULL,
    added_on     TEXT NOT NULL,
    discontinued INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE customers (
    customer_id  INTEGER PRIMARY KEY,
    first_name   TEXT NOT NULL,
    last_name    TEXT NOT NULL,
    email        TEXT,
    city         TEXT,
    country      TEXT,
    joined_on    TEXT NOT NULL,
    loyalty_tier TEXT
);
CREATE TABLE orders (
    order_id    INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers (customer_id),
    store_id    INTEGER REFERENCES stores (store_id),
    order_date  TEXT NOT NULL,
    status      TEXT NOT NULL,
    ship_city   TEXT,
    shipped_on  TEXT
);
CREATE TABLE order_items (
    order_id    INTEGER NOT NULL REFERENCES orders (order_id),
    line_no     INTEGER NOT NULL,
    product_id  INTEGER NOT NULL REFERENCES products (product_id),
    quantity    INTEGER NOT NULL,
    unit_price  REAL NOT NULL,
    discount    REAL,
    PRIMARY KEY (order_id, line_no)
);
CREATE INDEX idx_orders_customer ON orders (customer_id);
CREATE INDEX idx_order_items_product ON order_items (product_id);
"""

# Table names in insertion (and foreign-key dependency) order.
TABLES: tuple[str, ...] = (
    "stores", "categories", "suppliers", "products", "customers", "orders", "order_items",
)

# (name, city, state, opened_on). Store cities are spelled canonically; the mess is in customer
# and shipping data, as it would be in a real shop where those are typed in by hand.
_STORES = [
    ("Midtown", "New York", "NY", "2015-03-14"),
    ("Brooklyn Heights", "New York", "NY", "2019-09-01"),
    ("Back Bay", "Boston", "MA", "2016-05-20"),
    ("Loop", "Chicago", "IL", "2014-11-02"),
    ("Mission", "San Francisco", "CA", "2018-04-07"),
    ("South Congress", "Austin", "TX", "2020-02-15"),
    ("Capitol Hill", "Seattle", "WA", None),
    ("Plateau", "Montréal", None, "2021-06-30"),
]

# "home and garden" is a second row for the same idea, as left behind by a careless import.
_CATEGORIES = [
    "Electronics", "Kitchen", "Home & Garden", "Toys", "Office Supplies",
    "Sports & Outdoors", "home and garden", "Books",
]

_SUPPLIERS = [
    ("Acme Corp", "USA", "sales@acme.example"),
    ("ACME Corporation", "usa", None),
    ("Nordic Home AB", "Sweden", "order@nordichome.example"),
    ("Lumière Lighting", "France", "contact@lumiere.example"),
    ("Pacific Trading Co.", "USA", "hello@pacific.example"),
    ("Kyoto Crafts", "Japan", None),
]

# (name, category name, supplier_id, base price). Near-duplicates differ by one letter or a
# suffix; the last block never sells, because it was added after the order history ends.
_PRODUCTS = [
    ("Wireless Mouse", "Electronics", 1, 24.99),
    ("Wireless Mouse Pro", "Electronics", 1, 49.99),
    ("Wired Mouse", "Electronics", 2, 12.5),
    ("USB-C Cable 1m", "Electronics", 5, 9.99),
    ("USB-C Cable 2m", "Electronics", 5, 12.99),
    ("Bluetooth Speaker", "Electronics", 5, 59.0),
    ("Bluetooth Speakers", "Electronics", 2, 99.0),
    ("Noise Cancelling Headphones", "Electronics", 1, 189.0),
    ("Ceramic Mug", "Kitchen", 6, 8.5),
    ("Ceramic Mugs (Set of 4)", "Kitchen", 6, 29.0),
    ("Chef Knife", "Kitchen", 6, 64.0),
    ("Chef's Knife", "Kitchen", 3, 79.0),
    ("French Press", "Kitchen", 3, 34.9),
    ("Cast Iron Skillet", "Kitchen", 2, 42.0),
    ("Cast Iron Skillet XL", "Kitchen", 2, 58.0),
    ("Garden Hose 15m", "Home & Garden", 3, 27.5),
    ("Garden Hose 25m", "Home & Garden", 3, 36.0),
    ("Garden Hose 15m Deluxe", "Home & Garden", 3, 39.5),
    ("Watering Can", "Home & Garden", 3, 18.0),
    ("Plant Pot", "Home & Garden", 6, 11.0),
    ("Plant Pots", "Home & Garden", 6, 26.0),
    ("Desk Lamp", "Home & Garden", 4, 45.0),
    ("Desk Lamp LED", "Home & Garden", 4, 55.0),
    ("Throw Pillow", "Home & Garden", 3, 22.0),
    ("Terracotta Planter", "home and garden", 6, 19.5),
    ("Bird Feeder", "home and garden", 3, 24.0),
    ("Solar Garden Light", "home and garden", 4, 15.0),
    ("Puzzle 1000 pcs", "Toys", 5, 21.0),
    ("Puzzle 500 pcs", "Toys", 5, 15.0),
    ("Building Blocks", "Toys", 2, 39.0),
    ("Building Block", "Toys", 2, 2.5),
    ("Plush Bear", "Toys", 5, 17.0),
    ("Notebook A5", "Office Supplies", 6, 6.5),
    ("Notebook A4", "Office Supplies", 6, 8.0),
    ("Gel Pen", "Office Supplies", 1, 1.8),
    ("Gel Pens", "Office Supplies", 1, 7.5),
    ("Stapler", "Office Supplies", 2, 13.0),
    ("Desk Organizer", "Office Supplies", 3, 28.0),
    ("Desk Organiser", "Office Supplies", 3, 31.0),
    ("Yoga Mat", "Sports & Outdoors", 5, 32.0),
    ("Yoga Mats", "Sports & Outdoors", 5, 85.0),
    ("Water Bottle", "Sports & Outdoors", 5, 14.0),
    ("Water Bottle 1L", "Sports & Outdoors", 5, 16.0),
    ("Tennis Balls", "Sports & Outdoors", 1, 6.0),
]
_UNSOLD_PRODUCTS = [
    ("Camping Lantern", "Sports & Outdoors", 4, 38.0),
    ("Espresso Machine", "Kitchen", 3, 249.0),
    ("The Little Book of SQL", "Books", None, 19.0),
]

# Canonical city -> (country, spellings as people typed them, with weights).
_CITIES: dict[str, tuple[str, list[tuple[str, int]]]] = {
    "New York": ("USA", [("New York", 6), ("new york", 3), ("NEW YORK", 2)]),
    "Boston": ("USA", [("Boston", 5), ("boston", 2)]),
    "Chicago": ("USA", [("Chicago", 5), ("CHICAGO", 1)]),
    "San Francisco": ("USA", [("San Francisco", 5), ("san francisco", 2), ("San Fransisco", 1)]),
    "Austin": ("USA", [("Austin", 4)]),
    "Seattle": ("USA", [("Seattle", 4), ("seattle", 1)]),
    "Montréal": ("Canada", [("Montréal", 3), ("Montreal", 2)]),
}
_CITY_WEIGHTS = {"New York": 8, "Boston": 4, "Chicago": 4, "San Francisco": 4, "Austin": 2,
                 "Seattle": 3, "Montréal": 2}

# Customers every build contains, so that questions about the accented and unaccented spellings
# and the city casings always have an answer: (first, last, canonical city, city as typed).
_FIXED_CUSTOMERS = [
    ("José", "García", "New York", "NEW YORK"),
    ("Jose", "Garcia", "Austin", "Austin"),
    ("Zoë", "Martin", "Boston", "boston"),
    ("Zoe", "Martin", "Chicago", "Chicago"),
    ("Renée", "Dubois", "Montréal", "Montréal"),
    ("Renee", "Dubois", "New York", "new york"),
    ("François", "Lefèvre", "Montréal", "Montreal"),
    ("Björn", "Müller", "Seattle", "seattle"),
    ("Bjorn", "Mueller", "San Francisco", "san francisco"),
    ("Chloé", "Núñez", "New York", "New York"),
]
_FIRST_NAMES = [
    "Emma", "Liam", "Olivia", "Noah", "Ava", "Ethan", "Sophia", "Mason", "Mia", "Lucas",
    "Isabella", "Aiden", "Amelia", "James", "Harper", "Benjamin", "Evelyn", "Elijah", "Abigail",
    "Daniel", "Emily", "Henry", "Ella", "Jack", "Grace", "Samuel", "Chloe", "David", "Lily", "Leo",
]
_LAST_NAMES = [
    "Smith", "Johnson", "Williams", "Brown", "Jones", "Miller", "Davis", "Wilson", "Anderson",
    "Taylor", "Thomas", "Moore", "Jackson", "Lee", "Kim", "Nguyen", "Patel", "O'Brien", "Walker",
    "Hall", "Young", "King", "Wright", "Lopez", "Hill", "Scott", "Green", "Adams",
]
_RANDOM_CUSTOMERS = 52
_ORDERS = 170

# Status spellings with weights; only 'shipped', 'delivered' and 'returned' orders left a store.
_STATUSES = [
    ("delivered", 30), ("Delivered", 8), ("DELIVERED", 3), ("shipped", 10), ("Shipped", 4),
    ("pending", 6), ("cancelled", 6), ("Cancelled", 2), ("returned", 3),
]
_ORDERS_FROM = date(2023, 1, 1)
_ORDERS_UNTIL = date(2024, 12, 31)


def _weighted(rng: random.Random, pairs: list[tuple[Any, int]]) -> Any:
    # Integer arithmetic only, unlike rng.choices, so no float rounding can change a pick.
    total = sum(w for _, w in pairs)
    pick = rng.randrange(total)
    for value, weight in pairs:
        if pick < weight:
            return value
        pick -= weight
    raise AssertionError("unreachable")


def _spelling(rng: random.Random, city: str) -> str:
    return _weighted(rng, _CITIES[city][1])


def _day(rng: random.Random, start: date, end: date) -> date:
    return start + timedelta(days=rng.randrange((end - start).days + 1))


def _email(first: str, last: str, n: int) -> str:
    plain = unicodedata.normalize("NFKD", f"{first}.{last}".lower())
    ascii_name = plain.encode("ascii", "ignore").decode().replace("'", "")
    return f"{ascii_name}{n}@mail.example"


def _rows(seed: int) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, generated from ``seed`` in a fixed order."""
    rng = random.Random(seed)
    rows: dict[str, list[tuple[Any, ...]]] = {}

    rows["stores"] = [(i, *s) for i, s in enumerate(_STORES, 1)]
    rows["categories"] = [(i, name) for i, name in enumerate(_CATEGORIES, 1)]
    rows["suppliers"] = [(i, *s) for i, s in enumerate(_SUPPLIERS, 1)]
    category_id = {name: i for i, name in rows["categories"]}

    products = []
    for i, (name, cat, supplier, price) in enumerate(_PRODUCTS + _UNSOLD_PRODUCTS, 1):
        unsold = i > len(_PRODUCTS)
        added = date(2025, 2, 1) + timedelta(days=rng.randrange(60)) if unsold else _day(
            rng, date(2021, 1, 1), date(2022, 12, 31))
        discontinued = int(not unsold and rng.random() < 0.1)
        products.append((i, name, category_id[cat], supplier, price, added.isoformat(),
                         discontinued))
    rows["products"] = products

    customers: list[tuple[Any, ...]] = []
    home: dict[int, str] = {}  # customer_id -> canonical city, for shipping addresses
    people = list(_FIXED_CUSTOMERS)
    cities = list(_CITY_WEIGHTS.items())
    for _ in range(_RANDOM_CUSTOMERS):
        city = _weighted(rng, cities)
        typed = None if rng.random() < 0.05 else _spelling(rng, city)
        people.append((rng.choice(_FIRST_NAMES), rng.choice(_LAST_NAMES), city, typed))
    for cid, (first, last, city, typed_city) in enumerate(people, 1):
        home[cid] = city
        email = None if rng.random() < 0.12 else _email(first, last, cid)
        country = _CITIES[city][0] if typed_city is not None else None
        joined = _day(rng, date(2021, 6, 1), date(2024, 6, 30)).isoformat()
        tier = _weighted(rng, [(None, 5), ("Bronze", 3), ("Silver", 2), ("Gold", 1)])
        customers.append((cid, first, last, email, typed_city, country, joined, tier))
    rows["customers"] = customers

    # A few customers buy far more often than the rest, as in any shop.
    buyer_weights = [(cid, 6 if cid % 9 == 1 else 1) for cid in home]
    sold = products[: len(_PRODUCTS)]
    orders, items = [], []
    for oid in range(1, _ORDERS + 1):
        cid = _weighted(rng, buyer_weights)
        online = rng.random() < 0.55
        store = None if online else rng.randrange(1, len(_STORES) + 1)
        ordered = _day(rng, _ORDERS_FROM, _ORDERS_UNTIL)
        status = _weighted(rng, _STATUSES)
        left = status.lower() in ("shipped", "delivered", "returned")
        shipped = (ordered + timedelta(days=1 + rng.randrange(5))).isoformat() if left else None
        ship_city = _spelling(rng, home[cid]) if online else None
        orders.append((oid, cid, store, ordered.isoformat(), status, ship_city, shipped))
        for line in range(1, 1 + _weighted(rng, [(1, 4), (2, 4), (3, 3), (4, 1)])):
            product = rng.choice(sold)
            quantity = _weighted(rng, [(1, 8), (2, 5), (3, 2), (4, 1), (6, 1)])
            # A line sells at the catalogue price; NULL means no discount was given.
            discount = _weighted(rng, [(None, 8), (0.1, 2), (0.25, 1)])
            items.append((oid, line, product[0], quantity, product[4], discount))
    rows["orders"] = orders
    rows["order_items"] = items
    return rows


def build_demo_db(path: str | os.PathLike[str], *, seed: int = 7) -> Path:
    """Write the demo database to ``path``, replacing any file there.

    The same ``seed`` always gives a byte-identical file (with the same SQLite library).

    Args:
        path: where to write the SQLite file; parent folders are created.
        seed: seed of the random generator behind every generated value.

    Returns:
        The path written, resolved.
    """
    target = Path(path).expanduser().resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    rows = _rows(seed)
    # Build beside the target and rename, so a reader never sees a half-written file.
    fd, tmp_name = tempfile.mkstemp(prefix=".demo-", suffix=".sqlite", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            conn.execute("PRAGMA journal_mode = DELETE")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("BEGIN")
            _create(conn)
            for table in TABLES:
                data = rows[table]
                marks = ", ".join("?" * len(data[0]))
                conn.executemany(f"INSERT INTO {table} VALUES ({marks})", data)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
            conn.execute("VACUUM")
        finally:
            conn.close()
        tmp.chmod(0o644)  # mkstemp makes the file private; the database is meant to be shared
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _create(conn: sqlite3.Connection) -> None:
    # executescript() would COMMIT the open transaction first; run the statements one by one.
    for statement in SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)


def _default_path() -> Path:
    return Path(__file__).resolve().parent.parent / "sqlchorus" / "data" / "demo.sqlite"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python scripts/build_demo_db.py", description="Build the sqlchorus demo database."
    )
    parser.add_argument("path", nargs="?", type=Path, default=_default_path(),
                        help="where to write it (default: the packaged sqlchorus/data/demo.sqlite)")
    parser.add_argument("--seed", type=int, default=7, help="random seed (default: 7)")
    args = parser.parse_args(argv)
    path = build_demo_db(args.path, seed=args.seed)
    print(f"wrote {path} ({path.stat().st_size} bytes, seed {args.seed})")


if __name__ == "__main__":
    main()
