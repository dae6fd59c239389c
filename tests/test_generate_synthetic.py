"""generate_synthetic: Algorithm 2's two example sets, their checks and bounds, then generation."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, run_generator, spider_examples
from sqlchorus.graph.generators import GENERATORS
from sqlchorus.nodes.generate_synthetic import generate_synthetic
from sqlchorus.tools.models.parsing import parse_examples

model_calls = GENERATORS["synthetic"].calls
from sqlchorus.config.settings import Settings
from sqlchorus.testing import ScriptedChatModel, oracle_model, prompt_text

PARSE = json.loads((FIXTURES / "synthetic" / "parse_examples.json").read_text())


@pytest.mark.parametrize("case", PARSE, ids=[c["text"][:30] for c in PARSE])
def test_parse_examples(case):
    assert parse_examples(case["text"], case["limit"]) == case["expected"]


def test_oracle_answers_with_the_gold(spider):
    ex = spider_examples("concert_singer")[0]
    model = oracle_model(lambda q: ex["query"])
    update, _ = run_generator(generate_synthetic, spider("concert_singer"), model, question=ex["question"])
    (candidate,) = update["candidates"]
    assert candidate["sql"] == ex["query"]
    assert len(update["usage"]) == model_calls(Settings(trace_dir=None)) == 3
    assert candidate["meta"]["examples_kept"] > 0


def test_examples_are_checked_bounded_and_shown(spider):
    prompts_seen = []

    def respond(messages):
        text = prompt_text(messages)
        prompts_seen.append(text)
        if "Generate a mixture of SQL examples" in text:
            return "\n".join(
                ['"input": "How many singers?"\n"output": "SELECT count(*) FROM singer"',
                 '"input": "Broken one"\n"output": "SELECT nme FROM singer"',
                 '"input": "Not a query"\n"output": "DROP TABLE singer"',
                 '"input": "Stadiums"\n"output": "SELECT Name FROM stadium"']
            )
        if "###Examples from other database###" in text:
            return '"input": "Concert names"\n"output": "SELECT concert_Name FROM concert"'
        return "**Final Optimized SQL Query:**\nSELECT count(*) FROM singer"

    update, _ = run_generator(
        generate_synthetic, spider("concert_singer"), ScriptedChatModel(respond), question="How many singers?",
        links={"concert": ["concert_Name"]}, synthetic_feature_examples=3, synthetic_schema_examples=2,
    )
    meta = update["candidates"][0]["meta"]
    assert meta["examples_proposed"] == 4  # three of the four by features (the bound), one by schema
    assert [e["sql"] for e in meta["examples"]] == ["SELECT count(*) FROM singer", "SELECT concert_Name FROM concert"]
    features, schema, final = prompts_seen
    assert "Generate total of 3 examples" in features and "stadium" in features
    # R_t sees the linked columns only, and the other database's examples
    target = schema.split("###Table creation statements###")[-1]
    assert "concert_Name" in target and "stadium" not in target.lower()
    assert "SELECT concert_Name FROM concert" in final and "SELECT nme FROM singer" not in final


def test_counts_of_zero_skip_the_calls(spider):
    model = oracle_model(lambda q: "SELECT 1")
    update, _ = run_generator(generate_synthetic, spider("concert_singer"), model, question="q?",
                              synthetic_feature_examples=0, synthetic_schema_examples=0)
    assert len(update["usage"]) == 1 == model_calls(Settings(trace_dir=None, synthetic_feature_examples=0,
                                                             synthetic_schema_examples=0))
    assert update["candidates"][0]["meta"]["examples_kept"] == 0
