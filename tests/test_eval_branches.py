"""What was scored stays what was scored: debugging an evaluation's question leaves its record as
it was, and each branch that ends is scored against the question's gold (`now correct`, `still
wrong`, ...) in the debugger, in `debug --eval ... --question N` and in the viewer's JSON."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_evaluate import spider_dev

from conftest import data_dir
from sqlchorus.config.settings import Settings
from sqlchorus.evaluation.datasets import load_dataset
from sqlchorus.evaluation.runs import (
    BRANCHES_FILE,
    RECORDS_FILE,
    question_run,
    read_branches,
    read_records,
    run_eval,
    score_branches,
)
from sqlchorus.interfaces.cli import cli
from sqlchorus.runs.debugger import Debugger, kept_answers_model
from sqlchorus.runs.session import Session
from sqlchorus.testing import oracle_model

WRONG = {1: "SELECT name FROM singer"}
"""The question the scripted model answers wrongly, with its wrong answer."""
NOT_THE_ANSWER = "SELECT 'not the answer'"


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """An evaluation of Spider dev's first three questions, kept as `sqlchorus eval` keeps one
    (its traces and checkpoints in its own folder), question 1 answered wrongly."""
    examples = spider_dev().examples[:3]
    tmp = tmp_path_factory.mktemp("eval-branches")
    source = tmp / "three.json"
    source.write_text(json.dumps({"db_root": str(data_dir() / "spider" / "database"), "examples": [
        {"question": e.question, "db_id": e.db_id, "gold_sql": e.gold_sql} for e in examples]}), encoding="utf-8")
    answers = {e.question: WRONG.get(i, e.gold_sql) for i, e in enumerate(examples)}
    folder = tmp / "evals" / "first"
    settings = Settings(model=oracle_model(answers.get), trace_dir=str(folder / "traces"), cache=False)
    run_eval(load_dataset(source), settings, out_dir=folder, progress=False)
    records = read_records(folder / RECORDS_FILE)
    assert [r["verdict"] for r in records.values()] == ["correct", "wrong", "correct"]
    return {"tmp": tmp, "folder": folder, "records": records,
            "recorded": (folder / RECORDS_FILE).read_bytes()}


def _before_selection(folder: Path, question: int) -> str:
    """The checkpoint of question ``question``'s own run paused before select_candidate."""
    found = question_run(folder, question)
    with Session(Settings(checkpoints=found.checkpoints, model=kept_answers_model(), trace_dir=None)) as session:
        debugger = Debugger.open(found.run_id, session=session)
        try:
            return next(h["id"] for h in debugger.history() if h["next"] == ["select_candidate"])
        finally:
            debugger.close()


def _debug(args: list[str], commands: str, monkeypatch) -> str:
    # Wide enough that rich never wraps a line the assertions read whole.
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.setenv("NO_COLOR", "1")
    result = CliRunner().invoke(cli, ["debug", *args, "--commands", "-"], input=commands)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return result.output


@pytest.fixture(scope="module")
def debugged(evaluated):
    """Question 1 debugged from the command line: one branch edited to the gold, one to a wrong query."""
    folder, record = evaluated["folder"], evaluated["records"][1]
    fork = _before_selection(folder, 1)
    commands = "\n".join([
        f"fork {fork}", f"set candidates[0].sql {json.dumps(record['gold_sql'])}", "continue",
        f"fork {fork}", f"set candidates[0].sql {json.dumps(NOT_THE_ANSWER)}", "continue", "quit", ""])
    with pytest.MonkeyPatch.context() as monkeypatch:
        output = _debug(["--eval", str(folder), "--question", "1"], commands, monkeypatch)
    return {"output": output, "fork": fork, "record": record}


def _branch_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("branch ")]


def test_each_branch_is_scored_against_the_gold_as_it_ends(evaluated, debugged):
    output, record, fork = debugged["output"], debugged["record"], debugged["fork"]
    # Before any command: what the evaluation scored, and no branch yet.
    assert f"scored wrong: {WRONG[1]}" in output
    lines = _branch_lines(output)
    assert len(lines) == 2, output
    assert re.fullmatch(rf"branch \S+ ended \(from {fork}; edited candidates\): now correct against the gold: "
                        rf"{re.escape(record['gold_sql'])}", lines[0]), lines[0]
    assert re.fullmatch(rf"branch \S+ ended \(from {fork}; edited candidates\): still wrong against the gold: "
                        rf"{re.escape(NOT_THE_ANSWER)}", lines[1]), lines[1]
    assert output.count("the evaluation's record stays wrong") == 2

    # The verdicts are kept beside the records, and the records are as the evaluation wrote them.
    assert (evaluated["folder"] / RECORDS_FILE).read_bytes() == evaluated["recorded"]
    assert read_records(evaluated["folder"] / RECORDS_FILE)[1]["prediction"] == WRONG[1]
    kept = read_branches(evaluated["folder"])[record["run_id"]]
    assert [(b["outcome"], b["label"], b["verdict"], b["sql"]) for b in kept] == [
        ("now_correct", "now correct", "correct", record["gold_sql"]),
        ("still_wrong", "still wrong", "wrong", NOT_THE_ANSWER)]
    assert all(b["forked_from"] == fork and b["edits"] == ["candidates"] for b in kept)


def test_debug_eval_shows_the_scored_verdict_and_every_branchs(evaluated, debugged, monkeypatch):
    output = _debug(["--eval", str(evaluated["folder"]), "--question", "1"], "quit\n", monkeypatch)
    record = debugged["record"]
    assert f"question 1 (concert_singer, wrong): {record['question']}" in output
    assert f"scored wrong: {WRONG[1]}" in output
    lines = _branch_lines(output)
    assert [re.sub(r"^branch (\S+) \(.*?\): ", "", line) for line in lines] == [
        f"now correct against the gold: {record['gold_sql']}", f"still wrong against the gold: {NOT_THE_ANSWER}"]
    # Said as they stand, not as news: nothing ended in this session.
    assert " ended " not in "\n".join(lines)
    # The same when the run is opened by its id in the evaluation's own store.
    by_id = _debug(["--run", record["run_id"], "--checkpoints", str(evaluated["folder"] / "traces" / "checkpoints.sqlite")],
                   "quit\n", monkeypatch)
    assert f"scored wrong: {WRONG[1]}" in by_id and _branch_lines(by_id) == lines


def test_the_viewer_serves_the_scored_verdict_beside_each_branchs(evaluated, debugged, tmp_path):
    from starlette.testclient import TestClient

    from sqlchorus.interfaces.viewer import NoModel, create_app
    from sqlchorus.runs.run_index import RunIndex
    from sqlchorus.runs.service import RunService

    folder, record = evaluated["folder"], debugged["record"]
    service = RunService(settings=Settings(trace_dir=str(tmp_path / "traces"), checkpoints=str(tmp_path / "c.sqlite"),
                                           cache=False), model=NoModel())
    app = create_app(service, RunIndex(tmp_path / "traces", folder.parent))
    # Entered, so that the debugger the page opens is closed with the app.
    with contextlib.closing(service), TestClient(app, base_url="http://127.0.0.1:8080") as client:
        questions = {q["question_id"]: q for q in client.get("/api/evals/first").json()["questions"]}
        row = questions[1]
        assert (row["verdict"], row["correct"], row["prediction"]) == ("wrong", False, WRONG[1])
        assert [(b["label"], b["sql"]) for b in row["branches"]] == [
            ("now correct", record["gold_sql"]), ("still wrong", NOT_THE_ANSWER)]
        assert questions[0]["branches"] == [] and questions[2]["branches"] == []

        run = client.get(f"/api/runs/{record['run_id']}").json()
        assert (run["eval"]["verdict"], run["eval"]["prediction"]) == ("wrong", WRONG[1])
        assert [b["outcome"] for b in run["eval"]["branches"]] == ["now_correct", "still_wrong"]
        # The run's answer is the one that was scored, not the last branch's.
        assert run["answer"]["sql"] == WRONG[1]

        # A branch ended from the page's step-through is scored as it ends: question 0, scored
        # correct, edited to a wrong query, is now wrong.
        csrf = re.search(r'name="csrf-token" content="([^"]+)"', client.get("/").text)[1]
        headers = {"x-csrf-token": csrf}
        first = evaluated["records"][0]
        fork = _before_selection(folder, 0)
        assert client.post(f"/api/debug/{first['run_id']}/fork/{fork}", headers=headers).status_code == 200
        edited = client.post(f"/api/debug/{first['run_id']}/set", headers=headers,
                             json={"key": "candidates[0].sql", "value": NOT_THE_ANSWER})
        assert edited.status_code == 200 and "branch" not in edited.json()  # paused: nothing has ended
        ended = client.post(f"/api/debug/{first['run_id']}/continue", headers=headers).json()
        assert ended["finished"] and (ended["branch"]["label"], ended["branch"]["sql"]) == ("now wrong", NOT_THE_ANSWER)
        row = {q["question_id"]: q for q in client.get("/api/evals/first").json()["questions"]}[0]
        assert (row["verdict"], row["correct"]) == ("correct", True)
        assert [b["outcome"] for b in row["branches"]] == ["now_wrong"]
        assert client.get(f"/api/runs/{first['run_id']}").json()["answer"]["sql"] == first["prediction"]
    assert (folder / RECORDS_FILE).read_bytes() == evaluated["recorded"]
    assert (folder / BRANCHES_FILE).is_file()


def test_starting_an_evaluation_over_leaves_no_branch_of_its_old_runs(tmp_path):
    example = spider_dev().examples[0]
    source = tmp_path / "one.json"
    source.write_text(json.dumps({"db_root": str(data_dir() / "spider" / "database"), "examples": [
        {"question": example.question, "db_id": example.db_id, "gold_sql": example.gold_sql}]}), encoding="utf-8")
    folder = tmp_path / "evals" / "one"
    settings = Settings(model=oracle_model(lambda q: NOT_THE_ANSWER), trace_dir=str(folder / "traces"), cache=False)
    run_eval(load_dataset(source), settings, out_dir=folder, progress=False)
    record = read_records(folder / RECORDS_FILE)[0]
    scored = score_branches(folder, record, [{"checkpoint": "edited", "forked_from": None, "edits": ["answer"],
                                              "sql": example.gold_sql}])
    assert [b["outcome"] for b in scored] == ["now_correct"]
    # Resumed, the records and their branches stay; started over, neither does.
    run_eval(load_dataset(source), settings, out_dir=folder, progress=False)
    assert list(read_branches(folder)) == [record["run_id"]]
    run_eval(load_dataset(source), settings, out_dir=folder, progress=False, resume=False)
    assert read_branches(folder) == {}
    assert read_records(folder / RECORDS_FILE)[0]["run_id"] != record["run_id"]
