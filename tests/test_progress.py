"""Progress while a run thinks: every step tells the caller as it starts and ends."""

from __future__ import annotations

import math

from click.testing import CliRunner

import sqlchorus
from sqlchorus.interfaces.cli import cli
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}


STEPS = ["prepare", "extract_keywords", "retrieve_values", "link_schema", "generate_divide_conquer",
         "check_candidates", "select_candidate"]


def test_each_node_starts_then_ends_in_order(demo_db):
    events = []
    # One generator, and a first candidate that is right: the graph's one path, step after step.
    settings = sqlchorus.Settings(trace_dir=None, generators={"divide_conquer": 1})
    result = sqlchorus.ask("How many customers do we have?", db=demo_db, model=oracle_model(GOLD.get),
                           settings=settings, progress=events.append)
    assert result.ok
    assert [(e.node, e.kind) for e in events] == [(node, kind) for node in STEPS for kind in ("start", "end")]
    # A start says no duration yet; an end says how long its step took, in seconds (a number, its
    # size the machine's).
    assert {e.seconds for e in events if e.kind == "start"} == {0.0}
    ends = [e.seconds for e in events if e.kind == "end"]
    assert all(isinstance(s, float) and math.isfinite(s) and s >= 0 for s in ends), ends


def test_verbose_prints_a_line_per_step_where_there_is_no_terminal(monkeypatch):
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: oracle_model(GOLD.get))
    out = CliRunner().invoke(cli, ["ask", "How many customers do we have?", "--model", "openai:x", "--no-trace",
                                   "--verbose"])
    assert out.exit_code == 0, out.output
    lines = [line for line in out.output.splitlines() if line.startswith("  step ")]
    assert [line.split(":")[0].split()[-1] for line in lines][:3] == ["prepare", "extract_keywords", "retrieve_values"]
    quiet = CliRunner().invoke(cli, ["ask", "How many customers do we have?", "--model", "openai:x", "--no-trace"])
    assert "  step " not in quiet.output
