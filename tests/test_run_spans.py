"""Runs you can tell apart and find: each run's span is named for what started it (ask, eval,
batch, debug, serve) and carries metadata and tags that Phoenix and Langfuse read; node spans show
the values they were given, bounded; no span claims work that was not done (select_candidate's
fetch of the answer's rows says what it is; a debugging session that only looked adds no turn;
a fork's span covers what it ran)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import sqlchorus
from sqlchorus.core.tracing import NODE_VALUE_CHARS, NODE_VALUES_CHARS, node_input, run_labels
from sqlchorus.evaluation.batch import run_batch
from sqlchorus.evaluation.datasets import load_dataset
from sqlchorus.evaluation.runs import run_eval
from sqlchorus.interfaces.rest import create_app
from sqlchorus.runs.debugger import Debugger
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.runs.service import RunService
from sqlchorus.testing import oracle_model
from sqlchorus.tools.tracing.content import TRUNCATION_MARK

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"


def file_spans(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def roots(spans: list[dict]) -> list[dict]:
    return [s for s in spans if s["parent_id"] is None]


def ns(stamp: str) -> int:
    """A span's time in a trace file (ISO 8601, microseconds), in nanoseconds since the epoch."""
    from datetime import datetime

    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1_000_000) * 1000


@pytest.fixture
def session(tmp_path):
    with sqlchorus.Session(sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path / "traces"),
                                              cache=False)) as s:
        yield s


# -- names, metadata and tags -----------------------------------------------------------------


def test_an_ask_is_named_ask_with_metadata_and_tags_dashboards_read(session, demo_db, spans):
    result = session.ask(QUESTION, demo_db, exporters=[spans],
                         run_metadata={"evaluation": "nightly", "question": 7, "gold_sql": GOLD[QUESTION]})
    assert result.ok
    (root,) = [s for s in spans.get_finished_spans() if s.parent is None]
    a = root.attributes
    assert root.name == "ask" and a["sqlchorus.origin"] == "ask" and a["openinference.span.kind"] == "AGENT"
    # OpenInference's metadata (one JSON object) and tags, which Arize Phoenix shows.
    metadata = json.loads(a["metadata"])
    assert metadata["origin"] == "ask" and metadata["database"] == "demo" and metadata["engine"] == "sqlite"
    assert metadata["models"] == dict.fromkeys(("keywords", "linking", "generation", "fixing", "selection"),
                                               "scripted-oracle")
    assert "preset" in metadata and metadata["generators"] == {"divide_conquer": 1}
    # The caller's run metadata, whatever it holds, lands there too.
    assert (metadata["evaluation"], metadata["question"], metadata["gold_sql"]) == ("nightly", 7, GOLD[QUESTION])
    assert list(a["tag.tags"]) == ["ask", "engine:sqlite", "database:demo", "model:scripted-oracle"]
    # Langfuse's trace attributes: the same, one attribute per metadata key.
    assert list(a["langfuse.trace.tags"]) == list(a["tag.tags"])
    assert a["langfuse.trace.metadata.evaluation"] == "nightly" and a["langfuse.trace.metadata.question"] == "7"
    assert json.loads(a["langfuse.trace.metadata.models"]) == metadata["models"]
    # Still what every reader of a run's span reads.
    assert a["sqlchorus.question"] == QUESTION and a["input.value"] == QUESTION and a["sqlchorus.sql"] == result.sql


def test_a_preset_is_a_tag_and_the_python_ask_takes_origin_and_metadata(demo_db, spans):
    result = sqlchorus.ask(QUESTION, demo_db, model=oracle_model(GOLD.get), exporters=[spans],
                           settings=sqlchorus.Settings(trace_dir=None, preset="fast", cache=False),
                           origin="notebook", run_metadata={"team": "data"})
    assert result.ok
    (root,) = [s for s in spans.get_finished_spans() if s.parent is None]
    assert root.name == "notebook" and "preset:fast" in root.attributes["tag.tags"]
    assert json.loads(root.attributes["metadata"])["team"] == "data"


def test_labels_are_bounded_and_checked():
    labels = run_labels("eval", {"long": "x" * 10_000, "rows": list(range(5_000)), "odd": {(1, 2): b"\x00"}})
    metadata = json.loads(labels["metadata"])
    assert metadata["long"].endswith(TRUNCATION_MARK) and len(metadata["long"]) < 1100
    assert len(json.dumps(metadata["rows"])) < 1100 and metadata["odd"] == {"(1, 2)": "<blob 1 bytes>"}
    with pytest.raises(ValueError, match="short lowercase word"):
        run_labels("Ask Me")
    with pytest.raises(TypeError, match="dict of JSON values"):
        run_labels("ask", ["not", "a", "dict"])


def test_an_evaluation_question_is_named_eval(tmp_path, demo_db):
    shutil.copy(demo_db, tmp_path / "demo.sqlite")  # <db_root>/<db_id>.sqlite
    data = tmp_path / "two.json"
    data.write_text(json.dumps({"benchmark": "spider", "examples": [
        {"question": q["question"], "db_id": "demo", "gold_sql": q["sql"]} for q in load_demo_questions()[:2]]}),
        encoding="utf-8")
    settings = sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path / "traces"), cache=False)
    run = run_eval(load_dataset(data), settings, out_dir=tmp_path / "run", progress=False)
    assert len(run.records) == 2
    traced = [roots(file_spans(p)) for p in (tmp_path / "traces").glob("*.jsonl")]
    assert len(traced) == 2 and all([s["name"] for s in r] == ["eval"] for r in traced)
    for (root,) in traced:
        assert json.loads(root["attributes"]["metadata"])["origin"] == "eval"


def test_a_batch_question_is_named_batch(tmp_path, demo_db):
    source = tmp_path / "questions.jsonl"
    source.write_text(json.dumps({"question": QUESTION, "db": str(demo_db)}) + "\n", encoding="utf-8")
    settings = sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path / "traces"), cache=False)
    run_batch(source, settings, out=tmp_path / "answers.jsonl")
    (path,) = (tmp_path / "traces").glob("*.jsonl")
    assert [s["name"] for s in roots(file_spans(path))] == ["batch"]


def test_a_served_run_is_named_serve_and_an_mcp_one_mcp(tmp_path):
    service = RunService(settings=sqlchorus.Settings(trace_dir=str(tmp_path / "traces"),
                                                     checkpoints=str(tmp_path / "c.sqlite"), cache=False),
                         model=oracle_model(GOLD.get))
    try:
        client = TestClient(create_app(service), base_url="http://127.0.0.1")
        answered = client.post("/v1/ask", json={"question": QUESTION})
        assert answered.status_code == 200 and answered.json()["rows"] == [[62]]
        served = answered.json()["run_id"]
        live = service.start(QUESTION, origin="mcp")
        live.future.result(timeout=120)
        live.done.wait(120)
    finally:
        service.close()
    assert [s["name"] for s in roots(file_spans(tmp_path / "traces" / f"{served}.jsonl"))] == ["serve"]
    assert [s["name"] for s in roots(file_spans(tmp_path / "traces" / f"{live.run_id}.jsonl"))] == ["mcp"]


# -- node spans -------------------------------------------------------------------------------


def test_node_spans_show_the_values_they_read_bounded(session, demo_db, spans):
    assert session.ask(QUESTION, demo_db, exporters=[spans]).ok
    nodes = {s.name: s for s in spans.get_finished_spans() if s.name.startswith("node:")}
    shown = json.loads(nodes["node:select_candidate"].attributes["input.value"])
    (candidate,) = shown["values"]["candidates"]
    assert candidate["sql"] == GOLD[QUESTION] and candidate["status"] == "ok"  # values, not only key names
    assert shown["values"]["keywords"] and "question" in shown["state_keys"]
    # The schema shown to the model is longer than one value's room: cut, and said so.
    view = shown["values"]["schema_view"]
    assert view.endswith(TRUNCATION_MARK) and len(view) <= NODE_VALUE_CHARS + len(TRUNCATION_MARK)
    for span in nodes.values():
        values = json.loads(span.attributes["input.value"]).get("values", {})
        assert len(json.dumps(values)) <= NODE_VALUES_CHARS + NODE_VALUE_CHARS, span.name


def test_node_input_bounds_each_value_and_the_whole():
    state = {"question": "q", "evidence": "", "fix_round": 0, "candidates": [
        {"id": f"c{i}", "generator": "direct", "sql": "SELECT " + "x" * 2000, "status": "ok"} for i in range(40)]}
    state |= {f"key{i:02d}": "v" * 3000 for i in range(20)}
    shown = node_input(state, "all")
    assert shown["values"]["fix_round"] == 0
    *candidates, more = shown["values"]["candidates"]  # the first few, each cut, then how many more
    assert candidates[0]["id"] == "c0" and candidates[0]["sql"].endswith(TRUNCATION_MARK)
    assert more == f"... {40 - len(candidates)} more" and len(json.dumps(candidates)) <= NODE_VALUE_CHARS + 100
    long = [v for k, v in shown["values"].items() if k.startswith("key")]
    assert long and all(len(v) <= NODE_VALUE_CHARS + len(TRUNCATION_MARK) for v in long)
    assert shown["more"] and len(json.dumps(shown)) < NODE_VALUES_CHARS + 2 * NODE_VALUE_CHARS
    assert "values" not in node_input(state, "metadata") and node_input(state, "metadata")["state_keys"]


# -- no span for work not done ----------------------------------------------------------------


def test_select_candidate_fetches_the_answer_rows_in_a_span_that_says_so(session, demo_db, spans):
    result = session.ask(QUESTION, demo_db, exporters=[spans])
    finished = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}
    (node,) = [s for s in finished if s.name == "node:select_candidate"]
    children = [s for s in finished if s.parent is not None and s.parent.span_id == node.context.span_id]
    assert [s.name for s in children] == ["answer.fetch_rows"]  # no bare second `sql` span
    (fetch,) = children
    assert fetch.attributes["sqlchorus.candidate_id"] == result.selection["chosen"]
    assert fetch.attributes["openinference.span.kind"] == "CHAIN" and fetch.status.status_code.name == "OK"
    statements = [s for s in finished if s.name == "sql" and s.attributes["db.query.text"] == result.sql]
    assert sorted(by_id[s.parent.span_id].name for s in statements) == ["answer.fetch_rows", "node:check_candidates"]


def test_a_debugging_session_that_only_reads_history_adds_no_turn(session, demo_db):
    first = session.ask(QUESTION, demo_db)
    traces = Path(first.trace_path).parent
    before = sorted(p.name for p in traces.glob("*.jsonl"))
    original = Path(first.trace_path).read_text(encoding="utf-8")
    debugger = Debugger.open(first.run_id, session=session)
    assert debugger.history() and debugger.state("answer")["sql"] == GOLD[QUESTION] and debugger.finished
    debugger.diff()
    debugger.close()
    # No new trace, and no span telling the old answer again as a new one.
    assert sorted(p.name for p in traces.glob("*.jsonl")) == before
    assert Path(first.trace_path).read_text(encoding="utf-8") == original
    assert debugger.tracer.path is None and debugger.tracer.root is None


def test_a_fork_span_covers_what_the_fork_ran(session, demo_db):
    first = session.ask(QUESTION, demo_db)
    debugger = Debugger.open(first.run_id, session=session)
    history = debugger.history()
    time.sleep(0.3)  # time the session stands open before its first command is not the run's
    debugger.fork(next(h["id"] for h in history if h["next"] == ["select_candidate"]))
    asked = time.time_ns()
    assert debugger.step() == ["select_candidate"]
    stepped = time.time_ns()
    time.sleep(0.3)  # nor is the time after its last command, or closing
    path = debugger.tracer.path
    debugger.close()
    spans = file_spans(path)
    (root,) = roots(spans)
    assert root["name"] == "debug" and root["attributes"]["sqlchorus.replay_of"] == first.run_id
    (step,) = [s for s in spans if s["name"] == "debug.step"]
    assert step["parent_id"] == root["context"]["span_id"]
    a = step["attributes"]
    assert a["sqlchorus.debug.command"] == "step" and a["sqlchorus.debug.forked"] is True
    assert a["sqlchorus.checkpoint_id"] in {h["id"] for h in history}
    (node,) = [s for s in spans if s["name"] == "node:select_candidate"]
    assert node["parent_id"] == step["context"]["span_id"]
    # The run's span is the command's (within a few milliseconds on a busy machine), inside the
    # step's own time: neither the 0.3 s before it nor the 0.3 s after.
    start, end = ns(root["start_time"]), ns(root["end_time"])
    assert asked - 1_000_000 <= start and end <= stepped + 1_000_000
    assert ns(step["start_time"]) - start < 50_000_000 and end - ns(step["end_time"]) < 50_000_000
    # The fork ran to the end: its answer is the fork's outcome.
    assert json.loads(root["attributes"]["output.value"])["sql"] == GOLD[QUESTION]


def test_a_debugging_session_started_new_is_named_debug(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session)
    assert debugger.cont() is None and debugger.finished
    path = debugger.tracer.path
    debugger.close()
    spans = file_spans(path)
    (root,) = roots(spans)
    assert root["name"] == "debug" and json.loads(root["attributes"]["metadata"])["origin"] == "debug"
    commands = [s["name"] for s in spans if s["parent_id"] == root["context"]["span_id"]]
    assert commands[0] == "debug.start" and set(commands) <= {"debug.start", "debug.continue"}
    assert json.loads(root["attributes"]["output.value"])["sql"] == GOLD[QUESTION]
