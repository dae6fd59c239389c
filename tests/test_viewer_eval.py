"""`sqlchorus ui` as an evaluation workbench, driven in a real headless Chromium: an evaluation's
runs open from its own checkpoint store, its questions page, the waterfall as a tree, candidates
with their fixes, the stats' axes, and two runs or two evaluations compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from test_evaluate import spider_dev

from conftest import data_dir, screenshot, watched_page
from servers import free_port, running

LIMIT = 6
WRONG = {1: "SELECT name FROM singer", 3: "SELECT 'not the answer'"}
"""The questions the first evaluation answers wrongly, by number, with its wrong answer."""
BROKEN = {2: "SELECT nme FROM singer"}
"""Questions whose first answer fails, so that the fixer answers them (with the gold)."""
XSS = '<img src=x onerror="window.__pwned=1">'
MANY, MANY_WRONG_EVERY = 230, 5
"""The questions of the hand-written larger evaluation, and how often it is wrong."""

FACTORIES = '''
import json, os

from sqlchorus.testing import oracle_model


def _table(name):
    with open(os.environ[name], encoding="utf-8") as f:
        return json.load(f)


def answers():
    """Answers each question with the SQL $ANSWERS gives it; first with $FIRST's, when it has one."""
    table, first = _table("ANSWERS"), _table("FIRST")
    return oracle_model(table.get, first_answer=lambda q: first.get(q) or table.get(q), name="answers")
'''


def _env(tmp: Path, answers: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLCHORUS_")}
    return {**env, "SQLCHORUS_DATA": str(data_dir()), "PYTHONPATH": str(tmp), "ANSWERS": str(answers),
            "FIRST": str(tmp / "first.json"), "NO_COLOR": "1", "COLUMNS": "200"}


def _eval(work: Path, env: dict[str, str], name: str) -> None:
    out = subprocess.run([sys.executable, "-m", "sqlchorus", "eval", "--dataset", "spider-dev", "--limit", str(LIMIT),
                          "--model", "python:factories:answers", "--no-cache", "--generator", "divide_conquer",
                          "--generator", "nrep=2", "--out", str(work / "evals" / name)],
                         capture_output=True, text=True, cwd=work, env=env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.fixture(scope="module")
def workbench(tmp_path_factory):
    """Two evaluations of Spider dev's first questions with generators the viewer does not run by
    default (divide_conquer and nrep): "first" with two wrong answers and a fixed candidate,
    "second" all right; a third, hand-written, whose values look like markup. Then `sqlchorus ui`
    over them, with no model."""
    examples = spider_dev().examples[:LIMIT]
    tmp = tmp_path_factory.mktemp("workbench")
    work = tmp / "work"
    work.mkdir()
    (tmp / "factories.py").write_text(FACTORIES, encoding="utf-8")
    gold = {e.question: e.gold_sql for e in examples}
    wrong = dict(gold)
    for i, e in enumerate(examples):
        if i in WRONG:
            wrong[e.question] = WRONG[i]
    (tmp / "first.json").write_text(json.dumps({examples[i].question: sql for i, sql in BROKEN.items()}), encoding="utf-8")
    (tmp / "wrong.json").write_text(json.dumps(wrong), encoding="utf-8")
    (tmp / "gold.json").write_text(json.dumps(gold), encoding="utf-8")
    _eval(work, _env(tmp, tmp / "wrong.json"), "first")
    _eval(work, _env(tmp, tmp / "gold.json"), "second")
    xss = work / "evals" / "xss"
    xss.mkdir()
    (xss / "records.jsonl").write_text(json.dumps({
        "index": 0, "question_id": 0, "db_id": XSS, "difficulty": XSS, "question": "Which </script><script>x</script>?",
        "gold_sql": XSS, "prediction": XSS, "status": "answered", "ran": True, "correct": False, "verdict": "wrong",
        "candidates": [], "chosen_generator": XSS, "run_id": "../../etc/passwd", "cost_usd": 0, "seconds": 0,
    }) + "\n", encoding="utf-8")
    # A larger evaluation, hand-written: its table draws a page of questions, and more on asking.
    many = work / "evals" / "many"
    many.mkdir()
    (many / "records.jsonl").write_text("".join(json.dumps({
        "index": i, "question_id": i, "db_id": "concert_singer", "difficulty": "easy", "question": f"Question number {i}?",
        "gold_sql": "SELECT 1", "prediction": "SELECT 2" if i % MANY_WRONG_EVERY == 0 else "SELECT 1", "status": "answered",
        "ran": True, "correct": i % MANY_WRONG_EVERY != 0, "verdict": "wrong" if i % MANY_WRONG_EVERY == 0 else "correct",
        "candidates": [], "run_id": None, "cost_usd": 0, "seconds": 0}) + "\n" for i in range(MANY)), encoding="utf-8")
    records = {name: [json.loads(line) for line in (work / "evals" / name / "records.jsonl").read_text().splitlines()]
               for name in ("first", "second")}
    # Debugging sessions from the command line, whose traces go to ./traces: one of "first"'s
    # question 1 that only looks (it leaves no trace), one of "second"'s that replays it.
    for name, commands in (("first", "history\nquit\n"), ("second", "replay\nquit\n")):
        debug = subprocess.run([sys.executable, "-m", "sqlchorus", "debug", "--eval", name, "--question", "1",
                                "--commands", "-"], input=commands, capture_output=True, text=True, cwd=work,
                               env=_env(tmp, tmp / "gold.json"), timeout=300)
        assert debug.returncode == 0, debug.stdout + debug.stderr
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in _env(tmp, tmp / "gold.json").items()}
    args = ["ui", "--port", str(port), "--no-cache", "--trace-dir", str(work / "traces"),
            "--checkpoints", str(work / "checkpoints.sqlite"), "--evals-dir", str(work / "evals")]
    with running(args, work, env, base + "/api/runs"):
        yield {"base": base, "work": work, "records": records, "examples": examples}


@pytest.fixture
def page(browser, workbench):
    base = workbench["base"]
    with watched_page(browser, base, 900) as opened:
        opened.set_default_timeout(60_000)
        yield opened


def _record(workbench, name: str, n: int) -> dict:
    return next(r for r in workbench["records"][name] if r["question_id"] == n)


@pytest.mark.slow
def test_an_evaluations_wrong_run_opens_with_its_answer_calls_graph_verdict_and_step_through(page, workbench, tmp_path):
    base = workbench["base"]
    record = _record(workbench, "first", 1)
    page.goto(base + "/")
    row = page.locator(f"#runs tr[data-run='{record['run_id']}']")
    row.wait_for()
    assert row.locator("td").nth(3).inner_text() == "wrong"
    right = _record(workbench, "first", 0)
    assert page.locator(f"#runs tr[data-run='{right['run_id']}'] td").nth(3).inner_text() == "correct"
    listed = page.locator("#runs tbody tr[data-run]").count()
    # A debugging session sits under the run it debugged, not as a row of its own; one that only
    # looked (question 1 of "first") left no trace, so no row at all.
    assert page.locator(f"#runs tr[data-session-of='{record['run_id']}']").count() == 0
    replayed = _record(workbench, "second", 1)["run_id"]
    session = page.locator(f"#runs tr[data-session-of='{replayed}']")
    assert session.count() == 1
    assert session.evaluate("r => r.previousElementSibling.dataset.run") == replayed
    assert page.locator("#runs tbody tr[data-run] td:nth-child(2)").evaluate_all(
        "cells => cells.filter(c => !c.textContent.trim()).length") == 0
    row.click()
    page.wait_for_selector("#answer-sql")
    assert page.locator("#answer-sql").inner_text() == record["prediction"]
    assert page.locator("#verdict").inner_text() == "wrong"
    assert page.locator("#gold-sql").inner_text() == record["gold_sql"]
    assert page.locator("#candidates tbody tr").count() == len(record["candidates"])
    assert page.get_by_text("The call log is kept with checkpoints; none for this run.").count() == 0
    assert page.locator("details summary", has_text="generate_nrep").count() == 1
    # The graph of the generators that ran, with the path through them.
    assert page.locator("[data-node='generate_nrep'] .count").count() == 1
    assert page.locator("[data-node='generate_divide_conquer'] .count").count() == 1
    assert page.locator("#sessions li").count() == 0  # its only session looked, and ran nothing
    assert page.locator("main").evaluate("m => [...m.childNodes].some(n => n.nodeType === 3)") is False
    screenshot(page, "eval-run", tmp_path)
    page.click("#step-through")
    page.wait_for_selector("#timeline")
    assert "The run has ended." in page.locator("#debug-where").inner_text()
    assert page.locator("#timeline .cp", has_text="generate_nrep").count() >= 1
    # Opening it adds no empty row to the runs list.
    page.goto(base + "/")
    page.wait_for_selector("#runs tbody tr[data-run]")
    assert page.locator("#runs tbody tr[data-run]").count() == listed


@pytest.mark.slow
def test_the_evaluation_page_filters_charts_and_shows_both_results_side_by_side(page, workbench, tmp_path):
    base = workbench["base"]
    records = workbench["records"]["first"]
    page.goto(base + "/#/evals")
    page.locator("#evals tr[data-eval='first']").click()
    page.wait_for_selector("#questions tbody tr[data-question]")
    assert page.locator("#questions tbody tr[data-question]").count() == LIMIT
    # Gold and predicted SQL of every question, with its hardness.
    first_row = page.locator("#questions tr[data-question='1'] td")
    assert first_row.nth(1).inner_text() == records[1]["difficulty"]
    assert first_row.nth(4).inner_text() == records[1]["gold_sql"]
    assert first_row.nth(5).inner_text() == WRONG[1]
    assert first_row.nth(6).inner_text() == "wrong"
    # A wrong answer's rows beside the gold's.
    sides = page.locator("#questions tr.rows .side-by-side").first
    sides.wait_for()
    page.locator("#questions [data-side='gold'] table.result").first.wait_for()
    page.locator("#questions [data-side='predicted'] table.result").first.wait_for()
    # Charts with axes: a tick per 25 %, a bar per hardness and generator.
    for chart in ("#chart-hardness", "#chart-generator"):
        texts = page.locator(f"{chart} .axis text").all_text_contents()
        assert "0%" in texts and "100%" in texts and "50%" in texts
    assert page.locator("#chart-generator rect.barrect").count() == 1  # divide_conquer chosen each time
    page.select_option("#filter-verdict", "wrong")
    assert page.locator("#questions tbody tr[data-question]").count() == len(WRONG)
    page.select_option("#filter-verdict", "")
    page.select_option("#filter-hardness", records[0]["difficulty"])
    assert page.locator("#questions tbody tr[data-question]").count() == sum(
        1 for r in records if r["difficulty"] == records[0]["difficulty"])
    page.select_option("#filter-hardness", "")
    page.fill("#filter-q", "not the answer")
    assert page.locator("#questions tbody tr[data-question]").count() == 1
    page.fill("#filter-q", "")
    screenshot(page, "eval-page", tmp_path)
    # Each question opens its run, and its step-through.
    page.locator("#questions tr[data-question='3'] a.open-run").click()
    page.wait_for_selector("#answer-sql")
    assert page.locator("#answer-sql").inner_text() == WRONG[3]
    page.go_back()
    page.locator("#questions tr[data-question='3'] a.open-debug").click()
    page.wait_for_selector("#timeline")


@pytest.mark.slow
def test_the_waterfall_is_a_tree_whose_rows_open_their_span(page, workbench, tmp_path):
    base = workbench["base"]
    record = _record(workbench, "first", 0)
    page.goto(f"{base}/#/run/{record['run_id']}")
    page.wait_for_selector("#waterfall .wf-row")
    rows = page.locator("#waterfall .wf-row")
    names = [n.strip() for n in rows.locator(".name").all_inner_texts()]
    depths = [int(d) for d in rows.evaluate_all("rows => rows.map(r => r.dataset.depth)")]
    assert names[0].endswith("eval") and depths[0] == 0  # the run's span, named for what started it
    # Each parallel nrep branch holds its own model calls, right below it.
    branches = [i for i, n in enumerate(names) if n.endswith("node:generate_nrep")]
    assert len(branches) == 2
    for i in branches:
        assert names[i + 1].endswith("chat answers") and depths[i + 1] == depths[i] + 1
    plan_like = [i for i, n in enumerate(names) if n.endswith("node:generate_divide_conquer")][0]
    below = [names[k] for k in range(plan_like + 1, len(names)) if depths[k] > depths[plan_like]
             and all(depths[j] > depths[plan_like] for j in range(plan_like + 1, k + 1))]
    assert len(below) == 1  # its own call only, none of the nrep branches'
    # Collapsing a branch hides its calls.
    shown = rows.count()
    page.locator("#waterfall .wf-row").nth(branches[0]).locator("button.twisty").click()
    page.wait_for_function(f"document.querySelectorAll('#waterfall .wf-row').length < {shown}")
    # A model call's row opens its prompt and answer; a SQL row its query.
    page.locator("#waterfall .wf-row", has_text="chat answers").first.click()
    page.wait_for_selector("#span-call pre.prompt")
    assert page.locator("#span-call pre.answer").inner_text().strip() != ""
    page.wait_for_selector("#span-attributes")
    page.fill("#waterfall-text", "sql")
    page.locator("#waterfall .wf-row", has_text="sql").first.click()
    page.wait_for_selector("#span-sql")
    assert "SELECT" in page.locator("#span-sql").inner_text().upper()
    page.wait_for_selector("#span-rows table.result td")
    page.fill("#waterfall-text", "")
    page.select_option("#waterfall-kind", "LLM")
    kinds = set(page.locator("#waterfall .wf-row .kind").all_inner_texts())
    assert kinds == {"LLM"}
    screenshot(page, "waterfall", tmp_path)


@pytest.mark.slow
def test_a_large_evaluations_table_draws_a_page_of_questions_and_more_on_asking(page, workbench, tmp_path):
    page.goto(workbench["base"] + "/#/eval/many")
    rows = page.locator("#questions tbody tr[data-question]")
    page.wait_for_selector("#questions tbody tr[data-question]")
    assert page.locator("#eval-count").inner_text() == f"{MANY} of {MANY} questions"
    assert rows.count() == 100
    page.click("#questions-next")
    page.wait_for_function("document.querySelectorAll('#questions tbody tr[data-question]').length === 200")
    page.click("#questions-all")
    page.wait_for_function(f"document.querySelectorAll('#questions tbody tr[data-question]').length === {MANY}")
    assert page.locator("#questions-more button").count() == 0
    # A filter starts from the first page again, over the questions it keeps.
    page.select_option("#filter-verdict", "wrong")
    wrong = len(range(0, MANY, MANY_WRONG_EVERY))
    page.wait_for_function(f"document.querySelectorAll('#questions tbody tr[data-question]').length === {wrong}")
    assert page.locator("#eval-count").inner_text() == f"{wrong} of {MANY} questions"
    page.select_option("#filter-verdict", "")
    page.fill("#filter-q", "number 7")  # 7, 70-79
    page.wait_for_function("document.querySelectorAll('#questions tbody tr[data-question]').length === 11")
    assert page.locator("#questions-more button").count() == 0
    page.fill("#filter-q", "")
    page.wait_for_function("document.querySelectorAll('#questions tbody tr[data-question]').length === 100")


@pytest.mark.slow
def test_every_model_call_span_of_parallel_generators_opens_its_own_prompt(page, workbench, tmp_path):
    """divide_conquer and two nrep branches call the model from parallel threads: the call log
    keeps every call, and each call span names its own entry (not one matched by order)."""
    base = workbench["base"]
    for record in workbench["records"]["first"]:
        detail = httpx.get(f"{base}/api/runs/{record['run_id']}", timeout=60).json()
        chats = [r for r in detail["spans"] if r["chat"]]
        assert len(chats) > 10 and len(detail["calls"]) == len(chats)
        for row in chats:
            assert detail["calls"][row["call"]]["usage"]["call"] == row["call_id"]
            info = httpx.get(f"{base}/api/runs/{record['run_id']}/spans/{row['span_id']}", timeout=60).json()
            a, call = info["attributes"], info["call"]
            assert call["usage"]["call"] == a["sqlchorus.call_id"]
            shown = a["llm.input_messages.0.message.content"]  # the trace keeps a long prompt's start
            assert call["messages"][0][1][:4000] == shown[:4000]
            assert call["answer"] == a["output.value"]
            assert (call["node"], call["role"]) == (a["sqlchorus.node"], a["sqlchorus.role"])
    # In the page, every call row shows a prompt.
    page.goto(f"{base}/#/run/{workbench['records']['first'][0]['run_id']}")
    page.wait_for_selector("#waterfall .wf-row")
    page.select_option("#waterfall-kind", "LLM")
    calls = page.locator("#waterfall .wf-row")
    for i in range(calls.count()):
        calls.nth(i).click()
        page.wait_for_selector(f"#span-details h3:text-is('{calls.nth(i).locator('.name').inner_text().strip()}')")
        page.wait_for_selector("#span-call pre.prompt")


@pytest.mark.slow
def test_a_fixed_candidate_shows_its_original_sql_the_error_and_its_own_vote(page, workbench, tmp_path):
    base = workbench["base"]
    record = _record(workbench, "first", 2)
    fixed = [c for c in record["candidates"] if c["fix_attempts"]]
    assert fixed, "the scripted fixer fixed a candidate"
    page.goto(f"{base}/#/run/{record['run_id']}")
    row = page.locator(f"#candidates tr[data-candidate='{fixed[0]['id']}']")
    row.wait_for()
    assert BROKEN[2] in row.locator(".fix-round").first.inner_text()
    assert "nme" in row.locator(".fix-round .error").first.inner_text()
    assert row.locator(".fixed-sql").text_content() == fixed[0]["sql"]
    # Each candidate's own vote, and its cluster's count beside the cluster.
    votes = page.locator("#candidates td.votes").all_inner_texts()
    assert set(votes) <= {"0", "1"} and "1" in votes
    screenshot(page, "fixed-candidate", tmp_path)


@pytest.mark.slow
def test_two_evaluations_compared_name_the_flipped_questions_and_their_runs(page, workbench, tmp_path):
    base = workbench["base"]
    page.goto(base + "/#/evals")
    page.wait_for_selector("#compare-a")
    page.select_option("#compare-a", "first")
    page.select_option("#compare-b", "second")
    page.click("#compare-evals")
    page.wait_for_selector("#flipped tbody tr")
    assert sorted(int(q) for q in page.locator("#flipped tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.question)")) == sorted(WRONG)
    difference = round(100 * len(WRONG) / LIMIT, 1)
    assert page.locator("#accuracy-difference").inner_text() == f"+{difference:g} points"
    screenshot(page, "compare-evals", tmp_path)
    page.locator("#flipped tr[data-question='1'] a.compare-pair").click()
    page.wait_for_selector("#compare-sql-b")
    assert page.locator("#compare-sql-a").inner_text() == WRONG[1]
    verdicts = page.locator("#compare section > p[class^='status']")
    assert verdicts.evaluate_all("ps => ps.map(p => [p.innerText, p.className])") == [
        ["wrong", "status-bad"], ["correct", "status-ok"]]
    assert page.locator("#compare-sql-b").inner_text() == _record(workbench, "second", 1)["gold_sql"]
    # What changed at each node: a row per node either run visited, marked where they differ.
    nodes = page.locator("#compare-nodes tbody tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.node, [...r.cells].map(c => c.innerText)])")
    by_node = dict(nodes)
    assert {"extract_keywords", "link_schema", "check_candidates", "select_candidate", "generate_nrep"} <= set(by_node)
    for node, cells in nodes:
        a, b, mark = cells[1:6], cells[6:11], cells[11]
        assert mark == ("changed" if a != b else "same"), (node, cells)
    assert page.locator(".compare-calls").nth(0).locator("li").count() > 0
    assert page.locator(".compare-calls").nth(1).locator("li").count() > 0
    screenshot(page, "compare-runs", tmp_path)


@pytest.mark.slow
def test_stats_have_axes_units_dates_and_percentiles(page, workbench, tmp_path):
    page.goto(workbench["base"] + "/#/stats")
    row = page.locator("#nodes tr[data-node='generate_nrep']")
    row.wait_for()
    assert row.locator("td.p50").inner_text().endswith(" ms") and row.locator("td.p95").inner_text().endswith(" ms")
    axis = row.locator(".time-chart").first.locator(".axis text").all_text_contents()
    assert any(t.endswith(" ms") for t in axis) and len(row.locator(".time-chart .date").all_text_contents()) >= 1
    assert "tokens" in row.inner_text()
    screenshot(page, "stats", tmp_path)


@pytest.mark.slow
def test_markup_in_an_evaluation_stays_text(page, workbench):
    page.goto(workbench["base"] + "/#/eval/xss")
    page.wait_for_selector("#questions tbody tr[data-question]")
    cells = page.locator("#questions tbody td").all_inner_texts()
    assert XSS in cells and "Which </script><script>x</script>?" in cells
    assert page.locator("#questions img").count() == 0
    # A run id that is no run id is not a link.
    assert page.locator("#questions a.open-run").count() == 0
    page.locator("#questions [data-side='gold'] .error").wait_for()  # its database is not here, and it says so


@pytest.mark.slow
def test_evaluation_pages_are_addressed_by_name_only_and_keep_the_policy(workbench):
    base = workbench["base"]
    csp = httpx.get(base + "/").headers["content-security-policy"]
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp
    for bad in ("..%2Ffirst", ".hidden", "first%2F..%2F..", "nope"):
        response = httpx.get(f"{base}/api/evals/{bad}")
        assert response.status_code == 404, bad
    assert httpx.get(f"{base}/api/evals/first/rows/..%2F1").status_code in (404, 422)
    assert httpx.get(f"{base}/api/evals/first/rows/99").status_code == 404
    evals = httpx.get(f"{base}/api/evals")
    assert evals.headers["content-security-policy"] == csp
    assert {e["name"] for e in evals.json()["evals"]} == {"first", "second", "xss", "many"}
    record = _record(workbench, "first", 1)
    rows = httpx.get(f"{base}/api/evals/first/rows/{record['index']}").json()
    assert rows["gold"]["rows"] != rows["predicted"]["rows"]
    run = httpx.get(f"{base}/api/runs/{record['run_id']}").json()
    span = next(s for s in run["spans"] if s["name"] == "sql")
    assert httpx.get(f"{base}/api/runs/{record['run_id']}/spans/{span['span_id']}").json()["attributes"]
    assert httpx.get(f"{base}/api/runs/{record['run_id']}/spans/nope").status_code == 404
    # The static report links each question to its run in the viewer, and shows the gold.
    report = httpx.get(f"{base}/evals/first/report")
    assert f'href="../../#/run/{record["run_id"]}"' in report.text and 'href="../../#/eval/first"' in report.text
    assert "script-src" not in report.headers["content-security-policy"]


@pytest.mark.slow
def test_a_debugging_branch_is_shown_beside_the_verdict_that_was_scored(page, workbench, tmp_path):
    """Question 3 of "first", scored wrong, is debugged from the command line: every candidate
    edited to the gold, then resumed. Its run page and the evaluation's page still say wrong with
    the prediction that was scored, and show the branch as `now correct`."""
    base, work = workbench["base"], workbench["work"]
    record = _record(workbench, "first", 3)
    history = httpx.get(f"{base}/api/debug/{record['run_id']}", timeout=60).json()["history"]
    fork = next(h["id"] for h in history if h["next"] == ["select_candidate"])
    gold = json.dumps(record["gold_sql"])
    commands = [f"fork {fork}", *(f"set candidates[{i}].sql {gold}" for i in range(len(record["candidates"]))),
                "continue", "quit", ""]
    debug = subprocess.run([sys.executable, "-m", "sqlchorus", "debug", "--eval", "first", "--question", "3",
                            "--commands", "-"], input="\n".join(commands), capture_output=True, text=True, cwd=work,
                           env=_env(work.parent, work.parent / "gold.json"), timeout=300)
    assert debug.returncode == 0, debug.stdout + debug.stderr
    assert "now correct against the gold" in debug.stdout

    page.goto(f"{base}/#/run/{record['run_id']}")
    page.wait_for_selector("#branches")
    assert page.locator("#verdict").inner_text() == "wrong"
    assert page.locator("#answer-sql").inner_text() == WRONG[3]
    assert page.locator("#branches .branch-verdict").all_inner_texts() == ["now correct"]
    assert page.locator("#branches .sql").inner_text() == record["gold_sql"]
    screenshot(page, "eval-run-branch", tmp_path)

    page.goto(f"{base}/#/eval/first")
    cell = page.locator("#questions tr[data-question='3'] td.verdict")
    cell.wait_for()
    assert cell.locator(".scored").inner_text() == "wrong"
    assert cell.locator(".branch-verdict").all_inner_texts() == ["now correct"]
    assert page.locator("#questions tr[data-question='3'] td.predicted").inner_text() == WRONG[3]
    screenshot(page, "eval-page-branch", tmp_path)

    # The same question debugged from the step-through page: a fork at the same checkpoint, every
    # candidate set to another wrong query, continued to the end. The page says the branch ended
    # and how it scored, and the evaluation keeps its verdict.
    page.goto(f"{base}/#/debug/{record['run_id']}/{fork}")
    page.wait_for_selector(f"#timeline .cp[data-checkpoint='{fork}']")
    page.locator("#timeline li", has=page.locator(f".cp[data-checkpoint='{fork}']")).get_by_role(
        "button", name="fork here").click()
    # Forking stands the step-through at that checkpoint; the edit below makes the branch.
    page.wait_for_selector(f"#timeline li.current .cp[data-checkpoint='{fork}']")
    candidates = httpx.get(f"{base}/api/debug/{record['run_id']}?checkpoint={fork}", timeout=60).json()["state"]["candidates"]
    page.select_option("#edit-key", "candidates")
    other_wrong = "SELECT 'still not the answer'"
    page.fill("#edit-value", json.dumps([{**c, "sql": other_wrong} for c in candidates]))
    page.click("#set")
    page.wait_for_selector("#state tr.diff-changed[data-key='candidates']")
    page.click("#continue")
    page.wait_for_selector("#branch-ended", timeout=120_000)
    assert page.locator("#branch-ended .branch-verdict").inner_text() == "still wrong"
    assert page.locator("#branch-ended .sql").inner_text() == other_wrong
    assert page.locator("#debug-where").inner_text() == "The run has ended."
    screenshot(page, "debug-page-branch", tmp_path)
    page.goto(f"{base}/#/eval/first")
    cell = page.locator("#questions tr[data-question='3'] td.verdict")
    cell.wait_for()
    assert cell.locator(".scored").inner_text() == "wrong"
    assert sorted(cell.locator(".branch-verdict").all_inner_texts()) == ["now correct", "still wrong"]
