"""Faults outside the model keep their meaning: an interrupted ask, a closed pipe, a damaged file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from click.testing import CliRunner

import sqlchorus
from sqlchorus.cli import cli
from sqlchorus.demo import load_demo_questions
from sqlchorus.testing import oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}


def test_ctrl_c_in_ask_exits_130(monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("sqlchorus.api.ask", interrupted)
    out = CliRunner().invoke(cli, ["ask", "How many customers do we have?", "--model", "x:y", "--no-trace"])
    assert out.exit_code == 130
    assert "Interrupted." in out.output and "Traceback" not in out.output


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
    return CliRunner().invoke(cli, ["ask", "How many customers do we have?", "--model", "x:y", *extra])


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


def test_a_refused_api_key_is_a_configuration_error_met_once(monkeypatch):
    from sqlchorus.testing import ScriptedChatModel

    class AuthenticationError(Exception):
        status_code = 401

    def refuse(messages):
        raise AuthenticationError("Error code: 401 - invalid api key")

    model = ScriptedChatModel(refuse)
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)
    out = CliRunner().invoke(cli, ["ask", "How many customers do we have?", "--model", "x:y", "--no-trace"])
    assert out.exit_code == 2, out.output
    assert "refused the credentials" in out.output and "Traceback" not in out.output
    assert model.calls == 1  # the run stops at the first refusal: no retry, no other node tries


def test_a_refused_api_key_stops_select_and_eval_once(monkeypatch, tmp_path, demo_db):
    from sqlchorus.testing import ScriptedChatModel

    class PermissionDeniedError(Exception):
        status_code = 403

    def refuse(messages):
        raise PermissionDeniedError("Error code: 403")

    model = ScriptedChatModel(refuse)
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)
    lines = [json.dumps({"db": str(demo_db), "question": f"q{i}", "candidates": ["SELECT 1", "SELECT 2", "SELECT 3"]})
             for i in range(5)]
    path = tmp_path / "candidates.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out = CliRunner().invoke(cli, ["select", "--candidates", str(path), "--model", "x:y", "--pairwise", "always"])
    assert out.exit_code == 2 and "refused the credentials" in out.output and "Traceback" not in out.output
    assert model.calls == 1


def test_a_refused_api_key_stops_an_evaluation_at_once(monkeypatch, tmp_path, spider):
    from sqlchorus.testing import ScriptedChatModel

    spider("concert_singer")  # skips without the benchmark data

    class AuthenticationError(Exception):
        status_code = 401

    def refuse(messages):
        raise AuthenticationError("Error code: 401")

    model = ScriptedChatModel(refuse)
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)
    out = CliRunner().invoke(cli, ["eval", "--dataset", "spider-dev", "--limit", "4", "--model", "x:y",
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
    run = next(s for s in spans if s["name"] == "run")
    assert run["attributes"]["sqlchorus.question"] == "How many customers do we have?\ufffd"
