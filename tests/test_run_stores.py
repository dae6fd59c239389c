"""One place to find a run: runs written by the command line (./traces), by the Python API (the
per-user data folder) and by an evaluation (evals/<name>/traces) are found by id alone by every
command that reads runs (`trace show`, `debug --run`, `prune`, the viewer's runs list); a run that
is nowhere is refused with a message naming every store searched; a store the user names is the
only one read."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

import sqlchorus
from servers import free_port, running
from sqlchorus.interfaces.cli import cli
from sqlchorus.runs.demo import demo_db_path, load_demo_questions
from sqlchorus.testing import oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTIONS = list(GOLD)[:3]


def invoke(*args: str, input: str | None = None):
    out = CliRunner().invoke(cli, list(args), input=input)
    assert "Traceback" not in out.output, out.output
    return out


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """One run of each writer, in the working folder (``tmp_path``) and a per-user data folder of
    the test's own: the command line's, the Python API's, and an evaluation's two."""
    monkeypatch.delenv("SQLCHORUS_MODEL", raising=False)
    monkeypatch.delenv("SQLCHORUS_TRACE_DIR", raising=False)
    monkeypatch.delenv("SQLCHORUS_CHECKPOINTS", raising=False)
    user_data = Path(os.environ["XDG_DATA_HOME"])  # the test's own, set by conftest
    assert user_data.is_relative_to(tmp_path)

    python = sqlchorus.ask(QUESTIONS[0], db=demo_db_path(), model=oracle_model(GOLD.get)).run_id

    # The command line and the evaluation resolve whatever --model names to the oracle.
    from sqlchorus.core import models

    real = models.resolve_model
    monkeypatch.setattr(models, "resolve_model", lambda spec, **kw: oracle_model(GOLD.get))
    asked = invoke("ask", QUESTIONS[1], "--model", "openai:x", "--json", "--no-cache")
    assert asked.exit_code == 0, asked.output
    command_line = json.loads(asked.output)["run_id"]

    shutil.copy(demo_db_path(), tmp_path / "demo.sqlite")
    dataset = tmp_path / "questions.json"
    dataset.write_text(json.dumps([{"question": q, "db_id": "demo", "gold_sql": GOLD[q]} for q in QUESTIONS[1:]]),
                       encoding="utf-8")
    evaluated = invoke("eval", "--dataset", str(dataset), "--model", "openai:x", "--run-name", "nightly",
                       "--no-cache", "--json")
    assert evaluated.exit_code == 0, evaluated.output
    records = [json.loads(line) for line in (tmp_path / "evals" / "nightly" / "records.jsonl").read_text().splitlines()]
    evaluation = [r["run_id"] for r in sorted(records, key=lambda r: r["index"])]
    # The runs are written; what reads them needs no model, and is served their kept answers.
    monkeypatch.setattr(models, "resolve_model", real)

    # Each is where its writer keeps runs, and nowhere else.
    assert (user_data / "sqlchorus" / "traces" / f"{python}.jsonl").is_file()
    assert (tmp_path / "traces" / f"{command_line}.jsonl").is_file()
    assert all((tmp_path / "evals" / "nightly" / "traces" / f"{run}.jsonl").is_file() for run in evaluation)
    assert not (tmp_path / "traces" / f"{python}.jsonl").exists()
    return {"python": python, "command_line": command_line, "evaluation": evaluation, "user_data": user_data,
            "question": {python: QUESTIONS[0], command_line: QUESTIONS[1], evaluation[0]: QUESTIONS[1],
                         evaluation[1]: QUESTIONS[2]}}


def _every(runs) -> list[str]:
    return [runs["command_line"], runs["python"], *runs["evaluation"]]


def test_trace_show_finds_every_writers_run_by_id_alone(runs):
    for run in _every(runs):
        out = invoke("trace", "show", run)
        assert out.exit_code == 0, out.output
        # Each run's span is named for what started it: ask (Python, command line) or eval.
        assert out.output.split(" ")[0] in ("ask", "eval") and "node:select_candidate" in out.output
    # A unique start of an id is enough, wherever the run is.
    start = runs["python"][:-3]
    assert invoke("trace", "show", start).output == invoke("trace", "show", runs["python"]).output


def test_a_run_that_is_nowhere_is_refused_naming_every_store_searched(runs):
    user_traces = runs["user_data"] / "sqlchorus" / "traces"
    out = invoke("trace", "show", "20990101T000000-00000000")
    assert out.exit_code == 2
    message = out.output.strip()
    assert message.startswith("Error: No trace for run '20990101T000000-00000000' in traces/ (the command line's), "
                              f"{user_traces}/ (the Python API's) and evals/nightly/traces/ (evaluation nightly)."), message

    out = invoke("debug", "--run", "20990101T000000-00000000", "--commands", "-", input="quit\n")
    assert out.exit_code == 2
    message = out.output.strip()
    assert message.startswith("Error: No run '20990101T000000-00000000' in traces/checkpoints.sqlite (the command "
                              f"line's), {user_traces / 'checkpoints.sqlite'} (the Python API's) and "
                              "evals/nightly/traces/checkpoints.sqlite (evaluation nightly)."), message
    assert "--checkpoints names another store" in message


def test_a_store_that_is_not_there_is_named_as_such_and_never_made(tmp_path, monkeypatch):
    monkeypatch.delenv("SQLCHORUS_TRACE_DIR", raising=False)
    monkeypatch.delenv("SQLCHORUS_CHECKPOINTS", raising=False)
    out = invoke("debug", "--run", "20990101T000000-00000000", "--commands", "-", input="quit\n")
    assert out.exit_code == 2
    assert "traces/checkpoints.sqlite (the command line's, none there)" in out.output
    assert "(the Python API's, none there)" in out.output
    assert not (tmp_path / "traces").exists()
    assert not (Path(os.environ["XDG_DATA_HOME"]) / "sqlchorus").exists()


def test_debug_run_opens_every_writers_run_by_id_alone(runs):
    for run in _every(runs):
        out = invoke("debug", "--run", run, "--commands", "-", input="state question\nstate answer\nquit\n")
        assert out.exit_code == 0, out.output
        shown = " ".join(out.output.split())  # the console wraps long lines
        assert runs["question"][run] in shown
        assert GOLD[runs["question"][run]] in shown  # its answer, from its own checkpoints
    # Where it was kept is said when it is not the command line's own store.
    python = invoke("debug", "--run", runs["python"][-8:], "--commands", "-", input="quit\n")
    assert python.exit_code == 0, python.output
    assert f"run {runs['python']}, kept in " in python.output and "(the Python API's)" in python.output


def test_a_named_store_is_the_only_one_read(runs):
    out = invoke("trace", "show", runs["python"], "--trace-dir", "traces")
    assert out.exit_code == 2 and "No trace for run" in out.output and "Python API" not in out.output
    out = invoke("debug", "--run", runs["python"], "--checkpoints", "traces/checkpoints.sqlite", "--commands", "-",
                 input="quit\n")
    assert out.exit_code == 2 and f"No run {runs['python']!r} in traces/checkpoints.sqlite" in out.output
    assert "Python API" not in out.output
    out = invoke("prune", "--keep-runs", "1", "--dry-run", "--trace-dir", "traces")
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[-1].startswith("Would remove 0 run(s)")


def test_prune_counts_the_runs_of_every_store_together(runs):
    python, command_line, (first, second) = runs["python"], runs["command_line"], runs["evaluation"]
    dry = invoke("prune", "--keep-runs", "1", "--dry-run")
    assert dry.exit_code == 0, dry.output
    lines = dry.output.splitlines()
    assert lines[0].startswith("runs of traces/ (the command line's), ") and "(evaluation nightly)" in lines[0]
    # Oldest first, each from its own store; the newest of all (the evaluation's last) stays.
    assert lines[1:-1] == [f"would remove {python} (the Python API's)",
                           f"would remove {command_line} (the command line's)",
                           f"would remove {first} (evaluation nightly)"]
    assert lines[-1].startswith("Would remove 3 run(s) and 3 trace file(s)") and "kept 1 run(s)" in lines[-1]

    user_traces = runs["user_data"] / "sqlchorus" / "traces"
    done = invoke("prune", "--keep-runs", "3")
    assert done.exit_code == 0, done.output
    assert f"removed {python} (the Python API's)" in done.output.splitlines()
    assert not (user_traces / f"{python}.jsonl").exists()
    gone = invoke("debug", "--run", python, "--commands", "-", input="quit\n")
    assert gone.exit_code == 2 and f"No run {python!r}" in gone.output  # its checkpoints went too
    for run in (command_line, first, second):
        assert invoke("trace", "show", run).exit_code == 0


@pytest.mark.slow
def test_the_viewer_lists_and_opens_every_writers_run(runs, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("SQLCHORUS_TOKEN", "SQLCHORUS_MODEL")}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with running(["ui", "--port", str(port), "--no-cache"], tmp_path, env, base + "/api/runs"):
        listed = {r["run_id"]: r for r in httpx.get(base + "/api/runs", timeout=60).json()["runs"]}
        assert set(_every(runs)) <= set(listed)
        assert listed[runs["evaluation"][0]]["group"] == "nightly"
        for run in _every(runs):
            detail = httpx.get(f"{base}/api/runs/{run}", timeout=60).json()
            # Read from the store that keeps it: its checkpoints, its answer and its calls.
            assert detail["checkpoints"] is True, run
            assert detail["answer"]["sql"] == GOLD[runs["question"][run]]
            assert detail["calls"], run
    # A folder named on the command line is the viewer's only store of runs outside evaluations.
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with running(["ui", "--port", str(port), "--no-cache", "--trace-dir", "traces"], tmp_path, env, base + "/api/runs"):
        listed = {r["run_id"] for r in httpx.get(base + "/api/runs", timeout=60).json()["runs"]}
        assert runs["command_line"] in listed and set(runs["evaluation"]) <= listed
        assert runs["python"] not in listed
