"""CHASE-SQL's query fixer: its few-shot examples, true on the demo database, shown to the model
before the task, and small enough to leave the schema its share of the prompt."""

from __future__ import annotations

import json

import pytest

import sqlchorus
from conftest import Recorder
from sqlchorus import prompts
from sqlchorus.config.settings import Settings
from sqlchorus.core.budget import PROMPT_RESERVE
from sqlchorus.nodes.fix_candidates import NODE, examples_text, result_text
from sqlchorus.testing import ScriptedChatModel, sql_of
from sqlchorus.tools.database import GuardedDatabase
from sqlchorus.tools.parsing import extract_sql
from sqlchorus.tools.results import check_sql
from sqlchorus.tools.schema import introspect
from sqlchorus.tools.tokens import APPROXIMATE

EXAMPLES = prompts.examples(NODE)
QUESTION = "How many suppliers are there?"
GOLD = "SELECT COUNT(*) FROM suppliers"
BROKEN = "SELECT COUNT(*) FROM supplier"


@pytest.mark.parametrize("example", EXAMPLES, ids=[ex["question"] for ex in EXAMPLES])
def test_each_example_is_true_on_the_demo_database(demo_db, example):
    """The failed query fails as the example says, the answer's query runs and returns rows, and
    the example's schema is the demo database's own."""
    with GuardedDatabase(demo_db) as db:
        failed = check_sql(db, example["sql"])
        fixed = extract_sql(example["answer"])
        assert failed["status"] in ("error", "empty")
        assert result_text(failed) == example["result"]
        assert fixed and fixed != example["sql"]
        assert check_sql(db, fixed)["status"] == "ok"
        schema = introspect(db, sample_values=0)
    final = example["answer"].rsplit("Final Answer:", 1)[1]
    assert final.strip() == fixed and "\n" not in final.strip()  # one line, as the prompt asks
    for table in example["schema"]["tables"]:
        real = schema.table(table["name"])
        assert [[c.name, c.type] for c in real.columns] == table["columns"]
        assert [c.name for c in real.columns if c.primary_key] == table["primary_key"]


def test_examples_cover_an_error_and_an_empty_result():
    assert {ex["result"].startswith("Error:") for ex in EXAMPLES} == {True, False}


def _fixer_prompts(demo_db, **settings):
    recorder = Recorder({QUESTION: GOLD}, first_answer=lambda q: BROKEN)
    result = sqlchorus.ask(
        QUESTION, db=demo_db,
        settings=Settings(model=ScriptedChatModel(recorder), trace_dir=None, **settings),
    )
    assert result.ok and result.sql == GOLD
    return recorder.of("fixing"), result


def test_the_fixer_prompt_shows_the_examples_before_the_task(demo_db):
    (prompt,), _ = _fixer_prompts(demo_db)
    shown, task = prompt.split("======= Your task =======")
    assert "Here are some examples:" in shown
    for ex in EXAMPLES:
        assert f"Question:\n{ex['question']}\n" in shown and ex["answer"] in shown
        assert ex["question"] not in task
    assert sql_of(prompt) == BROKEN
    assert "Error: no such table: supplier" in task


def test_examples_are_rendered_in_the_runs_schema_format():
    assert "CREATE TABLE suppliers" in examples_text(Settings(schema_format="ddl"))
    assert "# Table: suppliers" in examples_text(Settings(schema_format="m-schema"))


def test_the_examples_leave_the_schema_its_share_of_the_prompt(demo_db):
    """A schema view may take all of the prompt budget but PROMPT_RESERVE; the rest of the fixer's
    prompt, its examples included, fits in that reserve."""
    (prompt,), _ = _fixer_prompts(demo_db)
    task = prompt.split("======= Your task =======")[1]
    view = task.split("Table creation statements\n", 1)[1].split("\n**************************\n", 1)[0]
    assert view.startswith("【DB_ID】") and "# Table: order_items" in view
    rest = prompt.replace(view, "")
    assert APPROXIMATE.count(examples_text(Settings())) < APPROXIMATE.count(rest) <= PROMPT_RESERVE


def test_a_users_examples_file_replaces_the_shipped_one(tmp_path):
    mine = {**EXAMPLES[0], "question": "Which suppliers are in France?", "answer": "Final Answer: SELECT name FROM suppliers"}
    (tmp_path / f"{NODE}_examples.json").write_text(json.dumps([mine]), encoding="utf-8")
    text = examples_text(Settings(examples_dir=str(tmp_path)))
    assert "Which suppliers are in France?" in text and "Example 2" not in text
    assert EXAMPLES[1]["question"] not in text
