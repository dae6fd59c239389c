"""Stepping through a run: the debugger's Python API, `sqlchorus debug --commands`, and the prompt
in a real pseudo-terminal. Time-travel tests summarise the checkpoint history before asserting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import sqlchorus
from conftest import interruptible, model_called, wait_for
from sqlchorus.runs.debugger import DebugError, Debugger
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import ScriptedChatModel, oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"
@pytest.fixture
def session(tmp_path):
    with sqlchorus.Session(sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path))) as s:
        yield s


def summary(debugger: Debugger) -> list[tuple[int, str, str]]:
    """The history as (step, node, source), oldest first."""
    return [(h["step"], h["node"], h["source"]) for h in debugger.history()]


def broken(candidate: dict, sql: str) -> dict:
    return {**candidate, "sql": sql, "status": "unchecked", "error": None, "row_count": None}


# -- the Python API ------------------------------------------------------------------------------


def test_a_new_run_pauses_before_its_first_node_and_steps_one_superstep(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session)
    assert debugger.next_nodes == ("extract_keywords",)
    assert debugger.step() == ["extract_keywords"]
    assert debugger.next_nodes == ("retrieve_values",) and debugger.state("keywords")
    assert set(debugger.diff()) == {"keywords", "usage"}
    assert summary(debugger) == [(-1, "(input)", "input"), (0, "__start__", "loop"), (1, "extract_keywords", "loop")]
    debugger.close()


def test_several_generators_run_in_one_step(tmp_path, demo_db):
    settings = sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path),
                                  generators={"divide_conquer": 1, "query_plan": 1})
    with sqlchorus.Session(settings) as s:
        debugger = Debugger.start(QUESTION, demo_db, session=s, breakpoints=["generate_query_plan"])
        assert debugger.cont() == "generate_query_plan"
        assert set(debugger.next_nodes) == {"generate_divide_conquer", "generate_query_plan"}
        assert set(debugger.step()) == {"generate_divide_conquer", "generate_query_plan"}
        assert len(debugger.state("candidates")) == 2 and debugger.next_nodes == ("check_candidates",)
        debugger.close()


def test_break_before_the_fixer_edit_a_candidate_and_get_another_answer(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session, breakpoints=["check_candidates"])
    assert debugger.cont() == "check_candidates"
    (candidate,) = debugger.state("candidates")
    debugger.set("candidates", [broken(candidate, "SELECT COUNT(*) FROM orders")])
    assert debugger.cont() is None and debugger.finished
    result = debugger.result()
    assert result.sql == "SELECT COUNT(*) FROM orders" and result.rows != [[62]]
    steps = summary(debugger)
    assert ("(edit)" in [node for _, node, _ in steps]) and steps[-1][1] == "select_candidate"
    debugger.close()


def test_an_edit_before_a_routed_node_takes_the_route_again(session, demo_db):
    """link_schema sends the generators their inputs: an edit there reaches them."""
    debugger = Debugger.start(QUESTION, demo_db, session=session, breakpoints=["generate_divide_conquer"])
    assert debugger.cont() == "generate_divide_conquer"
    debugger.set("schema_view", "# Table: orders\n(order_id:INTEGER)")
    assert debugger.next_nodes == ("generate_divide_conquer",)
    debugger.step()
    calls = debugger.store.calls(debugger.run_id)
    assert "# Table: orders" in str(calls[-1]["messages"])
    debugger.close()


def test_a_conditional_breakpoint_stops_only_when_it_holds(session, demo_db):
    holds = Debugger.start(QUESTION, demo_db, session=session)
    holds.add_break("check_candidates", "len(candidates) == 1 and candidates[0]['status'] == 'unchecked'")
    assert holds.cont() == "check_candidates" and not holds.finished
    holds.close()
    debugger = Debugger.start(QUESTION, demo_db, session=session)
    debugger.add_break("check_candidates", "(fix_round or 0) >= 1")
    # The first check passes the breakpoint (no fix round yet); the run ends without a fix.
    assert debugger.cont() is None and debugger.finished
    with pytest.raises(DebugError, match="uses Attribute"):
        debugger.add_break("check_candidates", "question.__class__")
    with pytest.raises(DebugError, match="calls only"):
        debugger.add_break("check_candidates", "open('x')")
    with pytest.raises(DebugError, match="No node 'nope'"):
        debugger.add_break("nope")
    debugger.close()


def test_a_supplied_answer_stands_for_the_model(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session, breakpoints=["generate_divide_conquer"])
    debugger.cont()
    debugger.answer("**Final Optimized SQL Query:**\nSELECT COUNT(*) FROM products")
    debugger.clear()
    assert debugger.cont() is None
    assert debugger.result().sql == "SELECT COUNT(*) FROM products"
    debugger.close()


def test_fork_from_an_early_checkpoint_keeps_both_branches(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session)
    debugger.cont()
    first_answer = debugger.result().sql
    early = next(h for h in debugger.history() if h["node"] == "retrieve_values")
    debugger.fork(early["id"][-8:])  # ids start alike (they are time-ordered); their ends differ
    assert debugger.next_nodes == ("link_schema",)
    debugger.set("evidence", "count every customer")
    debugger.cont()
    rows = debugger.history()
    children: dict[str, int] = {}
    for row in rows:
        children[row["parent"]] = children.get(row["parent"], 0) + 1
    assert children[early["id"]] == 2  # the original step and the fork's edit
    assert debugger.result().sql == first_answer and debugger.state("evidence") == "count every customer"
    debugger.close()


def test_unknown_runs_keys_and_values_are_clear_errors(session, demo_db):
    from sqlchorus.core.checkpoints import UnknownRunError

    with pytest.raises(UnknownRunError, match="No run 'missing'"):
        Debugger.open("missing", session=session)
    debugger = Debugger.start(QUESTION, demo_db, session=session)
    with pytest.raises(UnknownRunError, match="no checkpoint 'zzz'"):
        debugger.fork("zzz")
    with pytest.raises(DebugError, match="nope is not a field of the state"):
        debugger.set("nope", 1)
    debugger.close()


# -- the command ---------------------------------------------------------------------------------


def _debug(tmp_path: Path, env: dict[str, str], *args: str, commands: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sqlchorus", "debug", *args, "--trace-dir", str(tmp_path / "traces"), "--commands", "-"],
        input=commands, capture_output=True, text=True, env=env, timeout=240,
    )


def _quit(child: Any) -> None:
    """Leave at the next prompt; the session ends with status 0."""
    import pexpect

    child.expect(PROMPT)
    child.sendline("quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def _spawn(tmp_path: Path, env: dict[str, str], model: str) -> Any:
    """`sqlchorus debug` in a real pseudo-terminal (which answers no cursor-position request)."""
    pexpect = pytest.importorskip("pexpect")
    return pexpect.spawn(
        sys.executable, ["-m", "sqlchorus", "debug", QUESTION, "--model", f"python:scripted_factories:{model}",
                         "--trace-dir", str(tmp_path / "traces")],
        env=env, encoding="utf-8", timeout=120, dimensions=(40, 200), preexec_fn=interruptible,
    )


@pytest.mark.slow
def test_commands_from_a_file_drive_a_whole_session(tmp_path, factories_env):
    out = _debug(tmp_path, factories_env, QUESTION, "--model", "python:scripted_factories:oracle",
                 commands="next\nbreak check_candidates\ncontinue\nstate candidates\nset fix_round \"x\"\n"
                          "set nope 1\nset fix_round {oops\nbreak fix_candidates if )(\nfly\nclear\ncontinue\n"
                          "state answer\nhistory\nquit\n")
    text = out.stdout
    assert "paused before extract_keywords" in text and "ran extract_keywords" in text
    assert "breakpoint before check_candidates" in text and "SELECT COUNT(*) FROM customers" in text
    assert "fix_round must be an integer, not a string" in text and "nope is not a field of the state" in text
    assert "The value is not JSON" in text and "does not parse" in text and "No command 'fly'" in text
    assert "ended at checkpoint" in text and "62" in text and "select_candidate" in text
    assert out.returncode == 1  # five commands failed; the session went on
    assert "Traceback" not in out.stdout + out.stderr


@pytest.mark.slow
def test_an_earlier_run_opens_in_a_new_process_and_replays_without_a_model(tmp_path, factories_env):
    ask = subprocess.run(
        [sys.executable, "-m", "sqlchorus", "ask", QUESTION, "--model", "python:scripted_factories:oracle", "--json",
         "--trace-dir", str(tmp_path / "traces")],
        capture_output=True, text=True, env=factories_env, timeout=240,
    )
    assert ask.returncode == 0, ask.stderr
    run_id = __import__("json").loads(ask.stdout)["run_id"]
    out = _debug(tmp_path, factories_env, "--run", run_id, "--model", "python:scripted_factories:refuse",
                 commands="history\nreplay\nexport-test " + str(tmp_path / "test_replayed.py") + "\nquit\n")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ended at checkpoint" in out.stdout and "0 model call(s) made" in out.stdout
    exported = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_replayed.py")],
                              capture_output=True, text=True, env=factories_env, timeout=240, cwd=tmp_path)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    bad = _debug(tmp_path, factories_env, "--run", "no-such-run", "--model", "python:scripted_factories:refuse", commands="quit\n")
    assert bad.returncode == 2 and "No run 'no-such-run'" in bad.stderr and "Traceback" not in bad.stderr
    # No model at all: the kept answers serve the replay, and an unknown run is named as such.
    no_model = {k: v for k, v in factories_env.items() if k != "SQLCHORUS_MODEL"}
    again = _debug(tmp_path, no_model, "--run", run_id, commands="replay\nquit\n")
    assert again.returncode == 0 and "0 model call(s) made" in again.stdout, again.stdout + again.stderr
    bad = _debug(tmp_path, no_model, "--run", "no-such-run", commands="quit\n")
    assert bad.returncode == 2 and "No run 'no-such-run'" in bad.stderr and "No model" not in bad.stderr


PROMPT = r"\(sqlchorus\)"  # drawn by prompt_toolkit, with terminal codes around it


@pytest.mark.slow
def test_the_prompt_in_a_real_terminal(tmp_path, factories_env):
    child = _spawn(tmp_path, factories_env, "oracle")
    child.expect(PROMPT)
    child.sendline("next")
    child.expect_exact("ran extract_keywords")
    child.expect(PROMPT)
    child.send("hist\t")  # completion finishes the command's name
    # The terminal may draw the completed part separately, with its escape codes in between.
    child.expect(r"hist(?:\x1b\[[0-9;?]*[A-Za-z])*ory")
    # The first Enter may only accept the completion; a second one on an empty line does nothing.
    child.send("\r")
    child.send("\r")
    child.expect_exact("extract_keywords")
    child.expect(PROMPT)
    child.sendcontrol("c")  # Ctrl-C at the prompt keeps the session
    child.expect(PROMPT)
    child.sendline("continue")
    child.expect_exact("ended at checkpoint")
    _quit(child)


@pytest.mark.slow
def test_ctrl_c_during_a_model_call_returns_to_the_prompt_with_the_run_intact(tmp_path, factories_env):
    child = _spawn(tmp_path, factories_env, "held")
    child.expect(PROMPT)
    child.sendline("next")  # extract_keywords calls the model, which answers once the test ends
    wait_for(lambda: model_called(factories_env), "extract_keywords to call the model")
    child.sendcontrol("c")
    child.expect_exact("Interrupted")
    child.expect_exact("paused before extract_keywords")
    child.expect(PROMPT)
    child.sendline("history")
    child.expect_exact("__start__")
    _quit(child)


def test_a_run_of_eval_opens_in_the_debugger(tmp_path, demo_db):
    from sqlchorus.evaluation.datasets import load_dataset
    from sqlchorus.evaluation.runs import run_eval

    questions = load_demo_questions()[:2]
    path = tmp_path / "demo-questions.json"
    path.write_text(__import__("json").dumps({"examples": [
        {"question": q["question"], "db_id": "demo", "gold_sql": q["sql"], "db_path": str(demo_db)} for q in questions]}),
        encoding="utf-8")
    settings = sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path / "traces"))
    run = run_eval(load_dataset(str(path)), settings, out_dir=tmp_path / "eval")
    run_id = run.records[0]["run_id"]
    with sqlchorus.Session(settings.replace(model=ScriptedChatModel(["unused"]))) as session:
        debugger = Debugger.open(run_id, session=session)
        assert debugger.finished and debugger.result().sql == questions[0]["sql"]
        debugger.close()


def test_a_changed_database_is_said_when_a_run_is_opened(tmp_path, demo_db):
    import shutil
    import sqlite3

    db = tmp_path / "shop.sqlite"
    shutil.copy(demo_db, db)
    with sqlchorus.Session(sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path))) as session:
        run_id = session.ask(QUESTION, db=db).run_id
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DELETE FROM customers WHERE customer_id = (SELECT MAX(customer_id) FROM customers)")
    conn.close()
    with sqlchorus.Session(sqlchorus.Settings(model=_refusing(), trace_dir=str(tmp_path))) as session:
        debugger = Debugger.open(run_id, session=session)
        assert len(debugger.notes) == 1 and str(db) in debugger.notes[0] and "has changed" in debugger.notes[0]
        result, served, called = debugger.replay()
        assert called == 0 and result.rows == [[61]]  # the same answers, the database's new count
        debugger.close()


def _refusing():
    def no(messages):
        raise AssertionError("no model call expected")
    return ScriptedChatModel(no, name="refuses")


@pytest.mark.slow
def test_a_damaged_checkpoint_file_is_one_clear_line(tmp_path, factories_env):
    bad = tmp_path / "checkpoints.sqlite"
    bad.write_bytes(b"not a database at all" * 50)
    out = subprocess.run(
        [sys.executable, "-m", "sqlchorus", "debug", QUESTION, "--model", "python:scripted_factories:oracle",
         "--checkpoints", str(bad), "--commands", "-"],
        input="quit\n", capture_output=True, text=True, env=factories_env, timeout=240,
    )
    assert out.returncode == 2 and str(bad) in out.stderr and "Traceback" not in out.stderr


def test_break_before_fix_candidates_edit_the_sql_and_continue(tmp_path, demo_db):
    model = oracle_model(GOLD.get, first_answer=lambda q: "SELECT nme FROM customers")
    with sqlchorus.Session(sqlchorus.Settings(model=model, trace_dir=str(tmp_path))) as s:
        debugger = Debugger.start(QUESTION, demo_db, session=s, breakpoints=["fix_candidates"])
        assert debugger.cont() == "fix_candidates"
        (candidate,) = debugger.state("candidates")
        assert candidate["status"] == "error" and "no such column" in candidate["error"]
        debugger.set("candidates", [broken(candidate, "SELECT COUNT(*) FROM orders")])
        assert debugger.cont() is None
        assert debugger.result().sql == "SELECT COUNT(*) FROM orders"
        fixer_calls = [u for u in debugger.state("usage") if u["node"] == "fix_candidates"]
        assert fixer_calls == []  # the edited query ran; nothing was left for the fixer
        debugger.close()
