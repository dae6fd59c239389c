"""Every engine's few-shot examples in its own SQL: the files ``prompts/examples_<dialect>.json``
are what ``scripts/build_dialect_examples.py`` gives (the carried text in process for every
engine; the whole build, run on the engine, for DuckDB in process and, slow, for PostgreSQL and
MariaDB servers the tests start), and each engine's prompts hold only its own examples."""

from __future__ import annotations

import json
import re

import pytest

import build_dialect_examples as build
from conftest import spider_db, spider_loader
from servers import allow_writable_role, mariadb_of_a_test, postgres_of_a_test
from sqlchorus import Session, prompts
from sqlchorus.config.settings import Settings
from sqlchorus.nodes.fix_candidates import examples_text
from sqlchorus.testing import ScriptedChatModel, oracle_model, prompt_text
from sqlchorus.tools.examples import fewshot

QUESTION = "How many singers are from France?"
GOLD = "SELECT count(*) FROM singer WHERE Country = 'France'"


def _shipped_file(dialect: str) -> dict:
    return json.loads(build.target(dialect).read_text(encoding="utf-8"))


@pytest.mark.parametrize("dialect", sorted(build.DIALECTS))
@pytest.mark.slow
def test_the_carried_text_is_what_the_build_gives(dialect):
    """Without running anything on an engine the build carries the same text; what only a run on
    the engine decides (the fixer's errors, examples the engine refuses) is left to the builds below."""
    shipped = _shipped_file(dialect)
    fresh = build.build(dialect, run=False)
    reasons = {(n["prompt"], n["index"]): n["reason"] for n in shipped["not_carried"]}
    engine = build.DIALECTS[dialect]
    assert fresh["examples"].keys() == shipped["examples"].keys()
    for prompt, items in fresh["examples"].items():
        assert len(items) == len(shipped["examples"][prompt]), prompt
        for i, (new, kept) in enumerate(zip(items, shipped["examples"][prompt])):
            if new is None:  # not carried for a reason of the text: the file says the same
                assert kept is None and reasons[(prompt, i)] == next(
                    n["reason"] for n in fresh["not_carried"] if (n["prompt"], n["index"]) == (prompt, i))
            elif kept is None:  # left out by the engine's run
                assert reasons[(prompt, i)].startswith(
                    (f"{engine} refuses", f"its query fails on {engine}", f"its failed query runs on {engine}")), \
                    reasons[(prompt, i)]
            else:
                assert {k: v for k, v in kept.items() if k != "result"} == new, (prompt, i)
    counts = shipped["counts"]
    assert counts["carried"] == sum(x is not None for items in shipped["examples"].values() for x in items)
    assert counts["examples"] - counts["carried"] == len(shipped["not_carried"])


@pytest.mark.slow
def test_the_duckdb_file_is_what_the_whole_build_gives():
    assert build.build("duckdb") == _shipped_file("duckdb")


@pytest.mark.slow
def test_the_postgresql_and_mariadb_files_are_what_the_whole_build_gives():
    with allow_writable_role():
        for postgres in postgres_of_a_test():
            assert build.build("postgres", postgres=postgres.url()) == _shipped_file("postgres")
    for maria in mariadb_of_a_test():
        assert build.build("mysql", mysql=maria.url("")) == _shipped_file("mysql")


@pytest.mark.parametrize("dialect", sorted(build.DIALECTS))
def test_most_examples_are_carried_and_the_rest_say_why(dialect):
    shipped = _shipped_file(dialect)
    assert shipped["counts"]["share"] >= 0.85
    for entry in shipped["not_carried"]:
        assert entry["reason"] and shipped["examples"][entry["prompt"]][entry["index"]] is None
    # An example left out is missing from the engine's examples, the others all there.
    pool = fewshot.pool(dialect=dialect)
    left_out = {n["question"] for n in shipped["not_carried"] if n["prompt"] == "fewshot_pool"}
    assert len(pool) == len(fewshot.pool()) - len(left_out)
    assert not {ex["question"] for ex in pool} & left_out


def test_the_fixers_examples_show_each_engines_own_errors():
    settings = Settings(schema_format="ddl", trace_dir=None)
    assert "no such column: supplier_name" in examples_text(settings)
    assert 'column "supplier_name" does not exist' in examples_text(settings, "postgres")
    assert "Unknown column 'supplier_name'" in examples_text(settings, "mysql")
    assert 'Referenced column "supplier_name" not found' in examples_text(settings, "duckdb")


# -- the prompts of a run ------------------------------------------------------------------------


def _prompts_of_a_run(db: str, tmp_path, gold: str = GOLD) -> str:
    """Every prompt of a run of the full preset (every generator) over ``db``, one text."""
    seen: list[str] = []
    inner = oracle_model({QUESTION: gold}.get).responses

    def respond(messages):
        seen.append(prompt_text(messages))
        return inner(messages)

    settings = Settings(model=ScriptedChatModel(respond, name="recorder"), preset="full", cache=False,
                        trace_dir=str(tmp_path / "traces"), checkpoints=str(tmp_path / "checkpoints.sqlite"),
                        value_cache_dir=str(tmp_path / "values"))
    with Session(settings) as session:
        result = session.ask(QUESTION, db)
    assert result.ok and result.rows == [[4]], result.error
    return "\n".join(seen)


def _sql_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(r"\*\*(?:Pseudo SQL|SQL):\*\*", line)]


def _not_carried(dialect: str, prompt: str) -> list[str]:
    return [n["question"] for n in _shipped_file(dialect)["not_carried"] if n["prompt"] == prompt]


def test_sqlite_prompts_keep_sqlites_examples(tmp_path):
    text = _prompts_of_a_run(str(spider_db("concert_singer")), tmp_path)
    assert "STRFTIME('%Y'" in text and "DATE_FORMAT(" not in text and "TO_CHAR(" not in text


def test_duckdb_prompts_hold_only_duckdbs_examples(tmp_path):
    spider_loader().load_database(spider_db("concert_singer"), duckdb_path=tmp_path / "db")
    text = _prompts_of_a_run(str(tmp_path / "db" / "concert_singer.duckdb"), tmp_path)
    assert "STRFTIME(CAST(" in text  # DuckDB's strftime takes the date first
    assert not re.search(r"STRFTIME\('%", text, re.IGNORECASE), "SQLite's strftime in a DuckDB prompt"
    assert "SQLite" not in text and "DuckDB" in text
    assert not any("`" in line for line in _sql_lines(text)), "backquoted names in DuckDB's SQL"
    for question in _not_carried("duckdb", "generate_divide_conquer"):
        assert question not in text


@pytest.mark.slow
def test_postgresql_prompts_hold_only_postgresqls_examples(tmp_path):
    with allow_writable_role():
        for server in postgres_of_a_test():
            spider_loader().load_database(spider_db("concert_singer"), postgres_url=server.url())
            # PostgreSQL folds unquoted names to lower case: Spider's capitalised column is quoted.
            text = _prompts_of_a_run(server.url("concert_singer"), tmp_path, GOLD.replace("Country", '"Country"'))
    assert "TO_CHAR(CAST(" in text and "STRFTIME" not in text.upper()
    assert "SQLite" not in text and "PostgreSQL" in text
    assert _sql_lines(text) and not any("`" in line for line in _sql_lines(text))


@pytest.mark.slow
def test_mysql_prompts_hold_only_mysqls_examples(tmp_path):
    with allow_writable_role():
        for server in mariadb_of_a_test():
            spider_loader().load_database(spider_db("concert_singer"), mysql_url=server.url(""))
            text = _prompts_of_a_run(server.url("concert_singer"), tmp_path)
    assert "DATE_FORMAT(" in text and "STRFTIME" not in text.upper()
    assert "SQLite" not in text and "MySQL" in text and "backticks" in text
    # The divide-and-conquer answers quote every name, with MySQL's backticks, never double quotes.
    assert any("`T1`.`" in line for line in _sql_lines(text))
    assert not re.search(r'"T\d"\.', text)


def test_prompt_files_name_each_engine():
    for dialect, name in (("postgres", "PostgreSQL"), ("duckdb", "DuckDB"), ("mysql", "MySQL")):
        text = prompts.for_dialect(prompts.load("generate_divide_conquer"), dialect)
        assert "SQLite" not in text and name in text
    mysql = prompts.for_dialect(prompts.load("generate_query_plan"), "mysql")
    assert "CAST to DOUBLE" in mysql and "backticks" in prompts.for_dialect(prompts.load("nrep_system"), "mysql")
