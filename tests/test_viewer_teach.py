"""Teaching from `sqlchorus ui`: a run's answer (or the SQL a user says is right) kept as a taught
example of the run's database, an evaluation's wrong questions taught with their gold SQL, and a
run's page saying which taught examples its nodes showed. The viewer is started for real over
runs on a copy of Spider's concert_singer, made with a scripted model, and driven in headless
Chromium (Debian's package, through Playwright); the endpoints are also called over HTTP."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from test_evaluate import spider_dev

from conftest import WAIT_S, data_dir, sha256, screenshot, spider_db, watched_page
from servers import TOKEN, free_port, running
from sqlchorus import Session
from sqlchorus.config.settings import Settings
from sqlchorus.runs.teach import TaughtError, Teacher, UnknownTaughtError
from sqlchorus.testing import oracle_model

LIMIT = 6
WRONG = {1: "SELECT name FROM singer", 3: "SELECT 'not the answer'"}
"""The evaluation's questions answered wrongly, by number, with the wrong answer."""
RIGHT = "How many singers do we have?"
MISTAKEN = "What are the names, countries, and ages for every singer in descending order of age?"
MISTAKEN_GOLD = "SELECT name, country, age FROM singer ORDER BY age DESC"
UNANSWERED = "Which singer would win a singing contest?"
BY_TOKEN = "How many stadiums are there?"
ANSWERS = {RIGHT: "SELECT count(*) FROM singer", MISTAKEN: "SELECT name FROM singer ORDER BY age",
           BY_TOKEN: "SELECT count(*) FROM stadium"}
"""The runs' questions on the copy of concert_singer, and the scripted model's answers (none for
UNANSWERED: the run has no answer)."""
NOT_HERE = "20990101T000000-00000000"
"""A run id no store of the viewer has."""

FACTORIES = '''
import json, os

from sqlchorus.testing import oracle_model


def answers():
    """Answers each question with the SQL $ANSWERS gives it."""
    with open(os.environ["ANSWERS"], encoding="utf-8") as f:
        return oracle_model(json.load(f).get, name="answers")
'''


def _settings(work: Path) -> Settings:
    """The stores the viewer reads: its traces, and its checkpoints, which keep the taught examples."""
    return Settings(trace_dir=str(work / "traces"), checkpoints=str(work / "checkpoints.sqlite"), cache=False)


def _env(tmp: Path, answers: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLCHORUS_") or k == "SQLCHORUS_CACHE"}
    return {**env, "SQLCHORUS_DATA": str(data_dir()), "PYTHONPATH": str(tmp), "ANSWERS": str(answers),
            "NO_COLOR": "1", "COLUMNS": "200"}


def _evaluate(tmp: Path, work: Path) -> list[dict]:
    """Spider dev's first questions evaluated with two wrong answers; its records."""
    examples = spider_dev().examples[:LIMIT]
    answers = {e.question: WRONG.get(i, e.gold_sql) for i, e in enumerate(examples)}
    (tmp / "eval_answers.json").write_text(json.dumps(answers), encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "sqlchorus", "eval", "--dataset", "spider-dev", "--limit", str(LIMIT),
                          "--model", "python:teach_factories:answers", "--no-cache",
                          "--out", str(work / "evals" / "first")],
                         capture_output=True, text=True, cwd=work, env=_env(tmp, tmp / "eval_answers.json"), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = (work / "evals" / "first" / "records.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def teaching(tmp_path_factory):
    """Runs on a copy of concert_singer (one answered right, one wrongly, one not at all), an
    evaluation of Spider dev's first questions with two wrong answers, and `sqlchorus ui` over
    them, with no model: teaching needs none."""
    tmp = tmp_path_factory.mktemp("teaching")
    work = tmp / "work"
    work.mkdir()
    (tmp / "teach_factories.py").write_text(FACTORIES, encoding="utf-8")
    db = work / "concert_singer.sqlite"
    shutil.copy(spider_db("concert_singer"), db)
    runs = {}
    with Session(_settings(work), model=oracle_model(ANSWERS.get)) as session:
        for question in (RIGHT, MISTAKEN, UNANSWERED, BY_TOKEN):
            runs[question] = session.ask(question, db=db).run_id
    records = _evaluate(tmp, work)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = ["ui", "--port", str(port), "--no-cache", "--trace-dir", str(work / "traces"),
            "--checkpoints", str(work / "checkpoints.sqlite"), "--evals-dir", str(work / "evals")]
    env = _env(tmp, tmp / "eval_answers.json")
    with running(args, work, env, base + "/api/runs"):
        yield SimpleNamespace(base=base, tmp=tmp, work=work, db=db, sha=sha256(db), runs=runs, records=records,
                              args=args, env=env)


@pytest.fixture
def page(browser, teaching):
    with watched_page(browser, teaching.base, 900) as opened:
        opened.set_default_timeout(60_000)
        yield opened


def _taught(work: Path, db: str | Path, question: str | None = None) -> list[dict]:
    """The taught examples the viewer's store keeps for ``db`` (of ``question`` only, when given),
    read through the library, as a run would."""
    with Session(_settings(work), model=oracle_model(ANSWERS.get)) as session:
        try:
            entries = Teacher(session).entries(str(db))
        except UnknownTaughtError:  # nothing taught on it yet
            return []
    return [e for e in entries if question is None or e["question"] == question]


REFUSED = TaughtError.http_status
"""The status of a teach the library refuses (a duplicate may have one of its own)."""


def _take_refusal(page) -> None:
    """The browser logs a refused request's status as a failed load: that one is the test's own."""
    deadline = time.monotonic() + WAIT_S
    while not (found := [p for p in page.problems if re.search(r"status of 4\d\d\b", p)]):
        assert time.monotonic() < deadline, f"no refusal logged: {page.problems}"
        page.wait_for_timeout(50)
    assert len(found) == 1, page.problems
    page.problems.remove(found[0])


def _record(teaching, n: int) -> dict:
    return next(r for r in teaching.records if r["question_id"] == n)


# -- a run's page -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_this_answer_is_right_keeps_the_runs_question_and_answer(page, teaching, tmp_path):
    run_id = teaching.runs[RIGHT]
    page.goto(f"{teaching.base}/#/run/{run_id}")
    page.wait_for_selector("#answer-sql")
    page.click("#teach-right")
    said = page.locator("#teach-result.status-ok")
    said.wait_for()
    entries = _taught(teaching.work, teaching.db, RIGHT)
    assert len(entries) == 1
    entry = entries[0]
    assert (entry["sql"], entry["hint"], entry["run_id"], entry["source"], entry["kind"]) == (
        ANSWERS[RIGHT], "", run_id, "ui", "example")
    assert said.inner_text() == (f"Kept as taught example {entry['id']} on {teaching.db}: "
                                 "later runs on it see it in their prompts.")
    screenshot(page, "teach-right", tmp_path)
    # Teaching it again is refused, and said in the same line; the store keeps it once.
    page.click("#teach-right")
    page.locator("#teach-result.error").wait_for()
    _take_refusal(page)
    assert "taught already" in page.locator("#teach-result").inner_text()
    assert entry["id"] in page.locator("#teach-result").inner_text()
    assert len(_taught(teaching.work, teaching.db, RIGHT)) == 1


@pytest.mark.slow
def test_the_right_sql_the_guard_refuses_is_said_and_nothing_is_kept(page, teaching, tmp_path):
    run_id = teaching.runs[MISTAKEN]
    page.goto(f"{teaching.base}/#/run/{run_id}")
    page.wait_for_selector("#teach-sql")
    assert page.input_value("#teach-sql") == ANSWERS[MISTAKEN]  # the answer, to correct
    page.fill("#teach-sql", "DROP TABLE singer")
    page.click("#teach-given")
    said = page.locator("#teach-result.error")
    said.wait_for()
    _take_refusal(page)
    text = said.inner_text()
    assert text.startswith("The SQL was refused, so it was not taught") and "DROP" in text and "\n" not in text
    screenshot(page, "teach-refused", tmp_path)
    assert _taught(teaching.work, teaching.db, MISTAKEN) == []
    # The guard ran it read-only: the database is byte for byte what it was.
    assert sha256(teaching.db) == teaching.sha
    assert sqlite3.connect(teaching.db).execute("SELECT count(*) FROM singer").fetchone()[0] > 0
    # The right SQL, typed in the same box, is kept, with the run's question.
    page.fill("#teach-sql", MISTAKEN_GOLD)
    page.click("#teach-given")
    page.locator("#teach-result.status-ok").wait_for()
    entries = _taught(teaching.work, teaching.db, MISTAKEN)
    assert [(e["sql"], e["run_id"], e["source"]) for e in entries] == [(MISTAKEN_GOLD, run_id, "ui")]
    assert entries[0]["id"] in page.locator("#teach-result").inner_text()


@pytest.mark.slow
def test_a_run_without_an_answer_has_nothing_to_call_right(page, teaching):
    page.goto(f"{teaching.base}/#/run/{teaching.runs[UNANSWERED]}")
    page.wait_for_selector("#teach-right")
    assert page.locator("#teach-right").is_disabled()
    assert page.input_value("#teach-sql") == ""
    page.click("#teach-given")  # an empty box is refused, and says why
    page.locator("#teach-result.error").wait_for()
    _take_refusal(page)
    assert page.locator("#teach-result").inner_text().startswith("The SQL is empty")
    assert _taught(teaching.work, teaching.db, UNANSWERED) == []


# -- an evaluation's page ---------------------------------------------------------------------------


@pytest.mark.slow
def test_the_gold_sql_of_the_wrong_questions_is_taught_and_each_refusal_said(page, teaching, tmp_path):
    wrong = [_record(teaching, n) for n in sorted(WRONG)]
    database = wrong[0]["db_path"]
    # One of them is taught already (by hand, from the library): it is refused as a duplicate,
    # and the other is kept all the same.
    with Session(_settings(teaching.work), model=oracle_model(ANSWERS.get)) as session:
        before = Teacher(session).teach(database, wrong[1]["question"], wrong[1]["gold_sql"], source="cli")
    page.goto(f"{teaching.base}/#/eval/first")
    button = page.locator("#teach-gold")
    button.wait_for()
    assert button.inner_text() == "Teach the gold SQL of the 2 wrong questions"
    button.click()
    said = page.locator("#teach-gold-result")
    page.locator("#teach-gold-result", has_text=re.compile("^Kept")).wait_for()
    kept = _taught(teaching.work, database, wrong[0]["question"])
    assert [(e["sql"], e["hint"], e["run_id"], e["source"]) for e in kept] == [
        (wrong[0]["gold_sql"], wrong[0]["evidence"], wrong[0]["run_id"], "ui")]
    assert said.inner_text() == f"Kept 1 of 2 as taught examples ({kept[0]['id']}); 1 refused:"
    refused = page.locator("#teach-gold-refused li")
    assert refused.count() == 1 and refused.get_attribute("data-question") == "3"
    assert "taught already" in refused.inner_text() and before["id"] in refused.inner_text()
    screenshot(page, "teach-gold", tmp_path)
    # The right questions were left alone.
    right = [r for r in teaching.records if r["correct"]]
    assert all(_taught(teaching.work, database, r["question"]) == [] for r in right)
    # Again: both are duplicates now, each said.
    button.click()
    page.locator("#teach-gold-result", has_text=re.compile("^Kept 0")).wait_for()
    assert said.inner_text() == "Kept 0 of 2 as taught examples; 2 refused:"
    assert sorted(refused.evaluate_all("items => items.map(i => i.dataset.question)")) == ["1", "3"]


# -- which taught examples a run used ----------------------------------------------------------------


@pytest.mark.slow
def test_a_run_that_used_taught_examples_and_a_glossary_term_shows_them(page, teaching, tmp_path):
    """On a database of its own: examples taught from a run the viewer has and from one it has
    not, and a glossary term, then a question that uses them all."""
    db = teaching.work / "concerts.sqlite"
    shutil.copy(spider_db("concert_singer"), db)
    asked = "How many concerts are there with a veteran singer?"
    answers = {"How many concerts are there?": "SELECT count(*) FROM concert",
               asked: "SELECT count(*) FROM singer_in_concert AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id "
                      "WHERE T2.age > 40"}
    with Session(_settings(teaching.work), model=oracle_model(answers.get)) as session:
        source = session.ask("How many concerts are there?", db=db).run_id
        teacher = Teacher(session)
        known = teacher.teach(db, "How many concerts are there?", "SELECT count(*) FROM concert", run_id=source,
                              source="cli")
        elsewhere = teacher.teach(db, "What is the number of concerts in 2014?",
                                  "SELECT count(*) FROM concert WHERE year = '2014'", run_id=NOT_HERE, source="rest")
        term = teacher.teach_term(db, "veteran singer", "a singer older than 40", "age > 40", source="cli")
        used = session.ask(asked, db=db).run_id
    page.goto(f"{teaching.base}/#/run/{used}")
    table = page.locator("#taught-examples")
    table.wait_for()
    row = table.locator(f"tr[data-taught='{known['id']}']")
    assert row.get_attribute("data-node").startswith("generate_")
    assert "How many concerts are there?" in row.inner_text() and "via cli" in row.inner_text()
    assert row.locator("a.taught-run").inner_text() == source
    other = table.locator(f"tr[data-taught='{elsewhere['id']}']")
    assert f"from run {NOT_HERE} (not on this viewer)" in other.inner_text()
    assert other.locator("a").count() == 0
    glossary = page.locator(f"#glossary tr[data-term='{term['id']}']").locator("td").all_inner_texts()
    assert glossary == ["veteran singer", "a singer older than 40", "age > 40", term["id"]]
    screenshot(page, "taught-used", tmp_path)
    # The node's span says so too, in the tree and in its details.
    page.fill("#waterfall-text", "taught examples")
    page.locator("#waterfall .wf-row").first.click()
    page.locator(f"#span-taught li[data-taught='{known['id']}'] a.taught-run").wait_for()
    assert "(not on this viewer)" in page.locator(f"#span-taught li[data-taught='{elsewhere['id']}']").inner_text()
    # This run's answer taught in turn keeps the user's hint (none), not the glossary's sentences.
    page.click("#teach-right")
    page.locator("#teach-result.status-ok").wait_for()
    assert [e["hint"] for e in _taught(teaching.work, db, asked)] == [""]
    # The example's run opens from its link.
    row.locator("a.taught-run").click()
    # The page being left has an answer too: wait for the new run's own title, not any answer.
    page.locator("h1", has_text="How many concerts are there?").wait_for()
    assert page.locator("h1").inner_text() == "How many concerts are there?"


# -- over HTTP ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_bad_requests_get_a_clear_json_error_and_keep_nothing(teaching):
    base, run_id = teaching.base, teaching.runs[MISTAKEN]
    teach = f"{base}/api/runs/{run_id}/teach"
    before = _taught(teaching.work, teaching.db)

    def refused(response, status: int, kind: str) -> str:
        assert response.status_code == status, response.text
        assert response.headers["content-type"].startswith("application/json")
        error = response.json()["error"]
        assert error["kind"] == kind and "Traceback" not in response.text and "\n" not in error["message"]
        return error["message"]

    assert "sql" in refused(httpx.post(teach, json={"sql": 5}), 422, "invalid_request")
    assert "sql" in refused(httpx.post(teach, json={"sql": ["SELECT 1"]}), 422, "invalid_request")
    refused(httpx.post(teach, content=b"{not json", headers={"content-type": "application/json"}), 400, "invalid_json")
    assert "DROP" in refused(httpx.post(teach, json={"sql": "DROP TABLE singer"}), REFUSED, "taught")
    assert "no rows" in refused(httpx.post(teach, json={"sql": "SELECT name FROM singer WHERE 0"}), REFUSED, "taught")
    assert "empty" in refused(httpx.post(teach, json={"sql": "  "}), REFUSED, "taught")
    assert "over" in refused(httpx.post(teach, json={"sql": "SELECT 1 " + "x" * 300_000}), 413, "payload_too_large")
    unanswered = f"{base}/api/runs/{teaching.runs[UNANSWERED]}/teach"
    assert "chose no SQL" in refused(httpx.post(unanswered, json={}), REFUSED, "taught")
    # The question, hint and database are the run's: a request that names one is refused, not obeyed.
    named = httpx.post(unanswered, json={"sql": "SELECT name FROM singer", "database": "/etc/passwd"})
    assert "database" in refused(named, 422, "invalid_request")
    for bad in (NOT_HERE, "not-a-run", "..%2F..%2Fetc%2Fpasswd"):
        response = httpx.post(f"{base}/api/runs/{bad}/teach", json={})
        assert response.status_code == 404 and response.json()["error"]["kind"] in ("unknown_run", "not_found"), bad
    for bad in ("nope", "..%2Ffirst", ".hidden"):
        response = httpx.post(f"{base}/api/evals/{bad}/teach")
        assert response.status_code == 404 and response.json()["error"]["kind"] in ("unknown_run", "not_found"), bad
    assert "POST" in refused(httpx.get(teach), 405, "method_not_allowed")
    assert _taught(teaching.work, teaching.db) == before
    assert sha256(teaching.db) == teaching.sha


@pytest.mark.slow
def test_a_teach_from_another_page_or_without_the_pages_csrf_token_is_refused(teaching):
    base = teaching.base
    teach = f"{base}/api/runs/{teaching.runs[UNANSWERED]}/teach"
    gold = {"sql": "SELECT name FROM singer"}  # would be kept, were the request let in
    cases = [({"Origin": "http://evil.example"}, "cross_site"),
             ({"Origin": base, "Sec-Fetch-Site": "cross-site"}, "cross_site"),
             ({"Origin": "null"}, "cross_site"),
             ({"Origin": base}, "csrf"),  # a browser's request from this origin, but not from the page
             ({"Origin": base, "X-CSRF-Token": "guessed"}, "csrf"),
             ({"Host": "attacker.example"}, "forbidden_host")]
    for headers, kind in cases:
        response = httpx.post(teach, json=gold, headers=headers)
        assert response.status_code == 403 and response.json()["error"]["kind"] == kind, headers
        response = httpx.post(f"{base}/api/evals/first/teach", headers=headers)
        assert response.status_code == 403 and response.json()["error"]["kind"] == kind, headers
    assert _taught(teaching.work, teaching.db, UNANSWERED) == []


@pytest.mark.slow
def test_under_a_token_the_page_teaches_from_its_session_folder_and_a_cookie_alone_cannot(browser, teaching, tmp_path):
    """Beyond loopback's defaults: the page, logged in with the token, teaches with its cookie
    and CSRF token; the cookie without the page's CSRF token, or nothing, teaches nothing."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = [*teaching.args[:2], str(port), *teaching.args[3:]]
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    run_id = teaching.runs[BY_TOKEN]
    with running(args, teaching.work, {**teaching.env, "SQLCHORUS_TOKEN": TOKEN}, base + "/api/runs", headers=bearer):
        assert httpx.post(f"{base}/api/runs/{run_id}/teach", json={}).status_code == 401
        with watched_page(browser, base, 900) as page:
            page.set_default_timeout(60_000)
            page.goto(f"{base}/?token={TOKEN}")
            page.wait_for_selector("#runs")
            folder = page.url.removeprefix(base).split("#")[0]
            assert folder.startswith("/s/")
            cookies = {c["name"]: c["value"] for c in page.context.cookies()}
            refused = httpx.post(f"{base}{folder}api/runs/{run_id}/teach", json={}, cookies=cookies,
                                 headers={"Origin": base})
            assert refused.status_code == 403 and refused.json()["error"]["kind"] == "csrf"
            assert _taught(teaching.work, teaching.db, BY_TOKEN) == []
            page.goto(f"{base}{folder}#/run/{run_id}")
            page.click("#teach-right")
            page.locator("#teach-result.status-ok").wait_for()
            screenshot(page, "teach-session", tmp_path)
    assert [(e["sql"], e["run_id"]) for e in _taught(teaching.work, teaching.db, BY_TOKEN)] == [
        (ANSWERS[BY_TOKEN], run_id)]


@pytest.mark.slow
def test_with_taught_examples_off_a_teach_says_so_and_the_pages_still_open(teaching):
    """A viewer started with --no-taught: each teach is refused in one line, before any question
    is looked at; the run's page still lists the taught examples its trace names."""
    from starlette.testclient import TestClient

    from sqlchorus.interfaces.viewer import create_app
    from sqlchorus.runs.run_index import RunIndex
    from sqlchorus.runs.service import RunService
    from sqlchorus.runs.teach import NoExamplesStoreError

    settings = _settings(teaching.work).replace(examples_store=None)
    service = RunService(settings=settings, model=oracle_model(ANSWERS.get))
    try:
        client = TestClient(create_app(service, RunIndex(teaching.work / "traces", teaching.work / "evals")),
                            base_url="http://127.0.0.1:8080")
        for response in (client.post(f"/api/runs/{teaching.runs[RIGHT]}/teach", json={}),
                         client.post("/api/evals/first/teach")):
            assert response.status_code == NoExamplesStoreError.http_status
            error = response.json()["error"]
            assert error["kind"] == "no_examples_store" and "--examples-store" in error["message"]
        detail = client.get(f"/api/runs/{teaching.runs[RIGHT]}")
        assert detail.status_code == 200 and detail.json()["asked"]["question"] == RIGHT
    finally:
        service.close()
