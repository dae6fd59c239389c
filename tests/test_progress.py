"""Progress while a run thinks: every step tells the caller as it starts and ends."""

from __future__ import annotations

from click.testing import CliRunner

import sqlchorus
from sqlchorus.cli import cli
from sqlchorus.demo import load_demo_questions
from sqlchorus.testing import oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}


def test_each_node_starts_then_ends_in_order(demo_db):
    events = []
    result = sqlchorus.ask("How many customers do we have?", db=demo_db, model=oracle_model(GOLD.get),
                           settings=sqlchorus.Settings(trace_dir=None), progress=events.append)
    assert result.ok
    started = [e.node for e in events if e.kind == "start"]
    ended = [e.node for e in events if e.kind == "end"]
    assert started[:4] == ["prepare", "extract_keywords", "retrieve_values", "link_schema"]
    assert sorted(started) == sorted(ended)
    assert all(e.seconds >= 0 for e in events)
    for node in set(started):  # each ends after it starts
        assert events.index(next(e for e in events if e.node == node and e.kind == "end")) > events.index(
            next(e for e in events if e.node == node and e.kind == "start"))


def test_verbose_prints_a_line_per_step_where_there_is_no_terminal(monkeypatch):
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: oracle_model(GOLD.get))
    out = CliRunner().invoke(cli, ["ask", "How many customers do we have?", "--model", "x:y", "--no-trace",
                                   "--verbose"])
    assert out.exit_code == 0, out.output
    lines = [line for line in out.output.splitlines() if line.startswith("  step ")]
    assert [line.split(":")[0].split()[-1] for line in lines][:3] == ["prepare", "extract_keywords", "retrieve_values"]
    quiet = CliRunner().invoke(cli, ["ask", "How many customers do we have?", "--model", "x:y", "--no-trace"])
    assert "  step " not in quiet.output
