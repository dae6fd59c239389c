"""The prompt budget: every call fits, a schema too large for a prompt is narrowed to what the
question needs, and a question has a size limit."""

from __future__ import annotations

import json
import sqlite3

import pytest
from click.testing import CliRunner

import sqlchorus
from conftest import area_tables
from sqlchorus.config.errors import QuestionTooLongError
from sqlchorus.interfaces.cli import cli
from sqlchorus.testing import ScriptedChatModel, oracle_model
from sqlchorus.tools.engines.catalog import Column, DatabaseSchema, ForeignKey, Table
from sqlchorus.tools.schema.narrow import narrow_schema, rank_columns, subset
from sqlchorus.tools.models.tokens import APPROXIMATE, approximate_tokens, tiktoken_counter
from sqlchorus.tools.schema.views import render_view

AREAS = ("sales", "billing", "fleet", "clinic", "school", "museum", "energy", "travel", "farm", "legal")
NOUNS = ("customer", "invoice", "vehicle", "visit", "course", "ticket", "meter", "booking", "field",
         "contract", "asset", "route", "member", "review", "permit")
ATTRIBUTES = ("amount", "status", "city", "rating", "weight", "priority", "color", "capacity")


@pytest.fixture(scope="module")
def wide_db(tmp_path_factory):
    """150 tables in 10 areas, 10 columns each, each joined to the first table of its area."""
    path = tmp_path_factory.mktemp("wide") / "wide.sqlite"
    conn = sqlite3.connect(path)
    with conn:
        area_tables(conn, AREAS, NOUNS, ATTRIBUTES)
        conn.execute("INSERT INTO fleet_vehicle (id, vehicle_color) VALUES (1, 'red'), (2, 'blue')")
    conn.close()
    return path


QUESTION = "How many fleet vehicle records have the vehicle color red?"
GOLD = {QUESTION: "SELECT COUNT(*) FROM fleet_vehicle WHERE vehicle_color = 'red'"}


class RecordingModel(ScriptedChatModel):
    """Records each prompt's approximate size and the role it was sent for."""

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.__dict__.setdefault("seen", []).append(
            ((getattr(run_manager, "metadata", None) or {}).get("sqlchorus_role"), APPROXIMATE.count_messages([str(m.content) for m in messages]),
             "\n".join(str(m.content) for m in messages)))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def _model(**kwargs):
    return RecordingModel(oracle_model(GOLD.get).responses, name="recording", **kwargs)


# -- counting ----------------------------------------------------------------------------------


def test_the_approximation_counts_ascii_by_threes_and_other_characters_one_each():
    assert approximate_tokens("") == 0
    assert approximate_tokens("abcdef") == 2
    assert approximate_tokens("abcdefg") == 3
    assert approximate_tokens("有多少歌手") == 5
    assert APPROXIMATE.count_messages(["abc", "abc"]) == 2 + 2 * 4


def test_openai_models_are_counted_with_tiktoken_even_offline():
    counter = tiktoken_counter("gpt-4o")
    assert counter is not None and counter.name == "tiktoken o200k_base"
    assert counter.count("hello world") == 2


def test_a_model_profile_lowers_the_budget_and_a_local_model_reports_its_window():
    from sqlchorus.config.settings import Settings
    from sqlchorus.core.budget import context_window, prompt_budget, schema_budget
    from sqlchorus.core.context import Context
    from sqlchorus.core.local_model import ChatLlamaCpp

    small = ScriptedChatModel(["x"], profile={"max_input_tokens": 6000})
    context = Context(db=None, models={"generation": small}, settings=Settings(model=small), schema=None)
    assert prompt_budget(context, "generation") == 6000
    assert schema_budget(context) == 2000
    tiny = ScriptedChatModel(["x"], profile={"max_input_tokens": 3000})
    assert schema_budget(Context(db=None, models={"generation": tiny}, settings=Settings(model=tiny), schema=None)) == 750
    assert context_window(ChatLlamaCpp(model_path="x.gguf", n_ctx=4096, max_tokens=512)) == 8192 - 512


# -- ranking and narrowing ---------------------------------------------------------------------


def _schema() -> DatabaseSchema:
    def table(name, *cols, fks=()):
        return Table(name=name, columns=[Column("id", "INTEGER", primary_key=True), *(Column(c, "TEXT") for c in cols)],
                     foreign_keys=[ForeignKey(*fk) for fk in fks])

    return DatabaseSchema(name="shop", tables=[
        table("singer", "name", "country", "age"),
        table("concert", "venue", "year", "singer_id", fks=[("singer_id", "singer", "id")]),
        table("stadium", "capacity", "city"),
        table("ticket", "price", "concert_id", fks=[("concert_id", "concert", "id")]),
    ])


def test_linked_columns_come_first_then_the_tables_the_question_names():
    ranked = rank_columns(_schema(), "Which singers from France sang in a concert?", links={"stadium": ["city"]})
    assert ranked[0] == ("stadium", "city")
    tables_in_order = list(dict.fromkeys(t for t, _ in ranked[1:]))
    assert set(tables_in_order[:2]) == {"singer", "concert"}
    assert len(ranked) == sum(len(t.columns) for t in _schema().tables)


def test_a_column_described_in_the_question_ranks_above_its_neighbours():
    schema = _schema()
    schema.tables[2].columns[1].description = "How many people the stadium seats"
    ranked = rank_columns(schema, "Which stadium seats the most people?")
    stadium = [c for t, c in ranked if t == "stadium"]
    assert stadium.index("capacity") < stadium.index("city")


def test_a_subset_keeps_the_keys_that_join_what_it_shows():
    part = subset(_schema(), {"ticket": ["price"], "singer": ["name"], "concert": []})
    shown = {t.name: [c.name for c in t.columns] for t in part.tables}
    assert shown == {"singer": ["id", "name"], "concert": ["id", "singer_id"], "ticket": ["id", "price", "concert_id"]}
    assert [fk.ref_table for fk in part.table("ticket").foreign_keys] == ["concert"]


def test_narrowing_keeps_the_longest_prefix_that_fits_and_says_what_it_left_out():
    schema = _schema()
    ranked = rank_columns(schema, "How old is each singer?")
    whole = approximate_tokens(render_view(schema, "m-schema"))
    budget = whole // 2
    narrowing = narrow_schema(schema, ranked, lambda s: approximate_tokens(render_view(s, "m-schema")) <= budget)
    assert narrowing is not None
    assert approximate_tokens(render_view(narrowing.schema, "m-schema")) <= budget
    assert "singer" in {t.name for t in narrowing.schema.tables}
    assert narrowing.left_out_tables and narrowing.left_out_tables[0] not in {t.name for t in narrowing.schema.tables}
    assert narrowing.note().startswith("The schema was narrowed to fit the prompt:")
    assert narrow_schema(schema, ranked, lambda s: True) is None


# -- a run on a wide schema ----------------------------------------------------------------------


@pytest.mark.slow
def test_every_call_fits_the_budget_and_the_run_says_what_was_left_out(wide_db, tmp_path):
    model = _model()
    settings = sqlchorus.Settings(model=model, trace_dir=str(tmp_path), max_schema_tokens=1500,
                                  value_cache_dir=str(tmp_path / "values"), preset="balanced")
    result = sqlchorus.ask(QUESTION, db=wide_db, settings=settings)
    assert result.ok and result.rows == [[1]]
    seen = model.__dict__["seen"]
    assert seen and all(tokens <= settings.max_prompt_tokens for _, tokens, _ in seen)
    linking = [text for role, _, text in seen if role == "linking"]
    assert linking and all("fleet_vehicle" in text and "museum_permit" not in text for text in linking)
    notes = [e["message"] for e in result.errors if e["kind"] == "narrowed"]
    assert len(notes) == 1 and "of 150 tables" in notes[0]
    spans = [json.loads(line) for line in open(result.trace_path, encoding="utf-8")]
    link = next(s for s in spans if s["name"] == "node:link_schema")
    assert link["attributes"]["sqlchorus.schema.narrowed"].startswith("The schema was narrowed")
    calls = [s for s in spans if s["attributes"].get("gen_ai.operation.name") == "chat"]
    assert calls and all(s["attributes"]["sqlchorus.prompt.tokens"] <= s["attributes"]["sqlchorus.prompt.budget"] for s in calls)
    assert {s["attributes"]["sqlchorus.prompt.tokenizer"] for s in calls} == {APPROXIMATE.name}


def test_a_model_with_a_small_window_gets_a_smaller_schema(wide_db, tmp_path):
    model = _model(profile={"max_input_tokens": 6000})
    settings = sqlchorus.Settings(model=model, trace_dir=None, value_cache_dir=str(tmp_path / "values"), preset="fast")
    result = sqlchorus.ask(QUESTION, db=wide_db, settings=settings)
    assert result.ok
    assert all(tokens <= 6000 for _, tokens, _ in model.__dict__["seen"])


def test_a_prompt_over_its_budget_is_not_sent(wide_db, tmp_path):
    model = _model(profile={"max_input_tokens": 600})
    settings = sqlchorus.Settings(model=model, trace_dir=None, value_cache_dir=str(tmp_path / "values"), preset="fast")
    result = sqlchorus.ask(QUESTION, db=wide_db, settings=settings)
    assert not result.ok
    assert all(tokens <= 600 for _, tokens, _ in model.__dict__.get("seen", []))
    assert any("over its budget of 600" in e["message"] and "not sent" in e["message"] for e in result.errors)


def test_a_small_schema_is_never_narrowed(demo_db, tmp_path):
    questions = {q["question"]: q["sql"] for q in sqlchorus.runs.demo.load_demo_questions()}
    model = oracle_model(questions.get)
    result = sqlchorus.ask("How many customers do we have?", db=demo_db, model=model,
                           settings=sqlchorus.Settings(trace_dir=None))
    assert result.ok and not [e for e in result.errors if e["kind"] == "narrowed"]


# -- the question's size ----------------------------------------------------------------------------


def test_a_question_over_the_limit_is_refused_before_any_call(demo_db):
    model = ScriptedChatModel(["SELECT 1"])
    with pytest.raises(QuestionTooLongError, match="8,001 characters; the limit is 8,000"):
        sqlchorus.ask("x" * 8001, db=demo_db, model=model, settings=sqlchorus.Settings(trace_dir=None))
    with pytest.raises(QuestionTooLongError, match="hint"):
        sqlchorus.ask("How many?", db=demo_db, model=model, evidence="y" * 9000, settings=sqlchorus.Settings(trace_dir=None))
    assert model.calls == 0  # refused before any model was asked


def test_the_cli_refuses_a_long_question_with_exit_2(demo_db):
    out = CliRunner().invoke(cli, ["ask", "x" * 200, "--db", str(demo_db), "--model", "x:y", "--no-trace",
                                   "--max-question-chars", "100"])
    assert out.exit_code == 2
    assert "200 characters; the limit is 100 (--max-question-chars)" in out.output
    assert "Traceback" not in out.output
