"""From an evaluation to the debugger: `sqlchorus eval` names the wrong answers' runs, and
`sqlchorus debug --eval FOLDER --question N` opens one, from any working directory."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_evaluate import spider_dev

from conftest import data_dir
from sqlchorus.config.settings import Settings
from sqlchorus.evaluation.datasets import load_dataset
from sqlchorus.evaluation.runs import EvalError, question_run, read_records, run_eval
from sqlchorus.interfaces.cli import cli
from sqlchorus.testing import oracle_model

LIMIT = 5
WRONG = {1: "SELECT name FROM singer", 3: "SELECT 'not the answer'"}
"""The questions the scripted model answers wrongly, by number, with its wrong answer."""

FACTORIES = '''
import json, os

from sqlchorus.testing import oracle_model


def answers():
    """Answers each question with the SQL $ANSWERS gives it."""
    with open(os.environ["ANSWERS"], encoding="utf-8") as f:
        table = json.load(f)
    return oracle_model(table.get, name="answers")
'''


def _env(tmp: Path) -> dict[str, str]:
    # Only the data folder from the environment: a settings variable of the caller's must not
    # move the traces or checkpoints this test looks for.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLCHORUS_")}
    return {**env, "SQLCHORUS_DATA": str(data_dir()), "PYTHONPATH": str(tmp), "ANSWERS": str(tmp / "answers.json"),
            "COLUMNS": "200", "NO_COLOR": "1"}


def _sqlchorus(args: list[str], *, cwd: Path, env: dict[str, str], stdin: str | None = None):
    return subprocess.run([sys.executable, "-m", "sqlchorus", *args], input=stdin, capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=240)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """One `sqlchorus eval` of Spider dev's first questions, two of them answered wrongly,
    written to <work>/evals/mine; its text output."""
    data = spider_dev()
    tmp = tmp_path_factory.mktemp("eval-debug")
    answers: dict[str, str] = {}
    for i, example in enumerate(data.examples[:LIMIT]):
        answers.setdefault(example.question, WRONG.get(i, example.gold_sql))
    (tmp / "answers.json").write_text(json.dumps(answers), encoding="utf-8")
    (tmp / "factories.py").write_text(FACTORIES, encoding="utf-8")
    work, elsewhere = tmp / "work", tmp / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    folder = work / "evals" / "mine"
    env = _env(tmp)
    out = _sqlchorus(["eval", "--dataset", "spider-dev", "--limit", str(LIMIT), "--model", "python:factories:answers",
                      "--no-cache", "--out", str(folder)], cwd=work, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return {"tmp": tmp, "work": work, "elsewhere": elsewhere, "folder": folder, "env": env, "stdout": out.stdout,
            "records": read_records(folder / "records.jsonl")}


def _listed(stdout: str) -> dict[int, str]:
    """The wrong questions `sqlchorus eval` lists, with what it says beside each."""
    return {int(m[1]): m[2] for m in re.finditer(r"^  question (\d+) \(concert_singer, wrong\): (.+)$", stdout, re.M)}


@pytest.mark.slow
def test_eval_names_the_wrong_answers_and_their_debug_commands(evaluated):
    stdout, folder = evaluated["stdout"], evaluated["folder"]
    assert f"EX 60% on {LIMIT} question(s) scored" in stdout
    assert f"wrong answers: 2 of {LIMIT}" in stdout
    listed = _listed(stdout)
    assert set(listed) == set(WRONG)
    for n, command in listed.items():
        assert command == f"sqlchorus debug --eval {shlex.quote(str(folder))} --question {n}"
    assert all(evaluated["records"][n]["checkpoint_path"] == str(folder / "traces" / "checkpoints.sqlite")
               for n in WRONG)


@pytest.mark.slow
def test_the_listed_command_opens_that_questions_run_from_another_folder(evaluated):
    command = shlex.split(_listed(evaluated["stdout"])[1])
    assert command[0] == "sqlchorus"
    record = evaluated["records"][1]
    out = _sqlchorus([*command[1:], "--commands", "-"], cwd=evaluated["elsewhere"], env=evaluated["env"],
                     stdin="state question\nstate answer\nhistory\nquit\n")
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert f"question 1 (concert_singer, wrong): {record['question']}" in text
    assert f"run {record['run_id']} ended at checkpoint" in text
    assert f"question: {record['question']}" in text
    assert f"answer: {record['prediction']}" in text and record["prediction"] == WRONG[1]
    assert "Traceback" not in text + out.stderr

    # --at opens another checkpoint of the same run; the folder's name under ./evals will do.
    at = re.search(r"link_schema\s+loop\s+(\S+)", text)[1]
    again = _sqlchorus(["debug", "--eval", "mine", "--question", "1", "--at", at[-8:], "--commands", "-"],
                       cwd=evaluated["work"], env=evaluated["env"], stdin="quit\n")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"run {record['run_id']} paused before generate_divide_conquer (checkpoint {at})" in again.stdout


@pytest.mark.slow
def test_eval_json_names_the_wrong_answers_without_changing_its_shape(evaluated):
    folder = evaluated["folder"]
    out = _sqlchorus(["eval", "--dataset", "spider-dev", "--limit", str(LIMIT), "--model", "python:factories:answers",
                      "--no-cache", "--out", str(folder), "--json"], cwd=evaluated["work"], env=evaluated["env"])
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert {"ex", "n_scored", "n_missing_db", "by_difficulty", "out_dir", "files"} <= set(summary)
    assert summary["n_wrong"] == 2
    assert [(w["question"], w["run_id"], w["debug"]) for w in summary["wrong"]] == [
        (n, evaluated["records"][n]["run_id"], f"sqlchorus debug --eval {shlex.quote(str(folder))} --question {n}")
        for n in sorted(WRONG)
    ]


# -- what cannot be opened -----------------------------------------------------------------------


def _debug(*args) -> object:
    result = CliRunner().invoke(cli, ["debug", *map(str, args)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def without_runs(tmp_path_factory):
    """An evaluation kept without traces (so without checkpoints), with a question whose
    database is missing, and a run folder whose only question failed."""
    tmp = tmp_path_factory.mktemp("eval-without-runs")
    examples = [{"question": e.question, "db_id": e.db_id, "gold_sql": e.gold_sql}
                for e in spider_dev().examples[:2]]
    examples.append({"question": "How many ships are there?", "db_id": "no_such_db", "gold_sql": "SELECT 1"})
    source = tmp / "small.json"
    source.write_text(json.dumps({"db_root": str(data_dir() / "spider" / "database"), "examples": examples}))
    settings = Settings(model=oracle_model(lambda q: WRONG[3]), trace_dir=None, cache=False)
    notrace = tmp / "notrace"
    run_eval(load_dataset(source), settings, out_dir=notrace, progress=False)
    failed = tmp / "failed"
    failed.mkdir()
    (failed / "records.jsonl").write_text(json.dumps({
        "index": 0, "question_id": 0, "db_id": "concert_singer", "question": "q", "status": "error", "ran": True,
        "correct": False, "error": "RuntimeError: boom", "run_id": None}) + "\n")
    (tmp / "empty").mkdir()
    (tmp / "empty" / "records.jsonl").write_text("")
    (tmp / "not-an-eval").mkdir()
    return {"tmp": tmp, "notrace": notrace, "failed": failed}


@pytest.mark.slow
def test_wrong_use_of_the_options_is_one_line(evaluated, monkeypatch):
    folder = evaluated["folder"]
    assert "give --eval FOLDER too" in _debug("--question", 1)
    assert "needs --question N" in _debug("--eval", folder)
    assert "without --run or a QUESTION" in _debug("--eval", folder, "--question", 1, "--run", "x")
    assert "without --run or a QUESTION" in _debug("How many?", "--eval", folder, "--question", 1)
    assert "--at opens a checkpoint of an earlier run" in _debug("How many?", "--at", "x")
    assert f"No question 99 in {folder}: its {LIMIT} question(s) are numbered 0 to {LIMIT - 1}" in _debug(
        "--eval", folder, "--question", 99)
    monkeypatch.chdir(evaluated["elsewhere"])
    line = _debug("--eval", "mine", "--question", 1)
    assert "No eval run folder 'mine': looked for" in line
    assert str(evaluated["elsewhere"] / "mine") in line and str(evaluated["elsewhere"] / "evals" / "mine") in line


def test_questions_without_a_run_say_why_and_what_to_do(without_runs, monkeypatch):
    tmp, notrace = without_runs["tmp"], without_runs["notrace"]
    records = read_records(notrace / "records.jsonl")
    assert [r["status"] for r in records.values()] == ["answered", "answered", "missing_db"]
    assert "Question 2 (no_such_db) was not run: its database was missing" in _debug("--eval", notrace, "--question", 2)
    line = _debug("--eval", notrace, "--question", 0)
    assert "kept no checkpoints to open: the eval ran with --no-trace or --no-checkpoints" in line
    assert f"sqlchorus eval --dataset {tmp / 'small.json'} --out {notrace} --no-resume" in line
    assert "failed before its run was kept (RuntimeError: boom)" in _debug(
        "--eval", without_runs["failed"], "--question", 0)
    monkeypatch.chdir(tmp)
    assert "holds no records" in _debug("--eval", "empty", "--question", 0)
    assert "is not an eval run folder" in _debug("--eval", "not-an-eval", "--question", 0)


def test_the_lookup_is_the_librarys(evaluated, without_runs):
    found = question_run(evaluated["folder"], "3")
    assert (found.run_id, found.record["prediction"]) == (evaluated["records"][3]["run_id"], WRONG[3])
    assert found.checkpoints == str(evaluated["folder"] / "traces" / "checkpoints.sqlite")
    # A checkpoint store given instead of the recorded one is the one used.
    assert question_run(without_runs["notrace"], 0, checkpoints="elsewhere.sqlite").checkpoints == "elsewhere.sqlite"
    with pytest.raises(EvalError, match="numbered 0 to 4"):
        question_run(evaluated["folder"], 5)
