"""Presets: what each runs, how it combines with explicit settings, its expected cost, the CLI."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import sqlchorus
from conftest import FIXTURES, spider_examples
from sqlchorus.cli import cli
from sqlchorus.config.presets import PRESET_NAMES
from sqlchorus.config.settings import NREP_VIEWS, Settings
from sqlchorus.graph.expected_calls import expected_calls, explain_preset
from sqlchorus.graph.generators import GENERATORS
from sqlchorus.testing import oracle_model

CASES = json.loads((FIXTURES / "presets" / "presets.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["preset"])
def test_preset_choices(case):
    for settings in (Settings().with_preset(case["preset"]), Settings(preset=case["preset"])):
        if "generators" in case:
            assert settings.generators == case["generators"]
        for name in case.get("generators_include", []):
            assert name in settings.generators
        assert settings.pairwise == case["pairwise"]
        assert settings.fix_rounds == case["fix_rounds"]
        assert settings.preset == case["preset"]
        if "nrep_views" in case:
            assert list(settings.nrep_views) == case["nrep_views"]
        if "typical_calls" in case:
            assert expected_calls(settings)["typical"] == case["typical_calls"]


def test_full_runs_every_generator_of_the_four_methods():
    # "direct" is the small-model prompt of the tiny preset, not one of the papers' generators.
    assert set(Settings(preset="full").generators) == set(GENERATORS) - {"direct"}


def test_explicit_choices_win_over_the_preset():
    settings = Settings(preset="balanced", generators={"din": 2}, fix_rounds=2)
    assert settings.generators == {"din": 2}
    assert settings.fix_rounds == 2
    assert settings.nrep_views != NREP_VIEWS  # still filled: left at its default
    # with_preset overrides everything it covers
    assert settings.with_preset("fast").generators == {"divide_conquer": 1}


@pytest.mark.parametrize(
    "kwargs,message",
    [({"preset": "cheap"}, "Unknown preset"), ({"din_correction": "strict"}, "Unknown DIN-SQL correction"),
     ({"nrep_views": ("ddl:everything",)}, "Unknown level")],
)
def test_settings_validate(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Settings(**kwargs)
    if "preset" in kwargs:
        with pytest.raises(ValueError, match=message):
            Settings().with_preset(kwargs["preset"])


def test_presets_name_only_registered_generators():
    """A preset is data that names generators; the registry must have every one of them."""
    for name in PRESET_NAMES:
        assert set(Settings().with_preset(name).generators) <= set(GENERATORS)


def test_for_preset_lets_explicit_values_win_even_at_their_default():
    settings = Settings.for_preset("balanced", fix_rounds=3, trace_dir=None)
    assert (settings.preset, settings.fix_rounds, settings.generators) == ("balanced", 3, {"nrep": 1})
    assert Settings.for_preset("balanced").fix_rounds == 1
    assert Settings.for_preset(None, fix_rounds=2).preset is None


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_explain_preset(name):
    text = explain_preset(name)
    cost = expected_calls(Settings().with_preset(name))
    assert text.startswith(f"preset {name}:")
    assert f"typical: {cost['typical']}" in text
    for generator in Settings().with_preset(name).generators:
        assert f"  {generator} x" in text


def test_expected_calls_bound_fixer_and_selection():
    cost = expected_calls(Settings(preset="balanced", pairwise_max_clusters=3))
    assert cost["candidates"] == 5
    assert cost["fixer_max"] == 5
    assert cost["selection_max"] == 6
    assert cost["most"] == cost["typical"] + 11
    assert expected_calls(Settings(preset="fast"))["selection_max"] == 0


def test_cli_explain_preset_needs_no_question():
    result = CliRunner().invoke(cli, ["ask", "--explain-preset", "balanced"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == explain_preset("balanced")
    bad = CliRunner().invoke(cli, ["ask", "--explain-preset", "cheap"])
    assert bad.exit_code == 2


@pytest.mark.parametrize("name,calls", [("fast", 3), ("balanced", 8)])
def test_preset_runs_match_their_expected_calls(spider, name, calls):
    examples = spider_examples("concert_singer")[:3]
    gold = {ex["question"]: ex["query"] for ex in examples}
    model = oracle_model(gold.get)
    for ex in examples:
        result = sqlchorus.ask(ex["question"], db=spider("concert_singer"),
                               settings=Settings(model=model, preset=name, trace_dir=None))
        assert result.ok, result.error
        assert len(result.usage) == calls == expected_calls(Settings(preset=name))["typical"]
