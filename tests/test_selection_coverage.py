"""balanced and full compare every result cluster, within their call budget, and their explained
cost says what a run makes."""

from __future__ import annotations

import threading

import pytest

import sqlchorus
from conftest import spider_examples
from sqlchorus.config.presets import FULL_CANDIDATES
from sqlchorus.config.settings import Settings
from sqlchorus.graph.expected_calls import expected_calls, explain_preset
from sqlchorus.runs.standalone_selection import select
from sqlchorus.testing import oracle_model
from sqlchorus.tools.candidates import selection as sel

GOLD = "SELECT count(*) FROM singer"
WRONG = [f"SELECT count(*) + {k} FROM singer" for k in range(1, 12)]
QUESTION = "How many singers do we have?"


def _select(spider, name, candidates):
    model = oracle_model(lambda q: GOLD)
    settings = Settings(preset=name, trace_dir=None, cache=False)
    return select(spider("concert_singer"), QUESTION, candidates, model=model, settings=settings), model


def _compared(out):
    return {v["a"] for v in out["pairwise"]} | {v["b"] for v in out["pairwise"]}


@pytest.mark.parametrize("name", ["balanced", "full"])
def test_five_singleton_clusters_meet_in_every_pair_both_orders(spider, name):
    # N-rep's 1-1-1-1-1 split, the gold last: the fifth cluster used to be left out.
    out, model = _select(spider, name, WRONG[:4] + [GOLD])
    assert out["votes"] == [1] * 5 and out["method"] == "pairwise"
    shown = [(v["a"], v["b"]) for v in out["pairwise"]]
    reps = [c[0] for c in out["clusters"]]
    assert sorted(shown) == sorted((a, b) for a in reps for b in reps if a != b)  # 2·C(5,2) = 20
    assert model.calls == out["model_calls"] == 20 == expected_calls(Settings(preset=name))["selection_max"]
    assert {v["stage"] for v in out["pairwise"]} == {"final"}  # a round robin, no ladder
    assert out["sql"] == GOLD and "not compared" not in out["reason"]


def test_full_compares_each_of_eleven_clusters_within_its_budget(spider):
    out, model = _select(spider, "full", WRONG[:10] + [GOLD])
    settings = Settings(preset="full")
    assert out["votes"] == [1] * 11
    assert _compared(out) == {c[0] for c in out["clusters"]}
    assert model.calls == out["model_calls"] == sel.tournament_calls(11, settings.pairwise_max_clusters,
                                                                     settings.max_pairwise_calls) <= settings.max_pairwise_calls
    assert out["sql"] == GOLD and "ladder" in out["reason"] and "not compared" not in out["reason"]


@pytest.mark.parametrize("name", ["balanced", "full", "paper"])
def test_the_budget_reaches_every_cluster_the_candidates_can_form(name):
    """A ladder over n clusters costs 2(n - 1) calls: within the budget for every split of the
    preset's candidates, so no cluster is ever left out."""
    settings = Settings(preset=name)
    cost = expected_calls(settings)
    assert settings.pairwise_max_clusters >= cost["candidates"]
    assert settings.max_pairwise_calls >= 2 * (cost["candidates"] - 1)
    for n in range(2, cost["candidates"] + 1):
        assert sel.tournament(n, settings.pairwise_max_clusters, settings.max_pairwise_calls)[0] == n
    assert cost["selection_max"] <= settings.max_pairwise_calls
    assert f"pairwise selection {cost['selection_max']})" in explain_preset(name)


def test_full_budget_is_two_calls_per_candidate():
    cost = expected_calls(Settings(preset="full"))
    assert cost["candidates"] == FULL_CANDIDATES
    assert Settings(preset="full").max_pairwise_calls == 2 * cost["candidates"] == cost["selection_max"]


def test_balanced_is_bounded_by_nreps_two_c_m_2():
    settings = Settings(preset="balanced")
    m = expected_calls(settings)["candidates"]
    assert settings.max_pairwise_calls == m * (m - 1) == expected_calls(settings)["selection_max"] == 20
    text = explain_preset("balanced")
    assert "every pair of the result clusters (up to 5, one per candidate), in both orders (20 calls at most" in text
    assert "at most: 33 (fixer 5, pairwise selection 20)" in text


def test_explicit_cluster_bound_still_wins_over_the_preset():
    settings = Settings(preset="full", pairwise_max_clusters=4, max_pairwise_calls=0)
    assert expected_calls(settings)["selection_max"] == 12


def test_balanced_run_with_five_different_results_compares_them_all(spider):
    """N-rep's five candidates all disagree: the vote is not confident, every pair of the five
    clusters meets in both orders, and the run makes the selection calls --explain-preset gives."""
    ex = spider_examples("concert_singer")[0]
    lock, drawn = threading.Lock(), []

    def first(question):
        with lock:
            drawn.append(question)
            n = len(drawn)
        return ex["query"] if n == 5 else f"SELECT count(*) * 100 + {n} FROM singer"

    model = oracle_model(lambda q: ex["query"], first_answer=first)
    settings = Settings(model=model, preset="balanced", trace_dir=None, cache=False)
    cost = expected_calls(settings)
    result = sqlchorus.ask(ex["question"], db=spider("concert_singer"), settings=settings)
    assert result.ok, result.error
    selection = result.selection
    assert selection["votes"] == [1] * 5 and not selection["vote"]["confident"]
    assert selection["model_calls"] == cost["selection_max"] == 20
    assert _compared(selection) == {c["members"][0] for c in selection["clusters"]}
    assert result.sql == ex["query"]
