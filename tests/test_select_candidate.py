"""Selection: clusters, confidence-aware voting, pairwise scores, and the standalone selector.

Cases are fixtures (``tests/fixtures/selection``): candidate lists over a Spider database with
the scripted judge to use and the expected choice, method, votes, scores and model calls.
"""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, load_pairs
from sqlchorus.config.settings import Settings
from sqlchorus.runs.standalone_selection import select
from sqlchorus.testing import ScriptedChatModel, oracle_model
from sqlchorus.tools.candidates import selection as sel
from sqlchorus.tools.models.parsing import parse_verdict

CASES = json.loads((FIXTURES / "selection" / "select_cases.json").read_text())
RULES = json.loads((FIXTURES / "selection" / "nrep_rules.json").read_text())["cases"]
VERDICTS = load_pairs(FIXTURES / "selection" / "verdicts.txt")  # no expected part: None


def judge(spec: str, gold: str):
    if spec == "none":
        return None
    if spec == "oracle":
        return oracle_model(lambda q: gold)
    assert spec.startswith("text:")
    return ScriptedChatModel([spec[len("text:"):]])


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_select_cases(spider, case):
    db = spider("concert_singer")
    model = judge(case["model"], case["gold"])
    settings = Settings(trace_dir=None, cache=False, **case.get("settings", {}))
    out = select(db, case["question"], case["candidates"], model=model, settings=settings)
    expect = case["expect"]
    assert out["chosen"] == expect["chosen"], out["reason"]
    assert out["method"] == expect["method"], out["reason"]
    assert out["model_calls"] == expect["model_calls"]
    assert out["votes"] == expect["votes"]
    assert out["cluster"] == expect["cluster"]
    if "confidence" in expect:
        assert out["confidence"] == expect["confidence"]
    if "scores" in expect:
        assert out["scores"] == expect["scores"]
    if "reason_contains" in expect:
        assert expect["reason_contains"] in out["reason"]
    if model is not None and hasattr(model, "calls"):
        assert model.calls == out["model_calls"]  # every call is accounted for
    if out["pairwise"]:
        # each pair of clusters is shown in both orders, next to each other
        firsts = [(v["a"], v["b"]) for v in out["pairwise"]]
        assert firsts[1::2] == [(b, a) for a, b in firsts[0::2]]
    if expect["chosen"] is not None:
        assert out["sql"] == case["candidates"][expect["chosen"]].strip()


@pytest.mark.parametrize("rule", RULES, ids=["-".join(map(str, r["votes"])) for r in RULES])
def test_default_thresholds_follow_nrep(rule):
    settings = Settings(trace_dir=None)
    clusters = [{"size": n} for n in rule["votes"]]
    outcome = sel.vote(
        clusters, sum(rule["votes"]),
        confident_share=settings.vote_confident_share, contender_share=settings.vote_contender_share,
    )
    assert outcome["confident"] is rule["confident"], outcome["reason"]


@pytest.mark.parametrize(
    "text,expected", [(v.input, v.expected) for v in VERDICTS], ids=[v.name for v in VERDICTS]
)
def test_parse_verdict(text, expected):
    assert parse_verdict(text) == expected


def test_pairwise_scores_follow_algorithm_3():
    # Candidate-level Algorithm 3 on sizes 3, 2, 1 equals the cluster-level sum: members of a
    # cluster score size-1 among themselves plus size(other) per win over another cluster.
    clusters = [{"size": 3}, {"size": 2}, {"size": 1}]
    verdicts = [
        {"first": 0, "second": 1, "winner": 1}, {"first": 1, "second": 0, "winner": 1},
        {"first": 0, "second": 2, "winner": 0}, {"first": 2, "second": 0, "winner": 2},
        {"first": 1, "second": 2, "winner": None}, {"first": 2, "second": 1, "winner": 1},
    ]
    members = [0, 0, 0, 1, 1, 2]
    won = {(0, 1): 0, (1, 0): 2, (0, 2): 1, (2, 0): 1, (1, 2): 1, (2, 1): 0}
    brute = [0] * len(members)
    for i, ci in enumerate(members):
        for j, cj in enumerate(members):
            if i != j:
                brute[i] += 1 if ci == cj else 0  # equal results: the first of the ordered pair wins
        for cj in range(3):
            if cj != ci:
                brute[i] += won[(ci, cj)] * clusters[cj]["size"]
    scores = sel.pairwise_scores(clusters, verdicts)
    assert [scores[c] for c in members] == brute


def test_schema_union(spider):
    from sqlchorus.tools.engines.sqlite import GuardedDatabase
    from sqlchorus.tools.schema.introspect import introspect

    with GuardedDatabase(spider("concert_singer")) as db:
        schema = introspect(db, sample_values=0)
    union = sel.schema_union(
        "SELECT T2.Name FROM singer_in_concert AS T1 JOIN singer AS T2 ON T1.Singer_ID = T2.Singer_ID",
        "SELECT Name FROM stadium WHERE Capacity > 10",
        schema,
    )
    assert union == {"singer": ["Name", "Singer_ID"], "singer_in_concert": ["Singer_ID"], "stadium": ["Capacity", "Name"]}


def test_graph_records_selection_in_state_and_trace(spider, spans):
    import sqlchorus
    from conftest import spider_examples

    ex = spider_examples("concert_singer")[0]
    wrong = "SELECT count(*) FROM stadium"
    calls = {"n": 0}

    def first(question):
        calls["n"] += 1
        return wrong if calls["n"] % 2 else ex["query"]

    model = oracle_model(lambda q: ex["query"], first_answer=first)
    settings = Settings(generators={"divide_conquer": 2, "query_plan": 2}, pairwise="always", trace_dir=None, cache=False)
    result = sqlchorus.ask(ex["question"], db=spider("concert_singer"), model=model, settings=settings, exporters=[spans])
    selection = result.selection
    assert selection["method"] == "pairwise"
    assert result.sql == ex["query"]
    assert selection["model_calls"] == 2 == result.cost["by_node"]["select_candidate"]["calls"]
    assert selection["votes"] == [2, 2]
    (node,) = [s for s in spans.get_finished_spans() if s.name == "node:select_candidate"]
    events = [e.name for e in node.events]
    assert events.count("pairwise") == 2 and "vote" in events
    assert node.attributes["sqlchorus.selection.method"] == "pairwise"


# -- the bounded tournament (max_pairwise_calls) ---------------------------------------------------


def _play(sizes, max_clusters, budget, judge):
    asked = []

    def compare(first, second):
        asked.append((first, second))
        return judge(first, second)

    return sel.play(sizes, max_clusters, budget, compare), asked


@pytest.mark.parametrize("budget", [0, 1, 2, 3, 6, 12, 13, 20, 42, 100])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 21, 25])
def test_tournament_compares_every_cluster_within_the_budget(n, budget):
    sizes = sorted(((i * 7) % 4 + 1 for i in range(n)), reverse=True)
    entrants = min(n, 21)
    if budget:
        entrants = min(entrants, budget // 2 + 1)
    for strongest in sorted({0, entrants // 2, max(entrants - 1, 0)}):
        # a judge with a hidden order of strength: the lower rank wins, whichever order it is shown
        strength = {i: (i - strongest) % n for i in range(n)}
        played, asked = _play(sizes, 21, budget, lambda a, b: a if strength[a] < strength[b] else b)
        if budget:
            assert len(asked) <= budget
        assert len(asked) == sel.tournament_calls(n, 21, budget)
        assert played["entrants"] == entrants
        if entrants >= 2:
            # every entrant is shown to the judge, each pair in both orders, one right after the other
            assert {i for pair in asked for i in pair} == set(range(entrants))
            assert asked[1::2] == [(b, a) for a, b in asked[0::2]]
            assert played["winner"] == strongest  # the strongest entrant wins, wherever it is seeded
        else:
            assert asked == [] and played["winner"] == 0
        if not budget or budget >= entrants * (entrants - 1):
            assert played["ladder"] == [] and played["finalists"] == list(range(entrants))


def test_tournament_with_a_position_biased_judge_keeps_the_largest_cluster():
    played, asked = _play([5, 3, 2, 1, 1, 1, 1, 1], 21, 12, lambda a, b: a)
    assert len(asked) == sel.tournament_calls(8, 21, 12) <= 12
    assert {i for pair in asked for i in pair} == set(range(7))  # 12 calls reach 7 clusters
    assert played["winner"] == 0 and 0 in played["tied"]


@pytest.mark.parametrize("verdict", ["first shown", "none"])
def test_a_tied_ladder_match_goes_to_the_challenger(verdict):
    # A judge that always picks the query shown first (or never gives a usable verdict) splits
    # every pair, so every ladder match is a tie; ties go to the challenger, the larger cluster,
    # as the final's do. Split verdicts tie sizes 2 and 1 as well (1 + 1 points against 0 + 2).
    judge = {"first shown": lambda a, b: a, "none": lambda a, b: None}[verdict]
    played, asked = _play([3, 2, 1, 1, 1], 21, 8, judge)
    assert played["ladder"] == [{"a": 3, "b": 4, "winner": 3}, {"a": 2, "b": 3, "winner": 2},
                                {"a": 1, "b": 2, "winner": 1}]
    assert (played["entrants"], played["finalists"]) == (5, [0, 1])
    assert asked == [(3, 4), (4, 3), (2, 3), (3, 2), (1, 2), (2, 1), (0, 1), (1, 0)]
    assert played["winner"] == 0


def test_expected_selection_calls_follow_the_budget():
    from sqlchorus.graph.expected_calls import expected_calls

    unbounded = Settings(generators={"divide_conquer": 9}, pairwise="always", pairwise_max_clusters=9)
    assert expected_calls(unbounded)["selection_max"] == 9 * 8
    bounded = unbounded.replace(max_pairwise_calls=20)
    assert expected_calls(bounded)["selection_max"] == 20
    assert max(sel.tournament_calls(n, 9, 20) for n in range(2, 10)) == 20


GOLD = "SELECT count(*) FROM singer"
WRONG = [f"SELECT count(*) + {k} FROM singer" for k in range(1, 12)]


@pytest.mark.parametrize("budget", [8, 14, 20, 30])
def test_select_tournament_reaches_a_lone_gold_in_the_smallest_cluster(spider, budget):
    # Eight clusters of sizes 3, 2, 2, 1, 1, 1, 1 and the gold alone, last: comparing only the four
    # largest clusters can never choose it; a tournament over all of them within the budget does.
    candidates = WRONG[:1] * 3 + WRONG[1:2] * 2 + WRONG[2:3] * 2 + WRONG[3:8] + [GOLD]
    model = oracle_model(lambda q: GOLD)
    settings = Settings(trace_dir=None, cache=False, pairwise="always", pairwise_max_clusters=21,
                        max_pairwise_calls=budget)
    out = select(spider("concert_singer"), "How many singers do we have?", candidates, model=model, settings=settings)
    assert out["votes"] == [3, 2, 2, 1, 1, 1, 1, 1, 1]
    clusters = len(out["votes"])
    assert model.calls == out["model_calls"] == sel.tournament_calls(clusters, 21, budget) <= budget
    compared = {v["a"] for v in out["pairwise"]} | {v["b"] for v in out["pairwise"]}
    reps = {c[0] for c in out["clusters"]}
    if budget >= 2 * (clusters - 1):
        assert compared == reps
        assert out["sql"] == GOLD and out["method"] == "pairwise", out["reason"]
    else:
        assert len(compared) == budget // 2 + 1 and "not compared" in out["reason"]
    if budget < clusters * (clusters - 1):
        assert "ladder" in out["reason"]
        assert {v["stage"] for v in out["pairwise"]} == {"ladder", "final"}


def test_select_without_a_budget_compares_only_the_largest_clusters(spider):
    candidates = WRONG[:1] * 3 + WRONG[1:2] * 2 + WRONG[2:3] * 2 + WRONG[3:8] + [GOLD]
    model = oracle_model(lambda q: GOLD)
    settings = Settings(trace_dir=None, cache=False, pairwise="always")  # 4 clusters, no call bound
    out = select(spider("concert_singer"), "How many singers do we have?", candidates, model=model, settings=settings)
    assert out["model_calls"] == 12 == 4 * 3
    assert out["sql"] != GOLD and "5 smaller cluster(s) not compared" in out["reason"]
