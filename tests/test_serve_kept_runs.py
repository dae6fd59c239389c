"""What a checkpoint store did not take of a run while it was away (its model calls and newest
checkpoint) is kept, survives being written to a file and read back, and is written whole to a
store later: the run's state is read from it, and a second write adds nothing. The servers keep a
run's end this way (see tests/test_serve_stop.py for a server stopped while its store is away)."""

from __future__ import annotations

import json

from sqlchorus import Session, Settings
from sqlchorus.core.checkpoints import RunCheckpoints
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import oracle_model

QUESTION = "How many customers do we have?"


def _calls(store: RunCheckpoints, run_id: str) -> int:
    return store._rows("SELECT COUNT(*) FROM sqlchorus_calls WHERE thread_id = ?", (run_id,))[0][0]


def test_a_run_kept_while_its_store_was_away_is_written_whole_later(tmp_path):
    gold = {q["question"]: q["sql"] for q in load_demo_questions()}
    settings = Settings(trace_dir=str(tmp_path / "traces"), checkpoints=str(tmp_path / "away.sqlite"), preset="tiny",
                        cache=False)
    with Session(settings, model=oracle_model(gold.get)) as session:
        away = session.checkpoints(settings)
        away.away = True  # as a server marks a store it cannot reach: nothing is written to it
        result = session.ask(QUESTION)
        assert result.ok and result.rows == [[62]]
        run_id = result.run_id
        assert not list(away.list({"configurable": {"thread_id": run_id}})) and _calls(away, run_id) == 0
        kept = away.take_unwritten(run_id)
        assert kept is not None and kept["calls"] and "" in kept["checkpoints"]
        assert away.take_unwritten(run_id) is None  # taken once

        # Through a file (as a stopping server keeps it) and into another store.
        text = json.dumps(away.encode_unwritten(kept))
        later = RunCheckpoints(tmp_path / "later.sqlite")
        try:
            back = later.decode_unwritten(json.loads(text))
            later.write_unwritten(back)
            assert back["calls"] == [] and back["checkpoints"] == {}  # what was written left it
            later.write_unwritten(back)  # so a try again writes nothing twice
            assert _calls(later, run_id) == len(kept["calls"])
            state = session.graph(settings, later).get_state({"configurable": {"thread_id": run_id}})
            assert state.next == ()  # the checkpoint the run ended at
            values = state.values
            assert values["question"] == QUESTION
            assert any(c.get("sql") == gold[QUESTION] for c in values["candidates"]), values["candidates"]
        finally:
            later.close()
