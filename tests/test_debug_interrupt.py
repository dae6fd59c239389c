"""Ctrl-C in `sqlchorus debug` while the local model works on a step: the prompt comes back
with one line, the run stays at its checkpoint, and the model stops.

The steps interrupted here are far longer than the test waits for anything: prompts of thousands
of tokens for SmolLM2 on a CPU, under a 600-second model limit, and in the parallel case many
such calls. Without a working Ctrl-C the prompt would come back only once the step's work had
ended by itself, minutes later.
"""

from __future__ import annotations

import contextvars
import io
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import interruptible

PROMPT = r"\(sqlchorus\)"  # drawn by prompt_toolkit, with terminal codes around it
WAIT_S = 60
"""Room for the prompt to come back, and for the process to exit: far below how long the
interrupted work takes by itself."""
INTERRUPTED = "Interrupted: the run stays at its last checkpoint."


def _question(clauses: int) -> str:
    # Some eighteen tokens a clause: SmolLM2 evaluates such a prompt for many seconds on any CPU.
    return "Which customers have no email address on record? " + " ".join(
        f"Consider also customer number {i} and the orders placed in week {i % 52} of the year,"
        for i in range(clauses)
    )


def _spawn(tmp_path: Path, question: str, *options: str) -> tuple[Any, io.StringIO]:
    """`sqlchorus debug` on the local model in a real pseudo-terminal, and what it shows."""
    pexpect = pytest.importorskip("pexpect")
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "PROMPT_TOOLKIT_NO_CPR": "1"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "sqlchorus", "debug", question, "--model", "local:smollm2", "--max-question-chars", "20000",
         "--model-timeout", "600", "--no-cache", "--trace-dir", str(tmp_path / "traces"), *options],
        env=env, encoding="utf-8", timeout=WAIT_S, dimensions=(40, 200), preexec_fn=interruptible, cwd=tmp_path,
    )
    child.logfile_read = seen = io.StringIO()
    return child, seen


# The keywords step is one node, run in the main thread; the generators' step runs its branches
# and their samples in LangGraph's worker threads, which the main thread waits for.
CASES = {
    "one-node-in-the-main-thread": (_question(230), (), None, "extract_keywords"),
    "parallel-generators-in-worker-threads": (
        _question(100),
        ("--keywords", "question", "--linking", "lexical", "--generator", "divide_conquer=8",
         "--generator", "query_plan=8", "--break", "generate_query_plan"),
        "generate_query_plan",
        "generate_divide_conquer",  # the first of its sixteen nodes
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_ctrl_c_during_a_local_model_step_returns_to_the_prompt_and_stops_the_model(
        offline_model, tmp_path, case):
    import pexpect

    question, options, breakpoint, step = CASES[case]
    child, seen = _spawn(tmp_path, question, *options)
    try:
        child.expect(PROMPT)
        if breakpoint:  # no model call on the way: keywords from the question, lexical linking
            child.sendline("continue")
            child.expect_exact(f"breakpoint before {breakpoint}")
            child.expect(PROMPT)
        child.sendline("next")
        # Whatever the step is doing by now (the weights loading, the long prompt evaluated),
        # Ctrl-C brings the prompt back.
        time.sleep(5)
        child.sendcontrol("c")
        child.expect_exact(INTERRUPTED)
        child.expect_exact(f"paused before {step}")  # the checkpoint the step started from
        child.expect(PROMPT)
        child.sendline("state question")
        child.expect_exact("Which customers have no email address on record?")
        child.expect(PROMPT)
        child.sendline("quit")
        # The engine's thread keeps the process until it stops: an exit now means it has.
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0
    finally:
        if child.isalive():
            child.terminate(force=True)
    shown = seen.getvalue()
    assert f"ran {step}" not in shown  # the step was cut short, not let finish
    assert shown.count(INTERRUPTED) == 1
    assert "Traceback" not in shown and "Exception ignored" not in shown


# -- the cancel under it ---------------------------------------------------------------------------


def test_a_cancelled_run_stops_waiting_and_tells_the_local_engine_to_stop():
    """A model call in a cancelled run gives up at once, in whichever thread it waits; the engine
    stops at its next step, and the model answers the next call."""
    from langchain_core.messages import HumanMessage
    from test_local_model import _EngineThatHangs, _with_engine

    from sqlchorus.core.deadline import Cancel, Interrupted, cancellable

    engine = _EngineThatHangs(obeys=True)
    model = _with_engine(engine)
    cancel = Cancel()
    raised: list[BaseException] = []

    def call() -> None:  # as a generator's node does, in a worker thread of the step
        try:
            model.invoke([HumanMessage("q")], timeout_s=600)
        except BaseException as e:  # noqa: BLE001 - what the call raised is the point
            raised.append(e)

    with cancellable(cancel):
        worker = threading.Thread(target=contextvars.copy_context().run, args=(call,))
        worker.start()
    assert engine.started.wait(60)
    cancel.set()
    worker.join(60)
    assert not worker.is_alive() and len(raised) == 1 and isinstance(raised[0], Interrupted)
    assert cancel.settle(60) and engine.told_to_stop.is_set()
    with cancellable(cancel):  # a call of the cancelled run does not start
        with pytest.raises(Interrupted):
            model.invoke([HumanMessage("q")], timeout_s=600)
    assert engine.calls == 1
    assert model.invoke([HumanMessage("q")], timeout_s=60).content == "SELECT 1"


def test_a_cancelled_nodes_late_writes_are_not_shown_as_a_traceback(caplog):
    """After Ctrl-C, a worker thread's node may end by the cancel once the step's executor is
    shut: LangGraph's callback then cannot schedule its writes and concurrent.futures logs the
    error. That one record is dropped; any other error of that logger still shows."""
    import logging
    from concurrent.futures import ThreadPoolExecutor

    import sqlchorus.runs.session  # noqa: F401  (installs the filter)
    from sqlchorus.core.deadline import Interrupted

    executor = ThreadPoolExecutor(1)
    executor.shutdown()

    def late_writes(cause: BaseException) -> None:
        try:
            raise cause
        except BaseException:
            executor.submit(print)  # what LangGraph's callback does: RuntimeError, after shutdown

    logger = logging.getLogger("concurrent.futures")
    with caplog.at_level(logging.ERROR, logger="concurrent.futures"):
        for cause in (Interrupted("the run was cancelled"), ValueError("a node's own bug")):
            try:
                late_writes(cause)
            except RuntimeError:
                logger.exception("exception calling callback for %r", "future")
    shown = [r for r in caplog.records if r.name == "concurrent.futures"]
    assert len(shown) == 1 and isinstance(shown[0].exc_info[1].__context__, ValueError)
