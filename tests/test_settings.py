"""Settings check a value the same way wherever it comes from: a Python argument, a command-line
option or a SQLCHORUS_<FIELD> environment variable; and a preset fills only what was not given."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest
from click.testing import CliRunner

from conftest import REPO
from sqlchorus.config.settings import (
    SETTINGS_FIELDS,
    Settings,
    SettingsError,
    default_of,
    env_name,
    option_of,
    range_of,
)
from sqlchorus.interfaces.cli import cli
from sqlchorus.tools.errors import EXIT_BAD_INPUT, SqlchorusError


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    """No variable of a field from the shell that runs the tests."""
    for name in SETTINGS_FIELDS:
        if env_name(name):
            monkeypatch.delenv(env_name(name), raising=False)


@pytest.fixture
def seen(monkeypatch):
    """Run ``ask`` up to the point where it has its settings, and keep them."""
    captured = {}

    def fake_ask(question, db=None, evidence="", settings=None, progress=None):
        captured["settings"] = settings
        raise ValueError("stop here")

    monkeypatch.setattr("sqlchorus.runs.session.ask", fake_ask)
    return captured


def ask(*args, env=None):
    return CliRunner().invoke(cli, ["ask", "q", "--model", "openai:x", *map(str, args)], env=env)


# field, its flag, the value as typed, what is wrong with it
BAD = [
    ("fix_rounds", "--fix-rounds", "11", "11 is not in the range 0<=x<=10."),
    ("fix_rounds", "--fix-rounds", "-1", "-1 is not in the range 0<=x<=10."),
    ("fix_rounds", "--fix-rounds", "many", "'many' is not a whole number."),
    ("retry_top_p", "--retry-top-p", "0", "0 is not in the range 0.0<x<=1.0."),
    ("max_prompt_tokens", "--max-prompt-tokens", "100", "100 is not in the range 512<=x<=10000000."),
    ("schema_format", "--schema-format", "yaml",
     "Unknown schema format: 'yaml' is not one of 'ddl', 'm-schema', 'mac-schema', 'json', 'markdown'."),
    ("din_correction", "--din-correction", "strict",
     "Unknown DIN-SQL correction: 'strict' is not one of 'gentle', 'generic', 'none'."),
    ("generators", "--generator", "din=0", "Generator 'din' needs at least one sample, got 0."),
    ("generators", "--generator", "din=100000", "Generator 'din' draws at most 64 samples, got 100000."),
    ("models", "--role-model", "sorting=a:b",
     "Unknown model role(s) ['sorting']; roles are keywords, linking, generation, fixing, selection."),
    ("models", "--role-model", "generation", "'generation' is not of the form NAME=VALUE."),
]


@pytest.mark.parametrize("field,flag,value,message", BAD, ids=[f"{b[0]}={b[2]}" for b in BAD])
def test_a_bad_value_gets_the_same_message_from_python_the_cli_and_the_environment(
        field, flag, value, message, monkeypatch, seen):
    # Python: a ValueError (and sqlchorus's own error, exit code 2) naming the field.
    typed = [value] if option_of(field).get("pairs") else value
    with pytest.raises(SettingsError) as python:
        Settings(**{field: typed})
    assert isinstance(python.value, ValueError) and isinstance(python.value, SqlchorusError)
    assert python.value.exit_code == EXIT_BAD_INPUT
    assert str(python.value) == f"{field}: {message}"

    # The command line: a clean line naming the option, exit code 2.
    out = ask(flag, value)
    assert out.exit_code == EXIT_BAD_INPUT, out.output
    assert f"Error: {flag}: {message}" in out.output
    assert "Traceback" not in out.output and "stop here" not in out.output

    # The environment, read by Settings itself: the message names the variable, in Python...
    variable = env_name(field)
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as environment:
        Settings()
    assert str(environment.value) == f"{variable}: {message}"
    # ... and on the command line.
    out = ask()
    assert out.exit_code == EXIT_BAD_INPUT and f"Error: {variable}: {message}" in out.output


def test_the_cli_range_is_the_fields_own(monkeypatch):
    """--fix-rounds used to take 0-10 while Python took any value from 0: one limit now."""
    assert range_of("fix_rounds").describe() == "0<=x<=10"
    with pytest.raises(ValueError, match="fix_rounds: 11 is not in the range 0<=x<=10"):
        Settings(fix_rounds=11)
    assert Settings(fix_rounds=10).fix_rounds == 10
    help_text = " ".join(CliRunner().invoke(cli, ["ask", "--help"], terminal_width=2000).output.split())
    assert "0<=x<=10" in help_text and "(env: SQLCHORUS_FIX_ROUNDS)" in help_text


def test_the_environment_reaches_the_settings(monkeypatch, seen):
    monkeypatch.setenv("SQLCHORUS_FIX_ROUNDS", "3")
    monkeypatch.setenv("SQLCHORUS_GENERATORS", "din=2, nrep")
    monkeypatch.setenv("SQLCHORUS_NREP_VIEWS", "ddl:full,m-schema:columns@ddl")
    monkeypatch.setenv("SQLCHORUS_ROLE_MODEL", "ignored: not a field's variable")
    monkeypatch.setenv("SQLCHORUS_MODELS", '{"generation": "openai:b"}')
    monkeypatch.setenv("SQLCHORUS_GRAMMAR", "false")
    monkeypatch.setenv("SQLCHORUS_PRICES", "prices.toml")
    monkeypatch.setenv("SQLCHORUS_MAX_TOKENS", "")  # empty: unset
    settings = Settings()
    assert (settings.fix_rounds, settings.generators, settings.models) == (3, {"din": 2, "nrep": 1}, {"generation": "openai:b"})
    assert (settings.nrep_views, settings.grammar, settings.prices_file) == (
        ("ddl:full", "m-schema:columns@ddl"), False, "prices.toml")
    assert settings.max_tokens == default_of("max_tokens")
    ask()
    assert seen["settings"].fix_rounds == 3 and seen["settings"].generators == {"din": 2, "nrep": 1}
    # an option typed wins over the environment
    ask("--fix-rounds", 1)
    assert seen["settings"].fix_rounds == 1


def test_unrelated_environment_is_ignored(monkeypatch):
    for name, value in [("SQLCHORUS_DATA", "/nowhere"), ("SQLCHORUS_TOKEN", "secret"),
                        ("SQLCHORUS_NOT_A_FIELD", "x"), ("SQLCHORUS_CACHE", "/a/cache/folder"),
                        ("SQLCHORUS_SELECTION_MODEL", "x:y")]:
        monkeypatch.setenv(name, value)
    assert Settings() == Settings.model_validate({})
    assert Settings().cache is True  # SQLCHORUS_CACHE names the cache folder, not this field
    assert Settings().model_fields_set == set()


def test_a_misspelt_argument_is_an_error():
    with pytest.raises(SettingsError, match="fix_round: there is no such setting"):
        Settings(fix_round=2)


def studio_settings(env: dict[str, str]) -> dict:
    """The settings LangGraph Studio's graph gets under ``env`` (in a process of its own: the
    module builds its graph once, when imported)."""
    code = ("import json; from sqlchorus.interfaces.studio import studio_settings; "
            "print(json.dumps(studio_settings().record()))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                         check=True, cwd=REPO)
    return json.loads(out.stdout.splitlines()[-1])


def test_explicit_values_beat_the_preset_on_every_path(monkeypatch, seen):
    # Python, even at the default value; a field not given takes the preset's
    python = Settings(preset="balanced", fix_rounds=3)
    assert (python.fix_rounds, python.generators, python.schema_level) == (3, {"nrep": 1}, "tables")
    assert python.model_fields_set == {"preset", "fix_rounds"}

    # the command line
    ask("--preset", "balanced", "--fix-rounds", 3)
    assert (seen["settings"].fix_rounds, seen["settings"].generators) == (3, {"nrep": 1})

    # the environment: its preset under an option typed, its value over a preset typed
    monkeypatch.setenv("SQLCHORUS_PRESET", "balanced")
    assert Settings().fix_rounds == 1
    assert Settings(fix_rounds=3).fix_rounds == 3
    ask("--fix-rounds", 3)
    assert (seen["settings"].preset, seen["settings"].fix_rounds) == ("balanced", 3)
    monkeypatch.setenv("SQLCHORUS_FIX_ROUNDS", "3")
    assert Settings().fix_rounds == 3
    monkeypatch.delenv("SQLCHORUS_PRESET")
    ask("--preset", "balanced")
    assert (seen["settings"].preset, seen["settings"].fix_rounds) == ("balanced", 3)

    # LangGraph Studio reads the same environment
    studio = studio_settings({"SQLCHORUS_PRESET": "balanced", "SQLCHORUS_MODEL": "x:y", "SQLCHORUS_FIX_ROUNDS": "3",
                              "SQLCHORUS_TRACE_DIR": "ignored: studio keeps no trace files"})
    assert (studio["model"], studio["preset"], studio["generators"], studio["fix_rounds"]) == (
        "x:y", "balanced", {"nrep": 1}, 3)
    assert (studio["trace_dir"], studio["checkpoints"]) == (None, None)


def test_replace_is_checked_and_keeps_what_was_given():
    settings = Settings(preset="balanced", generators={"din": 2})
    with pytest.raises(SettingsError, match="fix_rounds: 11 is not in the range"):
        settings.replace(fix_rounds=11)
    # another preset refills what the first one filled, never what was given
    fast = settings.replace(preset="fast")
    assert (fast.generators, fast.pairwise, fast.schema_level, fast.fix_rounds) == ({"din": 2}, "never", "full", 3)
    assert fast.model_fields_set == {"preset", "generators"}
    # no preset: back to the defaults
    assert settings.replace(preset=None).schema_level == default_of("schema_level")


def test_settings_are_values():
    a, b = Settings(preset="fast", trace_dir=None), Settings(preset="fast", trace_dir=None)
    assert a == b and a != Settings(preset="full")
    assert pickle.loads(pickle.dumps(a)) == a
    assert Settings(fix_rounds=3) == Settings()  # equal values, whichever were given
    with pytest.raises(Exception, match="frozen"):
        a.fix_rounds = 2  # type: ignore[misc]


def test_a_model_object_is_kept_as_it_is():
    from sqlchorus.testing import ScriptedChatModel

    model = ScriptedChatModel(["SELECT 1"])
    settings = Settings(model=model, models={"fixing": model})
    assert settings.model is model and settings.model_for("fixing") is model
    assert settings.replace(trace_dir=None).model is model
    assert settings.record()["model"].startswith("<")


def test_an_unknown_generator_is_a_settings_error_with_the_names_there_are(monkeypatch):
    from sqlchorus.graph.build import build_graph

    with pytest.raises(SettingsError, match=r"Unknown generator\(s\) \['nope'\]; available: din, direct") as raised:
        build_graph(Settings(generators={"nope": 1}))
    assert raised.value.exit_code == EXIT_BAD_INPUT


def test_explaining_a_preset_reports_bad_environment_in_one_line(monkeypatch):
    monkeypatch.setenv("SQLCHORUS_FIX_ROUNDS", "11")
    out = CliRunner().invoke(cli, ["ask", "--explain-preset", "fast"])
    assert out.exit_code == EXIT_BAD_INPUT
    assert "SQLCHORUS_FIX_ROUNDS: 11 is not in the range 0<=x<=10." in out.output and "Traceback" not in out.output
