"""A program using sqlchorus writes nothing into its current folder unless its settings name one:
traces and checkpoints go to the per-user data folder. The command line keeps ./traces."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sqlchorus
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"


def _model():
    return oracle_model(GOLD.get)


def test_library_calls_write_nothing_into_the_current_folder(tmp_path, demo_db, monkeypatch):
    cwd = tmp_path / "work"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    result = sqlchorus.ask(QUESTION, demo_db, _model())
    assert result.ok
    tool = sqlchorus.as_tool(demo_db, model=_model())
    assert tool.invoke({"question": QUESTION})["rows"] == [[62]]
    graph = sqlchorus.graph_for(demo_db, model=_model())
    assert graph.invoke({"question": QUESTION}, {"recursion_limit": 40})["answer"]["rows"] == [[62]]
    assert list(cwd.iterdir()) == []
    folder = Path(os.environ["XDG_DATA_HOME"]) / "sqlchorus" / "traces"
    assert sqlchorus.Settings().trace_folder == str(folder)
    assert (folder / f"{result.run_id}.jsonl").is_file()
    assert (folder / "checkpoints.sqlite").is_file()
    # A folder the settings name is used as given.
    named = sqlchorus.ask(QUESTION, demo_db, _model(), settings=sqlchorus.Settings(trace_dir=str(tmp_path / "mine")))
    assert (tmp_path / "mine" / f"{named.run_id}.jsonl").is_file()


@pytest.mark.slow
def test_the_command_line_keeps_its_traces_folder(tmp_path, demo_db):
    (tmp_path / "factories.py").write_text(
        "from sqlchorus.runs.demo import load_demo_questions\n"
        "from sqlchorus.testing import oracle_model\n"
        "GOLD = {q['question']: q['sql'] for q in load_demo_questions()}\n"
        "def oracle():\n    return oracle_model(GOLD.get)\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "NO_COLOR": "1"}
    env.pop("SQLCHORUS_TRACE_DIR", None)
    done = subprocess.run([sys.executable, "-m", "sqlchorus", "ask", QUESTION, "--db", str(demo_db), "--model",
                           "python:factories:oracle", "--json"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list((tmp_path / "traces").glob("*.jsonl"))) == 1
    assert (tmp_path / "traces" / "checkpoints.sqlite").is_file()
    assert not (Path(env["XDG_DATA_HOME"]) / "sqlchorus" / "traces").exists()
    shown = subprocess.run([sys.executable, "-m", "sqlchorus", "trace", "show",
                            next((tmp_path / "traces").glob("*.jsonl")).stem], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0 and shown.stdout.startswith("ask ")  # the run span, named for its origin
