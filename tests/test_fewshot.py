"""Few-shot examples: shipped files, user replacements, train-style loaders, links from SQL."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, REPO, data_dir
from sqlchorus import prompts
from sqlchorus.config.settings import Settings
from sqlchorus.tools.examples import fewshot
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.schema.introspect import schema_only_database

FEWSHOT = FIXTURES / "fewshot"
OURS = ["din_classify", "din_easy", "din_medium", "din_hard"]


def _dev_questions() -> set[str]:
    root = data_dir()
    found: set[str] = set()
    for path in (root / "spider" / "dev.json", root / "bird" / "dev.json"):
        if path.exists():
            found |= {" ".join(ex["question"].lower().split()) for ex in json.loads(path.read_text())}
    return found


def test_no_dev_question_among_shipped_examples():
    dev = _dev_questions()
    if not dev:
        pytest.skip("no benchmark data")
    for name in prompts.names():
        try:
            shots = prompts.examples(name)
        except FileNotFoundError:
            continue
        for shot in shots:
            assert " ".join(shot["question"].lower().split()) not in dev, (name, shot["question"])


@pytest.mark.parametrize("name", OURS)
def test_shipped_example_sql_runs_on_its_schema(name, tmp_path):
    """Each example's SQL is valid against its own schema (an empty database built from it)."""
    for i, ex in enumerate(prompts.examples(name)):
        schema = ex["schema"]
        entry = {
            "db_id": schema["name"],
            "table_names_original": [t["name"] for t in schema["tables"]],
            "column_names_original": [[ti, c[0]] for ti, t in enumerate(schema["tables"]) for c in t["columns"]],
            "column_types": [c[1] or "others" for t in schema["tables"] for c in t["columns"]],
            "primary_keys": [], "foreign_keys": [],
        }
        path = schema_only_database(entry, tmp_path / f"{name}-{i}.sqlite")
        with GuardedDatabase(path) as db:
            db.execute(ex["sql"])
        assert fewshot.links_of(ex), ex["question"]


@pytest.mark.parametrize("case", json.loads((FEWSHOT / "sql_links.json").read_text()), ids=lambda c: c["sql"][:40])
def test_sql_links(case):
    tables = json.loads((FEWSHOT / "tables.json").read_text())
    schema = fewshot.schema_of(fewshot.compact_schema(tables[0]))
    assert fewshot.sql_links(case["sql"], schema) == case["expected"]


def test_spider_train_file():
    examples = fewshot.load_train_file(FEWSHOT / "spider_train.json", FEWSHOT / "tables.json")
    assert [ex["db_id"] for ex in examples] == ["farm", "farm", "department_management"]
    assert examples[1]["sql"] == "SELECT Theme FROM farm_competition ORDER BY YEAR ASC"
    assert examples[1]["links"] == {"farm_competition": ["Year", "Theme"]}
    assert examples[0]["evidence"] == ""
    assert examples[0]["schema"]["name"] == "farm"


def test_bird_train_file_keeps_evidence_and_excludes_evaluation_questions():
    examples = fewshot.load_train_file(
        FEWSHOT / "bird_train.json", FEWSHOT / "tables.json",
        exclude_questions=["  how many HEADS are older than the oldest acting manager? "],
    )
    assert [ex["question"] for ex in examples] == ["What is the official name of the city with the largest area?"]
    assert examples[0]["evidence"] == "largest area refers to MAX(Area_km_2)"
    assert examples[0]["links"] == {"city": ["Official_Name", "Area_km_2"]}
    assert len(fewshot.load_train_file(FEWSHOT / "spider_train.json", FEWSHOT / "tables.json", limit=2)) == 2


def test_a_loaded_file_replaces_the_shipped_examples(tmp_path):
    loaded = fewshot.load_train_file(FEWSHOT / "spider_train.json", FEWSHOT / "tables.json")
    fewshot.write_examples(loaded, tmp_path / "nrep_generate_examples.json")
    settings = Settings(examples_dir=str(tmp_path))
    assert fewshot.examples("nrep_generate", settings) == json.loads(json.dumps(loaded))
    # N-rep's generation retrieves from the user's file; its linking, without one, from the pool
    assert fewshot.pool_for("nrep_generate", settings) == json.loads(json.dumps(loaded))
    assert fewshot.pool_for("nrep_link", settings) == fewshot.pool()
    assert fewshot.pool_for("nrep_generate") == fewshot.pool()


@pytest.mark.parametrize("content", ["not json", '{"question": "x"}', '[{"sql": "SELECT 1"}]'])
def test_a_broken_replacement_file_is_refused(tmp_path, content):
    (tmp_path / "din_easy_examples.json").write_text(content)
    with pytest.raises(fewshot.ExamplesFileError):
        fewshot.examples("din_easy", Settings(examples_dir=str(tmp_path)))


def test_most_similar_examples():
    pool = fewshot.pool()
    chosen = fewshot.most_similar(pool, "How many heads of the departments are older than 60?", 3)
    assert len(chosen) == 3
    assert chosen[0]["question"] == "How many heads of the departments are older than 56 ?"
    assert fewshot.most_similar(pool, "anything", 0) == []


def test_examples_dir_reaches_every_generator_prompt(tmp_path):
    """A replacement file in examples_dir is what the spine's prompts show."""
    import json as _json

    import sqlchorus
    from sqlchorus.testing import ScriptedChatModel, prompt_text

    marker = "How many unicorns live in the replacement file?"
    shipped = _json.loads((REPO / "prompts" / "generate_divide_conquer_examples.json").read_text())
    (tmp_path / "generate_divide_conquer_examples.json").write_text(
        _json.dumps([{**shipped[0], "question": marker}]))
    seen = []

    def respond(messages):
        seen.append(prompt_text(messages))
        return "**Final Optimized SQL Query:**\nSELECT count(*) FROM customers"

    result = sqlchorus.ask("How many customers do we have?", model=ScriptedChatModel(respond),
                           settings=sqlchorus.Settings(examples_dir=str(tmp_path), trace_dir=None, cache=False))
    assert result.ok
    assert any(marker in p for p in seen)
