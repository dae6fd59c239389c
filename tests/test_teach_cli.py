"""`sqlchorus teach`, `sqlchorus examples list|export|rm` and `sqlchorus check`, through the front door."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import spider_db
from sqlchorus.evaluation.runs import question_run
from sqlchorus.interfaces.cli import cli
from sqlchorus.runs.demo import demo_db_path, load_demo_questions

CONCERT = str(spider_db("concert_singer"))
COUNT = "SELECT count(*) FROM singer"
DEMO = load_demo_questions()


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def sqlchorus(*args: str, env=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sqlchorus", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_teach_then_list_export_and_remove(tmp_path):
    taught = run("teach", "--db", CONCERT, "-q", "How many singers are there?", "--sql", COUNT, "--json")
    assert taught.exit_code == 0, taught.output
    entry = json.loads(taught.output)
    term = run("teach", "--db", CONCERT, "--term", "veteran", "--meaning", "older than 40", "--sql", "Age > 40")
    assert term.exit_code == 0 and term.output.startswith("taught t")
    assert Path("traces/checkpoints.sqlite").is_file()  # the command line's store

    listed = json.loads(run("examples", "list", "--json").output)
    assert [e["id"] for e in listed] == [entry["id"], term.output.split()[1].rstrip(":")]
    shown = run("examples", "list", "--db", CONCERT, "--kind", "example")
    assert entry["id"] in shown.output and "veteran" not in shown.output and "1 taught" in shown.output

    out = tmp_path / "taught.jsonl"
    assert run("examples", "export", "--out", str(out)).exit_code == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["id"] for line in lines] == [e["id"] for e in listed]

    # What export writes, teach --file takes back, into another store.
    other = tmp_path / "other.sqlite"
    again = run("teach", "--file", str(out), "--examples-store", str(other), "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["added"] == [e["id"] for e in listed]

    removed = run("examples", "rm", entry["id"])
    assert removed.exit_code == 0 and f"removed {entry['id']}" in removed.output
    assert [e["id"] for e in json.loads(run("examples", "list", "--json").output)] == [lines[1]["id"]]


@pytest.mark.parametrize(("args", "says"), [
    (["-q", "Drop it", "--sql", "DROP TABLE singer"], "refused, so it was not taught"),
    (["-q", "   ", "--sql", COUNT], "question is empty"),
    (["-q", "Nobody", "--sql", "SELECT Name FROM singer WHERE 0"], "returned no rows"),
    (["-q", "Only a question"], "needs both --question and --sql"),
    (["--term", "veteran", "--sql", "no_such_column > 1"], "none of the database's tables"),
])
@pytest.mark.slow
def test_a_refused_teach_is_one_line_exit_2_and_keeps_nothing(args, says):
    done = sqlchorus("teach", "--db", CONCERT, *args)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not Path("traces/checkpoints.sqlite").exists() or json.loads(
        sqlchorus("examples", "list", "--json").stdout) == []


@pytest.mark.slow
def test_a_duplicate_is_refused_with_the_id_to_remove():
    assert sqlchorus("teach", "--db", CONCERT, "-q", "How many singers?", "--sql", COUNT).returncode == 0
    again = sqlchorus("teach", "--db", CONCERT, "-q", "how many singers?", "--sql", COUNT)
    assert again.returncode == 2 and "taught already" in again.stderr and "sqlchorus examples rm e" in again.stderr


@pytest.mark.slow
def test_a_pairs_file_with_bad_lines_keeps_the_others_and_exits_1(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join([
        json.dumps({"question": "How many singers?", "sql": COUNT}),
        "{not json",
        json.dumps({"question": "Drop", "sql": "DROP TABLE singer"}),
        json.dumps({"question": "Stadium names?", "sql": "SELECT Name FROM stadium"}),
    ]) + "\n")
    done = sqlchorus("teach", "--db", CONCERT, "--file", str(pairs))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "line 2: not taught: not JSON" in done.stderr and "line 3: not taught: The SQL was refused" in done.stderr
    assert "2 taught, 2 refused" in done.stdout
    assert len(json.loads(sqlchorus("examples", "list", "--json").stdout)) == 2


@pytest.mark.slow
def test_bad_input_is_one_clear_line():
    cases = [
        (["examples", "list", "--db", CONCERT], "keeps nothing for"),
        (["examples", "rm", "e000000000"], "No taught entry has the id e000000000"),
        (["teach", "--db", str(Path("missing.sqlite").absolute()), "-q", "x", "--sql", "SELECT 1"], "missing.sqlite"),
        (["teach", "--db", CONCERT, "-q", "x", "--sql", "SELECT 1",
          "--examples-store", "postgresql://nobody@127.0.0.1:1/none"], "Cannot reach the checkpoint database"),
        (["teach", "--db", CONCERT, "-q", "x", "--sql", "SELECT 1", "--no-taught"], "--examples-store"),
        (["check", "--db", CONCERT, "--model", "openai:gpt-4o-mini"], "keeps nothing for"),
    ]
    sqlchorus("teach", "--db", str(demo_db_path()), "-q", "How many customers?", "--sql", "SELECT count(*) FROM customers")
    for args, says in cases:
        done = sqlchorus(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert says in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)


@pytest.mark.slow
def test_check_asks_every_taught_question_again_and_reports_each_regression(factories_env):
    """Taught with the demo questions' own SQL, the oracle answers every one alike; a question
    taught with other SQL than the model writes is a regression, with the command that opens it."""
    db = str(demo_db_path())
    for q in DEMO[:3]:
        assert sqlchorus("teach", "--db", db, "-q", q["question"], "--sql", q["sql"], env=factories_env).returncode == 0
    model = ["--model", "python:scripted_factories:oracle", "--no-cache"]
    clean = sqlchorus("check", "--db", db, "--json", *model, env=factories_env)
    assert clean.returncode == 0, clean.stderr
    report = json.loads(clean.stdout)
    assert (report["n_checked"], report["n_regressions"], report["regressions"]) == (3, 0, [])

    broken = DEMO[3]
    other_sql = DEMO[4]["sql"]  # returns rows, but not this question's
    assert sqlchorus("teach", "--db", db, "-q", broken["question"], "--sql", other_sql,
                     env=factories_env).returncode == 0
    regressed = sqlchorus("check", "--db", db, "--json", "--out", "evals/check-demo", *model, env=factories_env)
    assert regressed.returncode == 1, regressed.stderr
    report = json.loads(regressed.stdout)
    assert (report["n_checked"], report["n_regressions"]) == (4, 1)
    [r] = report["regressions"]
    assert (r["question"], r["taught_sql"], r["sql"]) == (broken["question"], other_sql, broken["sql"])
    assert r["debug"] == f"sqlchorus debug --eval evals/check-demo --question {r['id']}"
    found = question_run("evals/check-demo", r["id"])
    assert found.record["question"] == broken["question"] and Path(found.checkpoints).is_file()

    text = sqlchorus("check", "--db", db, "--out", "evals/check-demo", *model, env=factories_env)
    assert text.returncode == 1 and f"REGRESSED {r['id']}" in text.stdout and "4 checked, 1 regressed" in text.stdout
