"""A trace written before spans carried their content still reads as it did: the trace index
and the viewer's views read the same attribute names and need none of the new ones."""

from __future__ import annotations

import shutil

import sqlchorus
from conftest import FIXTURES
from sqlchorus.core.trace_file import load_spans, read_spans
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.runs.run_index import path_taken, summarise, waterfall
from sqlchorus.testing import oracle_model

OLD = FIXTURES / "traces" / "before_content.jsonl"
QUESTION = "How many customers do we have?"
SQL = "SELECT COUNT(*) FROM customers"


def _views(path):
    spans = read_spans(path)
    summary = summarise(path.stem, "", spans)
    return spans, summary, waterfall(spans), path_taken(spans)


def test_a_trace_from_before_content_reads_as_before(tmp_path):
    old = tmp_path / OLD.name
    shutil.copy(OLD, old)
    spans, summary, rows, taken = _views(old)
    assert not any("input.value" in s["attributes"] or "session.id" in s["attributes"] for s in spans)
    assert (summary.question, summary.sql, summary.error) == (QUESTION, SQL, None)
    assert {r["name"] for r in rows} >= {"run", "node:extract_keywords", "node:select_candidate", "sql"}
    assert "select_candidate" in str(taken)
    assert load_spans(old)[0].name == "run"


def test_a_trace_with_content_reads_the_same(tmp_path, demo_db):
    gold = {q["question"]: q["sql"] for q in load_demo_questions()}
    result = sqlchorus.ask(QUESTION, db=demo_db, model=oracle_model(gold.get),
                           settings=sqlchorus.Settings(trace_dir=str(tmp_path), checkpoints=None))
    new = tmp_path / f"{result.run_id}.jsonl"
    spans, summary, rows, taken = _views(new)
    assert any("input.value" in s["attributes"] for s in spans)
    _, old_summary, old_rows, old_taken = _views(OLD)
    assert (summary.question, summary.sql) == (old_summary.question, old_summary.sql)
    # The run span, named "run" before runs were named for what started them, is "ask" now.
    assert {r["name"] for r in rows} >= {"ask" if r["name"] == "run" else r["name"]
                                          for r in old_rows if r["name"] != "value_index.build"}
    assert str(taken) == str(old_taken)
