"""Narrowing by evidence: a gold column reachable only by a retrieved value, a foreign-key bridge,
the question's words or the hint's quoted name is kept, and is lost when that evidence is left
out; a per-question budget narrows a schema that fits one prompt but not every call of the
question, and a small schema still reaches the prompts whole."""

from __future__ import annotations

import sqlite3

import pytest

import sqlchorus
from conftest import area_tables, spider_db
from sqlchorus.config.settings import Settings
from sqlchorus.core.budget import NAMES, question_plan, schema_view
from sqlchorus.core.context import Context
from sqlchorus.testing import ScriptedChatModel, oracle_model
from sqlchorus.tools.engines.catalog import Column, DatabaseSchema, ForeignKey, Table
from sqlchorus.tools.schema.narrow import EVIDENCE
from sqlchorus.tools.models.tokens import APPROXIMATE

FILLER = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")


def _table(name: str, columns: list[str], fks=(), description: str | None = None) -> Table:
    cols = [Column("id", "INTEGER", primary_key=True)]
    cols += [Column(c, "TEXT", description=description and f"{description} {c.replace('_', ' ')}") for c in columns]
    return Table(name=name, columns=cols, foreign_keys=[ForeignKey(*fk) for fk in fks])


def _schema() -> DatabaseSchema:
    """Forty distractor tables that share the question's word ``year``, and the tables the
    questions need: a registry reachable by a value, a bridge between two named tables, a vessel
    table reachable by the question's words, a school table by the hint's quoted name."""
    tables = [_table(f"archive_{i}", [*(f"{w}_{i}" for w in FILLER), "year"], description="Archived record")
              for i in range(40)]
    tables += [
        _table("registry", ["code_value", "remark"]),
        _table("pilot", ["pilot_name", "licence"]),
        _table("roster", ["crew_ref", "craft_ref", "shift"],
               fks=[("crew_ref", "pilot", "id"), ("craft_ref", "aircraft", "id")]),
        _table("aircraft", ["model", "seats"]),
        _table("vessels", ["hull_length", "flag"]),
        _table("schools", ["Free Meal Count (K-12)", "Enrollment (K-12)", "district"]),
    ]
    return DatabaseSchema(name="many", tables=tables)


def _context(budget: int = 1_200) -> Context:
    model = ScriptedChatModel(["-"])
    return Context(db=None, models={"generation": model}, schema=_schema(),
                   settings=Settings(model=model, max_schema_tokens=budget))


def _details(state: dict, evidence) -> set[tuple[str, str]]:
    """The columns a narrowed full view shows in detail (the names-only tier left out, so that
    what the ranking keeps is what is measured)."""
    context = _context()
    view = schema_view(context, state, evidence=evidence)
    assert APPROXIMATE.count(view) <= 1_200
    narrowing = context.memo["last_narrowing"]
    return {(t.name, c.name) for t in narrowing.schema.tables for c in t.columns}


def _without(source: str) -> tuple[str, ...]:
    return tuple(e for e in EVIDENCE if e != source)


def test_a_column_reached_only_by_a_retrieved_value_is_kept():
    state = {"question": "Which year had an entry labelled Zebra Crossing?", "evidence": "",
             "values": {"registry.code_value": [{"value": "Zebra Crossing", "keyword": "Zebra Crossing"}]}}
    assert ("registry", "code_value") in _details(state, EVIDENCE)
    assert ("registry", "code_value") not in _details(state, _without("values"))


def test_the_table_bridging_two_named_tables_is_kept():
    state = {"question": "Which pilot name and aircraft model, in which year?", "evidence": ""}
    kept = _details(state, EVIDENCE)
    assert {("roster", "crew_ref"), ("roster", "craft_ref")} <= kept
    assert ("roster", "crew_ref") not in _details(state, _without("foreign_keys"))


def test_a_column_named_by_the_question_words_is_kept():
    state = {"question": "What is the hull length of the longest vessel, by year?", "evidence": ""}
    assert ("vessels", "hull_length") in _details(state, EVIDENCE)
    assert ("vessels", "hull_length") not in _details(state, _without("question"))


def test_a_column_the_hint_quotes_whole_is_kept():
    state = {"question": "What is the highest eligible rate in a year?",
             "evidence": "eligible free rate = `Free Meal Count (K-12)` / `Enrollment (K-12)`"}
    kept = _details(state, EVIDENCE)
    assert {("schools", "Free Meal Count (K-12)"), ("schools", "Enrollment (K-12)")} <= kept
    assert ("schools", "Free Meal Count (K-12)") not in _details(state, _without("hint"))


def test_the_names_tier_lists_what_the_details_leave_out_within_the_budget():
    context = _context()
    state = {"question": "What is the hull length of the longest vessel?", "evidence": ""}
    view = schema_view(context, state)
    assert APPROXIMATE.count(view) <= 1_200
    narrowing = context.memo["last_narrowing"]
    assert narrowing.listed and "Other columns, by name only" in view
    assert "more by name only" in narrowing.note()
    without = schema_view(_context(), state, evidence=EVIDENCE)
    assert "Other columns, by name only" not in without
    # Once a linker has chosen, later views show the details alone.
    linked = schema_view(_context(), {**state, "links": {"vessels": ["hull_length"]}})
    assert "Other columns, by name only" not in linked and "hull_length" in linked
    assert NAMES not in EVIDENCE


def test_balanced_plans_three_full_views_in_eight_calls():
    assert question_plan(Settings(model="scripted", preset="balanced")) == (8, 3)
    assert Settings(model="scripted", preset="balanced").max_question_tokens == 32_000
    assert Settings(model="scripted").max_question_tokens == 0


AREAS = ("fleet", "museum", "clinic", "school", "farm", "bank", "travel", "media")
NOUNS = ("vehicle", "permit", "visit", "member", "ticket", "asset", "claim", "route", "lease", "audit",
         "branch", "batch", "event", "review", "budget")
ATTRIBUTES = ("color", "status", "city", "category", "language", "priority", "rating", "weight")


@pytest.fixture(scope="module")
def large_db(tmp_path_factory):
    """120 tables of 10 columns with one row each: about 12,000 tokens whole, which fits one
    prompt but not the three full views of a balanced question within 32,000 tokens."""
    path = tmp_path_factory.mktemp("large") / "large.sqlite"
    conn = sqlite3.connect(path)
    with conn:
        for table in area_tables(conn, AREAS, NOUNS, ATTRIBUTES):
            noun = table.split("_", 1)[1]
            conn.execute(f"INSERT INTO {table} (id, {noun}_{ATTRIBUTES[0]}) VALUES (1, 'red')")
    conn.close()
    return path


class RecordingModel(ScriptedChatModel):
    """Records each prompt's approximate size."""

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.__dict__.setdefault("seen", []).append(APPROXIMATE.count_messages([str(m.content) for m in messages]))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def _ask(db, question, sql, tmp_path, **settings):
    model = RecordingModel(oracle_model(lambda q: sql).responses, name="recording")
    result = sqlchorus.ask(question, db=db, settings=Settings(
        model=model, trace_dir=None, cache=False, value_cache_dir=str(tmp_path / "values"), **settings))
    return result, model.__dict__.get("seen", [])


@pytest.mark.slow
def test_a_per_question_budget_narrows_a_schema_that_fits_one_prompt(large_db, tmp_path):
    question = "How many fleet vehicle records have the vehicle color red?"
    sql = "SELECT COUNT(*) FROM fleet_vehicle WHERE vehicle_color = 'red'"
    result, seen = _ask(large_db, question, sql, tmp_path, preset="balanced")
    assert result.ok and result.rows == [[1]]
    assert [e for e in result.errors if e["kind"] == "narrowed"]
    assert sum(seen) <= 32_000
    # Without the per-question budget the same schema fits each prompt, and is shown whole.
    whole, seen_whole = _ask(large_db, question, sql, tmp_path, preset="balanced", max_question_tokens=0)
    assert whole.ok and not [e for e in whole.errors if e["kind"] == "narrowed"]
    assert sum(seen_whole) > 32_000


def test_a_small_schema_reaches_a_balanced_question_whole(tmp_path):
    db = spider_db("concert_singer")
    if not db.exists():
        pytest.skip("Spider databases not found")
    result, _ = _ask(db, "How many singers are there?", "SELECT count(*) FROM singer", tmp_path, preset="balanced")
    assert result.ok
    assert not [e for e in result.errors if e["kind"] == "narrowed"]
