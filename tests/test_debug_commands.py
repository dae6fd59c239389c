"""The debugger's commands for a question gone wrong: a node that raises, every model call, LIST's
steps, a step rerun live, pdb's habits (where, until, display), completion and run-id prefixes.
Driven through the Python API, `--commands` and a real pseudo-terminal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import sqlchorus
from sqlchorus.interfaces.debug_shell import DebugShell
from sqlchorus.runs.debugger import DebugError, Debugger, kept_answers_model
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTION = "How many customers do we have?"
WRONG = "SELECT COUNT(*) FROM orders"


@pytest.fixture
def session(tmp_path):
    with sqlchorus.Session(sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path),
                                              generators={"divide_conquer": 1})) as s:
        yield s


def summary(rows: list[dict[str, Any]]) -> list[tuple[Any, str]]:
    return [(h["step"], h["node"]) for h in rows]


def shell_of(debugger: Debugger) -> tuple[DebugShell, Any]:
    from rich.console import Console

    console = Console(record=True, width=200, color_system=None)
    return DebugShell(debugger, console), console


# -- it never dies -------------------------------------------------------------------------------


def test_a_node_that_raises_leaves_the_run_paused_before_it_with_a_post_mortem(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session, breakpoints=["link_schema"])
    assert debugger.cont() == "link_schema"
    debugger.set("values", {"customers.name": [{}]})  # the declared type allows it; link_schema does not
    with pytest.raises(DebugError, match=r"link_schema raised KeyError: 'value'\. The run is paused before link_schema"):
        debugger.step()
    assert debugger.next_nodes == ("link_schema",)
    failure = debugger.failure
    assert failure.node == "link_schema" and failure.error == "KeyError: 'value'"
    assert "values_by_column" in failure.traceback and "site-packages" not in failure.traceback
    assert failure.state["values"] == {"customers.name": [{}]} and failure.state["question"] == QUESTION
    # Mended, the run goes on from where it stopped.
    debugger.set("values", {})
    assert debugger.cont() is None and debugger.result().sql == GOLD[QUESTION]
    debugger.close()


def test_set_checks_the_declared_type_before_the_value_is_accepted(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session, breakpoints=["check_candidates"])
    debugger.cont()
    before = summary(debugger.history())
    with pytest.raises(DebugError, match=r"candidates\[0\] must be a candidate \(a JSON object\), not an integer"):
        debugger.set("candidates", [1])
    with pytest.raises(DebugError, match=r"candidates\[0\] lacks generator, reasoning, status, .*: every candidate has them"):
        debugger.set("candidates", [{"id": "divide_conquer-0", "sql": "SELECT 1"}])
    with pytest.raises(DebugError, match="fix_round must be an integer, not a string"):
        debugger.set("fix_round", "1")
    with pytest.raises(DebugError, match=r'candidates\[0\]\.status must be one of "unchecked", "ok", "empty", "error", not "fine"'):
        (candidate,) = debugger.state("candidates")
        debugger.set("candidates", [{**candidate, "status": "fine"}])
    assert summary(debugger.history()) == before  # nothing refused was kept
    assert debugger.cont() is None and debugger.result().sql == GOLD[QUESTION]
    debugger.close()


@pytest.mark.slow
def test_the_crashes_of_a_session_are_one_line_each_through_the_command(tmp_path, factories_env):
    out = _debug(tmp_path, factories_env, QUESTION, "--model", "python:scripted_factories:oracle",
                 commands="break check_candidates\ncontinue\nset candidates [1]\n"
                          'set candidates [{"id":"divide_conquer-0","sql":"SELECT 1"}]\nnext\n'
                          "export-test /nonexistent/dir/t.py\nfork nope\ncontinue\nquit\n")
    text = out.stdout
    assert "candidates[0] must be a candidate (a JSON object), not an integer" in text
    assert "candidates[0] lacks generator, reasoning, status," in text
    assert "ran check_candidates" in text  # the refused values left the run as it was
    assert "has no checkpoint 'nope'" in text and "ended at checkpoint" in text
    # Each failed command is one line, and the session went on.
    assert sum(line.startswith("error ") for line in text.splitlines()) == 4
    assert "Traceback" not in text + out.stderr and out.returncode == 1


@pytest.mark.slow
def test_a_raising_node_through_the_command_then_post_mortem_and_on(tmp_path, factories_env):
    out = _debug(tmp_path, factories_env, QUESTION, "--model", "python:scripted_factories:oracle",
                 commands='break link_schema\ncontinue\nset values {"customers.name": [{}]}\nnext\npost-mortem\n'
                          "where\nset values {}\ncontinue\nquit\n")
    text = out.stdout
    assert "error link_schema raised KeyError: 'value'. The run is paused before link_schema" in text
    assert "link_schema raised KeyError: 'value'" in text and "values_by_column" in text  # post-mortem
    assert "the state it met:" in text and '"customers.name": [{}]' in text
    assert "> next: link_schema" in text
    assert "ended at checkpoint" in text and "SELECT COUNT(*) FROM customers" in text
    assert "Traceback" not in text + out.stderr and out.returncode == 1


# -- every model call ----------------------------------------------------------------------------


def test_calls_lists_each_step_s_model_calls_and_shows_a_prompt_and_its_answer(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session)
    debugger.step()  # extract_keywords
    (call,) = debugger.calls_of()
    assert call["n"] == 1 and call["node"] == "extract_keywords" and call["role"] == "keywords"
    assert call["how"] == "model" and call["temperature"] == 0.0 and call["input_tokens"] > 0
    assert QUESTION in call["messages"][-1][1] and "customers" in call["answer"]
    debugger.step()  # retrieve_values: no model call
    assert debugger.calls_of() == []
    debugger.answer(json.dumps({"customers": ["customer_id"]}))  # the linking call's answer, by hand
    debugger.step()
    (typed,) = debugger.calls_of()
    assert typed["node"] == "link_schema" and typed["how"] == "typed"
    debugger.cont()
    every = debugger.calls_of(every=True)
    assert [c["n"] for c in every] == list(range(1, len(every) + 1))
    assert {c["node"] for c in every} >= {"extract_keywords", "link_schema", "generate_divide_conquer"}
    assert [c["node"] for c in debugger.calls_of("generate_divide_conquer")] == ["generate_divide_conquer"]
    shown = debugger.call(every[-1]["n"])
    assert shown["messages"] and shown["answer"]
    with pytest.raises(DebugError, match=f"No model call 99 on this branch; it has {len(every)}"):
        debugger.call(99)
    with pytest.raises(DebugError, match="No model call -1 on this branch"):
        debugger.call(-1)
    shell, console = shell_of(debugger)
    shell.run("calls all")
    shell.run("calls 1")
    shell.run("state usage")
    text = console.export_text()
    assert "extract_keywords" in text and "typed" in text and "Question: How many customers do we have?" in text
    assert "usage (calls shows each call's prompt and answer)" in text
    debugger.close()


def test_a_replayed_run_marks_its_calls_replayed(tmp_path, demo_db):
    settings = sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path), generators={"divide_conquer": 1})
    with sqlchorus.Session(settings) as s:
        run_id = s.ask(QUESTION, db=demo_db).run_id
    with sqlchorus.Session(settings.replace(model=kept_answers_model())) as s:
        debugger = Debugger.open(run_id, at=None, session=s)
        first = debugger.history()[0]["id"]
        debugger.fork(first)
        debugger.cont()
        hows = {c["how"] for c in debugger.calls_of(every=True)}
        assert hows == {"replayed"}
        debugger.close()


# -- inside LIST ---------------------------------------------------------------------------------


@pytest.fixture
def full(tmp_path):
    with sqlchorus.Session(sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path), preset="full")) as s:
        yield s


def test_a_breakpoint_at_list_plan_stops_inside_the_search_and_next_steps_through_it(full, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=full, breakpoints=["list_plan"])
    assert debugger.cont() == "list_plan"
    (inside,) = debugger.inside()
    assert inside["node"] == "generate_list" and inside["next"] == ("list_plan",)
    assert debugger.state("question") == QUESTION and debugger.state("plan") is None
    with pytest.raises(DebugError, match="paused inside generate_list's search"):
        debugger.set("step", 0)  # the search's own key: refused for where the run is, not as unknown
    started = debugger.checkpoint_id
    with pytest.raises(DebugError, match=f"fork {started}, the run's checkpoint before that step"):
        debugger.fork(inside["checkpoint"][-8:])
    assert debugger.step() == ["list_plan"]
    assert debugger.inside()[0]["next"] == ("list_write_step",) and debugger.state("plan")
    assert "plan" in debugger.diff()
    assert [c["node"] for c in debugger.calls_of()] == ["list_plan"]
    assert debugger.step() == ["list_write_step"]
    assert debugger.state("attempt")["sql"] and debugger.inside()[0]["next"] == ("list_verify_step",)
    # History: the search's checkpoints under the run's step it started from.
    rows = debugger.history(inner=True)
    inner = [r for r in rows if r.get("search")]
    assert [r["node"] for r in inner if r["node"] != "(search input)"] == ["list_plan", "list_write_step"]
    started_from = {r["id"]: r for r in rows}[inner[0]["parent"]]
    assert started_from["node"] == "link_schema" and not started_from.get("search")
    assert debugger.cont() is None and debugger.finished
    assert debugger.result().sql == GOLD[QUESTION]
    generators = {c["generator"] for c in debugger.state("candidates")}
    assert "list" in generators
    debugger.close()


def test_a_condition_on_a_list_step_reads_the_search_s_state(full, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=full)
    debugger.add_break("list_verify_step", "global_attempts >= 2")
    assert debugger.cont() == "list_verify_step"
    assert debugger.state("global_attempts") >= 2
    assert debugger.cont() is None and debugger.result().sql == GOLD[QUESTION]
    debugger.close()


def test_a_list_breakpoint_in_a_run_without_list_is_refused(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session)
    with pytest.raises(DebugError, match="list_plan is a step of LIST's search, and this run's generators"):
        debugger.add_break("list_plan")
    with pytest.raises(DebugError, match="generate_din is not in this run's graph"):
        debugger.add_break("generate_din")
    debugger.close()


@pytest.mark.slow
def test_a_list_breakpoint_through_the_command_under_the_full_preset(tmp_path, factories_env):
    out = _debug(tmp_path, factories_env, QUESTION, "--model", "python:scripted_factories:oracle", "--preset", "full",
                 commands="break list_plan\ncontinue\nnext\nwhere\nstate plan\nhistory\ncontinue\nquit\n")
    text = out.stdout
    assert "breakpoint before list_plan" in text
    assert "paused inside generate_list's search before list_plan" in text
    assert "ran list_plan" in text and "> next, inside generate_list: list_write_step" in text
    assert "plan: [" in text and "generate_list step" in text
    assert "ended at checkpoint" in text and out.returncode == 0, text + out.stderr


# -- a step rerun live -----------------------------------------------------------------------------


def test_rerun_asks_the_model_afresh_and_shows_what_changed(tmp_path, demo_db):
    generated: list[str] = []

    def first_answer(question):  # a fresh sample differs from the kept one
        generated.append(question)
        return GOLD[question] if len(generated) == 1 else WRONG

    settings = sqlchorus.Settings(model=oracle_model(GOLD.get, first_answer=first_answer), trace_dir=str(tmp_path),
                                  generators={"divide_conquer": 1})
    with sqlchorus.Session(settings) as s:
        run_id = s.ask(QUESTION, db=demo_db).run_id
        before = next(h["id"] for h in Debugger.open(run_id, session=s).history() if h["next"] == ["generate_divide_conquer"])
    with sqlchorus.Session(settings) as s:
        debugger = Debugger.open(run_id, at=before, session=s)
        ran, changes = debugger.rerun()
        assert ran == ["generate_divide_conquer"] and len(generated) == 2
        recorded, new = changes["candidates"]
        assert recorded[0]["sql"] == GOLD[QUESTION] and new[0]["sql"] == WRONG
        assert [c["how"] for c in debugger.calls_of()] == ["model"]
        assert debugger.cont() is None and debugger.result().sql == WRONG  # the rest from kept answers
        assert len(generated) == 2
        debugger.close()
    with sqlchorus.Session(settings.replace(model=kept_answers_model())) as s:
        debugger = Debugger.open(run_id, at=before, session=s)
        with pytest.raises(DebugError, match="rerun calls the model, and none is configured"):
            debugger.rerun()
        debugger.close()


# -- pdb's habits --------------------------------------------------------------------------------


def test_where_until_and_display(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session)
    debugger.display("len(candidates)")
    debugger.display("fix_round")
    assert debugger.until("check_candidates") == "check_candidates"
    assert [n for _, n in summary(debugger.path())] == [
        "(input)", "__start__", "extract_keywords", "retrieve_values", "link_schema", "generate_divide_conquer"]
    assert debugger.displayed() == [(1, "len(candidates)", 1), (2, "fix_round", 0)]
    assert "check_candidates" not in debugger.breakpoints  # until's stop was for once
    debugger.undisplay(1)
    assert [text for _, text, _ in debugger.displayed()] == ["fix_round"]
    with pytest.raises(DebugError, match="No display 5"):
        debugger.undisplay(5)
    debugger.close()


def test_a_condition_on_a_key_not_yet_set_reads_its_empty_value(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session, breakpoints=["check_candidates"])
    debugger.cont()
    (candidate,) = debugger.state("candidates")
    debugger.set("candidates", [{**candidate, "sql": "SELECT nope FROM customers", "status": "unchecked"}])
    debugger.add_break("fix_candidates", "fix_round == 0")
    assert debugger.state("fix_round") is None
    assert debugger.cont() == "fix_candidates"
    debugger.close()


def test_diff_prints_each_key_before_and_after(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session, breakpoints=["check_candidates"])
    debugger.cont()
    shell, console = shell_of(debugger)
    shell.run("set fix_round 3")
    shell.run("diff")
    text = console.export_text()
    assert "- fix_round: null" in text and "+ fix_round: 3" in text
    debugger.close()


def test_tab_offers_each_command_s_own_words(session, demo_db, tmp_path):
    debugger = Debugger.start(QUESTION, demo_db, session=session)
    debugger.step()
    shell, _ = shell_of(debugger)
    (tmp_path / "exports").mkdir()
    assert shell.complete("sta") == ["state"]
    assert shell.complete("state cand") == ["candidates"]
    assert shell.complete("break generate_d") == ["generate_divide_conquer", "generate_din", "generate_direct"]
    assert shell.complete("break fix_candidates i") == ["if"]
    assert shell.complete("break fix_candidates if fix_r") == ["fix_round"]
    assert shell.complete("until list_v") == ["list_verify_step"]
    assert shell.complete("calls a") == ["all"]
    checkpoint = debugger.checkpoint_id
    assert shell.complete(f"fork {checkpoint[:-3]}") == [checkpoint]
    assert shell.complete(f"fork {checkpoint[-8:]}") == [checkpoint]  # any unique part of it
    assert shell.complete(f"export-test {tmp_path}/exp") == [f"{tmp_path}/exports/"]
    assert shell.complete("set fix_round 1") == []
    debugger.close()


@pytest.mark.slow
def test_a_run_opens_by_any_unique_start_of_its_id(tmp_path, demo_db, factories_env):
    settings = sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path / "traces"),
                                  generators={"divide_conquer": 1})
    with sqlchorus.Session(settings) as s:
        first = s.ask(QUESTION, db=demo_db).run_id
        second = s.ask(QUESTION, db=demo_db).run_id
        debugger = Debugger.open(first[:-2], session=s)
        assert debugger.run_id == first and debugger.finished
        debugger.close()
        common = next(i for i in range(len(first)) if first[i] != second[i])
        with pytest.raises(sqlchorus.SqlchorusError, match="names several runs"):
            Debugger.open(first[:common], session=s)
    out = _debug(tmp_path, factories_env, "--run", second[:-3], commands="state answer\nquit\n")
    assert out.returncode == 0 and second in out.stdout and "SELECT COUNT(*) FROM customers" in out.stdout, out.stderr


# -- the command and the terminal ----------------------------------------------------------------


def _debug(tmp_path: Path, env: dict[str, str], *args: str, commands: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sqlchorus", "debug", *args, "--trace-dir", str(tmp_path / "traces"), "--commands", "-"],
        input=commands, capture_output=True, text=True, env=env, timeout=240,
    )


PROMPT = r"\(sqlchorus\)"
CODES = r"(?:\x1b\[[0-9;?]*[A-Za-z])*"  # what the terminal may draw between the typed and the completed part


@pytest.mark.slow
def test_completion_history_and_a_crash_in_a_real_terminal(tmp_path, factories_env):
    pexpect = pytest.importorskip("pexpect")
    from conftest import interruptible

    env = {**factories_env, "XDG_STATE_HOME": str(tmp_path / "state")}

    def spawn():
        return pexpect.spawn(
            sys.executable, ["-m", "sqlchorus", "debug", QUESTION, "--model", "python:scripted_factories:oracle",
                             "--trace-dir", str(tmp_path / "traces")],
            env=env, encoding="utf-8", timeout=120, dimensions=(40, 200), preexec_fn=interruptible,
        )

    child = spawn()
    child.expect(PROMPT)
    child.sendline("break link_schema")
    child.expect(PROMPT)
    child.sendline("continue")
    child.expect_exact("breakpoint before link_schema")
    child.expect(PROMPT)
    child.send("state keyw\t")  # the key after the command word
    child.expect(f"keyw{CODES}ords")
    child.send("\r")
    child.send("\r")
    child.expect_exact('"customers"')  # the key's value: the completed command ran
    child.expect(PROMPT)
    child.sendline('set values {"customers.name": [{}]}')
    child.expect(PROMPT)
    child.sendline("next")
    child.expect_exact("link_schema raised KeyError")
    child.expect(PROMPT)
    child.sendline("post-mortem")
    child.expect_exact("the state it met:")
    child.expect(PROMPT)
    child.sendline("quit")
    child.expect(pexpect.EOF)
    child.close()
    assert "Traceback" not in (child.before or "")
    history = tmp_path / "state" / "sqlchorus" / "debug_history"
    assert "post-mortem" in history.read_text(encoding="utf-8")
    # A new session recalls the last one's commands.
    child = spawn()
    child.expect(PROMPT)
    child.sendcontrol("p")  # the previous command, from the history file
    child.expect_exact("quit")
    child.sendcontrol("u")
    child.sendline("quit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_state_json_gives_a_value_to_edit_and_set_back(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session, breakpoints=["check_candidates"])
    debugger.cont()
    shell, console = shell_of(debugger)
    shell.run("state candidates --json")
    (line,) = [line for line in console.export_text().splitlines() if line.startswith("[{")]
    candidates = json.loads(line)
    assert candidates == debugger.state("candidates")
    candidates[0]["sql"] = WRONG
    shell.run(f"set candidates {json.dumps(candidates)}")
    assert shell.failed == 0 and debugger.cont() is None and debugger.result().sql == WRONG
    debugger.close()



# -- what a demanding user tried -----------------------------------------------------------------


def test_edits_one_after_another_keep_the_run_before_the_same_node(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session)
    debugger.step()
    debugger.set("keywords", ["a"])
    debugger.set("keywords", ["customers"])
    assert debugger.next_nodes == ("retrieve_values",)
    debugger.cont()
    assert [n for _, n in summary(debugger.path())][3:6] == ["(edit)", "(edit)", "retrieve_values"]
    # After a node raised, an edit that mends it goes on from that node.
    debugger2 = Debugger.start(QUESTION, demo_db, session=session, breakpoints=["link_schema"])
    debugger2.cont()
    debugger2.set("values", {"x": [{}]})
    with pytest.raises(DebugError):
        debugger2.step()
    debugger2.set("values", {})
    assert debugger2.next_nodes == ("link_schema",)
    # At the end, edits leave the run at its end.
    debugger2.cont()
    debugger2.set("fix_round", 1)
    debugger2.set("fix_round", 2)
    assert debugger2.finished and debugger2.state("fix_round") == 2
    debugger.close()
    debugger2.close()


def test_ctrl_c_keeps_the_steps_that_finished(tmp_path, demo_db):
    def linking_interrupted(question):
        raise KeyboardInterrupt  # as Ctrl-C would, during link_schema's model call

    from sqlchorus.testing import role_of_call

    def answer_for(question):
        if role_of_call() == "linking":
            linking_interrupted(question)
        return GOLD.get(question)

    settings = sqlchorus.Settings(model=oracle_model(answer_for), trace_dir=str(tmp_path), generators={"divide_conquer": 1})
    with sqlchorus.Session(settings) as s:
        debugger = Debugger.start(QUESTION, demo_db, session=s)
        with pytest.raises(KeyboardInterrupt):
            debugger.cont()
        assert debugger.next_nodes == ("link_schema",)  # extract_keywords and retrieve_values kept
        assert debugger.state("keywords")
        debugger.close()


def test_values_no_run_could_have_are_refused(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session, breakpoints=["check_candidates"])
    debugger.cont()
    (candidate,) = debugger.state("candidates")
    for key, value, message in [
        ("question", "  ", "question cannot be empty"),
        ("question", "x" * 30_000, "a run takes at most"),
        ("fix_round", -1, "cannot be negative"),
        ("fix_round", 10**30, "beyond a 64-bit integer"),
        ("candidates", [candidate, candidate], "is given twice"),
        ("candidates", [{**candidate, "fix_attempts": -5}], "cannot be negative"),
        ("keywords", json.loads("[" * 150 + "]" * 150), "nested more than 100 deep"),
    ]:
        with pytest.raises(DebugError, match=message):
            debugger.set(key, value)
    with pytest.raises(DebugError, match="nosuchvar is not a state key"):
        debugger.add_break("select_candidate", "nosuchvar > 1")
    with pytest.raises(DebugError, match="nested too deeply|at most 2000 characters"):
        debugger.display("-" * 5000 + "1")
    debugger.add_break("select_candidate", "all(c['status'] == 'ok' for c in candidates)")  # its own names
    debugger.close()


def test_set_a_part_sql_trace_and_escaped_output_through_the_shell(session, demo_db):
    debugger = Debugger.start(QUESTION, demo_db, session=session, breakpoints=["check_candidates"])
    debugger.cont()
    shell, console = shell_of(debugger)
    shell.run(f'set candidates[0].sql "{WRONG}"')
    assert debugger.state("candidates")[0]["sql"] == WRONG and debugger.next_nodes == ("check_candidates",)
    shell.run('set candidates[3].sql "x"')
    shell.run("sql SELECT COUNT(*) AS n FROM customers")
    shell.run("sql DELETE FROM customers")
    shell.run('set evidence "\\u001b[31mred"')
    shell.run("state evidence")
    shell.run("trace")
    text = console.export_text()
    assert "candidates[3] is out of range: candidates has 1 item" in text
    assert "62" in text and "1 row(s)" in text
    assert "\\x1b[31mred" in text and "\x1b" not in text
    assert "node:extract_keywords" in text and "calls all lists the model calls" in text
    assert shell.failed == 2  # the missing item and the DELETE, refused by the guard
    debugger.close()


@pytest.mark.slow
def test_opening_a_run_never_makes_a_checkpoint_file_and_takes_any_part_of_an_id(tmp_path, demo_db, factories_env):
    settings = sqlchorus.Settings(model=oracle_model(GOLD.get), trace_dir=str(tmp_path / "traces"),
                                  generators={"divide_conquer": 1})
    with sqlchorus.Session(settings) as s:
        run_id = s.ask(QUESTION, db=demo_db).run_id
        debugger = Debugger.open(run_id[-8:], session=s)  # the distinctive end of the id
        assert debugger.run_id == run_id
        debugger.close()
    missing = tmp_path / "nowhere.sqlite"
    out = _debug(tmp_path, factories_env, "--run", run_id, "--checkpoints", str(missing), commands="quit\n")
    assert out.returncode == 2 and "there is no checkpoint file at" in out.stderr and not missing.exists()
    empty = _debug(tmp_path, factories_env, "--run", "", commands="quit\n")
    assert empty.returncode == 2 and "--run needs a run's id" in empty.stderr
