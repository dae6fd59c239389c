"""The command line's options come from Settings: names, defaults and help written once."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from sqlchorus.config.settings import Settings, default_of, option_of
from sqlchorus.interfaces.cli import CLI_DEFAULTS, RUN_OPTIONS, cli
from sqlchorus.testing import ScriptedChatModel


@pytest.fixture
def seen(monkeypatch):
    """Run ``ask`` up to the point where it has its settings, and keep them."""
    captured = {}

    def fake_ask(question, db=None, evidence="", settings=None, progress=None):
        captured["settings"] = settings
        raise ValueError("stop here")

    monkeypatch.setattr("sqlchorus.runs.session.ask", fake_ask)
    return captured


def ask(*args):
    return CliRunner().invoke(cli, ["ask", "q", *map(str, args)])


def _squeeze(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("command", ["ask", "demo", "eval"])
def test_every_option_shows_the_fields_help_and_default(command):
    help_text = _squeeze(CliRunner().invoke(cli, [command, "--help"], terminal_width=2000).output)
    for name in RUN_OPTIONS:
        if command == "eval" and name == "trace_dir":
            continue  # eval writes its traces into its run folder
        spec = option_of(name)
        flag = spec.get("flag") or spec["negate"][0]
        assert flag in help_text, (command, flag)
        if spec.get("flag"):
            assert _squeeze(Settings.help(name))[:60] in help_text, (command, name)
            default = CLI_DEFAULTS.get(name, default_of(name))
            if default is not None and not spec.get("pairs"):
                assert f"{spec['flag']} " in help_text and f"default: {default}" in help_text, (command, name)


def test_untyped_options_leave_the_settings_defaults(seen):
    ask("--model", "openai:x")
    # The command line's traces go to ./traces; a program's, to the per-user data folder.
    assert seen["settings"] == Settings(model="openai:x", trace_dir="traces")
    assert Settings().trace_dir == "auto"


def test_typed_options_reach_the_settings(seen):
    ask("--model", "openai:x", "--role-model", "generation=openai:b", "--generator", "din=2", "--generator", "nrep",
        "--fix-rounds", 1, "--schema-level", "columns", "--timeout", 2.5, "--no-trace", "--no-cache",
        "--no-grammar", "--pairwise", "always", "--max-clusters", 3)
    s = seen["settings"]
    assert (s.models, s.generators, s.fix_rounds, s.schema_level, s.sql_timeout_s) == (
        {"generation": "openai:b"}, {"din": 2, "nrep": 1}, 1, "columns", 2.5)
    assert (s.trace_dir, s.cache, s.grammar, s.pairwise, s.pairwise_max_clusters) == (None, False, False, "always", 3)


def test_an_option_typed_at_its_default_wins_over_the_preset(seen):
    ask("--model", "openai:x", "--preset", "balanced", "--fix-rounds", 3, "--pairwise", "low-confidence")
    assert (seen["settings"].fix_rounds, seen["settings"].preset) == (3, "balanced")
    ask("--model", "openai:x", "--preset", "balanced")
    assert seen["settings"].fix_rounds == 1
    ask("--model", "openai:x", "--preset", "full", "--pairwise", "low-confidence")
    assert (seen["settings"].pairwise, seen["settings"].fix_rounds) == ("low-confidence", 3)
    ask("--model", "openai:x", "--preset", "full")
    assert seen["settings"].pairwise == "always"


def test_environment_counts_as_typed(seen, monkeypatch):
    monkeypatch.setenv("SQLCHORUS_MODEL", "openai:from-env")
    ask()
    assert seen["settings"].model == "openai:from-env"


@pytest.mark.parametrize("args,message", [
    (["--role-model", "generation"], "is not of the form NAME=VALUE"),
    (["--role-model", "sorting=a:b"], "Unknown model role(s) ['sorting']"),
    (["--generator", "din=x"], "'x' is not a whole number"),
    (["--generator", "din=0"], "needs at least one sample"),
    (["--fix-rounds", "11"], "0<=x<=10"),
    (["--schema-format", "yaml"], "'yaml' is not one of"),
])
def test_bad_values_are_clear_errors(args, message, monkeypatch):
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: ScriptedChatModel(["x"]))
    out = ask("--model", "openai:x", *args)
    assert out.exit_code == 2
    assert message in out.output
    assert "Traceback" not in out.output
