"""The viewer's evaluation pages under a token: served from the session folder (/s/<session>/)
with relative addresses only, the static report's links landing in that folder, and nothing of
them answered without the token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from urllib.parse import urlsplit

import httpx
import pytest
from test_evaluate import spider_dev

from conftest import data_dir
from servers import TOKEN, free_port, running

FACTORIES = '''
import json, os

from sqlchorus.testing import oracle_model


def answers():
    with open(os.environ["ANSWERS"], encoding="utf-8") as f:
        table = json.load(f)
    return oracle_model(table.get, name="answers")
'''


@pytest.mark.slow
def test_evaluation_pages_live_in_the_session_folder_and_need_the_token(browser, tmp_path):
    examples = spider_dev().examples[:2]
    (tmp_path / "factories.py").write_text(FACTORIES, encoding="utf-8")
    (tmp_path / "answers.json").write_text(json.dumps({e.question: e.gold_sql for e in examples}), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLCHORUS_")}
    env.update(SQLCHORUS_DATA=str(data_dir()), PYTHONPATH=str(tmp_path), ANSWERS=str(tmp_path / "answers.json"),
               NO_COLOR="1")
    work = tmp_path / "work"
    work.mkdir()
    out = subprocess.run([sys.executable, "-m", "sqlchorus", "eval", "--dataset", "spider-dev", "--limit", "2",
                          "--model", "python:factories:answers", "--no-cache", "--out", str(work / "evals" / "night")],
                         capture_output=True, text=True, cwd=work, env=env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    run_id = json.loads((work / "evals" / "night" / "records.jsonl").read_text().splitlines()[0])["run_id"]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    args = ["ui", "--port", str(port), "--no-cache", "--trace-dir", str(work / "traces"),
            "--checkpoints", str(work / "checkpoints.sqlite"), "--evals-dir", str(work / "evals")]
    with running(args, work, {**env, "SQLCHORUS_TOKEN": TOKEN}, base + "/api/runs", headers=bearer):
        for path in ("/api/evals", "/api/evals/night", "/api/evals/night/rows/0", f"/api/runs/{run_id}/spans/x",
                     "/evals/night/report"):
            assert httpx.get(base + path).status_code == 401, path
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.set_default_timeout(60_000)
        requests, problems = [], []
        page.on("request", lambda r: requests.append(r.url))
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(f"{base}/?token={TOKEN}")
        page.wait_for_selector("#runs")
        folder = urlsplit(page.url).path
        assert folder.startswith("/s/")
        page.locator("a[data-eval='night']").click()
        page.wait_for_selector("#questions tbody tr[data-question]")
        page.locator("#questions tr.rows [data-side='gold'] table.result, #questions .rows-button").first.wait_for()
        page.locator("#questions tr[data-question='0'] .rows-button").click()
        page.locator("#questions [data-side='gold'] table.result").first.wait_for()
        page.locator("#questions tr[data-question='0'] a.open-run").click()
        page.wait_for_selector("#waterfall .wf-row")
        page.locator("#waterfall .wf-row", has_text="chat").first.click()
        page.wait_for_selector("#span-attributes")
        # The static report, opened from the session folder, links back into it.
        page.goto(f"{base}{folder}evals/night/report")
        page.locator(f"a[href='../../#/run/{run_id}']").click()
        page.wait_for_selector("#answer-sql")
        assert urlsplit(page.url).path == folder
        origin = urlsplit(base).netloc
        assert [u for u in requests if urlsplit(u).scheme not in ("data", "blob") and urlsplit(u).netloc != origin] == []
        # Every request the pages made stayed in the session folder.
        assert all(urlsplit(u).path.startswith(folder) or urlsplit(u).path == "/" for u in requests
                   if urlsplit(u).scheme.startswith("http")), requests
        assert problems == []
        context.close()
