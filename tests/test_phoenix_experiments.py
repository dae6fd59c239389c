"""Evaluations as experiments in a real Arize Phoenix (``sqlchorus eval --experiment phoenix``).

Two evaluations of the same Spider questions, one answering two of them wrongly, each run by the
command line with its traces sent to Phoenix (into a project chosen by
``OTEL_RESOURCE_ATTRIBUTES=openinference.project.name=...``) and recorded as an experiment. Read back
through Phoenix's REST API: one dataset, both experiments on it, per-question results that differ
exactly where the answers differ, each run linked to its trace; recording again adds nothing.
Phoenix's comparison view of the two is saved as a screenshot (its path is printed).

Phoenix is installed and started as ``tests/test_phoenix.py`` does (its ``phoenix`` fixture: a
venv of its own, loopback only); without network the install fails and the test skips unless
SQLCHORUS_REQUIRE_PHOENIX is set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_evaluate import spider_dev
from test_phoenix import phoenix  # noqa: F401  (the fixture: a Phoenix server of the test's own)

from conftest import BROWSER_ARGS, WAIT_S, data_dir, wait_for

pytestmark = pytest.mark.slow

LIMIT = 5
WRONG = {1: "SELECT name FROM singer", 3: "SELECT 'not the answer'"}
"""The questions the second evaluation answers wrongly, by number, with its wrong answer."""
PROJECT = "sqlchorus-evals"

FACTORIES = '''
import json, os

from sqlchorus.testing import oracle_model


def answers():
    """Answers each question with the SQL $ANSWERS gives it."""
    with open(os.environ["ANSWERS"], encoding="utf-8") as f:
        return oracle_model(json.load(f).get, name="answers")
'''


def _sqlchorus(args: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sqlchorus", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=600)


def _get(phoenix, path: str, **params: Any) -> Any:
    answer = httpx.get(phoenix.base + path, params=params, timeout=WAIT_S)
    answer.raise_for_status()
    return answer.json()


def test_two_evaluations_compare_in_phoenix(phoenix, chromium, tmp_path):  # noqa: F811
    data = spider_dev()
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "factories.py").write_text(FACTORIES, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SQLCHORUS_", "PHOENIX_", "OTEL_", "LANGFUSE_"))}
    env.update(SQLCHORUS_DATA=str(data_dir()), PYTHONPATH=str(tmp_path), NO_COLOR="1", COLUMNS="200",
               PHOENIX_ENDPOINT=phoenix.base, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=phoenix.otlp,
               OTEL_EXPORTER_OTLP_TRACES_TIMEOUT=str(WAIT_S),
               OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={PROJECT}")
    questions = data.examples[:LIMIT]
    records: dict[str, dict[int, dict[str, Any]]] = {}
    for name, wrong in (("base", {}), ("worse", WRONG)):
        answers: dict[str, str] = {}
        for i, example in enumerate(questions):
            answers.setdefault(example.question, wrong.get(i, example.gold_sql))
        (tmp_path / f"{name}.json").write_text(json.dumps(answers), encoding="utf-8")
        folder = work / "evals" / name
        out = _sqlchorus(["eval", "--dataset", "spider-dev", "--limit", str(LIMIT), "--model",
                          "python:factories:answers", "--no-cache", "--out", str(folder), "--experiment", "phoenix"],
                         cwd=work, env={**env, "ANSWERS": str(tmp_path / f"{name}.json")})
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"phoenix: recorded as experiment '{name}' on dataset 'spider-dev' ({LIMIT} question(s)" in out.stdout
        records[name] = {json.loads(line)["index"]: json.loads(line)
                         for line in (folder / "records.jsonl").read_text().splitlines()}
    assert {i for i, r in records["worse"].items() if not r["correct"]} == set(WRONG)

    # Recording an evaluation again adds nothing.
    again = _sqlchorus(["eval", "--out", "evals/base", "--experiment", "phoenix"], cwd=work, env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("phoenix: already recorded as experiment 'base'"), again.stdout

    # Read back: one dataset of the questions, both experiments on it.
    (dataset,) = _get(phoenix, "/v1/datasets", name="spider-dev")["data"]
    assert dataset["example_count"] == LIMIT
    experiments = {e["name"]: e for e in _get(phoenix, f"/v1/datasets/{dataset['id']}/experiments")["data"]}
    assert set(experiments) == {"base", "worse"}
    for name, experiment in experiments.items():
        assert experiment["successful_run_count"] == LIMIT and experiment["failed_run_count"] == 0
        assert experiment["metadata"]["sqlchorus_eval"] == name and experiment["metadata"]["model"] == "python:factories:answers"
    examples = _get(phoenix, f"/v1/datasets/{dataset['id']}/examples")["data"]["examples"]
    index_of = {e["node_id"]: e["metadata"]["question_id"] for e in examples}
    assert sorted(index_of.values()) == list(range(LIMIT))
    for example in examples:
        assert example["output"]["sql"] == questions[example["metadata"]["question_id"]].gold_sql

    # Question by question: the runs' SQL and their `correct` evaluations differ where the answers do.
    results: dict[str, dict[int, dict[str, Any]]] = {}
    for name, experiment in experiments.items():
        for run in _get(phoenix, f"/v1/experiments/{experiment['id']}/json"):
            index = index_of[run["example_id"]]
            (correct,) = [a for a in run["annotations"] if a["name"] == "correct"]
            results.setdefault(name, {})[index] = {"sql": run["output"]["sql"], "score": correct["score"],
                                                   "label": correct["label"], "trace_id": run["trace_id"]}
            assert run["output"]["sql"] == records[name][index]["prediction"]
    assert {i for i in range(LIMIT) if results["base"][i]["score"] != results["worse"][i]["score"]} == set(WRONG)
    assert all(results["worse"][i]["score"] == 0.0 and results["worse"][i]["label"].startswith("wrong") for i in WRONG)
    assert all(results["base"][i]["score"] == 1.0 for i in range(LIMIT))

    # Each run links to its trace, which went to the project OTEL_RESOURCE_ATTRIBUTES chose, its
    # run span saying which evaluation and question it was and the gold SQL it was judged against.
    linked = {r["trace_id"]: (name, i) for name, by in results.items() for i, r in by.items()}
    assert len(linked) == 2 * LIMIT and all(linked)

    def traced():
        spans = _get(phoenix, f"/v1/projects/{PROJECT}/spans", limit=1000, parent_id="null")["data"]
        roots = {s["context"]["trace_id"]: s for s in spans}
        return roots if set(linked) <= set(roots) else None

    roots = wait_for(traced, f"the runs' traces in Phoenix's project {PROJECT}", timeout_s=2 * WAIT_S)
    for trace_id, (name, i) in linked.items():
        attributes = roots[trace_id]["attributes"]
        metadata = attributes.get("metadata")  # Phoenix's REST answer flattens it: metadata.<key>
        metadata = json.loads(metadata) if isinstance(metadata, str) else metadata or {
            k.removeprefix("metadata."): v for k, v in attributes.items() if k.startswith("metadata.")}
        assert metadata.get("eval") == name and metadata.get("gold_sql") == questions[i].gold_sql, metadata
        assert metadata.get("question_id") == i

    # Phoenix's comparison view of the two experiments, in headless Chromium.
    from playwright.sync_api import sync_playwright

    shot = tmp_path / "phoenix-experiments-compare.png"
    url = (f"{phoenix.base}/datasets/{dataset['id']}/compare?experimentId={experiments['worse']['id']}"
           f"&experimentId={experiments['base']['id']}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=BROWSER_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1600, "height": 2400}).new_page()
            page.goto(url, timeout=WAIT_S * 1000)
            page.get_by_text(questions[WRONG_FIRST].question).first.wait_for(timeout=WAIT_S * 1000)
            page.get_by_text(WRONG[WRONG_FIRST]).first.wait_for(timeout=WAIT_S * 1000)
            page.wait_for_timeout(1000)  # the scores' cells fill in after the rows
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    data_bytes = shot.read_bytes()
    assert len(data_bytes) > 1000 and data_bytes.startswith(b"\x89PNG\r\n\x1a\n")
    print(f"\nPhoenix's comparison of experiments 'worse' and 'base': {shot}")


WRONG_FIRST = min(WRONG)
