"""generate_query_plan: examples whose plans come from EXPLAIN QUERY PLAN, and sample diversity."""

from __future__ import annotations

import pytest

from conftest import run_generator, spider_examples
from sqlchorus import prompts
from sqlchorus.nodes.generate_query_plan import NODE, derive_examples, generate_query_plan
from sqlchorus.testing import ScriptedChatModel, oracle_model, prompt_text


def test_shipped_plans_are_derived_from_the_gold_sql():
    shipped = prompts.examples(NODE)
    assert shipped, "the query-plan prompt needs few-shot examples"
    # Re-derive with: derive_examples(prompts.examples(NODE)) and write the JSON back.
    assert derive_examples(shipped) == shipped


@pytest.mark.parametrize("ex", spider_examples("concert_singer")[:4], ids=lambda e: e["question"][:40])
def test_oracle_answers_with_the_gold(spider, ex):
    model = oracle_model(lambda q: ex["query"])
    update, _ = run_generator(generate_query_plan, spider("concert_singer"), model, question=ex["question"])
    (candidate,) = update["candidates"]
    assert candidate["id"] == "query_plan-0"
    assert candidate["sql"] == ex["query"].strip().rstrip(";").strip()
    assert len(update["usage"]) == 1


def test_samples_after_the_first_are_shuffled_and_warmer(spider):
    seen = []

    def respond(messages):
        seen.append(prompt_text(messages))
        return "**Final Optimized SQL Query:**\nSELECT 1"

    model = ScriptedChatModel(respond)
    first, view = run_generator(generate_query_plan, spider("concert_singer"), model, question="q?", sample=0)
    second, _ = run_generator(generate_query_plan, spider("concert_singer"), model, question="q?", sample=1,
                              sample_temperature=0.7)
    assert view in seen[0] and view not in seen[1]
    assert first["candidates"][0]["meta"] == {"temperature": 0.0, "shuffle_seed": None}
    assert second["candidates"][0]["meta"] == {"temperature": 0.7, "shuffle_seed": 1}
    assert second["candidates"][0]["id"] == "query_plan-1"


def test_a_failing_model_is_an_error_not_a_crash(spider):
    def boom(messages):
        raise RuntimeError("provider down")

    update, _ = run_generator(generate_query_plan, spider("concert_singer"), ScriptedChatModel(boom), question="q?",
                              model_retries=0)
    assert "candidates" not in update
    assert update["errors"][0]["node"] == NODE
