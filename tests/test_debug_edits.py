"""Edits are checked like input: `set` in `sqlchorus debug` (and `Debugger.set`, which the viewer
calls) refuses a key or field the state does not declare, at any depth, an index past the end of a
list, and a value of another type, in one line naming the path and the type expected. A refused
edit reaches no checkpoint, so neither the viewer nor `export-test` ever sees it. Time-travel tests
summarise the checkpoint history before asserting."""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from typing import Any

import pytest

import sqlchorus
from sqlchorus.config.errors import InvalidValueError
from sqlchorus.core.state import Candidate, SqlchorusState
from sqlchorus.interfaces.debug_shell import DebugShell
from sqlchorus.runs.debugger import DebugError, Debugger, validate_value
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.runs.regression_test import data_path, replay_exported
from sqlchorus.testing import oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"
WRONG = "SELECT COUNT(*) FROM orders"
CANDIDATE_FIELDS = ", ".join(typing.get_type_hints(Candidate))
STATE_FIELDS = ", ".join(typing.get_type_hints(SqlchorusState))


@pytest.fixture
def session(tmp_path):
    with sqlchorus.Session(sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path / "traces"),
                                              generators={"divide_conquer": 1})) as s:
        yield s


@pytest.fixture
def paused(session, demo_db):
    """A run paused before check_candidates, with its one candidate."""
    debugger = Debugger.start(QUESTION, demo_db, session=session, breakpoints=["check_candidates"])
    assert debugger.cont() == "check_candidates"
    yield debugger
    debugger.close()


def summary(debugger: Debugger) -> list[tuple[int, str, str, str]]:
    """The history as (step, node, source, id), oldest first."""
    return [(h["step"], h["node"], h["source"], h["id"]) for h in debugger.history()]


def shell_of(debugger: Debugger) -> tuple[DebugShell, Any]:
    from rich.console import Console

    console = Console(record=True, width=120, color_system=None)
    return DebugShell(debugger, console), console


def refusals(shell: DebugShell, console: Any, *lines: str) -> list[str]:
    """Run each line; each must fail with exactly one line of output. The lines printed."""
    said = []
    for line in lines:
        failed = shell.failed
        shell.run(line)
        printed = console.export_text(clear=True).splitlines()
        assert shell.failed == failed + 1, (line, printed)
        assert len(printed) == 1 and printed[0].startswith("error "), (line, printed)
        said.append(printed[0].removeprefix("error "))
    return said


def every_state(debugger: Debugger) -> list[dict[str, Any]]:
    return [dict(debugger.snapshot(h["id"]).values) for h in debugger.history()]


# -- refused, and named ----------------------------------------------------------------------------


def test_an_unknown_top_level_field_is_refused_naming_the_fields(paused):
    shell, console = shell_of(paused)
    before, here = summary(paused), paused.checkpoint_id
    said = refusals(shell, console, "set fix_rounds 1", 'set question_text "x"', "set nope.deeper 1")
    assert said[0] == f"fix_rounds is not a field of the state (fields: {STATE_FIELDS}; the closest is fix_round)."
    assert said[1].startswith("question_text is not a field of the state (fields: question, evidence,")
    assert said[2].startswith("nope is not a field of the state")
    with pytest.raises(InvalidValueError, match=r"^fix_rounds is not a field of the state \(fields: question, "):
        paused.set("fix_rounds", 1)  # the Python API (and the viewer, which calls it) says the same
    assert summary(paused) == before and paused.checkpoint_id == here
    assert "Traceback" not in console.export_text()


def test_an_unknown_nested_field_is_refused_at_any_depth(paused):
    shell, console = shell_of(paused)
    (candidate,) = paused.state("candidates")
    before, here = summary(paused), paused.checkpoint_id
    said = refusals(
        shell, console,
        'set candidates[0].sqll "SELECT 1"',
        'set candidates[0].rows "lots"',
        f"set candidates {json.dumps([{**candidate, 'sqll': 'SELECT 1'}])}",  # inside a whole value too
        'set candidates[0].sqll.deeper "x"',
        'set usage[0].nodee "x"',
        "set candidates[0].sql.length 3",
    )
    assert said[0] == (f"candidates[0].sqll is not a field of a candidate (fields: {CANDIDATE_FIELDS}; "
                       "the closest is sql).")
    assert said[1] == f"candidates[0].rows is not a field of a candidate (fields: {CANDIDATE_FIELDS})."
    assert said[2] == said[0]
    assert said[3] == said[0]  # refused at the first step the type does not have
    assert said[4].startswith("usage[0].nodee is not a field of a usage record (fields: node, role, model,")
    assert said[5] == "candidates[0].sql is a string: it has no fields, so candidates[0].sql.length names nothing."
    with pytest.raises(InvalidValueError, match=r"^candidates\[0\]\.sqll is not a field of a candidate"):
        paused.set("candidates[0].sqll", "SELECT 1")
    assert paused.state("candidates") == [candidate]
    assert summary(paused) == before and paused.checkpoint_id == here


def test_an_index_out_of_range_is_refused(paused):
    shell, console = shell_of(paused)
    before = summary(paused)
    said = refusals(shell, console, 'set candidates[1].sql "SELECT 1"', 'set candidates[-2].sql "SELECT 1"',
                    'set errors[0].message "x"', 'set question[0] "x"')
    assert said[0] == "candidates[1] is out of range: candidates has 1 item (candidates[0] to candidates[0])."
    assert said[1] == "candidates[-2] is out of range: candidates has 1 item (candidates[0] to candidates[0])."
    assert said[2] == "errors[0] is out of range: errors is empty."
    assert said[3] == "question is a string, not a list: question[0] names nothing."
    assert summary(paused) == before


def test_a_value_of_the_wrong_type_is_refused_at_the_top_and_nested(paused):
    shell, console = shell_of(paused)
    (candidate,) = paused.state("candidates")
    before, here = summary(paused), paused.checkpoint_id
    said = refusals(
        shell, console,
        'set fix_round "1"',
        "set fix_round true",
        "set fix_round 1.5",
        'set keywords "customers"',
        'set values {"customers.name": ["Ada"]}',
        "set candidates [1]",
        'set candidates[0].row_count "many"',
        'set candidates[0].status "fine"',
        "set candidates[0].fix_attempts true",
        'set candidates[0].history ["x"]',
        'set selection {"scores": {"a": "high"}}',
    )
    assert said == [
        "fix_round must be an integer, not a string.",
        "fix_round must be an integer, not true.",
        "fix_round must be an integer, not a number.",
        "keywords must be a list of strings, not a string.",
        'values["customers.name"][0] must be an object, not a string.',
        "candidates[0] must be a candidate (a JSON object), not an integer.",
        "candidates[0].row_count must be an integer or null, not a string.",
        'candidates[0].status must be one of "unchecked", "ok", "empty", "error", not "fine".',
        "candidates[0].fix_attempts must be an integer, not true.",
        "candidates[0].history[0] must be an object, not a string.",
        "selection.scores.a must be a number, not a string.",
    ]
    # Several problems in one value: the first three, and how many more.
    with pytest.raises(InvalidValueError, match=r"^candidates\[0\]\.sqll is not a field of a candidate .*; "
                                                r"candidates\[0\]\.sql must be a string, not an integer; .*\(and 1 more\)\.$"):
        paused.set("candidates", [{**candidate, "sqll": 1, "sql": 1, "error": 2, "row_count": "x"}])
    # A value no JSON could give, through the Python API: refused where the type is Any too.
    with pytest.raises(InvalidValueError, match=r"candidates\[0\]\.meta\.tags must be any JSON value, not a Python set"):
        paused.set("candidates[0].meta", {"tags": {"a", "b"}})
    assert paused.state("candidates") == [candidate]
    assert summary(paused) == before and paused.checkpoint_id == here


def test_the_answer_s_rows_are_checked_at_the_end_of_the_run(paused):
    paused.clear()
    assert paused.cont() is None and paused.finished
    shell, console = shell_of(paused)
    before, answer = summary(paused), paused.state("answer")
    said = refusals(shell, console, 'set answer.rows "lots"', 'set answer.rows [5]', 'set answer.truncated "no"',
                    "set answer.columns [1]")
    assert said == [
        "answer.rows must be a list of rows, not a string.",
        "answer.rows[0] must be a list of JSON values, not an integer.",
        "answer.truncated must be true or false, not a string.",
        "answer.columns[0] must be a string, not an integer.",
    ]
    assert paused.state("answer") == answer and summary(paused) == before


# -- nothing refused is kept ------------------------------------------------------------------------


def test_refused_edits_leave_the_checkpoint_history_unchanged(paused):
    shell, console = shell_of(paused)
    before, here, state = summary(paused), paused.checkpoint_id, paused.state()
    refusals(shell, console, 'set candidates[0].sqll "SELECT 1"', 'set candidates[0].rows "lots"',
             'set fix_round "1"', 'set candidates[5].sql "x"', "set nope 1")
    for target, value in [("candidates[0].sqll", "SELECT 1"), ("fix_round", "1"), ("candidates", [{"id": "x"}])]:
        with pytest.raises(DebugError):
            paused.set(target, value)
    assert summary(paused) == before
    assert paused.checkpoint_id == here and paused.next_nodes == ("check_candidates",) and paused.state() == state
    # fork takes a checkpoint and no edits: anything more is refused, and it too leaves the history as it was.
    generated = next(h["id"] for h in paused.history() if h["node"] == "generate_divide_conquer")
    refusals(shell, console, f'fork {generated} candidates[0].sqll "SELECT 1"')
    assert summary(paused) == before and paused.checkpoint_id == here
    # After a fork the edits at the earlier checkpoint are checked the same way.
    shell.run(f"fork {generated}")
    console.export_text(clear=True)
    refusals(shell, console, 'set candidates[0].sqll "SELECT 1"')
    assert summary(paused) == before and paused.checkpoint_id == generated
    # And the run goes on from where it stood, to the answer it would have given.
    paused.clear()
    assert paused.cont() is None and paused.result().sql == GOLD[QUESTION]


def test_a_valid_edit_still_works_and_is_what_export_test_writes(paused, tmp_path):
    shell, console = shell_of(paused)
    before = summary(paused)
    refusals(shell, console, 'set candidates[0].sqll "SELECT 1"', 'set candidates[0].rows "zqx-refused"',
             'set candidates[0].sql ["zqx-refused"]')
    shell.run(f'set candidates[0].sql "{WRONG}"')
    shell.run('set candidates[0].meta {"note": ["any", {"JSON": null}, 1.5, true]}')  # meta is Any: any JSON
    assert shell.failed == 3, console.export_text()
    (candidate,) = paused.state("candidates")
    assert candidate["sql"] == WRONG and candidate["meta"] == {"note": ["any", {"JSON": None}, 1.5, True]}
    assert "sqll" not in candidate and "rows" not in candidate
    after = summary(paused)
    assert after[:len(before)] == before and [node for _, node, _, _ in after[len(before):]] == ["(edit)", "(edit)"]
    paused.clear()
    shell.run("continue")
    assert paused.result().sql == WRONG
    test = tmp_path / "test_edited.py"
    shell.run(f"export-test {test}")
    assert shell.failed == 3 and f"wrote {test}" in console.export_text().replace("\n", "")
    text = test.read_text(encoding="utf-8")
    assert f"SQL = {WRONG!r}" in text and "ROWS = [[170]]" in text
    # The exported data holds the valid edit, and nothing that was refused.
    data = data_path(test).read_bytes()
    assert b"sqll" not in data and b"zqx-refused" not in data
    assert replay_exported(data_path(test), tmp_path / "replay").sql == WRONG
    # Nor does any checkpoint of the run: the viewer shows these.
    for values in every_state(paused):
        assert all("sqll" not in c and "rows" not in c for c in values.get("candidates") or [])


def test_every_state_a_run_writes_fits_its_declared_types(tmp_path, demo_db):
    """The checks are derived from the state's own types: what the nodes write passes them, so an
    edit of one part is never refused for another."""
    settings = sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path),
                                  generators={"divide_conquer": 1, "query_plan": 1})
    with sqlchorus.Session(settings) as s:
        debugger = Debugger.start(QUESTION, demo_db, session=s)
        assert debugger.cont() is None
        states = every_state(debugger)
        assert len(states) > 5 and states[-1]["answer"]["rows"] == [[62]]
        for values in states:
            for key, value in values.items():
                validate_value(key, json.loads(json.dumps(value, default=str)))
        debugger.close()


# -- through the command ---------------------------------------------------------------------------


@pytest.mark.slow
def test_bad_edits_through_the_command_are_one_line_each_and_the_session_goes_on(tmp_path, factories_env):
    test = tmp_path / "test_cli.py"
    commands = "\n".join([
        "break check_candidates", "continue",
        'set candidates[0].sqll "SELECT 1"',
        'set candidates[0].rows "lots"',
        'set candidates[7].sql "SELECT 1"',
        'set fix_round "1"',
        "set fix_rounds 1",
        f'set candidates[0].sql "{WRONG}"',
        "clear", "continue", f"export-test {test}", "quit",
    ]) + "\n"
    out = subprocess.run(
        [sys.executable, "-m", "sqlchorus", "debug", QUESTION, "--model", "python:scripted_factories:oracle",
         "--trace-dir", str(tmp_path / "traces"), "--commands", "-"],
        input=commands, capture_output=True, text=True, env={**factories_env, "COLUMNS": "80"}, timeout=240,
    )
    lines = out.stdout.splitlines()
    errors = [line for line in lines if line.startswith("error ")]
    assert errors == [
        f"error candidates[0].sqll is not a field of a candidate (fields: {CANDIDATE_FIELDS}; the closest is sql).",
        f"error candidates[0].rows is not a field of a candidate (fields: {CANDIDATE_FIELDS}).",
        "error candidates[7] is out of range: candidates has 1 item (candidates[0] to candidates[0]).",
        "error fix_round must be an integer, not a string.",
        f"error fix_rounds is not a field of the state (fields: {STATE_FIELDS}; the closest is fix_round).",
    ], out.stdout
    assert "Traceback" not in out.stdout + out.stderr and out.returncode == 1
    assert "set candidates[0].sql at a new checkpoint" in out.stdout and "ended at checkpoint" in out.stdout
    # The terminal is 80 columns wide, so a long temporary path wraps onto the next line.
    assert f"wrote {test}" in out.stdout.replace("\n", "") and f"SQL = {WRONG!r}" in test.read_text(encoding="utf-8")
    assert b"sqll" not in data_path(test).read_bytes()
