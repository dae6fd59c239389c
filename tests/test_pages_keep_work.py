"""Pages keep the user's work, checked on what headless Chromium lays out: the viewer's Ask box
says why a question is refused beside the box and keeps what was typed; tables of SQL (the
viewer's and ``report.html``'s) wrap between tokens, never inside a name; charts (the viewer's
across-runs and evaluation charts, ``report.html``'s plots) hold every label inside their box.
Each page's screenshot is kept (in the test's folder, or in $SQLCHORUS_SCREENSHOTS)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import screenshot, watched_page
from servers import free_port, running, server_env
from sqlchorus import Session
from sqlchorus.config.settings import Settings
from sqlchorus.evaluation.report import build_summary, write_report
from sqlchorus.runs.demo import demo_db_path, load_demo_questions
from sqlchorus.testing import oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
ASKED = list(GOLD)[:3]
TOKENS_SCALE = 100_000
"""How much the copied run's token counts are scaled: its ticks read millions of tokens, longer
than the axis of a fixed width had room for."""
LONG_SQL = ("SELECT T1.customer_identifier_number, T2.order_fulfilment_status_description "
            "FROM customer_accounts_with_history AS T1 JOIN order_fulfilment_events_archive AS T2 "
            "ON T1.customer_identifier_number = T2.customer_identifier_number "
            "WHERE T2.order_fulfilment_status_description = 'shipped' ORDER BY T1.customer_identifier_number")
GENERATORS = ["divide_conquer", "query_plan", "synthetic_examples_generator", "din", "nrep", "list_search"]
HARDNESS = ["easy", "medium", "hard", "extra"]

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
"""A name in SQL: an identifier, or one qualified by its table."""

BROKEN_NAMES = """(cells) => {
  // Each name of each cell: the lines the browser laid it out on, from its text's boxes. A name
  // on two lines was split; a name wider than its cell sticks out of the column.
  const re = new RegExp(%s, "g");
  const found = [];
  for (const cell of cells) {
    const node = cell.firstChild;
    if (!node || node.nodeType !== Node.TEXT_NODE) continue;
    const box = cell.getBoundingClientRect();
    for (const m of node.data.matchAll(re)) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const rects = [...range.getClientRects()].filter(r => r.width > 0);
      const lines = new Set(rects.map(r => Math.round(r.top)));
      const out = rects.some(r => r.left < box.left - 0.5 || r.right > box.right + 0.5);
      if (lines.size > 1 || out) found.push(m[0]);
    }
  }
  return found;
}""" % json.dumps(NAME.pattern)

LABELS_OUTSIDE = """(charts) => {
  // Every label of every chart: inside the chart's own box, and clear of the other labels on
  // its line (an axis's ticks, the names under bars, the two dates).
  const found = [];
  for (const chart of charts) {
    const box = chart.getBoundingClientRect();
    const texts = [...chart.querySelectorAll("text")].filter(t => t.textContent.trim());
    const rects = texts.map(t => t.getBoundingClientRect());
    texts.forEach((t, i) => {
      const r = rects[i];
      if (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5)
        found.push("outside: " + t.textContent);
      rects.forEach((o, j) => {
        if (j > i && Math.abs(o.top - r.top) < 1 && o.left < r.right - 0.5 && r.left < o.right - 0.5)
          found.push("overlap: " + t.textContent + " / " + texts[j].textContent);
      });
    });
  }
  return found;
}"""


FITS_THE_WINDOW = "() => document.documentElement.scrollWidth <= window.innerWidth"
"""The page does not run off the window's right edge: a wide table scrolls in its own box."""


def _scaled_copy(trace: Path, run_id: str) -> Path:
    """A copy of a run's trace under another id, its model calls' tokens scaled up."""
    lines = []
    for line in trace.read_text(encoding="utf-8").splitlines():
        span = json.loads(line)
        attributes = span.get("attributes") or {}
        for key in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"):
            if isinstance(attributes.get(key), int):
                attributes[key] *= TOKENS_SCALE
        if "sqlchorus.run_id" in attributes:
            attributes["sqlchorus.run_id"] = run_id
        lines.append(json.dumps(span))
    copy = trace.with_name(f"{run_id}.jsonl")
    copy.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return copy


def _evaluation(folder: Path) -> Path:
    """An evaluation's folder, written by hand: questions whose SQL has long names, chosen by
    generators with long names, and its report.html."""
    records = []
    for i in range(8):
        right = i % 3 != 0
        records.append({
            "index": i, "question_id": i, "db_id": "shop", "difficulty": HARDNESS[i % len(HARDNESS)],
            "question": f"Which customers had their orders shipped, case {i}?", "gold_sql": LONG_SQL,
            "prediction": LONG_SQL if right else LONG_SQL.replace("'shipped'", "'cancelled'"),
            "status": "answered", "ran": True, "correct": right, "verdict": "correct" if right else "wrong",
            "candidates": [{"generator": GENERATORS[i % len(GENERATORS)], "correct": right}],
            "chosen_generator": GENERATORS[i % len(GENERATORS)], "any_candidate_correct": right,
            "model_calls": 4, "input_tokens": 1200 + i, "output_tokens": 80, "cost_usd": 0.0012 * (i + 1),
            "unpriced_models": [], "seconds": 1.5 + i, "run_id": None,
        })
    scored = {level: [r for r in records if r["difficulty"] == level] for level in HARDNESS}
    score_summary = {
        "ex": round(100.0 * sum(r["correct"] for r in records) / len(records), 2), "n_total": len(records),
        "n_scored": len(records), "n_correct": sum(r["correct"] for r in records), "n_missing_db": 0,
        "n_missing_prediction": 0, "n_pred_errors": 0, "n_timeouts": 0, "n_gold_errors": 0,
        "by_difficulty": {level: {"n": len(rs), "ex": round(100.0 * sum(r["correct"] for r in rs) / len(rs), 2),
                                  "n_missing_db": 0} for level, rs in scored.items()},
    }
    run = folder / "evals" / "long-names"
    run.mkdir(parents=True)
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (run / "run.json").write_text(json.dumps({"dataset": "long-names", "settings": {}}), encoding="utf-8")
    write_report(run, records, build_summary(records, score_summary, meta={"dataset": "long-names"}))
    return run


@pytest.fixture(scope="module")
def viewer(tmp_path_factory):
    """`sqlchorus ui` over three runs of the demo database, a copy of one whose model calls took
    millions of tokens, and a hand-written evaluation with its report."""
    folder = tmp_path_factory.mktemp("pages")
    db = folder / "shop.sqlite"
    shutil.copy(demo_db_path(), db)
    settings = Settings(trace_dir=str(folder / "traces"), checkpoints=str(folder / "checkpoints.sqlite"), cache=False)
    with Session(settings, model=oracle_model(GOLD.get)) as session:
        ids = [session.ask(question, db=db).run_id for question in ASKED]
    _scaled_copy(folder / "traces" / f"{ids[0]}.jsonl", "20260101T000000-0000beef")
    _evaluation(folder)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = ["ui", "--port", str(port), "--db", str(db), "--model", "python:server_factories:mixed", "--no-cache",
            "--trace-dir", str(folder / "traces"), "--checkpoints", str(folder / "checkpoints.sqlite"),
            "--evals-dir", str(folder / "evals")]
    with running(args, folder, server_env(folder), base + "/api/runs"):
        yield base


@pytest.fixture
def page(browser, viewer):
    with watched_page(browser, viewer, 900) as opened:
        opened.set_default_timeout(60_000)
        yield opened


@pytest.mark.slow
@pytest.mark.parametrize("typed, refusal", [("   ", "The question is empty"),
                                            ("How many customers? " * 401, "the limit is 8,000")],
                         ids=["empty", "over-long"])
@pytest.mark.parametrize("button", ["Run", "Step through"])
def test_a_refused_question_is_said_beside_the_ask_box_which_keeps_the_text(page, viewer, tmp_path, typed, refusal,
                                                                             button):
    page.goto(viewer + "/")
    page.wait_for_selector("#runs tbody tr[data-run]")
    runs = page.locator("#runs tbody tr[data-run]").count()
    box = page.get_by_label("question", exact=True)
    box.fill(typed)
    page.get_by_role("button", name=button, exact=True).click()
    said = page.locator("#ask-error")
    said.wait_for(state="visible")
    assert refusal in said.inner_text()
    # The browser logs the refusal's status as a failed load: that one is this test's own.
    refused = [p for p in page.problems if re.search(r"status of (413|422)\b", p)]
    assert len(refused) == 1
    page.problems.remove(refused[0])
    # The page is still the runs list, with what was typed in the box.
    assert box.input_value() == typed
    assert page.locator("#runs tbody tr[data-run]").count() == runs
    assert page.locator("h1").first.inner_text() == "Runs"
    # Beside the box: in its section, right under its row of controls.
    assert said.evaluate("(e) => e.closest('section') === "
                         "document.querySelector('[aria-label=question]').closest('section')")
    under, row = said.bounding_box(), box.bounding_box()
    assert 0 <= under["y"] - (row["y"] + row["height"]) < 40 and abs(under["x"] - row["x"]) < 40
    name = f"ask-refused-{'empty' if not typed.strip() else 'long'}-{button.replace(' ', '-').lower()}"
    screenshot(page, name, tmp_path)
    # Asking again with a good question starts the run.
    box.fill(ASKED[0])
    page.get_by_role("button", name=button, exact=True).click()
    page.wait_for_url(re.compile(r"#/(live|debug)/"))


@pytest.mark.slow
def test_the_reports_sql_wraps_between_tokens_and_its_plots_fit_their_labels(page, viewer, tmp_path):
    page.goto(viewer + "/evals/long-names/report")
    page.wait_for_selector("table.questions td.sql")
    cells = page.locator("table.questions td.sql")
    assert cells.count() == 16
    assert page.locator("table.questions td.sql").evaluate_all(BROKEN_NAMES) == []
    # The SQL wraps (it is not left on one long line), and only where the styles allow: at spaces.
    styles = cells.first.evaluate(
        "(c) => { const s = getComputedStyle(c); return [s.wordBreak, s.overflowWrap, s.whiteSpace]; }")
    assert styles == ["normal", "normal", "pre-wrap"]
    lines = cells.first.evaluate("(c) => { const r = document.createRange(); r.selectNodeContents(c); "
                                 "return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size; }")
    assert lines > 1
    assert page.locator("figure svg").count() == 7
    assert page.locator("figure svg").evaluate_all(LABELS_OUTSIDE) == []
    screenshot(page, "report-long-names", tmp_path)


@pytest.mark.slow
def test_the_evaluation_page_wraps_sql_between_tokens_and_its_charts_fit_their_labels(page, viewer, tmp_path):
    page.goto(viewer + "/#/eval/long-names")
    page.wait_for_selector("#questions td.sql.gold")
    assert page.locator("#questions td.sql").evaluate_all(BROKEN_NAMES) == []
    charts = page.locator("#chart-hardness svg, #chart-generator svg")
    assert charts.count() == 2
    names = page.locator("#chart-generator .axis text").all_text_contents()
    assert "synthetic_examples_generator" in names  # whole, not cut to fit a fixed slot
    assert charts.evaluate_all(LABELS_OUTSIDE) == []
    assert page.evaluate(FITS_THE_WINDOW)
    screenshot(page, "eval-long-names", tmp_path)


@pytest.mark.slow
def test_the_across_runs_charts_fit_their_axis_labels(page, viewer, tmp_path):
    page.goto(viewer + "/#/stats")
    page.wait_for_selector("#nodes .time-chart")
    charts = page.locator("#nodes .time-chart")
    assert charts.count() >= 4
    ticks = page.locator("#nodes .time-chart .axis text").all_text_contents()
    assert any(re.fullmatch(r"\d{1,3}(,\d{3}){2,} tok", t) for t in ticks), ticks  # millions of tokens
    assert charts.evaluate_all(LABELS_OUTSIDE) == []
    assert page.evaluate(FITS_THE_WINDOW)
    screenshot(page, "stats-long-labels", tmp_path)
