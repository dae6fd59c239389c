"""Presets: what each runs, how it combines with explicit settings, its expected cost, the CLI."""

from __future__ import annotations

import json
import threading

import pytest
from click.testing import CliRunner

import sqlchorus
from conftest import FIXTURES, REPO, spider_examples
from sqlchorus.config.presets import PRESET_NAMES
from sqlchorus.config.settings import NREP_VIEWS, Settings
from sqlchorus.graph.expected_calls import DIFFERS_FROM_PAPER, expected_calls, explain_preset
from sqlchorus.graph.generators import GENERATORS
from sqlchorus.interfaces.cli import cli
from sqlchorus.testing import oracle_model

CASES = json.loads((FIXTURES / "presets" / "presets.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["preset"])
def test_preset_choices(case):
    for settings in (Settings().replace(preset=case["preset"]), Settings(preset=case["preset"])):
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
    # another preset keeps the values given and refills the rest from itself (or the defaults)
    other = settings.replace(preset="fast")
    assert (other.generators, other.fix_rounds, other.pairwise) == ({"din": 2}, 2, "never")
    assert other.nrep_views == NREP_VIEWS


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
            Settings().replace(preset=kwargs["preset"])


def test_presets_name_only_registered_generators():
    """A preset is data that names generators; the registry must have every one of them."""
    for name in PRESET_NAMES:
        assert set(Settings(preset=name).generators) <= set(GENERATORS)


def test_explicit_values_win_over_the_preset_even_at_their_default():
    settings = Settings(preset="balanced", fix_rounds=3, trace_dir=None)
    assert (settings.preset, settings.fix_rounds, settings.generators) == ("balanced", 3, {"nrep": 1})
    assert Settings(preset="balanced").fix_rounds == 1
    assert Settings(preset=None, fix_rounds=2).preset is None


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_explain_preset(name):
    text = explain_preset(name)
    cost = expected_calls(Settings(preset=name))
    assert text.startswith(f"preset {name}:")
    assert f"typical: {cost['typical']}" in text
    for generator in Settings(preset=name).generators:
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


@pytest.mark.parametrize("name,calls", [("fast", 3), ("balanced", 8), ("paper", 37)])
def test_preset_runs_match_their_expected_calls(spider, name, calls):
    examples = spider_examples("concert_singer")[:3]
    gold = {ex["question"]: ex["query"] for ex in examples}
    model = oracle_model(gold.get)
    for ex in examples:
        result = sqlchorus.ask(ex["question"], db=spider("concert_singer"),
                               settings=Settings(model=model, preset=name, trace_dir=None))
        assert result.ok, result.error
        assert len(result.usage) == calls == expected_calls(Settings(preset=name))["typical"]


def test_paper_preset_is_chase_sqls_pool_and_compares_every_cluster():
    settings = Settings(preset="paper")
    cost = expected_calls(settings)
    assert set(settings.generators) == {"divide_conquer", "query_plan", "synthetic"}
    assert cost["candidates"] == 21 == settings.pairwise_max_clusters
    assert settings.shuffle_schema and settings.sample_temperature > settings.temperature
    # every pair of up to 7 clusters fits the budget; 21 clusters still all meet, in a ladder
    assert cost["selection_max"] == settings.max_pairwise_calls
    assert f"at most: {cost['most']} (fixer {cost['fixer_max']}, pairwise selection {cost['selection_max']})" in explain_preset("paper")


def test_paper_run_with_21_different_results_matches_its_explained_calls(spider):
    """A run whose 21 candidates all disagree makes exactly the selection calls --explain-preset
    gives, compares every cluster, and finds the one right candidate among them."""
    ex = spider_examples("concert_singer")[0]
    lock, drawn = threading.Lock(), []

    def first(question):
        with lock:
            drawn.append(question)
            n = len(drawn)
        return ex["query"] if n == 17 else f"SELECT count(*) * 100 + {n} FROM singer"

    model = oracle_model(lambda q: ex["query"], first_answer=first)
    settings = Settings(model=model, preset="paper", trace_dir=None)
    cost = expected_calls(settings)
    result = sqlchorus.ask(ex["question"], db=spider("concert_singer"), settings=settings)
    assert result.ok, result.error
    selection = result.selection
    assert len(result.candidates) == cost["candidates"] == len(selection["votes"])  # 21 clusters of one
    assert selection["model_calls"] == cost["selection_max"] == result.cost["by_node"]["select_candidate"]["calls"]
    assert len(result.usage) == cost["typical"] + cost["selection_max"]
    compared = {v["a"] for v in selection["pairwise"]} | {v["b"] for v in selection["pairwise"]}
    assert compared == {c["members"][0] for c in selection["clusters"]}
    assert result.sql == ex["query"]


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_explain_preset_says_where_each_method_differs_from_its_paper(name):
    text = explain_preset(name)
    settings = Settings(preset=name)
    for generator in settings.generators:
        node = GENERATORS[generator].node
        assert f"  {node}: {DIFFERS_FROM_PAPER[node]}" in text
    if settings.pairwise == "never":
        assert "select_candidate:" not in text.split("where it differs")[-1]
    else:
        assert f"  select_candidate: {DIFFERS_FROM_PAPER['select_candidate']}" in text
        assert "not fine-tuned" in text and "--export-pairs" in text and "--role-model selection=" in text


DOCS_ROWS = {"generate_list": "list_plan"}  # LIST's note sits on its plan node's row


def test_docs_note_where_each_method_differs_from_its_paper():
    """The table of nodes (docs/how-it-answers.md) says where each node differs from its paper."""
    page = (REPO / "docs" / "how-it-answers.md").read_text()
    rows = {line.split("`")[1]: line for line in page.splitlines() if line.startswith("| `")}
    for node in DIFFERS_FROM_PAPER:
        if node == "generate_direct" or not (REPO / "nodes" / f"{node}.py").exists():
            continue  # the project's own prompt, or an installed plugin's node
        row = rows[DOCS_ROWS.get(node, node)]
        assert "Where it differs from the paper" in row, node
    assert "not fine-tuned" in rows["select_candidate"] and "--export-pairs" in rows["select_candidate"]
