"""`sqlchorus ui`: the viewer started for real and driven in headless Chromium (Debian's package,
through Playwright; no browser is downloaded)."""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import sqlite3
from pathlib import Path

import httpx
import pytest

from conftest import screenshot, watched_page
from servers import free_port, running, server_env
from sqlchorus import Session
from sqlchorus.config.settings import Settings
from sqlchorus.runs.demo import demo_db_path, load_demo_questions
from sqlchorus.runs.run_index import RunIndex, layout
from sqlchorus.testing import oracle_model

XSS_VALUE = '<img src=x onerror="window.__pwned=1">'
XSS_QUESTION = "Which notes say </script><script>window.__pwned=2</script>?"
GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
GOLD[XSS_QUESTION] = "SELECT body FROM notes"
QUESTION = "How many customers do we have?"


def _runs(folder: Path) -> dict[str, str]:
    """A database with values that look like markup, and runs over it kept on disk."""
    db = folder / "shop.sqlite"
    shutil.copy(demo_db_path(), db)
    with sqlite3.connect(db) as conn:  # the test's own copy
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        conn.executemany("INSERT INTO notes (body) VALUES (?)", [(XSS_VALUE,), ("</script><b>bold?</b>",)])
    settings = Settings(trace_dir=str(folder / "traces"), checkpoints=str(folder / "checkpoints.sqlite"), cache=False)
    ids = {}
    with Session(settings, model=oracle_model(GOLD.get)) as session:
        for question in (QUESTION, XSS_QUESTION, "What are the five most expensive products?"):
            ids[question] = session.ask(question, db=db).run_id
    # An evaluation's folder: its traces are listed under it, with its report.
    eval_traces = folder / "evals" / "nightly" / "traces"
    eval_traces.mkdir(parents=True)
    shutil.copy(folder / "traces" / f"{ids[QUESTION]}.jsonl", eval_traces / "20260101T000000-0000abcd.jsonl")
    (folder / "evals" / "nightly" / "report.html").write_text("<h1>nightly report</h1>", encoding="utf-8")
    return ids


@pytest.fixture(scope="module")
def viewer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("viewer")
    ids = _runs(folder)
    ids["sha256"] = hashlib.sha256((folder / "shop.sqlite").read_bytes()).hexdigest()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = ["ui", "--port", str(port), "--db", str(folder / "shop.sqlite"), "--model", "python:server_factories:mixed",
            "--no-cache", "--trace-dir", str(folder / "traces"), "--checkpoints", str(folder / "checkpoints.sqlite"),
            "--evals-dir", str(folder / "evals")]
    with running(args, folder, server_env(folder), base + "/api/runs"):
        yield base, folder, ids


@pytest.fixture
def page(browser, viewer, tmp_path):
    base = viewer[0]
    with watched_page(browser, base, 800) as opened:
        yield opened


@pytest.mark.slow
def test_the_runs_list_and_a_run_show_candidates_waterfall_and_markup_as_text(page, viewer, tmp_path):
    base, folder, ids = viewer
    page.goto(base + "/")
    page.wait_for_selector("#runs tbody tr[data-run]")
    rows = page.locator("#runs tbody tr[data-run]")
    assert rows.count() == 4  # three runs, and the evaluation's one
    assert page.get_by_text("Evaluation nightly").count() == 1
    assert page.locator("a[href='evals/nightly/report']").count() == 1
    # The question that carries </script> shows as text, exactly.
    assert page.locator("#runs td", has_text="</script><script>window.__pwned=2</script>").count() == 1
    page.fill("input[type=search]", "expensive")
    assert page.locator("#runs tbody tr[data-run]").count() == 1
    page.fill("input[type=search]", "")
    screenshot(page, "runs", tmp_path)

    page.goto(f"{base}/#/run/{ids[XSS_QUESTION]}")
    page.wait_for_selector("#candidates tbody tr")
    assert page.locator("#answer-sql").inner_text() == "SELECT body FROM notes"
    cells = page.locator("table.result td").all_inner_texts()
    assert XSS_VALUE in cells and "</script><b>bold?</b>" in cells
    assert page.locator("table.result img").count() == 0 and page.locator("table.result b").count() == 0
    candidate = page.locator("#candidates tbody tr").first.locator("td").all_inner_texts()
    assert candidate[1] == "divide_conquer" and candidate[3] == "ok" and candidate[4] == "2"
    assert page.locator("#why").inner_text().startswith("Why this one:")
    page.wait_for_selector("#waterfall .wf-row")
    names = [n.strip("▾▸ \n") for n in page.locator("#waterfall .wf-row .name").all_inner_texts()]
    assert names[0] == "ask" and any(n == "node:check_candidates" for n in names)
    assert any(n.startswith("chat ") for n in names)
    assert page.locator("[data-node='check_candidates'] .count").text_content() == "1×"
    screenshot(page, "run", tmp_path)


@pytest.mark.slow
def test_edit_a_state_value_and_resume_shows_the_new_answer(page, viewer, tmp_path):
    base, folder, ids = viewer
    run_id = ids[QUESTION]
    page.goto(f"{base}/#/debug/{run_id}")
    page.wait_for_selector("#timeline")
    assert "The run has ended." in page.locator("#debug-where").inner_text()
    # Go back to where check_candidates was next, and change the candidate's SQL there.
    history = httpx.get(f"{base}/api/debug/{run_id}").json()["history"]
    before_check = next(h for h in history if h["next"] == ["check_candidates"])
    page.locator(f"[data-checkpoint='{before_check['id']}'] + span + button").click()
    page.locator("#debug-where", has_text="Paused before: check_candidates").wait_for()
    page.select_option("#edit-key", "candidates")
    candidates = json.loads(page.input_value("#edit-value"))
    candidates[0]["sql"] = "SELECT COUNT(*) FROM orders"
    page.fill("#edit-value", json.dumps(candidates))
    page.click("#set")
    page.wait_for_selector("tr.diff-changed[data-key='candidates']")
    # A value no run could hold is refused with why, and the run is still where it was.
    refused = httpx.post(f"{base}/api/debug/{run_id}/set", json={"key": "question", "value": 123})
    assert refused.status_code == 422 and "question" in refused.json()["error"]["message"]
    page.click("#continue")
    page.wait_for_selector("text=The run has ended.")
    answer = page.locator("tr[data-key='answer'] pre").inner_text()
    assert '"sql": "SELECT COUNT(*) FROM orders"' in answer
    orders = sqlite3.connect(folder / "shop.sqlite").execute("SELECT COUNT(*) FROM orders").fetchone()[0]
    assert f"{orders}" in answer
    # The edit went to the checkpoints; the database is byte for byte what it was.
    assert hashlib.sha256((folder / "shop.sqlite").read_bytes()).hexdigest() == ids["sha256"]
    screenshot(page, "debug", tmp_path)


@pytest.mark.slow
def test_a_live_run_lights_its_nodes_and_ends_in_its_run_page(page, viewer, tmp_path):
    base, _, _ = viewer
    page.goto(base + "/")
    page.fill("input[aria-label=question]", "How many orders were cancelled?")
    page.get_by_role("button", name="Run", exact=True).click()
    page.wait_for_selector("#open-run", timeout=60_000)
    assert page.locator("[data-node='select_candidate'].done").count() == 1
    events = page.locator("#events").inner_text()
    assert "generate_divide_conquer started" in events and "candidate divide_conquer-0: ok" in events
    screenshot(page, "live", tmp_path)
    page.click("#open-run")
    page.wait_for_selector("#answer-sql")
    assert "cancelled" in page.locator("#answer-sql").inner_text().lower()
    page.goto(base + "/#/stats")
    page.wait_for_selector("#nodes tbody tr")
    assert "check_candidates" in page.locator("#nodes tbody td:first-child").all_inner_texts()
    screenshot(page, "stats", tmp_path)


@pytest.mark.slow
def test_security_headers_ids_only_and_a_token_beyond_loopback(viewer, tmp_path):
    base, folder, ids = viewer
    page = httpx.get(base + "/")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "<script>" not in page.text and 'src="assets/app.js"' in page.text
    for bad in ("..%2F..%2Fetc%2Fpasswd", "not-a-run", "20260101T000000-0000abcd%2F..%2Fx"):
        response = httpx.get(f"{base}/api/runs/{bad}")
        assert response.status_code == 404 and response.json()["error"]["kind"] in ("unknown_run", "not_found")
    assert httpx.get(base + "/assets/..%2Fviewer.py").status_code == 404
    report = httpx.get(base + "/evals/nightly/report")
    assert report.status_code == 200 and "script-src" not in report.headers["content-security-policy"]
    assert httpx.get(base + "/evals/..%2Fnightly/report").status_code == 404


def test_a_token_is_required_beyond_loopback_and_a_browser_keeps_it_as_a_cookie(tmp_path):
    from starlette.testclient import TestClient

    from sqlchorus.interfaces.viewer import create_app
    from sqlchorus.runs.service import RunService

    service = RunService(settings=Settings(trace_dir=str(tmp_path / "traces"), checkpoints=str(tmp_path / "c.sqlite")),
                         model=oracle_model(GOLD.get))
    try:
        token = secrets.token_urlsafe(32)
        client = TestClient(create_app(service, RunIndex(tmp_path / "traces"), token=token),
                            base_url="http://127.0.0.1:8080", follow_redirects=False)
        assert client.get("/api/runs").status_code == 401
        assert client.get("/?token=nope").status_code == 401
        first = client.get(f"/?token={token}")
        # The token leaves the address at once: the page lives in a session folder, and only
        # there is the cookie sent, so no other service on this machine (another port) gets it.
        assert first.status_code == 303 and "token" not in first.headers["location"]
        folder = first.headers["location"]
        assert folder.startswith("/s/") and folder.endswith("/")
        cookie = first.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and f"Path={folder}" in cookie
        name, value = cookie.split(";", 1)[0].split("=", 1)
        assert token not in cookie  # it holds a value derived from the token
        page = client.get(folder)
        assert page.status_code == 200 and 'src="assets/app.js"' in page.text
        assert client.get(folder + "api/runs").status_code == 200  # the cookie carries it now
        assert client.get(folder.rstrip("/")).headers["location"] == folder
        stranger = TestClient(client.app, base_url="http://127.0.0.1:8080")
        # Outside the folder the cookie counts for nothing; inside, for its value, not its name.
        assert stranger.get("/api/runs", headers={"cookie": f"{name}={value}"}).status_code == 401
        assert stranger.get(folder + "api/runs", headers={"cookie": f"{name}=nope"}).status_code == 401
        assert stranger.get(folder + "api/runs", headers={"cookie": f"{name}="}).status_code == 401
        assert stranger.get(folder + "api/runs", headers={"cookie": f"other_{name}={value}"}).status_code == 401
        assert stranger.get(folder + "api/runs", headers={"cookie": f"{name}={token}"}).status_code == 401
        assert stranger.get(folder + "api/runs", headers={"cookie": f"{name}={value}"}).status_code == 200
        assert stranger.get("/api/runs", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    finally:
        service.close()


def test_layers_put_every_node_below_its_predecessors_and_loops_aside():
    drawn = layout(["a", "b", "c", "d"], [("a", "b"), ("b", "c"), ("c", "b"), ("a", "c"), ("c", "d")])
    by = {n["id"]: n for n in drawn["nodes"]}
    assert by["a"]["layer"] < by["b"]["layer"] < by["c"]["layer"] < by["d"]["layer"]
    assert [e for e in drawn["edges"] if e["back"]] == [{"from": "c", "to": "b", "back": True}]


def test_a_run_without_an_answer_says_why_on_its_span():
    from sqlchorus.runs.result import Result, failure_kind

    def result(candidates, error="No answer.", errors=()):
        return Result(question="q", error=error, candidates=candidates, errors=list(errors))

    assert failure_kind(Result(question="q", sql="SELECT 1")) is None
    assert failure_kind(result([], "The run was cancelled.")) == "cancelled"
    assert failure_kind(result([], errors=[{"kind": "model"}])) == "model"
    assert failure_kind(result([{"sql": ""}])) == "no_sql"
    assert failure_kind(result([{"sql": "x", "status": "error", "error_kind": "timeout"}])) == "timeout"
    assert failure_kind(result([{"sql": "x", "status": "error", "fix_attempts": 2}])) == "fixer_gave_up"
    assert failure_kind(result([{"sql": "x", "status": "error", "fix_attempts": 0}])) == "execution_error"
    repeated = {"sql": "x", "status": "error", "fix_attempts": 0, "meta": {"fix": {"rounds": 2, "stopped": "repeat"}}}
    assert failure_kind(result([repeated])) == "fixer_gave_up"
    assert failure_kind(result([{"sql": "x", "status": "empty"}])) == "empty"


@pytest.mark.slow
def test_without_a_model_the_viewer_still_shows_the_runs_and_says_what_asking_needs(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in server_env(tmp_path).items() if k != "SQLCHORUS_MODEL"}
    with running(["ui", "--port", str(port), "--trace-dir", str(tmp_path / "traces")], tmp_path, env, base + "/api/runs"):
        assert httpx.get(base + "/api/runs").json()["runs"] == []
        run_id = httpx.post(base + "/api/live", json={"question": QUESTION}).json()["run_id"]
        with httpx.stream("GET", f"{base}/api/live/{run_id}/events", timeout=60) as events:
            said = [json.loads(line[5:]) for line in events.iter_lines() if line.startswith("data:")]
    assert said[-1]["event"] == "done"
    errors = [e for e in said if e["event"] in ("error", "answer")]
    assert errors and "no model is configured" in json.dumps(errors)


def test_a_trace_of_another_shape_costs_its_own_line_not_the_list(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "20260101T000000-0000beef.jsonl").write_text('{"hello": 1}\n[1, 2]\n', encoding="utf-8")
    (traces / "20260101T000001-0000beef.jsonl").write_text('{"name": "run", "start_time": "not a time", '
                                                         '"end_time": "nor this", "context": {"span_id": "1"}}\n',
                                                         encoding="utf-8")
    index = RunIndex(traces)
    statuses = {s.run_id: s.status for s in index.runs()}
    assert statuses == {"20260101T000000-0000beef": "incomplete", "20260101T000001-0000beef": "unreadable"}
    assert index.stats()["runs"] == 2
