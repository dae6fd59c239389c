"""The product's replay model: a chat model that answers only from the answers it is given (a
run's kept answers, an exported test's) and refuses every other call, saying why. The scripted
models of `sqlchorus.testing` build on it; the product never imports them."""

from __future__ import annotations

import pytest

import sqlchorus
from sqlchorus.core.llm import NODE_KEY, PROMPT_KEY, ROLE_KEY
from sqlchorus.core.replay_model import ReplayChatModel, UnrecordedCallError, current_call
from sqlchorus.runs.debugger import KEPT_ANSWERS_ONLY, Debugger, kept_answers_model
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import ScriptedChatModel, oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"


def test_it_answers_in_turn_and_refuses_after_the_last():
    model = ReplayChatModel(["SELECT 1", "SELECT 2"], name="kept")
    first, second = model.invoke("a question"), model.invoke("another")
    assert (first.content, second.content) == ("SELECT 1", "SELECT 2")
    assert first.usage_metadata["output_tokens"] > 0 and first.response_metadata["model_name"] == "kept"
    with pytest.raises(UnrecordedCallError, match="not among the answers the model was given"):
        model.invoke("a third")
    assert model.calls == 3


def test_with_no_answers_it_refuses_every_call_in_its_own_words():
    model = ReplayChatModel(name="none", refusal="Nothing recorded for this call.")
    with pytest.raises(UnrecordedCallError, match="Nothing recorded for this call") as refused:
        model.invoke("anything")
    assert isinstance(refused.value, RuntimeError) and refused.value.kind == "unrecorded_call"


def test_a_function_answers_knowing_the_call_and_refuses_with_none():
    seen = []

    def answer(messages):
        seen.append(current_call())
        return "SELECT 1" if current_call()["node"] == "generate" else None

    model = ReplayChatModel(answer)
    meta = {PROMPT_KEY: "generate_direct", ROLE_KEY: "generation", NODE_KEY: "generate"}
    assert model.invoke("q", {"metadata": meta}).content == "SELECT 1"
    with pytest.raises(UnrecordedCallError):
        model.invoke("q", {"metadata": {**meta, NODE_KEY: "fix_candidates"}})
    assert seen == [{"prompt": "generate_direct", "role": "generation", "node": "generate"},
                    {"prompt": "generate_direct", "role": "generation", "node": "fix_candidates"}]
    assert current_call() == {}  # only while a call is answered


def test_the_scripted_models_are_replay_models_that_never_run_out():
    scripted = ScriptedChatModel(["SELECT 1"])
    assert isinstance(scripted, ReplayChatModel)
    assert [scripted.invoke("q").content for _ in range(3)] == ["SELECT 1"] * 3


def test_a_run_replays_from_its_kept_answers_and_a_changed_call_is_refused(tmp_path, demo_db):
    settings = sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path), generators={"divide_conquer": 1})
    with sqlchorus.Session(settings) as s:
        run_id = s.ask(QUESTION, db=demo_db).run_id
        before = next(h["id"] for h in Debugger.open(run_id, session=s).history()
                      if h["next"] == ["generate_divide_conquer"])
    model = kept_answers_model()
    assert model.model_name == KEPT_ANSWERS_ONLY
    with sqlchorus.Session(settings.replace(model=model)) as s:
        replayed = s.replay(run_id)
        assert replayed.ok and replayed.sql == GOLD[QUESTION]
        assert model.calls == 0  # every answer came from the run's call log
        # An edit changes the generator's prompt: that call was never made, so the model refuses it.
        debugger = Debugger.open(run_id, at=before, session=s)
        debugger.set("evidence", "Customers are the rows of the customers table.")
        debugger.step()
        errors = [e["message"] for e in debugger.state("errors") if e["node"] == "generate_divide_conquer"]
        assert model.calls == 1
        assert errors and "this call is not among the run's kept answers" in errors[0]
        debugger.close()
