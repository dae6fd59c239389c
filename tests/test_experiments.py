"""Evaluations as experiments (``sqlchorus eval --experiment phoenix|langfuse``): the payloads built
from a run folder, an evaluation's runs tagged with its session, Langfuse's API played by a small
receiver on loopback (Langfuse's server cannot run here), and the one-line failures.

Phoenix itself, a real server, is exercised by the slow ``tests/test_phoenix_experiments.py``.
"""

from __future__ import annotations

import base64
import json
import shutil
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from click.testing import CliRunner
from test_evaluate import N_SPIDER, oracle_for, settings_for, small_dataset, spider_dev

from servers import free_port
from sqlchorus.evaluation.experiments import (
    CORRECT,
    ExperimentAuthError,
    ExperimentError,
    export_langfuse,
    export_phoenix,
    langfuse_events,
    langfuse_item,
    langfuse_run_item,
    langfuse_settings,
    phoenix_dataset_upload,
    phoenix_evaluations,
    phoenix_experiment,
    phoenix_run,
    phoenix_settings,
    read_evaluation,
)
from sqlchorus.evaluation.datasets import load_dataset
from sqlchorus.evaluation.runs import EvalError, run_eval, run_question, score_prediction_file
from sqlchorus.interfaces.cli import cli

WRONG_AT = {1, 6}
"""The questions (positions in the dataset, whose 4th and 5th are on a missing database) the second
evaluation answers wrongly."""
PUBLIC, SECRET = "pk-lf-test", "sk-lf-test"


@pytest.fixture(scope="module")
def evals(tmp_path_factory) -> dict[str, Path]:
    """Two finished evaluations of the same questions (Spider dev's first, two of them on a
    missing database): ``base`` answers every question right, ``worse`` two of them wrong."""
    spider_dev()
    tmp = tmp_path_factory.mktemp("experiments")
    data = small_dataset(tmp)
    folders = {}
    for name, wrong in (("base", set()), ("worse", WRONG_AT)):
        folder = tmp / "evals" / name
        run_eval(data, settings_for(oracle_for(data, wrong), tmp / name), out_dir=folder, progress=False)
        folders[name] = folder
    return folders


def _positions(ev) -> dict[int, dict[str, Any]]:
    return {r["index"]: r for r in ev.records}


# -- the payloads -------------------------------------------------------------------------------


def test_phoenix_payloads_put_both_evaluations_on_one_dataset(evals):
    base, worse = read_evaluation(evals["base"]), read_evaluation(evals["worse"])
    assert (base.name, worse.name) == ("base", "worse")
    assert base.dataset == worse.dataset == "small-spider"
    assert base.fingerprint != worse.fingerprint
    assert read_evaluation(evals["base"]).fingerprint == base.fingerprint  # stable: re-reading is the same evaluation

    # The dataset: the same examples, on the same ids, whichever evaluation uploads them.
    upload = phoenix_dataset_upload(base)
    assert upload == phoenix_dataset_upload(worse)
    n = len(base.records)
    assert upload["action"] == "append" and upload["name"] == "small-spider"
    assert len(upload["inputs"]) == len(upload["outputs"]) == len(upload["metadata"]) == len(upload["example_ids"]) == n
    assert upload["example_ids"] == [f"question-{r['question_id']}" for r in base.records]
    first = base.records[0]
    assert upload["inputs"][0] == {"question": first["question"], "db_id": first["db_id"]}
    assert upload["outputs"][0] == {"sql": first["gold_sql"]}
    assert upload["metadata"][0]["difficulty"] == first["difficulty"]

    # The experiment: named after the folder, saying what was evaluated.
    experiment = phoenix_experiment(base, "V1")
    assert experiment["name"] == "base" and experiment["version_id"] == "V1"
    meta = experiment["metadata"]
    assert meta["sqlchorus_fingerprint"] == base.fingerprint and meta["model"] == "scripted-oracle"
    assert meta["n_questions"] == n and meta["ex"] == 100.0 and meta["benchmark"] == "spider"
    assert "EX 100%" in experiment["description"]

    # A run per question: its SQL and verdict, its trace's id and times.
    for ev in (base, worse):
        for record in ev.records:
            run = phoenix_run(ev, record, "EX1")
            evaluations = phoenix_evaluations(ev, record, "RUN1", run["end_time"])
            (correct,) = [e for e in evaluations if e["name"] == CORRECT]
            if record["status"] == "missing_db":
                assert run["error"].startswith("missing_db") and "trace_id" not in run
                assert correct["result"]["label"] == "missing_db" and "score" not in correct["result"]  # not scored
                continue
            assert "error" not in run and run["output"]["sql"] == record["prediction"]
            trace_file = Path(record["trace_path"]).read_text().splitlines()
            root = json.loads(trace_file[-1])
            assert run["trace_id"] == root["context"]["trace_id"].removeprefix("0x")
            assert run["start_time"] <= run["end_time"]
            wrong = ev is worse and record["index"] in _wrong_indices(ev)
            assert correct["result"]["score"] == (0.0 if wrong else 1.0)
            assert correct["result"]["label"] == ("wrong" if wrong else "correct")
            assert run["output"]["verdict"] == correct["result"]["label"]


def _wrong_indices(ev) -> set[int]:
    """The positions of the questions the second evaluation answers wrongly."""
    assert all(_positions(ev)[i]["status"] != "missing_db" for i in WRONG_AT)
    return set(WRONG_AT)


def test_langfuse_payloads_carry_session_gold_and_verdict(evals):
    worse = read_evaluation(evals["worse"])
    wrong = _wrong_indices(worse)
    record = _positions(worse)[min(wrong)]
    item = langfuse_item(worse, record)
    assert item["id"] == f"sqlchorus-small-spider-question-{record['question_id']}"
    assert item["datasetName"] == "small-spider" and item["expectedOutput"] == {"sql": record["gold_sql"]}
    events = langfuse_events(worse, record)
    trace, *scores = events
    assert trace["type"] == "trace-create"
    body = trace["body"]
    assert body["sessionId"] == "worse" and body["metadata"]["gold_sql"] == record["gold_sql"]
    assert body["metadata"]["verdict"] == "wrong" and body["output"]["sql"] == record["prediction"]
    assert [(s["type"], s["body"]["name"], s["body"]["value"]) for s in scores] == [("score-create", CORRECT, 0.0)]
    assert scores[0]["body"]["traceId"] == body["id"] == json.loads(
        Path(record["trace_path"]).read_text().splitlines()[-1])["context"]["trace_id"].removeprefix("0x")
    run_item = langfuse_run_item(worse, record, "worse")
    assert run_item["datasetItemId"] == item["id"] and run_item["traceId"] == body["id"]
    assert run_item["metadata"]["sqlchorus_fingerprint"] == worse.fingerprint
    # A question not scored has no score, and says why in its trace.
    missing = next(r for r in worse.records if r["status"] == "missing_db")
    trace, *scores = langfuse_events(worse, missing)
    assert scores == [] and trace["body"]["metadata"]["error"].startswith("missing_db")


def test_a_scored_prediction_file_lands_on_the_same_entries(evals, tmp_path):
    source = json.loads((evals["worse"] / "run.json").read_text())["source"]
    scored = score_prediction_file(load_dataset(source), evals["worse"] / "pred.txt", out_dir=tmp_path / "scored")
    ev, worse = read_evaluation(scored.out_dir), read_evaluation(evals["worse"])
    assert (ev.name, ev.dataset, ev.meta["benchmark"]) == ("scored", "small-spider", "spider")
    assert phoenix_dataset_upload(ev) == phoenix_dataset_upload(worse)
    assert [r["run_id"] for r in ev.records] == [None] * len(ev.records)
    assert [phoenix_run(ev, r, "EX")["output"]["verdict"] for r in ev.records] == [
        phoenix_run(worse, r, "EX")["output"]["verdict"] for r in worse.records]
    out = CliRunner().invoke(cli, ["eval", "--dataset", source, "--predictions", str(evals["worse"] / "pred.txt"),
                                   "--experiment", "phoenix"])
    assert out.exit_code == 2 and "give it one with --out" in out.stderr


def test_an_unfinished_evaluation_is_refused(evals, tmp_path):
    folder = tmp_path / "half"
    folder.mkdir()
    (folder / "run.json").write_text((evals["base"] / "run.json").read_text())
    lines = (evals["base"] / "records.jsonl").read_text().splitlines()
    (folder / "records.jsonl").write_text("\n".join(lines[:3]) + "\n")
    with pytest.raises(EvalError, match=r"holds 3 of its \d+ questions: the evaluation has not finished"):
        read_evaluation(folder)
    with pytest.raises(EvalError, match="holds no records.jsonl"):
        read_evaluation(tmp_path)


def test_where_the_tools_are_comes_from_their_variables():
    assert phoenix_settings({}) == ("http://127.0.0.1:6006", {})
    assert phoenix_settings({"PHOENIX_COLLECTOR_ENDPOINT": "http://h:7000/v1/traces"})[0] == "http://h:7000"
    assert phoenix_settings({"PHOENIX_HOST": "0.0.0.0", "PHOENIX_PORT": "7007"})[0] == "http://127.0.0.1:7007"
    assert phoenix_settings({"PHOENIX_ENDPOINT": "http://a:1", "PHOENIX_HOST": "b"})[0] == "http://a:1"
    assert phoenix_settings({"PHOENIX_API_KEY": "k"})[1] == {"Authorization": "Bearer k"}
    assert phoenix_settings({"PHOENIX_CLIENT_HEADERS": "x-a=1%202"})[1] == {"x-a": "1 2"}
    base, headers = langfuse_settings({"LANGFUSE_PUBLIC_KEY": "p", "LANGFUSE_SECRET_KEY": "s"})
    assert base == "https://cloud.langfuse.com" and headers["Authorization"] == "Basic " + base64.b64encode(b"p:s").decode()
    assert langfuse_settings({"LANGFUSE_HOST": "http://lf:3000/", "LANGFUSE_PUBLIC_KEY": "p",
                              "LANGFUSE_SECRET_KEY": "s"})[0] == "http://lf:3000"
    with pytest.raises(ExperimentAuthError, match="set LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY"):
        langfuse_settings({"LANGFUSE_PUBLIC_KEY": "p"})


# -- an evaluation's runs share its session -----------------------------------------------------


def test_an_evaluation_tags_its_runs_where_ask_takes_the_keywords(tmp_path):
    data = small_dataset(tmp_path, missing=0)
    example = data.examples[0]
    seen: list[dict[str, Any]] = []

    class Answer:
        sql, candidates, selection, state, error, run_id, trace_path, checkpoint_path = (
            example.gold_sql, [], {}, {}, None, "r1", None, None)
        seconds = 0.01
        cost = {"calls": 0, "input_tokens": 0, "output_tokens": 0}

    def tagged(question, *, db=None, evidence="", settings=None, session_id=None, run_metadata=None):
        seen.append({"session_id": session_id, "run_metadata": run_metadata})
        return Answer()

    def passing_on(question, **kw):  # a caller's own ask: given nothing it did not name
        seen.append(kw)
        return Answer()

    record = run_question(0, example, "spider", None, tagged, session="nightly")
    assert record["verdict"] == "correct"
    assert seen[0]["session_id"] == "nightly"
    assert seen[0]["run_metadata"] == {"eval": "nightly", "question_id": example.question_id, "db_id": example.db_id,
                                       "difficulty": example.difficulty, "benchmark": "spider",
                                       "gold_sql": example.gold_sql}
    run_question(0, example, "spider", None, passing_on, session="nightly")
    assert set(seen[1]) == {"db", "evidence", "settings"}
    run_question(0, example, "spider", None, tagged)  # not an evaluation (a batch, a Ray worker's call)
    assert seen[2] == {"session_id": None, "run_metadata": None}


# -- Langfuse, played by a receiver -------------------------------------------------------------


class Langfuse:
    """What Langfuse's public API answers to the calls an export makes, as its documentation
    (the API reference generated from Langfuse's Fern definitions) says, with the state they
    leave: datasets upserted by name, items by id, traces and scores by id (merged), dataset runs
    by name with their items. Every request is kept in ``requests``."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.datasets: dict[str, dict[str, Any]] = {}
        self.items: dict[str, dict[str, Any]] = {}
        self.traces: dict[str, dict[str, Any]] = {}
        self.scores: dict[str, dict[str, Any]] = {}
        self.runs: dict[tuple[str, str], dict[str, Any]] = {}
        self.lock = threading.Lock()

    def handle(self, method: str, path: str, auth: str | None, body: Any) -> tuple[int, Any]:
        with self.lock:
            self.requests.append({"method": method, "path": path, "body": body})
            if auth != "Basic " + base64.b64encode(f"{PUBLIC}:{SECRET}".encode()).decode():
                return 401, {"message": "Invalid credentials. Confirm that you've configured the correct host."}
            parts = [unquote(p) for p in path.strip("/").split("/")]
            if method == "POST" and path == "/api/public/v2/datasets":
                dataset = self.datasets.setdefault(body["name"], {"id": f"ds-{len(self.datasets) + 1}",
                                                                  "projectId": "proj-1", "name": body["name"]})
                dataset.update(description=body.get("description"), metadata=body.get("metadata"))
                return 200, dataset
            if method == "GET" and parts[:3] == ["api", "public", "datasets"] and len(parts) == 6 and parts[4] == "runs":
                run = self.runs.get((parts[3], parts[5]))
                if run is None:
                    return 404, {"message": "Dataset run not found", "error": "LangfuseNotFoundError"}
                return 200, run
            if method == "POST" and path == "/api/public/dataset-items":
                if body["datasetName"] not in self.datasets:
                    return 404, {"message": "Dataset not found"}
                self.items[body["id"]] = {**self.items.get(body["id"], {}), **body, "status": "ACTIVE"}
                return 200, self.items[body["id"]]
            if method == "POST" and path == "/api/public/ingestion":
                successes = []
                for event in body["batch"]:
                    target = self.traces if event["type"] == "trace-create" else self.scores
                    target[event["body"]["id"]] = {**target.get(event["body"]["id"], {}), **event["body"]}
                    successes.append({"id": event["id"], "status": 201})
                return 207, {"successes": successes, "errors": []}
            if method == "POST" and path == "/api/public/dataset-run-items":
                item = self.items.get(body["datasetItemId"])
                if item is None:
                    return 404, {"message": "Dataset item not found"}
                key = (item["datasetName"], body["runName"])
                run = self.runs.setdefault(key, {"id": f"run-{len(self.runs) + 1}", "name": body["runName"],
                                                 "datasetName": item["datasetName"], "datasetRunItems": []})
                run.update(description=body.get("runDescription"), metadata=body.get("metadata"))
                run_item = {"id": str(uuid.uuid4()), "datasetRunId": run["id"], "datasetRunName": run["name"],
                            "datasetItemId": body["datasetItemId"], "traceId": body["traceId"]}
                run["datasetRunItems"].append(run_item)
                return 200, run_item
            return 404, {"message": f"no route {method} {path}"}


@pytest.fixture
def langfuse(monkeypatch) -> Iterator[tuple[Langfuse, str]]:
    state = Langfuse()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            status, answer = state.handle(self.command, urlsplit(self.path).path, self.headers.get("Authorization"), body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("LANGFUSE_HOST", base)
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", PUBLIC)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", SECRET)
    monkeypatch.delenv("LANGFUSE_BASE_URL", raising=False)
    try:
        yield state, base
    finally:
        server.shutdown()
        server.server_close()


def test_two_evaluations_become_two_runs_of_one_langfuse_dataset(evals, langfuse, tmp_path):
    state, base = langfuse
    first = export_langfuse(evals["base"])
    second = export_langfuse(evals["worse"])
    n = len(read_evaluation(evals["base"]).records)
    assert (first.dataset, second.dataset) == ("small-spider", "small-spider")
    assert (first.experiment, second.experiment, first.n_runs, second.n_runs) == ("base", "worse", n, n)
    assert first.url == f"{base}/project/proj-1/datasets/ds-1"
    assert list(state.datasets) == ["small-spider"] and len(state.items) == n  # the same items, upserted
    runs = {name: state.runs[("small-spider", name)] for name in ("base", "worse")}
    assert {name: len(run["datasetRunItems"]) for name, run in runs.items()} == {"base": n, "worse": n}

    # Question by question: each run item's trace carries the evaluation as its session, the gold
    # SQL and the verdict; the `correct` scores differ exactly where the answers differ.
    worse = read_evaluation(evals["worse"])
    wrong = {f"sqlchorus-small-spider-question-{_positions(worse)[i]['question_id']}" for i in _wrong_indices(worse)}
    scored: dict[str, dict[str, float]] = {}
    for name, run in runs.items():
        for run_item in run["datasetRunItems"]:
            trace = state.traces[run_item["traceId"]]
            item = state.items[run_item["datasetItemId"]]
            assert trace["sessionId"] == name and trace["metadata"]["gold_sql"] == item["expectedOutput"]["sql"]
            score = state.scores.get(f"{run_item['traceId']}-{CORRECT}")
            if trace["metadata"]["verdict"] == "missing_db":
                assert score is None
                continue
            assert score["value"] == (1.0 if trace["metadata"]["verdict"] == "correct" else 0.0)
            scored.setdefault(run_item["datasetItemId"], {})[name] = score["value"]
    assert len(scored) == N_SPIDER
    differ = {item for item, values in scored.items() if values["base"] != values["worse"]}
    assert differ == wrong and all(scored[i] == {"base": 1.0, "worse": 0.0} for i in wrong)

    # The same evaluation again: recognised, nothing sent but the look-up.
    before = len(state.requests)
    again = export_langfuse(evals["worse"])
    assert again.already and again.experiment == "worse"
    assert [(r["method"], r["path"]) for r in state.requests[before:]] == [
        ("POST", "/api/public/v2/datasets"), ("GET", "/api/public/datasets/small-spider/runs/worse")]
    assert len(runs["worse"]["datasetRunItems"]) == n

    # An export that stopped half-way goes on where it stopped.
    del runs["worse"]["datasetRunItems"][-3:]
    before = len(state.requests)
    resumed = export_langfuse(evals["worse"])
    assert not resumed.already and len(runs["worse"]["datasetRunItems"]) == n
    assert sum(r["path"] == "/api/public/dataset-run-items" for r in state.requests[before:]) == 3

    # Another evaluation run into a folder of the same name: a run of its own.
    other = tmp_path / "base"
    shutil.copytree(evals["worse"], other)
    renamed = export_langfuse(other)
    assert renamed.experiment == f"base {read_evaluation(other).fingerprint[:8]}" and not renamed.already
    assert export_langfuse(other).already
    assert len(state.runs) == 3 and len(state.items) == n


def test_the_command_records_a_finished_evaluation(evals, langfuse):
    state, _ = langfuse
    out = CliRunner().invoke(cli, ["eval", "--out", str(evals["worse"]), "--experiment", "langfuse"])
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("langfuse: recorded as dataset run 'worse' on dataset 'small-spider'")
    as_json = CliRunner().invoke(cli, ["eval", "--out", str(evals["worse"]), "--experiment", "langfuse", "--json"])
    assert as_json.exit_code == 0, as_json.output
    (entry,) = json.loads(as_json.stdout)["experiments"]
    assert entry["already"] and entry["tool"] == "langfuse" and entry["n_runs"] == len(read_evaluation(evals["worse"]).records)


def test_refusals_and_absences_are_one_line_each(evals, langfuse, monkeypatch):
    state, _ = langfuse
    # Keys the tool refuses: exit 2, the evaluation kept, and how to record it later.
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-wrong")
    with pytest.raises(ExperimentAuthError, match=r"refused the request \(HTTP 401"):
        export_langfuse(evals["base"])
    out = CliRunner().invoke(cli, ["eval", "--out", str(evals["base"]), "--experiment", "langfuse"])
    assert out.exit_code == 2
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("Error: Langfuse at http://127.0.0.1:") and "LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY" in line
    assert line.endswith(f"record it later with: sqlchorus eval --out {evals['base']} --experiment langfuse")
    # No keys at all.
    monkeypatch.delenv("LANGFUSE_SECRET_KEY")
    out = CliRunner().invoke(cli, ["eval", "--out", str(evals["base"]), "--experiment", "langfuse"])
    assert out.exit_code == 2 and len(out.stderr.strip().splitlines()) == 1 and "LANGFUSE_SECRET_KEY" in out.stderr
    # Nobody at Phoenix's address: exit 3.
    nobody = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("PHOENIX_ENDPOINT", nobody)
    with pytest.raises(ExperimentError, match=rf"Phoenix does not answer at {nobody} \(Connection refused\)"):
        export_phoenix(evals["base"])
    out = CliRunner().invoke(cli, ["eval", "--out", str(evals["base"]), "--experiment", "phoenix"])
    assert out.exit_code == 3
    (line,) = out.stderr.strip().splitlines()
    assert "start it, or name where it is with PHOENIX_ENDPOINT" in line
    # Not an evaluation's folder; no --dataset and nothing to record.
    out = CliRunner().invoke(cli, ["eval", "--out", str(evals["base"].parent), "--experiment", "phoenix"])
    assert out.exit_code == 2 and "not an eval run folder" in out.stderr
    out = CliRunner().invoke(cli, ["eval", "--experiment", "phoenix"])
    assert out.exit_code == 2 and "Missing option '--dataset'" in out.stderr
    assert not any(r["path"] == "/api/public/dataset-run-items" for r in state.requests)


def test_an_evaluation_is_recorded_as_it_ends(tmp_path, langfuse, monkeypatch):
    """`sqlchorus eval --dataset ... --experiment langfuse`: the run, then its record in the tool."""
    state, _ = langfuse
    data = small_dataset(tmp_path, missing=0)
    answers = {e.question: e.gold_sql for e in data.examples}
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    (tmp_path / "exp_factories.py").write_text(
        "import json, os\nfrom sqlchorus.testing import oracle_model\n\n\ndef answers():\n"
        "    return oracle_model(json.load(open(os.environ['ANSWERS'])).get, name='answers')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("ANSWERS", str(tmp_path / "answers.json"))
    folder = tmp_path / "evals" / "tonight"
    out = CliRunner().invoke(cli, ["eval", "--dataset", str(data.source), "--limit", "3", "--model",
                                   "python:exp_factories:answers", "--no-cache", "--out", str(folder),
                                   "--experiment", "langfuse", "--json"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)
    assert summary["ex"] == 100.0
    (entry,) = summary["experiments"]
    assert entry["experiment"] == "tonight" and entry["n_runs"] == 3 and entry["n_correct"] == 3
    run = state.runs[(data.name, "tonight")]
    assert len(run["datasetRunItems"]) == 3
    assert {state.traces[i["traceId"]]["sessionId"] for i in run["datasetRunItems"]} == {"tonight"}


def test_an_evaluations_runs_are_one_session_named_for_it_with_gold_sql(evals):
    """Read from the runs' own trace files: every run of ``worse`` is an eval run in session
    ``worse``, and carries its question's gold SQL in its metadata."""
    from sqlchorus.evaluation.runs import read_records
    from sqlchorus.tools.tracing import attributes as attrs

    records = [r for r in read_records(evals["worse"] / "records.jsonl").values() if r.get("trace_path")]
    assert records
    for record in records:
        spans = [json.loads(line) for line in Path(record["trace_path"]).read_text().splitlines()]
        root = next(s for s in spans if not s.get("parent_id"))
        attributes = root["attributes"]
        assert root["name"] == "eval"
        assert attributes[attrs.SESSION_ID] == "worse"
        assert json.loads(attributes["metadata"])["gold_sql"] == record["gold_sql"]
