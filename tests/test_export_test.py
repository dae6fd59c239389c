"""`export-test` in `sqlchorus debug`: the pytest module it writes replays the branch the debugger
stands on from data kept beside it, passes from any folder, and writes nothing outside its
tmp_path; a PATH it cannot use is one clear error and the session goes on."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import sqlchorus
from sqlchorus.runs.debugger import DebugError, Debugger
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.runs.regression_test import DATA_SUFFIX, ModelAskedError, data_path, replay_exported
from sqlchorus.testing import oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"
TYPED = "**Final Optimized SQL Query:**\nSELECT COUNT(*) FROM products"


@pytest.fixture
def session(tmp_path):
    with sqlchorus.Session(sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path / "traces"))) as s:
        yield s


def broken(candidate: dict, sql: str) -> dict:
    return {**candidate, "sql": sql, "status": "unchecked", "error": None, "row_count": None}


def run_exported(test: Path, cwd: Path, basetemp: Path) -> subprocess.CompletedProcess:
    """The exported test run by pytest in a process of its own, from ``cwd``; bytecode and
    pytest's cache are off so that only the test itself could write anything."""
    cwd.mkdir(parents=True, exist_ok=True)
    # Hypothesis (which Schemathesis's pytest plugin loads) keeps its files beside the run's temp
    # folder, not in cwd.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
           "HYPOTHESIS_STORAGE_DIRECTORY": str(basetemp) + "-hypothesis"}
    env.pop("SQLCHORUS_MODEL", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(basetemp), str(test)],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=240,
    )


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with its content's digest."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _checkpoint_files(folder: Path) -> dict[str, str]:
    return {name: digest for name, digest in fingerprint(folder).items() if name.startswith("checkpoints.sqlite")}


def _debug(tmp_path: Path, env: dict[str, str], *args: str, commands: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sqlchorus", "debug", *args, "--trace-dir", str(tmp_path / "traces"), "--commands", "-"],
        input=commands, capture_output=True, text=True, env=env, timeout=240,
    )


# -- through the command -------------------------------------------------------------------------


@pytest.mark.slow
def test_a_plain_run_exported_passes_from_another_folder_twice_and_changes_nothing(tmp_path, factories_env):
    out_dir = tmp_path / "exported"
    out_dir.mkdir()
    test = out_dir / "test_customers.py"
    out = _debug(tmp_path, factories_env, QUESTION, "--model", "python:scripted_factories:oracle",
                 commands=f"continue\nexport-test {test}\nquit\n")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"wrote {test}" in out.stdout.replace("\n", "")  # a long temporary path may wrap
    assert sorted(p.name for p in out_dir.iterdir()) == ["test_customers.py", "test_customers" + DATA_SUFFIX]
    text = test.read_text(encoding="utf-8")
    assert "traces" not in text and "checkpoints.sqlite" not in text
    assert "SELECT COUNT(*) FROM customers" in text and "[[62]]" in text
    assert "demo.sqlite" in text  # the docstring names the database the test needs

    recorded, exported = fingerprint(tmp_path / "traces"), fingerprint(out_dir)
    for n in range(2):
        ran = run_exported(test, tmp_path / "elsewhere", tmp_path / f"inner-{n}")
        assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout + ran.stderr
        assert fingerprint(tmp_path / "traces") == recorded
        assert fingerprint(out_dir) == exported
    assert not list((tmp_path / "elsewhere").iterdir())
    # The recorded run still opens where it ended: the test added no branch to it.
    run_id = re.search(r"run (\S+) paused", out.stdout).group(1)
    with sqlchorus.Session(sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path / "traces"))) as s:
        debugger = Debugger.open(run_id, session=s)
        assert debugger.finished and debugger.result().sql == "SELECT COUNT(*) FROM customers"
        debugger.close()


@pytest.mark.slow
def test_bad_paths_are_one_line_errors_and_the_session_goes_on(tmp_path, factories_env):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    good = tmp_path / "test_good.py"
    locked = _unwritable_folder(tmp_path)
    commands = "\n".join([
        "export-test " + str(tmp_path / "test_early.py"),  # the run has no answer yet
        "continue",
        "export-test /nonexistent/dir/t.py",
        f"export-test {folder}",
        f"export-test {tmp_path / 'notes.txt'}",
        f"export-test {tmp_path / 'file.txt' / 't.py'}",
        f"export-test {locked / 'test_x.py'}",
        f"export-test {good}",
        "quit",
    ]) + "\n"
    (tmp_path / "file.txt").write_text("not a folder", encoding="utf-8")
    before = sorted(p.name for p in folder.iterdir())
    out = _debug(tmp_path, factories_env, QUESTION, "--model", "python:scripted_factories:oracle", commands=commands)
    errors = [line for line in out.stdout.splitlines() if line.startswith("error ")]
    assert len(errors) == 6, out.stdout + out.stderr
    assert "no answer yet" in errors[0]
    assert "/nonexistent/dir does not exist" in errors[1]
    assert "is a folder" in errors[2]
    assert "does not end in .py" in errors[3]
    assert "is not a folder" in errors[4] or "does not exist" in errors[4]
    assert "Cannot write in" in errors[5]
    assert f"wrote {good}" in out.stdout.replace("\n", "")  # the session went on after every error
    assert out.returncode == 1  # commands failed; the session went on
    assert "Traceback" not in out.stdout + out.stderr
    assert sorted(p.name for p in folder.iterdir()) == before
    assert not (tmp_path / "test_early.py").exists() and not (tmp_path / "notes.txt").exists()
    if locked != Path("/sys"):
        assert not list(locked.iterdir())


@pytest.mark.slow
def test_a_typed_answer_through_the_command_is_exported(tmp_path, factories_env):
    test = tmp_path / "test_typed.py"
    out = _debug(tmp_path, factories_env, QUESTION, "--model", "python:scripted_factories:oracle",
                 commands="break generate_divide_conquer\ncontinue\nanswer SELECT COUNT(*) FROM products\nclear\n"
                          f"continue\nexport-test {test}\nquit\n")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SELECT COUNT(*) FROM products" in test.read_text(encoding="utf-8")
    ran = run_exported(test, tmp_path / "elsewhere", tmp_path / "inner")
    assert ran.returncode == 0, ran.stdout + ran.stderr


def _unwritable_folder(tmp_path: Path) -> Path:
    """A folder this process cannot create files in."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        return locked
    # Permission bits do not stop root; sysfs refuses new files even to root.
    try:
        (Path("/sys") / "sqlchorus-probe").write_text("")
    except OSError:
        return Path("/sys")
    pytest.skip("no folder here refuses root's writes")


# -- through the Python API ----------------------------------------------------------------------


@pytest.mark.slow
def test_fork_edit_and_continue_exports_the_edited_branch(tmp_path, session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session)
    debugger.cont()
    first = debugger.export_test(tmp_path / "test_first.py")
    checker = next(h for h in debugger.history() if h["node"] == "generate_divide_conquer")
    debugger.fork(checker["id"])
    (candidate,) = debugger.state("candidates")
    debugger.set("candidates", [broken(candidate, "SELECT COUNT(*) FROM orders")])
    debugger.cont()
    assert debugger.result().sql == "SELECT COUNT(*) FROM orders"
    here, kept = debugger.checkpoint_id, _checkpoint_files(tmp_path / "traces")
    edited = debugger.export_test(tmp_path / "test_edited.py")
    # Exporting replays a scratch copy: the run's file and the debugger's place stay as they were.
    assert _checkpoint_files(tmp_path / "traces") == kept and debugger.checkpoint_id == here
    text = edited.read_text(encoding="utf-8")
    assert "SQL = 'SELECT COUNT(*) FROM orders'" in text and "ROWS = [[170]]" in text
    assert "the newest edit on it" in text
    debugger.close()
    recorded = fingerprint(tmp_path / "traces")
    for test in (first, edited):
        ran = run_exported(test, tmp_path / "elsewhere", tmp_path / f"inner-{test.stem}")
        assert ran.returncode == 0, ran.stdout + ran.stderr
    assert fingerprint(tmp_path / "traces") == recorded
    assert "SELECT COUNT(*) FROM customers" in first.read_text(encoding="utf-8")


@pytest.mark.slow
def test_an_edit_before_the_generators_is_exported_with_their_sends(tmp_path, session, demo_db):
    """An edit at link_schema sends the generators their inputs again: the export keeps those sends."""
    debugger = Debugger.start(QUESTION, demo_db, session=session, breakpoints=["generate_divide_conquer"])
    debugger.cont()
    debugger.set("evidence", "count every customer, once")
    debugger.clear()
    debugger.cont()
    result = debugger.export_test(tmp_path / "test_sends.py")
    debugger.close()
    assert replay_exported(data_path(result), tmp_path / "replay").sql == "SELECT COUNT(*) FROM customers"
    ran = run_exported(result, tmp_path / "elsewhere", tmp_path / "inner")
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_a_typed_answer_after_a_fork_is_the_one_exported(tmp_path, session, demo_db):
    """The fork asks the generator the same request as before; the typed answer is this branch's."""
    debugger = Debugger.start(QUESTION, demo_db, session=session)
    debugger.cont()
    linked = next(h for h in debugger.history() if h["node"] == "link_schema")
    debugger.fork(linked["id"])
    debugger.answer(TYPED)
    debugger.cont()
    assert debugger.result().sql == "SELECT COUNT(*) FROM products"
    test = debugger.export_test(tmp_path / "test_typed.py")
    debugger.close()
    assert "SELECT COUNT(*) FROM products" in test.read_text(encoding="utf-8")
    result = replay_exported(data_path(test), tmp_path / "replay")
    assert result.sql == "SELECT COUNT(*) FROM products" and result.rows == [[47]]


def test_the_exported_replay_fails_if_it_asks_a_model(tmp_path, session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session)
    debugger.cont()
    test = debugger.export_test(tmp_path / "test_customers.py")
    debugger.close()
    damaged = tmp_path / "damaged" / data_path(test).name
    damaged.parent.mkdir()
    shutil.copyfile(data_path(test), damaged)
    conn = sqlite3.connect(damaged)
    with conn:
        conn.execute("DELETE FROM sqlchorus_calls WHERE node = 'generate_divide_conquer'")
    conn.close()
    with pytest.raises(ModelAskedError, match="generate_divide_conquer"):
        replay_exported(damaged, tmp_path / "replay")


@pytest.mark.slow
def test_a_branch_its_answers_no_longer_give_is_refused(tmp_path, demo_db):
    db = tmp_path / "shop.sqlite"
    shutil.copy(demo_db, db)
    settings = sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path / "traces"))
    with sqlchorus.Session(settings) as session:
        debugger = Debugger.start(QUESTION, db, session=session)
        debugger.cont()
        conn = sqlite3.connect(db)
        with conn:
            conn.execute("DELETE FROM customers WHERE customer_id = (SELECT MAX(customer_id) FROM customers)")
        conn.close()
        with pytest.raises(DebugError, match="cannot be reproduced from its kept answers"):
            debugger.export_test(tmp_path / "test_shop.py")
        debugger.close()
    assert not (tmp_path / "test_shop.py").exists() and not data_path(tmp_path / "test_shop.py").exists()


def test_bad_paths_through_the_api(tmp_path, session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session)
    with pytest.raises(DebugError, match="no answer yet"):
        debugger.export_test(tmp_path / "test_early.py")
    debugger.cont()
    for path, message in [(tmp_path / "missing" / "t.py", "does not exist"), (tmp_path, "is a folder"),
                          (tmp_path / "t.json", "does not end in .py")]:
        with pytest.raises(DebugError, match=message):
            debugger.export_test(path)
    assert not (tmp_path / "missing").exists()
    debugger.close()
