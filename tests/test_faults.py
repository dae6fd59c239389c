"""Faults outside the model keep their meaning: an interrupted ask or eval, a closed pipe, a damaged
file, tracing that cannot be written or sent, a value index built by another command."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import sqlchorus
from conftest import interruptible
from sqlchorus.evaluation.runs import read_records
from sqlchorus.interfaces.cli import cli
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}


def test_ctrl_c_in_ask_exits_130(monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("sqlchorus.runs.session.ask", interrupted)
    out = CliRunner().invoke(cli, ["ask", "How many customers do we have?", "--model", "openai:x", "--no-trace"])
    assert out.exit_code == 130
    assert "Interrupted." in out.output and "Traceback" not in out.output


@pytest.mark.slow
def test_a_closed_pipe_is_not_blamed_on_the_input(tmp_path, demo_db):
    lines = [json.dumps({"db": str(demo_db), "question": f"q{i}", "candidates": ["SELECT 1"]}) for i in range(400)]
    path = tmp_path / "candidates.jsonl"
    path.write_text("\n".join(lines) + "\n")
    # A reader that takes one line and goes: the writer meets a closed pipe.
    command = f"{sys.executable} -m sqlchorus select --candidates {path} | head -n 1"
    out = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, timeout=120)
    assert out.stdout.count("\n") == 1
    assert "Cannot read" not in out.stderr and "Traceback" not in out.stderr


def test_a_damaged_database_page_is_not_sent_to_the_fixer(tmp_path, demo_db):
    damaged = tmp_path / "damaged.sqlite"
    shutil.copy(demo_db, damaged)
    data = bytearray(damaged.read_bytes())
    for page in range(2, len(data) // 4096):  # every page after the first: the schema still reads
        data[page * 4096:page * 4096 + 64] = b"\xff" * 64
    damaged.write_bytes(bytes(data))
    model = oracle_model(GOLD.get)
    result = sqlchorus.ask("How many customers do we have?", db=damaged, model=model,
                           settings=sqlchorus.Settings(trace_dir=None))
    assert not result.ok
    assert result.candidates and result.candidates[0]["error_kind"] == "database_open"
    assert result.candidates[0]["fix_attempts"] == 0
    assert not any(u["node"] == "fix_candidates" for u in result.usage)


class _FullDisk:
    """A trace file on a disk that is full: every write fails as the OS would say so."""

    closed = False

    def write(self, text):
        raise OSError(28, "No space left on device")

    def flush(self):
        pass

    def close(self):
        self.closed = True


def _answer_with(monkeypatch, *extra):
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: oracle_model(GOLD.get))
    return CliRunner().invoke(cli, ["ask", "How many customers do we have?", "--model", "openai:x", *extra])


def test_a_full_disk_costs_the_trace_file_not_the_answer(monkeypatch, tmp_path):
    monkeypatch.setattr("sqlchorus.core.tracing.open", lambda *a, **k: _FullDisk(), raising=False)
    out = _answer_with(monkeypatch, "--trace-dir", str(tmp_path / "traces"))
    assert out.exit_code == 0, out.output
    assert "SELECT COUNT(*) FROM customers" in out.output and "62" in out.output
    assert "Traceback" not in out.output and "Exception while exporting" not in out.output
    assert " ".join(out.output.split()).count("stopped being written: No space left on device") == 1


def test_a_missing_otlp_exporter_costs_the_export_not_the_answer(monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    out = _answer_with(monkeypatch, "--no-trace", "--otlp-endpoint", "http://127.0.0.1:9/v1/traces")
    assert out.exit_code == 0, out.output
    assert "62" in out.output and "Traceback" not in out.output
    assert " ".join(out.output.split()).count("needs the OTLP exporter") == 1


def _refusing_provider(monkeypatch, name: str, status: int):
    """Every model the CLI resolves is one whose provider refuses the key, as an SDK's
    ``name`` error with ``status_code`` would; returns it, to count its calls."""
    from sqlchorus.testing import ScriptedChatModel

    error = type(name, (Exception,), {"status_code": status})

    def refuse(messages):
        raise error(f"Error code: {status} - invalid api key")

    model = ScriptedChatModel(refuse)
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)
    return model


def test_a_refused_api_key_is_a_configuration_error_met_once(monkeypatch):
    model = _refusing_provider(monkeypatch, "AuthenticationError", 401)
    out = CliRunner().invoke(cli, ["ask", "How many customers do we have?", "--model", "openai:x", "--no-trace"])
    assert out.exit_code == 2, out.output
    assert "refused the credentials" in out.output and "Traceback" not in out.output
    assert model.calls == 1  # the run stops at the first refusal: no retry, no other node tries


def test_a_refused_api_key_stops_select_and_eval_once(monkeypatch, tmp_path, demo_db):
    model = _refusing_provider(monkeypatch, "PermissionDeniedError", 403)
    lines = [json.dumps({"db": str(demo_db), "question": f"q{i}", "candidates": ["SELECT 1", "SELECT 2", "SELECT 3"]})
             for i in range(5)]
    path = tmp_path / "candidates.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out = CliRunner().invoke(cli, ["select", "--candidates", str(path), "--model", "openai:x", "--pairwise", "always"])
    assert out.exit_code == 2 and "refused the credentials" in out.output and "Traceback" not in out.output
    assert model.calls == 1


def test_a_refused_api_key_stops_an_evaluation_at_once(monkeypatch, tmp_path, spider):
    spider("concert_singer")  # skips without the benchmark data
    model = _refusing_provider(monkeypatch, "AuthenticationError", 401)
    out = CliRunner().invoke(cli, ["eval", "--dataset", "spider-dev", "--limit", "4", "--model", "openai:x",
                                   "--out", str(tmp_path / "run"), "--no-trace"])
    assert out.exit_code == 2 and "refused the credentials" in out.output and "Traceback" not in out.output
    assert model.calls == 1


def test_a_question_with_invalid_utf8_keeps_its_trace(tmp_path, demo_db):
    """Bytes that are not UTF-8 reach Python as lone surrogates; the run and its root span keep them
    as U+FFFD."""
    import json as _json

    gold = dict(GOLD)
    question = "How many customers do we have?\udcff"
    gold[question.replace("\udcff", "\ufffd")] = GOLD["How many customers do we have?"]
    result = sqlchorus.ask(question, db=demo_db, model=oracle_model(gold.get),
                           settings=sqlchorus.Settings(trace_dir=str(tmp_path)))
    assert result.ok and result.rows == [[62]]
    spans = [_json.loads(line) for line in open(result.trace_path, encoding="utf-8")]
    run = next(s for s in spans if s["name"] == "ask")
    assert run["attributes"]["sqlchorus.question"] == "How many customers do we have?\ufffd"


# -- the command line in a process of its own, with a scripted model ----------------------------

_LAUNCHER = '''
"""The sqlchorus command with an oracle model in place of whatever --model names.

HOLD (a JSON list of questions): their generation call never returns. ASKED (a file): each
generation call appends its question there.
"""
import json, os, sys, threading
import sqlchorus.core.models as models
from sqlchorus.interfaces.cli import cli
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import ScriptedChatModel, oracle_model, prompt_text, question_of, role_of_call

gold = {q["question"]: q["sql"] for q in load_demo_questions()}
oracle = oracle_model(gold.get).responses
hold = set(json.loads(os.environ.get("HOLD", "[]")))
asked = os.environ.get("ASKED")

def respond(messages):
    if role_of_call() == "generation":
        question = question_of(prompt_text(messages))
        if asked:
            with open(asked, "a", encoding="utf-8") as f:
                f.write(question + "\\n")
        if question in hold:
            threading.Event().wait()
    return oracle(messages)

models.resolve_model = lambda spec, **kw: ScriptedChatModel(respond)
cli(sys.argv[1:], prog_name="sqlchorus")
'''


def _command(tmp_path, *args):
    launcher = tmp_path / "launch_sqlchorus.py"
    launcher.write_text(_LAUNCHER, encoding="utf-8")
    return [sys.executable, str(launcher), *map(str, args)]


def _closed_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


RAW_EXPORTER_TEXT = ("Traceback", "WARNING", "Transient error", "Failed to export", "retrying in")


@pytest.mark.slow
def test_an_unreachable_otlp_endpoint_costs_one_line_not_the_answer(tmp_path):
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    endpoint = f"http://127.0.0.1:{_closed_port()}/v1/traces"
    out = subprocess.run(_command(tmp_path, "ask", "How many customers do we have?", "--model", "openai:x", "--no-cache",
                                  "--trace-dir", tmp_path / "traces", "--otlp-endpoint", endpoint),
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "SELECT COUNT(*) FROM customers" in out.stdout and "62" in out.stdout
    said = [line for line in (out.stdout + out.stderr).splitlines() if endpoint in line]
    assert len(said) == 1 and said[0] in out.stderr and "spans could not be sent" in said[0], out.stderr
    assert not [raw for raw in RAW_EXPORTER_TEXT if raw in out.stdout + out.stderr], out.stderr
    assert len(list((tmp_path / "traces").glob("*.jsonl"))) == 1  # the trace file is kept


def test_an_unreachable_otlp_endpoint_logs_nothing_even_where_logging_is_on(caplog, demo_db, tmp_path):
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    endpoint = f"http://127.0.0.1:{_closed_port()}/v1/traces"
    with caplog.at_level(logging.DEBUG):
        result = sqlchorus.ask("How many customers do we have?", db=demo_db, model=oracle_model(GOLD.get),
                               settings=sqlchorus.Settings(trace_dir=str(tmp_path), otlp_endpoint=endpoint))
    assert result.ok and result.rows == [[62]]
    assert result.trace_path and Path(result.trace_path).exists()  # the file still holds the run
    notes = [e["message"] for e in result.errors if e["kind"] == "trace"]
    assert len(notes) == 1 and endpoint in notes[0] and "could not be sent" in notes[0]
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]


def _demo_dataset(tmp_path, demo_db, n):
    questions = load_demo_questions()[:n]
    path = tmp_path / "demo-questions.json"
    path.write_text(json.dumps({"examples": [
        {"question": q["question"], "db_id": "demo", "gold_sql": q["sql"], "db_path": str(demo_db)}
        for q in questions]}), encoding="utf-8")
    return path, [q["question"] for q in questions]


def _lines(path):
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@pytest.mark.slow
def test_ctrl_c_in_a_parallel_eval_keeps_every_finished_answer_and_does_not_wait(tmp_path, demo_db):
    dataset, questions = _demo_dataset(tmp_path, demo_db, 12)
    run, asked = tmp_path / "run", tmp_path / "asked.txt"
    held = questions[6:]  # never answered: four of them are in flight when Ctrl-C comes
    command = _command(tmp_path, "eval", "--dataset", dataset, "--workers", 4, "--model", "openai:x", "--no-cache",
                       "--no-trace", "--out", run)
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HOLD": json.dumps(held), "ASKED": str(asked)},
                            preexec_fn=interruptible)
    try:
        deadline = time.monotonic() + 120
        while len(_lines(run / "records.jsonl")) < 6 or len(_lines(asked)) < 10:
            assert proc.poll() is None and time.monotonic() < deadline, "the run did not get going"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        # The held questions never finish: a command that waited for them would never end.
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    kept = read_records(run / "records.jsonl")
    assert sorted(kept) == list(range(6)) and all(r["status"] == "answered" for r in kept.values())
    said = [line for line in stderr.splitlines() if line.strip()]
    assert len(said) == 1 and "6 of 12 question(s) are kept" in said[0] and f"--out {run}" in said[0], stderr
    assert "Traceback" not in stderr

    again = subprocess.run([*command, "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "ASKED": str(tmp_path / "asked-again.txt")})
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert (summary["run"]["n_resumed"], summary["run"]["n_run"]) == (6, 6)
    assert sorted(_lines(tmp_path / "asked-again.txt")) == sorted(questions[6:])
    assert summary["ex"] == 100.0


# -- value indexes ------------------------------------------------------------------------------


def _spans(trace_path):
    return [json.loads(line) for line in open(trace_path, encoding="utf-8")]


def _indexing_statements(spans):
    return [s for s in spans if s["name"] == "sql" and "DISTINCT" in s["attributes"].get("db.query.text", "")]


def test_an_index_built_with_other_max_values_is_used_by_ask(tmp_path, demo_db):
    db, values = tmp_path / "shop.sqlite", tmp_path / "values"
    shutil.copy(demo_db, db)
    index = ["index", "--db", str(db), "--values-dir", str(values), "--json"]
    built = json.loads(CliRunner().invoke(cli, [*index, "--max-values", "5"]).output)
    assert built["from_cache"] is False and built["max_values_per_column"] == 5 and built["truncated"] > 0
    stamp = Path(built["path"]).stat().st_mtime_ns

    result = sqlchorus.ask("How many customers do we have?", db=db, model=oracle_model(GOLD.get),
                           settings=sqlchorus.Settings(trace_dir=str(tmp_path / "traces"), value_cache_dir=str(values)))
    assert result.ok and result.rows == [[62]]
    spans = _spans(result.trace_path)
    assert not [s for s in spans if s["name"] == "value_index.build"] and not _indexing_statements(spans)
    assert [p.name for p in values.iterdir()] == [Path(built["path"]).name]  # no second index
    assert Path(built["path"]).stat().st_mtime_ns == stamp

    # Another --max-values replaces it, explicitly; none reuses what is there.
    other = json.loads(CliRunner().invoke(cli, [*index, "--max-values", "7"]).output)
    assert (other["from_cache"], other["max_values_per_column"], other["path"]) == (False, 7, built["path"])
    same = json.loads(CliRunner().invoke(cli, index).output)
    assert (same["from_cache"], same["max_values_per_column"]) == (True, 7)


def test_the_first_index_build_in_a_run_is_one_span_with_counts(tmp_path, demo_db):
    db = tmp_path / "shop.sqlite"
    shutil.copy(demo_db, db)
    settings = sqlchorus.Settings(trace_dir=str(tmp_path / "traces"), value_cache_dir=str(tmp_path / "values"))
    with sqlchorus.Session(settings, model=oracle_model(GOLD.get)) as session:
        first = session.ask("How many customers do we have?", db=db)
        second = session.ask("How many customers do we have?", db=db)
    assert first.ok and second.ok
    spans = _spans(first.trace_path)
    builds = [s for s in spans if s["name"] == "value_index.build"]
    assert len(builds) == 1 and not _indexing_statements(spans)
    run = next(s for s in spans if s["name"] == "ask")
    assert builds[0]["parent_id"] == run["context"]["span_id"]
    counts = builds[0]["attributes"]
    assert counts["sqlchorus.value_index.columns"] > 0 and counts["sqlchorus.value_index.values"] > 0
    assert counts["sqlchorus.value_index.truncated_columns"] == 0
    assert {"sqlchorus.value_index.seconds", "sqlchorus.value_index.skipped_columns",
            "sqlchorus.value_index.max_values_per_column"} <= set(counts)
    assert not [s for s in _spans(second.trace_path) if s["name"] == "value_index.build"]
