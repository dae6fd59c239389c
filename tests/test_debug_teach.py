"""`teach` in the debugger: the branch's answer, or SQL the user gives, kept as a taught example of
the run's database; a regression test exported from the same branch agrees with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import sqlchorus
from sqlchorus.evaluation.taught_checks import check_taught
from sqlchorus.runs.debugger import DebugError, Debugger
from sqlchorus.runs.demo import demo_db_path, load_demo_questions
from sqlchorus.runs.regression_test import replay_exported
from sqlchorus.runs.teach import DuplicateTaughtError, Teacher, TaughtError
from sqlchorus.testing import oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"


@pytest.fixture
def session(tmp_path):
    settings = sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path / "traces"), cache=False)
    with sqlchorus.Session(settings) as s:
        yield s


def test_teach_keeps_the_branch_answer_with_its_run_and_refuses_before_there_is_one(session):
    debugger = Debugger.start(QUESTION, demo_db_path(), session=session)
    with pytest.raises(DebugError, match="no answer yet"):
        debugger.teach()
    with pytest.raises(TaughtError, match="refused"):
        debugger.teach("DELETE FROM customers")
    assert debugger.cont() is None
    entry = debugger.teach()
    assert (entry["question"], entry["sql"], entry["run_id"], entry["source"]) == (
        QUESTION, GOLD[QUESTION], debugger.run_id, "debug")
    with pytest.raises(DuplicateTaughtError):
        debugger.teach("SELECT COUNT(*) FROM customers WHERE 1 = 1")
    assert [e["id"] for e in Teacher(session).entries(str(demo_db_path()))] == [entry["id"]]
    debugger.close()


def test_an_exported_test_and_the_taught_example_of_one_branch_agree(session, tmp_path):
    debugger = Debugger.start(QUESTION, demo_db_path(), session=session)
    debugger.cont()
    entry = debugger.teach()
    (tmp_path / "exported").mkdir()
    test = debugger.export_test(tmp_path / "exported" / "test_customers.py")
    debugger.close()
    replayed = replay_exported(test.with_name("test_customers.sqlchorus.sqlite"), tmp_path / "replay")
    db = session.database(demo_db_path()).db
    assert replayed.sql == entry["sql"]
    assert [list(r) for r in db.execute(entry["sql"]).rows] == replayed.rows == [[62]]
    # The same question checked against what was taught: no regression.
    report = check_taught(demo_db_path(), session.settings, out_dir=tmp_path / "check",
                          ask=lambda *a, **k: session.ask(*a, **k))
    assert (report.n_checked, report.n_regressions) == (1, 0)


def _debug(traces: Path, env: dict, commands: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sqlchorus", "debug", QUESTION, "--model", "python:scripted_factories:oracle",
         "--trace-dir", str(traces), "--commands", "-"],
        input=commands, capture_output=True, text=True, env=env, timeout=240,
    )


@pytest.mark.slow
def test_the_teach_command_of_the_shell(tmp_path, factories_env):
    traces = tmp_path / "traces"
    early = _debug(traces, factories_env, "teach\nquit\n")
    assert "no answer yet" in early.stdout + early.stderr and "Traceback" not in early.stdout + early.stderr
    given = "SELECT COUNT(*) FROM customers WHERE email IS NOT NULL OR email IS NULL"
    done = _debug(traces, factories_env, f"continue\nteach {given}\nquit\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "taught e" in done.stdout and "Traceback" not in done.stdout + done.stderr
    listed = subprocess.run([sys.executable, "-m", "sqlchorus", "examples", "list", "--json",
                             "--trace-dir", str(traces)], capture_output=True, text=True, env=factories_env, timeout=120)
    [entry] = json.loads(listed.stdout)
    assert (entry["question"], entry["sql"], entry["source"]) == (QUESTION, given, "debug")
    assert Path(entry["db"]) == demo_db_path().resolve()
