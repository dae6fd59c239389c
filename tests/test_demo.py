"""`sqlchorus demo` as a new user runs it: offline, on the toy model, never a crash."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A question of some four thousand tokens: evaluating its prompt takes SmolLM2 seconds on any
# machine, so every call certainly runs past a one-second limit.
LONG_QUESTION = "Which customers have no email address on record? " + " ".join(
    f"Consider also customer number {i} and the orders placed in week {i % 52} of the year,"
    for i in range(230)
)


@pytest.mark.slow
def test_a_short_model_limit_ends_cleanly_ten_times_in_a_row(offline_model, tmp_path):
    """Every model call runs past a 1-second limit and is stopped: the demo says so and exits 1,
    with no signal and no traceback, every time."""
    for attempt in range(10):
        out = subprocess.run(
            [sys.executable, "-m", "sqlchorus", "demo", LONG_QUESTION, "--max-question-chars", "20000",
             "--model-timeout", "1", "--no-cache", "--no-trace"],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )
        report = out.stdout + out.stderr
        assert out.returncode == 1, f"attempt {attempt + 1}: exit {out.returncode}\n{report[-2000:]}"
        assert "Traceback" not in report
        assert "no answer within 1 s; the model was stopped" in " ".join(report.split())


def test_the_demo_without_a_model_runs_the_tiny_preset_and_a_typed_preset_wins(monkeypatch):
    from click.testing import CliRunner

    from sqlchorus.interfaces.cli import cli

    seen = {}

    def fake_ask(question, db=None, evidence="", settings=None, progress=None):
        seen["settings"] = settings
        raise ValueError("stop here")

    monkeypatch.setattr("sqlchorus.runs.session.ask", fake_ask)
    monkeypatch.delenv("SQLCHORUS_MODEL", raising=False)
    CliRunner().invoke(cli, ["demo", "--no-trace"])
    s = seen["settings"]
    assert (s.model, s.preset, s.generators, s.keywords, s.linking, s.grammar_scope) == (
        "local:smollm2", "tiny", {"direct": 1}, "question", "lexical", "from")
    CliRunner().invoke(cli, ["demo", "--no-trace", "--preset", "fast"])
    assert (seen["settings"].preset, seen["settings"].generators) == ("fast", {"divide_conquer": 1})
    CliRunner().invoke(cli, ["demo", "--no-trace", "--model", "openai:x"])
    assert (seen["settings"].model, seen["settings"].preset) == ("openai:x", None)


def test_the_tiny_preset_answers_with_one_call(demo_db):
    """Keywords from the question and lexical linking make no call; the direct prompt makes one."""
    import sqlchorus
    from sqlchorus.config.settings import Settings
    from sqlchorus.graph.expected_calls import expected_calls
    from sqlchorus.runs.demo import load_demo_questions
    from sqlchorus.testing import current_call, oracle_model

    gold = {q["question"]: q["sql"] for q in load_demo_questions()}
    prompts = []
    oracle = oracle_model(gold.get)

    def respond(messages):
        prompts.append(current_call()["prompt"])
        return oracle.responses(messages)

    from sqlchorus.testing import ScriptedChatModel

    settings = Settings(preset="tiny", model=ScriptedChatModel(respond), trace_dir=None)
    question = "How many customers do we have?"
    result = sqlchorus.ask(question, db=demo_db, settings=settings)
    assert result.ok and result.rows == [[62]]
    assert prompts == ["generate_direct"] and expected_calls(settings)["typical"] == 1
    assert result.state["keywords"] and result.state["links"] == {"customers": result.state["links"]["customers"]}
