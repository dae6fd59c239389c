"""A generator added from outside the package: one module with its description, named under the
``sqlchorus.generators`` entry point group, joins the registry, the graph, the cost explanation,
a preset and the scripted oracle without a change to sqlchorus."""

from __future__ import annotations

import sys
import textwrap

import pytest
from click.testing import CliRunner

import sqlchorus
from conftest import Recorder
from sqlchorus.config import catalog
from sqlchorus.config.errors import GeneratorPluginError
from sqlchorus.config.settings import Settings, SettingsError
from sqlchorus.graph.expected_calls import DIFFERS_FROM_PAPER, expected_calls, explain_preset
from sqlchorus.graph.generators import GENERATORS
from sqlchorus.interfaces.cli import cli
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.testing import ScriptedChatModel

ECHO_SQL = "SELECT 'echo' AS echo"

ECHO_MODULE = textwrap.dedent(f'''
    """generate_echo: asks the model for the query, and answers with its own fixed one."""

    from sqlchorus.core.candidates import new_candidate
    from sqlchorus.core.generator import Generator
    from sqlchorus.core.llm import try_call_model
    from sqlchorus.prompts import Prompt

    KEY = "echo"
    NODE = "generate_echo"
    SQL = {ECHO_SQL!r}


    def generate_echo(state, runtime):
        usage, errors = [], []
        prompt = Prompt(f"Write the query.\\nQuestion: {{state['question']}}\\n", NODE)
        answer = try_call_model(runtime.context, usage, errors, node=NODE, role="generation", prompt=prompt)
        candidate = new_candidate(KEY, state.get("sample", 0), SQL, reasoning=answer or "")
        return {{"candidates": [candidate], "usage": usage, "errors": errors}}


    GENERATOR = Generator(
        key=KEY,
        node=NODE,
        fn=generate_echo,
        differs="a fixed query, to show how a generator is added",
        oracle={{NODE: "generation:direct"}},
        presets={{"full": 1}},
    )
''')


@pytest.fixture
def echo(tmp_path, monkeypatch):
    """The echo generator installed as a plugin distribution would be, in a folder on sys.path."""
    (tmp_path / "generate_echo.py").write_text(ECHO_MODULE, encoding="utf-8")
    info = tmp_path / "sqlchorus_echo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sqlchorus-echo\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[sqlchorus.generators]\necho = generate_echo:GENERATOR\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    catalog.clear()
    yield
    monkeypatch.undo()
    sys.modules.pop("generate_echo", None)
    catalog.clear()


def test_the_plugin_joins_the_registry_after_the_shipped_generators(echo):
    names = list(GENERATORS)
    assert names[:7] == ["divide_conquer", "query_plan", "synthetic", "din", "nrep", "list", "direct"]
    assert "echo" in names[7:]  # after every shipped one (other installed plugins may sit beside it)
    assert GENERATORS["echo"].node == "generate_echo"
    assert DIFFERS_FROM_PAPER["generate_echo"] == "no paper: a fixed query, to show how a generator is added"


def test_the_plugin_runs_end_to_end_answered_by_the_scripted_oracle(echo, demo_db):
    ex = load_demo_questions()[0]
    recorder = Recorder({ex["question"]: ex["sql"]})
    settings = Settings(model=ScriptedChatModel(recorder), generators={"echo": 1}, trace_dir=None)
    graph = sqlchorus.build_graph(settings)
    assert "generate_echo" in graph.get_graph().nodes

    result = sqlchorus.ask(ex["question"], db=demo_db, settings=settings)
    assert result.ok, result.error
    assert (result.sql, result.rows) == (ECHO_SQL, [["echo"]])
    (candidate,) = result.candidates
    assert candidate["id"] == "echo-0"
    # The oracle knew the echo prompt's role from the description: the bare query, as reasoning.
    assert candidate["reasoning"] == ex["sql"]
    assert [p for p in recorder.of("generation:direct") if ex["question"] in p]
    by_node = expected_calls(settings)["by_node"]
    assert by_node["generate_echo"] == 1 == sum(1 for u in result.usage if u["node"] == "generate_echo")
    assert len(result.usage) == expected_calls(settings)["typical"]


def test_the_plugin_joins_the_presets_it_names(echo):
    full = Settings(preset="full")
    assert full.generators["echo"] == 1
    assert list(full.generators).index("echo") >= 6
    assert "generate_echo" in sqlchorus.build_graph(full).get_graph().nodes
    cost = expected_calls(full)
    assert cost["by_node"]["generate_echo"] == 1
    assert "  echo x1" in explain_preset("full")
    assert "echo" not in Settings(preset="fast").generators


def test_without_the_plugin_nothing_knows_echo():
    assert "echo" not in GENERATORS
    assert "echo" not in Settings(preset="full").generators
    with pytest.raises(SettingsError, match="Unknown generator"):
        sqlchorus.build_graph(Settings(generators={"echo": 1}))


@pytest.mark.parametrize("module, says", [
    ("import not_a_real_module\n", "cannot be loaded (ModuleNotFoundError: No module named 'not_a_real_module')"),
    ("GENERATOR = 42\n", "is not a generator description: 42"),
])
def test_a_broken_plugin_is_named_not_a_traceback(tmp_path, monkeypatch, module, says):
    (tmp_path / "generate_broken.py").write_text(module, encoding="utf-8")
    info = tmp_path / "sqlchorus_broken-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sqlchorus-broken\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[sqlchorus.generators]\nbroken = generate_broken:GENERATOR\n",
                                           encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    catalog.clear()
    try:
        with pytest.raises(GeneratorPluginError, match="broken = generate_broken:GENERATOR") as raised:
            Settings(preset="full")
        assert says in str(raised.value) and raised.value.exit_code == 2
        # The command line says it in one line.
        out = CliRunner().invoke(cli, ["ask", "--explain-preset", "full"])
        assert out.exit_code == 2 and says in out.output and "Traceback" not in out.output
    finally:
        monkeypatch.undo()
        sys.modules.pop("generate_broken", None)
        catalog.clear()


def test_a_plugin_whose_search_does_not_import_is_named(tmp_path, monkeypatch):
    (tmp_path / "generate_lost.py").write_text(textwrap.dedent('''
        from sqlchorus.core.generator import Generator

        def generate_lost(state, runtime):
            return {}

        GENERATOR = Generator(key="lost", node="generate_lost", fn=generate_lost, search="not_a_module:build")
    '''), encoding="utf-8")
    info = tmp_path / "sqlchorus_lost-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sqlchorus-lost\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[sqlchorus.generators]\nlost = generate_lost:GENERATOR\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    catalog.clear()
    try:
        with pytest.raises(GeneratorPluginError, match="names a search 'not_a_module:build' that cannot be imported"):
            sqlchorus.build_graph(Settings(generators={"lost": 1}))
        out = CliRunner().invoke(cli, ["ask", "--explain-preset", "fast"])
        assert out.exit_code == 2 and "not_a_module" in out.output and "Traceback" not in out.output
    finally:
        monkeypatch.undo()
        sys.modules.pop("generate_lost", None)
        catalog.clear()
