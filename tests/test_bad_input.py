"""Bad input gives a clear message, no traceback, and a non-zero exit."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import sqlchorus
from sqlchorus.interfaces.cli import cli
from sqlchorus.testing import ScriptedChatModel, role_of_call


@pytest.fixture
def use_model(monkeypatch):
    """Make the CLI use a given scripted model whatever --model names."""

    def install(model):
        monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)

    return install


def run(*args):
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def test_missing_database(tmp_path, use_model):
    use_model(ScriptedChatModel(["x"]))
    out = run("ask", "How many?", "--db", str(tmp_path / "nope.sqlite"), "--model", "openai:x")
    assert out.exit_code == 2
    assert "does not exist" in out.output


def test_file_that_is_not_a_database(tmp_path, use_model):
    use_model(ScriptedChatModel(["x"]))
    path = tmp_path / "notes.sqlite"
    path.write_text("just some notes\n" * 20)
    out = run("ask", "How many?", "--db", str(path), "--model", "openai:x")
    assert out.exit_code == 2
    assert "not a SQLite database" in out.output


@pytest.mark.parametrize("question", ["", "   \n"])
def test_empty_question(question, use_model):
    use_model(ScriptedChatModel(["x"]))
    out = run("ask", question, "--model", "openai:x")
    assert out.exit_code == 2
    assert "The question is empty" in out.output


def test_no_model_configured(monkeypatch):
    monkeypatch.delenv("SQLCHORUS_MODEL", raising=False)
    out = run("ask", "How many customers do we have?")
    assert out.exit_code == 2
    assert "No model is configured" in out.output
    assert "--model openai:gpt-4o-mini" in out.output and "SQLCHORUS_MODEL" in out.output


def test_malformed_model_name():
    out = run("ask", "How many customers?", "--model", "gpt-4o")
    assert out.exit_code == 2
    assert "provider:model" in out.output


@pytest.mark.slow
def test_model_that_raises(use_model, tmp_path):
    def boom(messages):
        raise ConnectionError("connection refused by 127.0.0.1:9")

    use_model(ScriptedChatModel(boom))
    out = run("ask", "How many customers do we have?", "--model", "openai:x", "--trace-dir", str(tmp_path))
    assert out.exit_code == 1
    assert "No candidate query was produced" in out.output
    assert "connection refused" in out.output


def test_model_that_returns_no_sql(use_model, tmp_path):
    def chatter(messages):
        role = role_of_call()
        return "['customers']" if role == "keywords" else "I would rather talk about the weather."

    use_model(ScriptedChatModel(chatter))
    out = run("ask", "How many customers do we have?", "--model", "openai:x", "--json", "--trace-dir", str(tmp_path))
    assert out.exit_code == 1
    answer = json.loads(out.output)
    assert answer["ok"] is False
    assert "contained no SQL" in answer["error"]
    # The fixer tried its beta rounds and each answer had no SQL either: no round produced a
    # new query, so none counts as a fix.
    assert answer["candidates"][0]["fix_attempts"] == 0
    assert [e["node"] for e in answer["errors"] if "contained no SQL" in e["message"]].count("fix_candidates") == 3


def test_python_api_errors_are_typed(tmp_path):
    model = ScriptedChatModel(["x"])
    with pytest.raises(sqlchorus.EmptyQuestionError):
        sqlchorus.ask("  ", model=model)
    from sqlchorus.tools.engines.sqlite import DatabaseOpenError

    with pytest.raises(DatabaseOpenError):
        sqlchorus.ask("How many?", db=tmp_path / "missing.sqlite", model=model)
    with pytest.raises(DatabaseOpenError, match="must be a path, a URL or an open Database, not int"):
        sqlchorus.ask("How many?", db=5, model=model)
    with pytest.raises(sqlchorus.EmptyQuestionError, match="must be text, not int"):
        sqlchorus.ask(5, model=model)


@pytest.mark.slow
def test_enormous_schema(tmp_path, use_model):
    import sqlite3

    path = tmp_path / "wide.sqlite"
    conn = sqlite3.connect(path)
    for t in range(120):
        cols = ", ".join(f"c{c} TEXT" for c in range(40))
        conn.execute(f"CREATE TABLE t{t} (id INTEGER PRIMARY KEY, {cols})")
        conn.execute(f"INSERT INTO t{t} (id, c0) VALUES (1, 'value {t}')")
    conn.commit()
    conn.close()

    def respond(messages):
        role = role_of_call()
        return {"keywords": "['value 7']", "linking": "Schema_links: [t7.c0]"}.get(
            role, "**Final Optimized SQL Query:**\nSELECT c0 FROM t7")

    use_model(ScriptedChatModel(respond))
    out = run("ask", "What is c0 of t7?", "--db", str(path), "--model", "openai:x", "--json", "--trace-dir", str(tmp_path))
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["rows"] == [["value 7"]]


def test_an_unexpected_failure_inside_the_graph_is_reported(use_model, monkeypatch, tmp_path):
    """A node that raises where nothing expected it gives a clear error and a trace, not a traceback."""
    model = ScriptedChatModel(["['customers']", "Schema_links: [customers.*]",
                               "**Final Optimized SQL Query:**\nSELECT count(*) FROM customers"])
    use_model(model)

    def broken(*args, **kwargs):
        raise RuntimeError("fingerprint store unavailable")

    monkeypatch.setattr("sqlchorus.tools.candidates.results.fingerprint", broken)
    out = run("ask", "How many customers do we have?", "--model", "openai:x", "--trace-dir", str(tmp_path))
    assert out.exit_code == 1
    assert "The run failed: RuntimeError: fingerprint store unavailable" in out.output
    trace_file = next(tmp_path.glob("*.jsonl"))
    assert "fingerprint store unavailable" in trace_file.read_text()


def test_unusable_trace_folder_costs_the_trace_not_the_answer(use_model, tmp_path, demo_db):
    use_model(ScriptedChatModel(["['customers']", "Schema_links: [customers.*]",
                                 "**Final Optimized SQL Query:**\nSELECT count(*) FROM customers"]))
    blocker = tmp_path / "afile"
    blocker.write_text("not a folder")
    out = run("ask", "How many customers?", "--model", "openai:x", "--trace-dir", str(blocker / "sub"))
    assert out.exit_code == 0, out.output
    assert "62" in out.output and "Traceback" not in out.output
    assert out.output.count("no trace file") == 1


def test_index_with_unusable_cache_folder(tmp_path, demo_db):
    blocker = tmp_path / "afile"
    blocker.write_text("not a folder")
    out = run("index", "--db", str(demo_db), "--cache-dir", str(blocker / "sub"))
    assert out.exit_code == 2 and "Cannot build the value index" in out.output


def test_select_with_a_binary_candidates_file(tmp_path, demo_db):
    out = run("select", "--candidates", str(demo_db))
    assert out.exit_code == 2 and "Cannot read" in out.output


@pytest.mark.parametrize("dataset", [{"db_root": 5, "examples": []},
                                     [{"question": "q", "db_id": "d", "gold_sql": "SELECT 1", "db_path": 5}]])
def test_eval_dataset_with_non_string_paths(tmp_path, dataset):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(dataset))
    out = run("eval", "--dataset", str(path), "--predictions", str(tmp_path / "p.txt"))
    assert out.exit_code == 2 and "path string" in out.output


def test_bird_predictions_with_an_absurd_index(tmp_path):
    from sqlchorus.evaluation.scoring import read_bird_predictions

    path = tmp_path / "pred.json"
    path.write_text('{"99999999999999999999": "SELECT 1"}')
    with pytest.raises(ValueError, match="out of range"):
        read_bird_predictions(path)


EARLY = """
import sys
from click.testing import CliRunner
from sqlchorus.interfaces.cli import cli
result = CliRunner().invoke(cli, sys.argv[1:])
heavy = sorted(m for m in ("langgraph", "langchain_core", "sqlglot", "psycopg", "duckdb") if m in sys.modules)
print(result.exit_code, ",".join(heavy) or "-", result.output.strip().splitlines()[0])
"""


@pytest.mark.parametrize("args,said", [
    (["ask", "   ", "--model", "openai:gpt-4o-mini"], "The question is empty"),
    (["ask", "x" * 9000, "--model", "openai:gpt-4o-mini"], "the limit is 8,000"),
    (["ask", "How many?", "--evidence", "y" * 9000, "--model", "openai:gpt-4o-mini"], "The hint has 9,000"),
    (["ask", "How many?", "--db", "/no/such/shop.sqlite", "--model", "openai:gpt-4o-mini"],
     "No database at /no/such/shop.sqlite: the file does not exist."),
    (["ask", "How many?", "--db", "duckdb:///no/such/sales", "--model", "openai:gpt-4o-mini"],
     "No database at /no/such/sales"),
    (["ask", "How many?", "--model", "gpt4"], "is not of the form 'provider:model'"),
    (["ask", "How many?", "--model", "openai:"], "is not of the form 'provider:model'"),
    (["ask", "How many?", "--model", "nosuch:foo"], "Model 'nosuch:foo' names an unknown provider 'nosuch'."),
    (["ask", "How many?", "--model", "openai:gpt-4o-mini", "--role-model", "fixing=opnai:gpt-4o"],
     "Did you mean openai:gpt-4o?"),
    (["demo", "--model", "nosuch:foo"], "names an unknown provider 'nosuch'"),
    (["ask", "How many?", "--model", "openai-compatible:qwen"], "'openai-compatible:<model>@<base_url>'"),
    (["ask", "How many?", "--model", "python:factories"], "'python:package.module:factory', not 'python:factories'"),
    (["ask", "How many?", "--preset", "nosuch"], "Unknown preset"),
])
def test_bad_input_is_refused_before_anything_is_built(args, said, tmp_path):
    """The refusal comes before the graph, the models or a database engine is imported: what
    takes seconds on a small machine is never started for input that cannot run."""
    import subprocess
    import sys

    env = {k: v for k, v in __import__("os").environ.items() if k != "SQLCHORUS_MODEL"}
    out = subprocess.run([sys.executable, "-c", EARLY, *args], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=120)
    code, heavy, line = out.stdout.strip().split(" ", 2)
    assert code == "2" and said in line, out.stdout + out.stderr
    assert heavy == "-", f"imported before refusing: {heavy}"


def test_no_model_at_all_is_refused_before_anything_is_built(tmp_path):
    import subprocess
    import sys

    env = {k: v for k, v in __import__("os").environ.items() if k != "SQLCHORUS_MODEL"}
    out = subprocess.run([sys.executable, "-c", EARLY, "ask", "How many?"], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=120)
    code, heavy, line = out.stdout.strip().split(" ", 2)
    assert (code, heavy) == ("2", "-") and line.startswith("Error: No model is configured"), out.stdout


def test_an_unknown_provider_is_refused_with_the_closest_one_and_what_providers_there_are(monkeypatch):
    monkeypatch.delenv("SQLCHORUS_MODEL", raising=False)
    out = run("ask", "How many?", "--model", "anthropc:claude-sonnet-4-5")
    assert out.exit_code == 2
    line = out.output.strip()
    assert line.count("\n") == 0, line
    assert line.startswith("Error: Model 'anthropc:claude-sonnet-4-5' names an unknown provider 'anthropc'. "
                           "Did you mean anthropic:claude-sonnet-4-5?")
    assert "openai-compatible, local, python" in line and "ollama" in line
    # From the environment too, before anything is built.
    monkeypatch.setenv("SQLCHORUS_MODEL", "nosuch:foo")
    out = run("ask", "How many?")
    assert out.exit_code == 2 and "names an unknown provider 'nosuch'" in out.output


def test_every_provider_langchain_builds_is_known_in_any_spelling_it_takes():
    from langchain.chat_models.base import _BUILTIN_PROVIDERS

    from sqlchorus.config.model_names import LANGCHAIN_PROVIDERS, check_model_name

    assert sorted(LANGCHAIN_PROVIDERS) == sorted(_BUILTIN_PROVIDERS)
    for provider in (*LANGCHAIN_PROVIDERS, "local"):
        assert check_model_name(f"{provider}:some-model") == (provider, "some-model")
    # sqlchorus's own providers whose names have parts: the form is checked as well.
    assert check_model_name("openai-compatible:qwen@http://127.0.0.1:8000/v1") == (
        "openai-compatible", "qwen@http://127.0.0.1:8000/v1")
    assert check_model_name("python:pkg.mod:factory") == ("python", "pkg.mod:factory")
    assert check_model_name("Azure-OpenAI:gpt-4o") == ("Azure-OpenAI", "gpt-4o")  # as init_chat_model reads it


def test_a_provider_of_a_newer_langchain_passes_when_its_package_is_installed(tmp_path, monkeypatch):
    from sqlchorus.config.errors import ModelConfigError
    from sqlchorus.config.model_names import check_model_name

    with pytest.raises(ModelConfigError, match="unknown provider 'zzfuture'"):
        check_model_name("zzfuture:model-1")
    (tmp_path / "langchain_zzfuture").mkdir()
    (tmp_path / "langchain_zzfuture" / "__init__.py").write_text("", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert check_model_name("zzfuture:model-1") == ("zzfuture", "model-1")


@pytest.mark.parametrize("args", [
    ["eval", "--dataset", "spider-dev", "--limit", "1", "--model", "nosuch:foo"],
    ["serve", "--model", "nosuch:foo", "--port", "1"],
    ["mcp", "--model", "nosuch:foo"],
    ["ui", "--model", "nosuch:foo", "--port", "1"],
])
def test_commands_that_run_questions_refuse_an_unknown_provider_before_starting(args, tmp_path, monkeypatch):
    """An evaluation or a server with a mistyped provider stops at once with the same line as
    ``ask``, rather than after every question (or every request) has failed."""
    from click.testing import CliRunner

    from sqlchorus.interfaces.cli import cli

    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(cli, args, env={"SQLCHORUS_MODEL": None})
    assert out.exit_code == 2, out.output
    assert "Model 'nosuch:foo' names an unknown provider 'nosuch'." in out.output
    assert "Traceback" not in out.output
    assert not (tmp_path / "evals").exists()
