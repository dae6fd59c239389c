"""Every run is resumable: checkpoints in one SQLite file under the run's id, large values stored
once, node spans pointing at the checkpoint they came from."""

from __future__ import annotations

import json
import sqlite3

import pytest
from langgraph.types import Overwrite

import sqlchorus
from conftest import WAIT_S
from sqlchorus.core.checkpoints import VALUE_MIN_BYTES, CheckpointFileError, RunCheckpoints
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import ScriptedChatModel, oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"


def test_a_run_keeps_its_checkpoints_under_its_own_id(tmp_path, demo_db):
    result = sqlchorus.ask(QUESTION, db=demo_db, model=oracle_model(GOLD.get),
                           settings=sqlchorus.Settings(trace_dir=str(tmp_path)))
    assert result.ok and result.checkpoint_path == str(tmp_path / "checkpoints.sqlite")
    saver = RunCheckpoints(result.checkpoint_path)
    items = list(saver.list({"configurable": {"thread_id": result.run_id}}))
    steps = sorted(t.metadata["step"] for t in items)
    sources = [t.metadata["source"] for t in sorted(items, key=lambda t: t.metadata["step"])]
    assert steps[0] == -1 and sources[0] == "input" and set(sources[1:]) == {"loop"}
    final = saver.get_tuple({"configurable": {"thread_id": result.run_id}})
    assert final.checkpoint["channel_values"]["answer"]["sql"] == result.sql
    assert final.checkpoint["channel_values"]["schema_view"]  # a large value, put back on reading
    saver.close()


def test_node_spans_point_at_their_thread_and_checkpoint(tmp_path, demo_db):
    result = sqlchorus.ask(QUESTION, db=demo_db, model=oracle_model(GOLD.get),
                           settings=sqlchorus.Settings(trace_dir=str(tmp_path)))
    spans = [json.loads(line) for line in open(result.trace_path, encoding="utf-8")]
    nodes = [s for s in spans if s["name"].startswith("node:")]
    assert nodes and {s["attributes"]["sqlchorus.thread_id"] for s in nodes} == {result.run_id}
    saver = RunCheckpoints(result.checkpoint_path)
    known = {t.config["configurable"]["checkpoint_id"] for t in saver.list({"configurable": {"thread_id": result.run_id}})}
    assert {s["attributes"]["sqlchorus.checkpoint_id"] for s in nodes} <= known
    saver.close()


def test_large_values_are_stored_once_per_run(tmp_path, demo_db):
    result = sqlchorus.ask(QUESTION, db=demo_db, model=oracle_model(GOLD.get),
                           settings=sqlchorus.Settings(trace_dir=str(tmp_path)))
    conn = sqlite3.connect(result.checkpoint_path)
    view = result.state["schema_view"]
    assert len(view) >= VALUE_MIN_BYTES
    stored = [row[0] for row in conn.execute("SELECT value FROM sqlchorus_values")]
    # The view is stored as a value of its own (and inside the generators' Send packets, which
    # carry it), not in any of the run's checkpoints, however many steps there were.
    checkpoints = [row[0] for row in conn.execute("SELECT checkpoint FROM checkpoints")]
    assert len(checkpoints) > 4
    assert 1 <= sum(view.encode() in blob for blob in stored) <= 2
    assert not [blob for blob in checkpoints if view.encode() in blob]
    conn.close()
    saver = RunCheckpoints(result.checkpoint_path)
    # Besides the call log, which keeps each prompt once by design, the run takes a few views' size.
    prompts = sum(len(json.dumps(c["messages"])) + len(c["answer"]) for c in saver.calls(result.run_id))
    assert 0 < saver.bytes_of(result.run_id) - prompts < 15 * len(view)
    saver.close()


def test_checkpoints_can_be_turned_off_or_put_elsewhere(tmp_path, demo_db):
    off = sqlchorus.ask(QUESTION, db=demo_db, model=oracle_model(GOLD.get),
                        settings=sqlchorus.Settings(trace_dir=str(tmp_path / "t1"), checkpoints=None))
    assert off.ok and off.checkpoint_path is None and not (tmp_path / "t1" / "checkpoints.sqlite").exists()
    elsewhere = tmp_path / "keep" / "runs.sqlite"
    moved = sqlchorus.ask(QUESTION, db=demo_db, model=oracle_model(GOLD.get),
                          settings=sqlchorus.Settings(trace_dir=None, checkpoints=str(elsewhere)))
    assert moved.checkpoint_path == str(elsewhere) and elsewhere.exists()


def test_an_unusable_checkpoint_file_costs_the_checkpoints_not_the_answer(tmp_path, demo_db):
    bad = tmp_path / "not-a-db.sqlite"
    bad.write_bytes(b"this is not SQLite" * 100)
    result = sqlchorus.ask(QUESTION, db=demo_db, model=oracle_model(GOLD.get),
                           settings=sqlchorus.Settings(trace_dir=None, checkpoints=str(bad)))
    assert result.ok and result.checkpoint_path is None
    notes = [e["message"] for e in result.errors if e["kind"] == "checkpoints"]
    assert len(notes) == 1 and str(bad) in notes[0] and "keeps no checkpoints" in notes[0]
    with pytest.raises(CheckpointFileError):
        RunCheckpoints(bad)


# -- recorded model answers and replay ---------------------------------------------------------


def _refusing_model():
    def refuse(messages):
        raise AssertionError("a replay must not call the model")

    return ScriptedChatModel(refuse, name="must-not-be-called")


def _asked(tmp_path, demo_db, question=QUESTION, **settings):
    session = sqlchorus.Session(sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path), **settings))
    return session, session.ask(question, db=demo_db)


def test_every_model_call_is_kept_with_its_prompt_and_answer(tmp_path, demo_db):
    session, result = _asked(tmp_path, demo_db)
    calls = RunCheckpoints(result.checkpoint_path).calls(result.run_id)
    assert [(c["node"], c["role"]) for c in calls] == [(u["node"], u["role"]) for u in result.usage]
    assert all(c["messages"] and c["answer"] and "temperature" in c["params"] for c in calls)
    assert GOLD[QUESTION] in calls[-1]["answer"]
    session.close()


def test_a_whole_run_replays_with_no_model_call(tmp_path, demo_db):
    session, first = _asked(tmp_path, demo_db)
    session.close()
    # A new session, as a new process would open it, with a model that raises if called.
    again = sqlchorus.Session(sqlchorus.Settings(model=_refusing_model(), trace_dir=str(tmp_path)))
    replayed = again.replay(first.run_id)
    assert replayed.ok and replayed.sql == first.sql and replayed.rows == first.rows
    assert replayed.cost["replayed_calls"] == len(first.usage) == replayed.cost["calls"]
    assert replayed.run_id != first.run_id
    spans = [json.loads(line) for line in open(replayed.trace_path, encoding="utf-8")]
    root = next(s for s in spans if s["name"] == "replay")
    assert root["attributes"]["sqlchorus.replay_of"] == first.run_id
    assert all(s["attributes"].get("sqlchorus.replayed") for s in spans if s["attributes"].get("gen_ai.operation.name") == "chat")
    # Each replayed call carries the tokens the call it replays took, and costs nothing.
    assert [(u["input_tokens"], u["output_tokens"]) for u in replayed.usage] == [
        (u["input_tokens"], u["output_tokens"]) for u in first.usage]
    assert all(u["input_tokens"] > 0 for u in replayed.usage) and replayed.cost["cost_usd"] == 0.0
    again.close()


def test_an_edit_calls_the_model_only_for_the_steps_it_changed(tmp_path, demo_db):
    session, first = _asked(tmp_path, demo_db)
    store = session.checkpoints()
    graph = session.graph(session.settings, store)
    thread = {"configurable": {"thread_id": first.run_id}}
    history = list(graph.get_state_history(thread))
    summary = [(h.metadata["step"], h.metadata["source"], h.next) for h in reversed(history)]
    assert summary[0][1] == "input" and ("check_candidates",) in [s[2] for s in summary]
    before_check = next(h for h in history if h.next == ("check_candidates",))
    (candidate,) = before_check.values["candidates"]
    earlier = len(before_check.values["usage"])  # the calls made before the edited step

    def edit(sql):
        config = graph.update_state(before_check.config, {"candidates": [{**candidate, "sql": sql}]},
                                    as_node="generate_divide_conquer")
        return config["configurable"]["checkpoint_id"]

    # Another query that runs: a different answer, and still no model call.
    other = session.replay(first.run_id, edit("SELECT COUNT(*) FROM orders"))
    assert other.ok and other.sql == "SELECT COUNT(*) FROM orders" and other.rows != first.rows
    assert other.usage[earlier:] == []
    # A broken query: only the fixer, whose prompt the run never sent, goes to the model.
    calls_before = len(store.calls(first.run_id))
    fixed = session.replay(first.run_id, edit("SELECT nme FROM customers"))
    assert fixed.ok and fixed.sql == first.sql and fixed.rows == first.rows
    assert [(u["node"], bool(u.get("replayed"))) for u in fixed.usage[earlier:]] == [("fix_candidates", False)]
    assert len(store.calls(first.run_id)) == calls_before + 1
    # Every branch is in the run's history: the original and each edit's fork.
    after = list(graph.get_state_history(thread))
    assert [h.metadata["source"] for h in after].count("update") == 2 and len(after) > len(history)
    session.close()


def test_an_edit_through_langgraphs_api_goes_on_where_the_edges_route_it(tmp_path, demo_db):
    """update_state with or without as_node: the routed node's edge decides again on the edited
    state, so a run is never left with nowhere to go."""
    session, first = _asked(tmp_path, demo_db)
    graph = session.graph(session.settings, session.checkpoints())
    history = list(graph.get_state_history({"configurable": {"thread_id": first.run_id}}))
    before_select = next(h for h in history if h.next == ("select_candidate",))
    (candidate,) = before_select.values["candidates"]
    broken = {**candidate, "sql": "SELECT nme FROM customers", "status": "error", "error": "no such column: nme",
              "error_kind": "execution", "row_count": None}
    for as_node in (None, "check_candidates"):
        kwargs = {"as_node": as_node} if as_node else {}
        config = graph.update_state(before_select.config, {"candidates": Overwrite([broken])}, **kwargs)
        edited = graph.get_state(config)
        assert edited.next == ("fix_candidates",), (as_node, edited.next)
        fixed = session.replay(first.run_id, config["configurable"]["checkpoint_id"])
        assert fixed.ok and fixed.sql == first.sql and fixed.rows == first.rows
    # An edit that leaves nothing broken goes on to selection.
    config = graph.update_state(before_select.config, {"question": "How many customers are there?"})
    assert graph.get_state(config).next == ("select_candidate",)
    session.close()


def test_an_unknown_run_or_checkpoint_is_a_clear_error(tmp_path, demo_db):
    from sqlchorus.core.checkpoints import UnknownRunError

    session, first = _asked(tmp_path, demo_db)
    with pytest.raises(UnknownRunError, match="No run 'nope'"):
        session.replay("nope")
    with pytest.raises(UnknownRunError, match="has no checkpoint 'bad-id'"):
        session.replay(first.run_id, "bad-id")
    session.close()


@pytest.mark.slow
def test_a_checkpoint_file_locked_during_a_run_costs_the_checkpoints_not_the_answer(tmp_path, demo_db, monkeypatch):
    monkeypatch.setattr("sqlchorus.core.checkpoints.LOCK_TIMEOUT_S", 0.2)
    path = tmp_path / "checkpoints.sqlite"
    with sqlchorus.Session(sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path))) as session:
        store = session.checkpoints()  # opened (and set up) before another program locks it
        other = sqlite3.connect(path, timeout=WAIT_S)  # waits as long as taking the lock takes
        other.execute("BEGIN EXCLUSIVE")  # ...and held for the whole run: far past the 0.2 s limit
        try:
            result = session.ask(QUESTION, db=demo_db)
        finally:
            other.rollback()
            other.close()
        assert result.ok and result.rows == [[62]]
        notes = [e["message"] for e in result.errors if e["kind"] == "checkpoints"]
        assert len(notes) == 1 and "stopped taking checkpoints" in notes[0] and str(path) in notes[0]
        assert store.failed is None  # the next run tries again
        again = session.ask(QUESTION, db=demo_db)
        assert again.ok and not [e for e in again.errors if e["kind"] == "checkpoints"]
