"""Build the back-translated few-shot examples for LIST's planning and step-writing prompts.

The paper builds its examples by decomposing gold SQL with LIST and having a model translate each
sub-query into a natural-language step instruction; its planning prompt then asks for such
instructions and no SQL. Here the translations are written once, by hand, in :data:`SOURCES`:
one plain-language instruction per sub-query of the decomposer, with no SQL in it (no keywords,
operators, function calls or ``alias.column`` names). :func:`build_examples` pairs each
instruction with the sub-query it describes and refuses a source whose instructions do not
match its steps one for one, so the shipped file ``prompts/list_plan_examples.json`` is exactly
what it produces, and a test checks that. The questions are our own, over the bundled demo
database, and are none of the demo's own questions nor any Spider or BIRD evaluation question.

Regenerate the file after changing :data:`SOURCES`, the decomposer or the demo database::

    python scripts/build_list_examples.py          # rewrite the shipped file
    python scripts/build_list_examples.py --check  # exit 1 when it is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.steps.decompose import decompose, describe_steps, execute_steps
from sqlchorus.tools.engines.catalog import DatabaseSchema
from sqlchorus.tools.schema.introspect import introspect
from sqlchorus.tools.schema.views import render_view

SOURCES: tuple[dict[str, Any], ...] = (
    {
        "question": "How many products does each supplier based in the USA provide? Give the supplier's name and the count.",
        "evidence": "The country is written either 'USA' or 'usa'.",
        "sql": "SELECT s.name, COUNT(*) AS product_count FROM suppliers AS s JOIN products AS p "
        "ON p.supplier_id = s.supplier_id WHERE LOWER(s.country) = 'usa' GROUP BY s.supplier_id, s.name",
        "instructions": [
            "Start from the suppliers table.",
            "Pair each supplier with the products it supplies, matching the supplier_id of the product with that of the supplier.",
            "Keep only the suppliers whose country is USA, written in any letter case.",
            "Make one group per supplier, by its supplier_id and name.",
            "For each group, return the supplier's name and the number of its products, called product_count.",
        ],
    },
    {
        "question": "Which three customers spent the most on delivered orders? Give their first and last names.",
        "evidence": "Spending is quantity times unit price; a delivered order has status 'delivered' in any letter case.",
        "sql": "SELECT c.first_name, c.last_name FROM customers AS c JOIN orders AS o ON o.customer_id = c.customer_id "
        "JOIN order_items AS i ON i.order_id = o.order_id WHERE LOWER(o.status) = 'delivered' "
        "GROUP BY c.customer_id, c.first_name, c.last_name ORDER BY SUM(i.quantity * i.unit_price) DESC LIMIT 3",
        "instructions": [
            "Start from the customers table.",
            "Pair each customer with their orders, matching the customer_id of the order with that of the customer.",
            "Pair each order with its items, matching the order_id of the item with that of the order.",
            "Keep only the orders whose status is delivered, written in any letter case.",
            "Make one group per customer, by customer_id, first name and last name.",
            "Return the first name and last name of each customer.",
            "Sort the customers by what they spent, the total of quantity times unit price over their items, highest first.",
            "Keep only the first three customers.",
        ],
    },
    {
        "question": "Which categories have no discontinued product?",
        "evidence": "A discontinued product has discontinued = 1.",
        "sql": "SELECT name FROM categories WHERE category_id NOT IN "
        "(SELECT category_id FROM products WHERE discontinued = 1)",
        "instructions": [
            "Start from the categories table.",
            "In a nested query, start from the products table.",
            "In the nested query, keep only the discontinued products, those whose discontinued flag is 1.",
            "In the nested query, return the category_id of each of these products.",
            "Keep only the categories whose category_id is not among those the nested query returns.",
            "Return the name of each remaining category.",
        ],
    },
    {
        "question": "In which cities do we have both a store and at least one customer?",
        "evidence": "",
        "sql": "SELECT city FROM stores INTERSECT SELECT city FROM customers",
        "instructions": [
            "For the first list, start from the stores table.",
            "For the first list, return the city of each store.",
            "For the second list, start from the customers table.",
            "For the second list, return the city of each customer.",
            "Keep only the cities that appear in both lists.",
        ],
    },
)
"""Question, hint and gold SQL of each example, and the instruction of each of its steps."""

NAME = "list_plan"


def shipped_path() -> Path:
    return Path(str(resources.files("sqlchorus.prompts").joinpath(f"{NAME}_examples.json")))


def _tables(sql: str) -> list[str]:
    tree = sqlglot.parse_one(sql, read="sqlite")
    return sorted({t.name for t in tree.find_all(exp.Table)})


def build_examples(db: GuardedDatabase, schema: DatabaseSchema | None = None) -> list[dict[str, Any]]:
    """Decompose each source query and pair its sub-queries with the source's step instructions.

    Args:
        db: the demo database (every sub-query is run, and must run and return rows).
        schema: its schema; introspected without sample values when None.

    Raises:
        ValueError: a source has not one instruction per step, or a sub-query of a source does
            not run or returns no rows.
    """
    schema = schema or introspect(db, sample_values=0)
    out = []
    for source in SOURCES:
        steps = decompose(source["sql"], schema=schema)
        if len(steps) != len(source["instructions"]):
            raise ValueError(
                f"{source['question']!r} has {len(source['instructions'])} instructions for "
                f"{len(steps)} steps:\n{describe_steps(steps)}"
            )
        for check in execute_steps(steps, db, max_rows=1):
            if not check.ok or check.row_count == 0:
                raise ValueError(
                    f"Step {check.step.index + 1} of {source['question']!r} "
                    f"{'returned no rows' if check.ok else 'failed: ' + str(check.error)}: {check.step.sql}"
                )
        view = render_view(
            schema, "m-schema", level="tables", links={t: [] for t in _tables(source["sql"])}, sample_values=0
        )
        out.append(
            {
                "question": source["question"],
                "evidence": source["evidence"],
                "sql": source["sql"],
                "schema": view,
                "steps": [
                    {"instruction": instruction, "sql": step.sql}
                    for instruction, step in zip(source["instructions"], steps, strict=True)
                ],
            }
        )
    return out


def render(examples: list[dict[str, Any]]) -> str:
    return json.dumps(examples, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    from sqlchorus.runs.demo import demo_db_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the shipped file is out of date")
    args = parser.parse_args(argv)
    with GuardedDatabase(demo_db_path()) as db:
        text = render(build_examples(db))
    path = shipped_path()
    if args.check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            print(f"{path} is out of date: run python scripts/build_list_examples.py", file=sys.stderr)
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"wrote {len(SOURCES)} examples to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
