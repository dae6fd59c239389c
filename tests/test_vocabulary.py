"""One vocabulary: a verdict, a count and a cost read the same on the command line, in the JSON
files, in the viewer's pages and in ``report.html``. A question with no prediction is
``missing_prediction`` everywhere (never "no answer" beside it); the Fixes column counts the
rounds the fixer spent on a candidate as its model calls show them; the model calls two runs
compare name their model; a model with no price reads ``unpriced``, never ``$0``.

An evaluation of four demo questions is run once from the command line with a scripted model
that has no price: two answered, one it has no answer for, and one whose query fails and whose
fixer never writes SQL. The viewer is then started over it and driven in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil

import httpx
import pytest
from click.testing import CliRunner

from conftest import screenshot, watched_page
from servers import free_port, running, server_env
from sqlchorus.interfaces.cli import cli
from sqlchorus.runs.demo import demo_db_path, load_demo_questions
from sqlchorus.testing import oracle_model

QUESTIONS = load_demo_questions()[:4]
GOLD = {q["question"]: q["sql"] for q in QUESTIONS}
MISSING = QUESTIONS[2]["question"]
"""A question the model has no answer for: no prediction."""
FIXED = QUESTIONS[3]["question"]
"""A question whose query fails, and whose fixer answers every round without SQL."""
BROKEN = "SELECT nme FROM customers"
SAYS_NO_ANSWER = re.compile(r"no[ _]answer", re.I)
"""The other name a missing prediction had, which nothing shows any more."""


def _answer(question: str) -> str | None:
    return None if question in (MISSING, FIXED) else GOLD.get(question)


def _model():
    return oracle_model(_answer, first_answer=lambda q: BROKEN if q == FIXED else _answer(q), name="oracle")


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    """The evaluation, run by `sqlchorus eval` with the scripted model for any model name: its
    folder and what the command printed."""
    folder = tmp_path_factory.mktemp("vocabulary")
    shutil.copy(demo_db_path(), folder / "shop.sqlite")
    (folder / "questions.json").write_text(json.dumps({"benchmark": "spider", "examples": [
        {"question": q["question"], "db_id": "shop", "gold_sql": q["sql"], "difficulty": "easy"} for q in QUESTIONS]}),
        encoding="utf-8")
    model = _model()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)
        out = CliRunner().invoke(cli, ["eval", "--dataset", str(folder / "questions.json"), "--model", "openai:x",
                                       "--no-cache", "--out", str(folder / "evals" / "vocab")])
    assert out.exit_code == 0, out.output
    run = folder / "evals" / "vocab"
    records = {r["question"]: r for r in map(json.loads, (run / "records.jsonl").read_text().splitlines())}
    return {"folder": folder, "run": run, "printed": out.output, "records": records}


def test_a_missing_prediction_has_one_name_on_the_command_line_in_the_files_and_the_report(evaluation):
    records, run = evaluation["records"], evaluation["run"]
    for question in (MISSING, FIXED):
        assert records[question]["prediction"] is None and records[question]["verdict"] == "missing_prediction"
        number = records[question]["question_id"]
        assert f"question {number} (shop, missing_prediction): " in evaluation["printed"]
    assert "errors: missing_prediction 2" in evaluation["printed"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["n_missing_prediction"] == 2 and summary["by_generator"]["missing_prediction"]["n"] == 2
    report = (run / "report.html").read_text()
    cells = re.findall(r'<td class="v">([^<]*)</td>', report)
    assert [c.split(":")[0] for c in cells] == ["correct", "correct", "wrong (missing_prediction)",
                                               "wrong (missing_prediction)"]
    assert "<td>wrong (missing_prediction)</td><td>2</td>" in report
    for said in (evaluation["printed"], json.dumps(summary), report):
        assert not SAYS_NO_ANSWER.search(said)


def test_the_fixers_rounds_are_its_recorded_attempts_in_the_records_and_on_the_command_line(evaluation, monkeypatch,
                                                                                              tmp_path):
    candidate = evaluation["records"][FIXED]["candidates"][0]
    # None of its rounds gave a new query, yet the fixer ran: every round it had.
    assert candidate["fix_attempts"] == 0 and candidate["fixer_rounds"] == 3
    model = _model()
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)
    db = str(evaluation["folder"] / "shop.sqlite")
    base = ["ask", FIXED, "--db", db, "--model", "openai:x", "--no-cache", "--trace-dir", str(tmp_path / "traces")]
    answer = json.loads(CliRunner().invoke(cli, [*base, "--json"]).output)
    fixer_calls = sum(1 for u in answer["usage"] if u["node"] == "fix_candidates")
    assert fixer_calls == 3
    printed = CliRunner().invoke(cli, base).output
    row = next(line for line in printed.splitlines() if "divide_conquer-0" in line)
    assert [cell.strip() for cell in row.split("│")[1:-1]][3] == str(fixer_calls)


@pytest.fixture(scope="module")
def viewer(evaluation):
    folder = evaluation["folder"]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = ["ui", "--port", str(port), "--db", str(folder / "shop.sqlite"), "--model", "python:server_factories:mixed",
            "--no-cache", "--trace-dir", str(folder / "traces"), "--checkpoints", str(folder / "checkpoints.sqlite"),
            "--evals-dir", str(folder / "evals")]
    with running(args, folder, server_env(folder), base + "/api/runs"):
        yield base


@pytest.fixture
def page(browser, viewer):
    with watched_page(browser, viewer, 900) as opened:
        opened.set_default_timeout(60_000)
        yield opened


def _run_of(evaluation, question: str) -> str:
    return evaluation["records"][question]["run_id"]


@pytest.mark.slow
def test_the_evaluation_page_the_run_page_and_the_runs_list_name_a_missing_prediction_alike(page, viewer, evaluation,
                                                                                              tmp_path):
    number = evaluation["records"][MISSING]["question_id"]
    page.goto(viewer + "/#/eval/vocab")
    row = page.locator(f"#questions tr[data-question='{number}']")
    row.wait_for()
    assert row.locator("td.verdict").inner_text() == "wrong (missing_prediction)"
    assert "missing_prediction" in page.locator("#chart-generator .axis text").all_text_contents()
    page.select_option("#filter-error", "missing_prediction")
    assert page.locator("#questions tbody tr[data-question]").count() == 2
    screenshot(page, "vocabulary-eval", tmp_path)
    page.goto(f"{viewer}/#/run/{_run_of(evaluation, MISSING)}")
    page.wait_for_selector("#verdict")
    assert page.locator("#verdict").inner_text() == "wrong (missing_prediction)"
    status = page.locator(".facts div", has=page.locator("span", has_text=re.compile("^Status$")))
    assert status.inner_text().splitlines()[-1] == "wrong (missing_prediction)"
    screenshot(page, "vocabulary-run", tmp_path)
    page.goto(viewer + "/")
    listed = page.locator(f"#runs tr[data-run='{_run_of(evaluation, MISSING)}'] td").nth(3)
    assert listed.inner_text() == "wrong (missing_prediction)"
    for shown in (page.locator("#main").inner_text(),):
        assert not SAYS_NO_ANSWER.search(shown)


@pytest.mark.slow
def test_the_fixes_column_counts_the_rounds_the_fixer_spent(page, viewer, evaluation, tmp_path):
    run_id = _run_of(evaluation, FIXED)
    page.goto(f"{viewer}/#/run/{run_id}")
    page.wait_for_selector("#candidates tbody tr")
    calls = httpx.get(f"{viewer}/api/runs/{run_id}").json()["calls"]
    fixer_calls = sum(1 for c in calls if c["node"] == "fix_candidates")
    assert fixer_calls == 3
    assert page.locator("#candidates tr[data-candidate='divide_conquer-0'] td.fixes").inner_text() == str(fixer_calls)
    screenshot(page, "vocabulary-fixes", tmp_path)


@pytest.mark.slow
def test_two_runs_compared_name_the_model_of_every_call(page, viewer, evaluation, tmp_path):
    a, b = _run_of(evaluation, QUESTIONS[0]["question"]), _run_of(evaluation, MISSING)
    page.goto(f"{viewer}/#/compare/{a}/{b}")
    page.wait_for_selector(".compare-calls li")
    for side in range(2):
        calls = page.locator(".compare-calls").nth(side).locator("li").all_inner_texts()
        assert calls and all(c.split(" · ")[2] == "oracle" for c in calls), calls
    screenshot(page, "vocabulary-compare", tmp_path)


@pytest.mark.slow
def test_an_unpriced_model_reads_unpriced_on_every_page_that_shows_a_cost(page, viewer, evaluation, tmp_path):
    report = (evaluation["run"] / "report.html").read_text()
    assert "<td>cost</td><td>unpriced</td>" in report and "$0" not in report
    page.goto(viewer + "/#/eval/vocab")
    page.wait_for_selector("#questions tbody tr[data-question]")
    column = page.locator("#questions thead th").all_inner_texts().index("Cost") + 1
    costs = page.locator(f"#questions tbody tr[data-question] td:nth-child({column})").all_inner_texts()
    assert costs == ["unpriced"] * len(QUESTIONS)
    page.goto(f"{viewer}/#/run/{_run_of(evaluation, QUESTIONS[0]['question'])}")
    page.wait_for_selector("#candidates")
    cost = page.locator(".facts div", has=page.locator("span", has_text=re.compile("^Cost$"))).first
    assert cost.inner_text().splitlines()[-1] == "unpriced"
    assert "$0" not in page.locator("#main").inner_text()
    a, b = _run_of(evaluation, QUESTIONS[0]["question"]), _run_of(evaluation, QUESTIONS[1]["question"])
    page.goto(f"{viewer}/#/compare/{a}/{b}")
    page.wait_for_selector("#compare-nodes")
    for side in range(2):
        cost = page.locator("#compare .facts").nth(side).locator("div", has=page.locator("span", has_text="Cost"))
        assert cost.inner_text().splitlines()[-1] == "unpriced"
    # Each node with model calls: its cost, in both runs, is unpriced (a node with none costs $0).
    rows = page.locator("#compare-nodes tbody tr").evaluate_all(
        "(rows) => rows.map(r => [...r.cells].map(c => c.textContent))")
    called = [r for r in rows if r[2] != "0"]
    assert called and all(r[4] == "unpriced" and r[9] == "unpriced" for r in called), rows
    screenshot(page, "vocabulary-unpriced", tmp_path)
    # The runs list and the across-runs page: every run and every node that called the model.
    page.goto(viewer + "/#/")
    page.wait_for_selector(f"#runs tr[data-run='{a}']")
    column = page.locator("#runs thead th").all_inner_texts().index("Cost") + 1
    for run in (a, b):
        assert page.locator(f"#runs tr[data-run='{run}'] td:nth-child({column})").inner_text() == "unpriced"
    page.goto(viewer + "/#/stats")
    page.wait_for_selector("#nodes tbody tr")
    nodes = page.locator("#nodes tbody tr").evaluate_all(
        "(rows) => rows.map(r => [r.dataset.node, r.querySelector('td.cost').textContent])")
    assert any(cost == "unpriced" for _, cost in nodes), nodes
    assert "$0" not in " ".join(cost for node, cost in nodes if node in {r[0] for r in called}), nodes
    screenshot(page, "vocabulary-unpriced-stats", tmp_path)
