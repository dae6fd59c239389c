"""Prompt templates: each node fills exactly the variables its template names."""

from __future__ import annotations

import json

import pytest

from conftest import data_dir
from sqlchorus import prompts

EXPECTED_VARIABLES = {
    "extract_keywords": {"examples", "question", "evidence"},
    "link_schema": {"examples", "schema", "values", "question", "evidence"},
    "generate_divide_conquer": {"examples", "schema", "values", "question", "evidence"},
    "generate_direct": {"examples", "schema", "question", "evidence"},
    "fix_candidates": {"examples", "schema", "values", "question", "evidence", "earlier", "sql", "result"},
    "din_classify": {"examples", "schema", "values", "schema_links", "question", "evidence"},
    "din_easy": {"examples", "schema", "values", "schema_links", "question", "evidence"},
    "din_medium": {"examples", "schema", "values", "schema_links", "question", "evidence"},
    "din_hard": {"examples", "schema", "values", "schema_links", "question", "evidence", "sub_questions"},
    "din_correct_gentle": {"schema", "question", "evidence", "sql"},
    "din_correct_generic": {"schema", "question", "evidence", "sql"},
    "nrep_system": set(),
    "nrep_system_question": set(),
    "nrep_link": {"examples", "schema", "question", "evidence"},
    "nrep_generate": {"examples", "schema", "question", "evidence"},
    "generate_query_plan": {"examples", "schema", "values", "question", "evidence"},
    "generate_synthetic": {"examples", "schema", "values", "question", "evidence"},
    "generate_synthetic_features": {"k", "schema"},
    "generate_synthetic_schema": {"k", "schema", "other_db", "other_schema", "other_examples"},
    "select_candidate": {"schema", "question", "evidence", "sql_a", "result_a", "sql_b", "result_b"},
    "select_candidate_reasoning": {"schema", "question", "evidence", "sql_a", "result_a", "sql_b", "result_b"},
    "list_plan": {"examples", "schema", "values", "question", "evidence", "feedback"},
    "list_write_step": {"examples", "schema", "values", "question", "evidence", "steps", "step_number",
                        "step_count", "step", "verified", "feedback"},
    "list_reprompt": {"schema", "values", "question", "evidence", "steps", "step_number", "step_count",
                      "step", "verified", "earlier", "sql", "runnable", "failing", "error"},
}


def test_every_template_is_known():
    assert set(prompts.names()) == set(EXPECTED_VARIABLES)


@pytest.mark.parametrize("name", sorted(EXPECTED_VARIABLES))
def test_template_variables(name):
    assert prompts.variables(name) == EXPECTED_VARIABLES[name]


def test_render_refuses_missing_and_extra_values():
    with pytest.raises(KeyError, match="missing"):
        prompts.render("extract_keywords", question="q")
    with pytest.raises(KeyError, match="unexpected"):
        prompts.render("extract_keywords", question="q", evidence="", examples="", extra=1)


def test_literal_braces_survive():
    text = prompts.render("extract_keywords", question="What is {x}?", evidence="{}", examples="")
    assert "What is {x}?" in text


def test_no_evaluation_question_among_shipped_examples():
    """Few-shot examples must never be questions we evaluate on."""
    root = data_dir()
    dev = set()
    for path, key in [(root / "spider" / "dev.json", "question"), (root / "bird" / "dev.json", "question")]:
        if path.exists():
            dev |= {" ".join(ex[key].lower().split()) for ex in json.loads(path.read_text())}
    if not dev:
        pytest.skip("no benchmark data")
    for name in prompts.names():
        try:
            shots = prompts.examples(name)
        except FileNotFoundError:
            continue
        for shot in shots:
            assert " ".join(shot["question"].lower().split()) not in dev, (name, shot["question"])
