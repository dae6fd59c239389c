"""A schema that fits the prompt budget reaches the prompt whole; one that does not is narrowed
until every call fits.

BIRD ships schemas and description files but no databases: the databases here are built from
``dev_tables.json``, with three rows per table so that every column has three sample values, as
a real database's view shows them.
"""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest

import sqlchorus
from conftest import data_dir
from sqlchorus.config.settings import Settings
from sqlchorus.core.budget import PROMPT_RESERVE, schema_budget
from sqlchorus.core.context import Context
from sqlchorus.testing import ScriptedChatModel, oracle_model
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.schema.introspect import introspect, schema_only_database, schema_only_ddl
from sqlchorus.tools.engines.catalog import quote_identifier
from sqlchorus.tools.models.tokens import APPROXIMATE
from sqlchorus.tools.schema.views import render_view

OLD_CAP = 5_000
"""The schema view's former bound, under which california_schools lost columns."""


def _bird():
    bird = data_dir() / "bird"
    if not (bird / "dev_tables.json").exists():
        pytest.skip(f"BIRD dev schemas not found under {data_dir()}")
    return bird


def _questions(bird, db_id):
    return [ex for ex in json.loads((bird / "dev.json").read_text(encoding="utf-8")) if ex["db_id"] == db_id]


def _with_samples(path):
    """Three rows per table, so each column shows three sample values."""
    schema = introspect(GuardedDatabase(path), sample_values=0)
    conn = sqlite3.connect(path)
    with conn:
        for table in schema.tables:
            names = ", ".join(quote_identifier(c.name) for c in table.columns)
            marks = ", ".join("?" * len(table.columns))
            for i in range(3):
                row = [i if any(t in c.type for t in ("INT", "REAL", "NUM")) else f"{c.name} example {i + 1}"
                       for c in table.columns]
                conn.execute(f"INSERT INTO {quote_identifier(table.name)} ({names}) VALUES ({marks})", row)
    conn.close()
    return path


@pytest.fixture(scope="module")
def california_schools(tmp_path_factory):
    bird = _bird()
    entry = next(e for e in json.loads((bird / "dev_tables.json").read_text(encoding="utf-8"))
                 if e["db_id"] == "california_schools")
    folder = tmp_path_factory.mktemp("bird") / "california_schools"
    path = schema_only_database(entry, folder / "california_schools.sqlite")
    shutil.copytree(bird / "dev_databases" / "california_schools" / "database_description",
                    folder / "database_description")
    return _with_samples(path)


@pytest.fixture(scope="module")
def bird_union(tmp_path_factory):
    """The eleven BIRD dev schemas in one database (75 tables), as benchmarks/large_schema.py
    builds it."""
    bird = _bird()
    folder = tmp_path_factory.mktemp("union")
    (folder / "database_description").mkdir()
    path = folder / "bird_union.sqlite"
    conn = sqlite3.connect(path)
    with conn:
        for entry in json.loads((bird / "dev_tables.json").read_text(encoding="utf-8")):
            for statement in schema_only_ddl(entry):
                conn.execute(statement)
            for csv in (bird / "dev_databases" / entry["db_id"] / "database_description").glob("*.csv"):
                shutil.copy(csv, folder / "database_description" / csv.name)
    conn.close()
    return path


class RecordingModel(ScriptedChatModel):
    """Records each prompt's role, approximate size and text."""

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        text = "\n".join(str(m.content) for m in messages)
        role = (getattr(run_manager, "metadata", None) or {}).get("sqlchorus_role")
        self.__dict__.setdefault("seen", []).append(
            (role, APPROXIMATE.count_messages([str(m.content) for m in messages]), text))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def _ask(db, ex, tmp_path, **settings):
    model = RecordingModel(oracle_model(lambda q: ex["SQL"]).responses, name="recording")
    result = sqlchorus.ask(ex["question"], db=db, evidence=ex.get("evidence") or "", settings=Settings(
        model=model, trace_dir=None, cache=False, value_cache_dir=str(tmp_path / "values"), **settings))
    return result, model.__dict__.get("seen", [])


def _narrowed(result):
    return [e["message"] for e in result.errors if e["kind"] == "narrowed"]


@pytest.mark.parametrize("preset", ["fast", "balanced", "full"])
def test_california_schools_reaches_the_prompt_whole(california_schools, tmp_path, preset):
    schema = introspect(GuardedDatabase(california_schools))
    whole = render_view(schema, "m-schema")
    # Over the former 5,000-token bound with its sample values, well under the prompt budget.
    assert OLD_CAP < APPROXIMATE.count(whole) < Settings().max_prompt_tokens - PROMPT_RESERVE
    ex = _questions(_bird(), "california_schools")[0]
    result, seen = _ask(california_schools, ex, tmp_path, preset=preset)
    assert result.ok, result.error
    assert not _narrowed(result)
    columns = [c.name for t in schema.tables for c in t.columns]
    # link_schema's call sees the full view, and so does divide-and-conquer's (balanced generates
    # over N-rep's views of the linked tables instead).
    shown = [text for role, _, text in seen if role == "linking"][:1]
    if preset != "balanced":
        shown += [text for role, _, text in seen if role == "generation"][:1]
    assert len(shown) == (1 if preset == "balanced" else 2)
    for text in shown:
        assert all(f"# Table: {t.name}" in text for t in schema.tables)
        assert all(f"({column}:" in text for column in columns)
    assert all(tokens <= Settings().max_prompt_tokens for _, tokens, _ in seen)


def test_california_schools_is_narrowed_for_a_smaller_budget(california_schools, tmp_path):
    ex = _questions(_bird(), "california_schools")[0]
    result, seen = _ask(california_schools, ex, tmp_path, preset="balanced", max_prompt_tokens=8_000)
    assert result.ok, result.error
    (note,) = _narrowed(result)
    assert note.startswith("The schema was narrowed to fit the prompt")
    assert seen and all(tokens <= 8_000 for _, tokens, _ in seen)


def test_an_explicit_schema_bound_still_narrows(california_schools, tmp_path):
    ex = _questions(_bird(), "california_schools")[0]
    result, _ = _ask(california_schools, ex, tmp_path, preset="fast", max_schema_tokens=OLD_CAP)
    assert result.ok and _narrowed(result)


@pytest.mark.parametrize("preset", ["fast", "balanced", "full"])
@pytest.mark.slow
def test_every_call_on_the_bird_union_fits_the_budget(bird_union, tmp_path, preset):
    """75 tables, 798 columns: narrowed where a view would not fit, and no call is over budget,
    even with a hint thousands of tokens long beside a view that fills the rest of the prompt."""
    bird = _bird()
    ex = next(e for e in _questions(bird, "european_football_2") if e.get("evidence"))
    long_hint = {**ex, "evidence": ex["evidence"] + " " + "; ".join(
        f"note {i}: the rating is a value between 0 and 100" for i in range(150))}
    for asked, budget in ((ex, 32_000), (ex, 20_000), (long_hint, 24_000)):
        result, seen = _ask(bird_union, asked, tmp_path, preset=preset, max_prompt_tokens=budget)
        assert result.ok, result.error
        assert not [e for e in result.errors if "over its budget" in e.get("message", "")]
        assert seen and all(tokens <= budget for _, tokens, _ in seen)
        if budget < 24_000 or asked is long_hint:
            assert _narrowed(result)


def test_the_question_and_hint_are_kept_beside_the_schema():
    model = ScriptedChatModel(["x"])
    context = Context(db=None, models={"generation": model}, settings=Settings(model=model), schema=None)
    assert schema_budget(context) == 32_000 - PROMPT_RESERVE
    hint = "x" * 6_000
    assert schema_budget(context, {"question": "abc", "evidence": hint}) == 32_000 - PROMPT_RESERVE - 1 - 2_000
    small = Settings(model=model, max_schema_tokens=OLD_CAP)
    assert schema_budget(Context(db=None, models={"generation": model}, settings=small, schema=None)) == OLD_CAP
