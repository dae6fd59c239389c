"""The graph end to end with scripted models, over the demo database and Spider databases."""

from __future__ import annotations

import json

import pytest

import sqlchorus
from conftest import spider_examples
from sqlchorus.config.settings import Settings
from sqlchorus.testing import ScriptedChatModel, oracle_model, role_of_call


def gold_model(examples, **kw):
    gold = {ex["question"]: ex.get("query") or ex.get("sql") for ex in examples}
    return oracle_model(gold.get, **kw), gold


def test_mermaid_drawing(snapshot):
    graph = sqlchorus.build_graph(Settings())
    assert graph.get_graph().draw_mermaid(with_styles=False) == snapshot


def test_generators_come_from_settings():
    from sqlchorus.graph.generators import GENERATORS

    only = set(sqlchorus.build_graph(Settings(generators={"divide_conquer": 2})).get_graph().nodes)
    assert {g.node for g in GENERATORS.values()} & only == {"generate_divide_conquer"}
    every = sqlchorus.build_graph(Settings(generators={name: 1 for name in GENERATORS}))
    assert {g.node for g in GENERATORS.values()} <= set(every.get_graph().nodes)
    with pytest.raises(ValueError, match="Unknown generator"):
        sqlchorus.build_graph(Settings(generators={"no_such_generator": 1}))


def test_demo_questions_end_to_end(demo_db):
    from sqlchorus.runs.demo import load_demo_questions
    from sqlchorus.tools.engines.sqlite import GuardedDatabase

    questions = load_demo_questions()
    model, gold = gold_model(questions)
    with GuardedDatabase(demo_db) as db:
        for ex in questions:
            result = sqlchorus.ask(ex["question"], db=demo_db, model=model)
            assert result.ok, result.error
            assert result.sql == ex["sql"]
            expected = db.execute(ex["sql"]).rows
            assert sorted(map(tuple, result.rows), key=repr) == sorted(expected, key=repr)
            assert result.cost["calls"] == 3  # keywords, linking, generation


@pytest.mark.parametrize("db_id", ["concert_singer", "pets_1", "world_1", "car_1", "flight_2"])
@pytest.mark.slow
def test_spider_end_to_end(spider, db_id):
    path = spider(db_id)
    examples = spider_examples(db_id)[:8]
    model, gold = gold_model(examples)
    from sqlchorus.tools.engines.sqlite import GuardedDatabase

    with GuardedDatabase(path) as db:
        for ex in examples:
            result = sqlchorus.ask(ex["question"], db=path, model=model)
            assert result.sql == ex["query"].strip().rstrip(";").strip()
            expected = db.execute(ex["query"]).rows
            if expected:
                assert result.ok, result.error
                assert sorted(map(tuple, result.rows), key=repr) == sorted(expected, key=repr)
            else:
                # An empty gold result: the fixer tries, then the empty answer stands.
                assert result.candidates[0]["status"] == "empty"


def test_fixer_repairs_a_broken_first_candidate(spider):
    examples = spider_examples("concert_singer")[:3]
    model, gold = gold_model(examples, first_answer=lambda q: "SELECT nme FROM singer")
    result = sqlchorus.ask(examples[0]["question"], db=spider("concert_singer"), model=model)
    assert result.ok, result.error
    assert result.sql == examples[0]["query"]
    (candidate,) = result.candidates
    assert candidate["fix_attempts"] == 1
    assert candidate["history"][0]["sql"] == "SELECT nme FROM singer"
    assert "no such column" in candidate["history"][0]["error"]
    assert [u["node"] for u in result.usage].count("fix_candidates") == 1


def test_fixer_gives_up_after_beta_rounds(spider):
    """Every round writes another broken query: beta rounds, each a new query, then selection."""
    examples = spider_examples("concert_singer")[:1]
    fixes = iter(["SELECT nam FROM singer", "SELECT nm FROM singer", "SELECT n FROM singer"])
    model = oracle_model(lambda q: next(fixes) if role_of_call() == "fixing" else "SELECT nme FROM singer")
    result = sqlchorus.ask(examples[0]["question"], db=spider("concert_singer"), model=model,
                           settings=Settings(fix_rounds=3))
    assert not result.ok
    assert "no such column" in result.error
    (candidate,) = result.candidates
    assert candidate["fix_attempts"] == 3 and candidate["sql"] == "SELECT n FROM singer"
    assert [h["sql"] for h in candidate["history"]] == ["SELECT nme FROM singer", "SELECT nam FROM singer", "SELECT nm FROM singer"]
    assert candidate["meta"]["fix"] == {"rounds": 3, "no_sql": 0, "stopped": None}
    assert [u["node"] for u in result.usage].count("fix_candidates") == 3


def test_identical_broken_candidates_share_one_fixer_call(spider):
    """Three samples write the same broken query: one fixer call fixes all three."""
    examples = spider_examples("concert_singer")[:1]
    model, gold = gold_model(examples, first_answer=lambda q: "SELECT nme FROM singer")
    result = sqlchorus.ask(examples[0]["question"], db=spider("concert_singer"), model=model,
                           settings=Settings(generators={"divide_conquer": 3}, temperature=0.0, fix_rounds=1))
    assert len(result.candidates) == 3
    assert all(c["fix_attempts"] == 1 and c["sql"] == examples[0]["query"] for c in result.candidates)
    assert [u["node"] for u in result.usage].count("fix_candidates") == 1
    assert result.ok


def test_several_samples_are_clustered(spider):
    examples = spider_examples("concert_singer")[:1]
    answers = iter(["SELECT count(*) FROM singer", "SELECT count(*) FROM stadium", "SELECT count(Singer_ID) FROM singer"])

    # Three samples: two agree (6 singers), one counts stadiums.
    model = oracle_model(lambda q: examples[0]["query"], first_answer=lambda q: next(answers))
    result = sqlchorus.ask(examples[0]["question"], db=spider("concert_singer"), model=model,
                           settings=Settings(generators={"divide_conquer": 3}))
    assert result.ok
    sizes = [c["size"] for c in result.selection["clusters"]]
    assert sizes == [2, 1]
    assert result.rows == [[6]]
    assert result.selection["confidence"] == pytest.approx(2 / 3, abs=1e-3)


def test_state_has_usage_for_every_call(demo_db):
    model = ScriptedChatModel(["['customers']", "Schema_links: [customers.*]",
                               "**Final Optimized SQL Query:**\nSELECT count(*) FROM customers"])
    result = sqlchorus.ask("How many customers do we have?", db=demo_db, model=model)
    assert result.ok, result.error
    assert [u["node"] for u in result.usage] == ["extract_keywords", "link_schema", "generate_divide_conquer"]
    assert all(u["model"] == "scripted" and u["input_tokens"] > 0 and u["output_tokens"] > 0 for u in result.usage)
    assert result.state["links"] == {"customers": []}
    json.dumps(result.to_dict())
