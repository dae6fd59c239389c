"""The few-shot pool over Spider's train schemas, and retrieval from it by similarity."""

from __future__ import annotations

import json

import pytest
from sqlglot import exp
from sqlglot.optimizer.qualify import qualify

import sqlchorus
from conftest import Recorder, data_dir, spider_examples
from sqlchorus.config.settings import Settings
from sqlchorus.testing import ScriptedChatModel, current_call, prompt_text
from sqlchorus.tools.examples import fewshot
from sqlchorus.tools.sql import text as sql_text
from sqlchorus.tools.schema.views import SCHEMA_FORMATS, render_view

POOL = fewshot.pool()


def _dev_db_ids() -> set[str]:
    found: set[str] = set()
    for path in (data_dir() / "spider" / "dev.json", data_dir() / "bird" / "dev.json"):
        if path.exists():
            found |= {row["db_id"] for row in json.loads(path.read_text())}
    return found


def test_the_pool_is_large_enough_and_has_hints():
    assert len(POOL) >= 60
    assert sum(1 for ex in POOL if ex["evidence"]) >= 20
    assert len({ex["question"] for ex in POOL}) == len(POOL)


def test_no_example_is_over_a_dev_database():
    dev = _dev_db_ids()
    if not dev:
        pytest.skip("no benchmark data")
    assert not {ex["db_id"] for ex in POOL} & dev


def test_the_schemas_are_spiders_train_schemas():
    tables = data_dir() / "spider" / "tables.json"
    if not tables.exists():
        pytest.skip("no benchmark data")
    entries = {e["db_id"]: e for e in json.loads(tables.read_text())}
    for ex in POOL:
        assert ex["schema"] == fewshot.compact_schema(entries[ex["db_id"]]), ex["db_id"]


@pytest.mark.parametrize("ex", POOL, ids=lambda ex: ex["question"][:40])
def test_every_query_parses_and_names_only_its_schemas_tables_and_columns(ex):
    """The train databases are not available as SQLite files, so the queries cannot run:
    sqlglot resolves every table and column against the schema instead."""
    mapping = {t["name"].lower(): {c[0].lower(): "TEXT" for c in t["columns"]} for t in ex["schema"]["tables"]}
    tree = sql_text.parse_one(ex["sql"])
    assert {t.name.lower() for t in tree.find_all(exp.Table)} <= set(mapping)
    qualify(tree, schema=mapping, dialect="sqlite", validate_qualify_columns=True)
    assert fewshot.links_of(ex)


def test_the_check_catches_an_unknown_column():
    mapping = {"head": {"name": "TEXT"}}
    with pytest.raises(Exception):
        qualify(sql_text.parse_one("SELECT T1.age FROM head AS T1"), schema=mapping, dialect="sqlite",
                validate_qualify_columns=True)


def _pool(*rows):
    schema = {"name": "s", "tables": [{"name": "t", "columns": [["a", "TEXT"], ["b", "NUMBER"]],
                                       "primary_key": [], "foreign_keys": []}]}
    return [{"db_id": "s", "question": q, "evidence": e, "sql": sql, "schema": schema} for q, e, sql in rows]


def test_the_most_similar_questions_rank_first():
    cases = [
        ("How many heads of the departments are older than 60?", "How many heads of the departments are older than 56 ?"),
        ("Which singer has the most concerts?", "Which artist has the most songs? Give the artist's name and country."),
        ("List the students who have no pets.", "What are the last names of students who have no allergies?"),
        ("Which cities have both a large and a small branch?",
         "Which cities have both a bank branch with more than 300 customers and one with fewer than 100 customers?"),
    ]
    for question, first in cases:
        assert fewshot.most_similar(POOL, question, 3)[0]["question"] == first, question


def test_the_skeleton_a_question_asks_for_breaks_a_tie_of_words():
    pool = _pool(("Show the items of t.", "", "SELECT a FROM t"),
                 ("Show the items of t.", "", "SELECT a FROM t ORDER BY b DESC LIMIT 1"))
    assert fewshot.most_similar(pool, "Show the item of t with the highest b", 1)[0]["sql"].endswith("LIMIT 1")


def test_examples_with_hints_come_first_among_equals_for_a_question_with_a_hint():
    pool = _pool(("How many rows does t have?", "", "SELECT count(*) FROM t"),
                 ("How many rows does t have?", "rows refers to t.a", "SELECT count(*) FROM t"))
    assert fewshot.most_similar(pool, "How many rows does t have?!", 1, evidence="a hint")[0]["evidence"]
    assert not fewshot.most_similar(pool, "How many rows does t have?!", 1)[0]["evidence"]


def test_a_bird_question_with_a_hint_gets_examples_with_hints():
    chosen = fewshot.most_similar(POOL, "What is the average balance of the accounts in Prague?", 3,
                                  evidence="Prague refers to A3 = 'Prague'")
    assert all(ex["evidence"] for ex in chosen)


def test_an_embedder_changes_the_ranking_deterministically():
    question = "How many heads of the departments are older than 60?"

    def embed(texts):  # a deterministic stand-in that likes texts about wine
        return [[1.0 if "wine" in t.lower() else 0.0, 1.0 if "wine" not in t.lower() else 0.1] for t in texts]

    lexical = fewshot.most_similar(POOL, question, 3)
    embedded = fewshot.most_similar(POOL, question, 3, embed=embed)
    assert embedded != lexical
    assert fewshot.most_similar(POOL, question, 3, embed=embed) == embedded
    assert fewshot.most_similar(POOL, question, 3) == lexical
    assert fewshot.most_similar(POOL, question, 0) == []


def test_the_question_itself_is_never_its_own_example():
    question = POOL[0]["question"]
    assert all(ex["question"] != question for ex in fewshot.most_similar(POOL, question, 5))


@pytest.mark.parametrize("fmt", SCHEMA_FORMATS)
def test_link_schema_shows_the_examples_schemas_in_the_runs_format(fmt, spider):
    question = "How many singers do we have?"
    seen = []

    def respond(messages):
        node = current_call().get("node")
        if node == "link_schema":
            seen.append(prompt_text(messages))
            return "Schema_links: [singer.*]"
        return "['singers']" if node == "extract_keywords" else "SELECT count(*) FROM singer"

    settings = Settings(generators={"direct": 1}, schema_format=fmt, trace_dir=None, cache=False)
    sqlchorus.ask(question, db=spider("concert_singer"), model=ScriptedChatModel(respond), settings=settings)
    prompt = seen[0]
    shots = fewshot.retrieve(fewshot.POOL, question, 10)
    shown = [ex for ex in shots if f'Q: "{ex["question"]}"' in prompt]
    # as many as the examples' token budget holds: JSON schemas are the longest
    assert len(shown) >= (3 if fmt == "json" else 5) and shown[0] == shots[0]
    schema = render_view(fewshot.schema_of(shown[0]["schema"]), fmt, sample_values=0)
    assert schema in prompt
    assert prompt.count("Schema_links: [") >= len(shown)


def test_nrep_prompts_show_the_retrieved_examples(spider):
    examples = spider_examples("concert_singer")
    gold = {ex["question"]: ex["query"].strip().rstrip(";").strip() for ex in examples}
    question = next(q for q in gold if q.lower().startswith("how many"))
    recorder = Recorder(gold)
    settings = Settings(model=ScriptedChatModel(recorder), generators={"nrep": 1}, trace_dir=None)
    sqlchorus.ask(question, db=spider("concert_singer"), settings=settings)
    expected = fewshot.retrieve("nrep_generate", question, 3)
    for prompt in recorder.of("nrep:generation"):
        assert all(f"Question: {ex['question']}\n" in prompt for ex in expected)
    for prompt in recorder.of("nrep:linking"):
        assert all(f"Question: {ex['question']}\n" in prompt for ex in fewshot.retrieve("nrep_link", question, 3))
