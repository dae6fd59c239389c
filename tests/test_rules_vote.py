"""Selection's vote, rule by rule: how shares are counted when candidates failed or returned no
rows, when a vote is confident, how clusters are ordered and ties broken
(tests/fixtures/rules/vote_shares.txt), and each rule of the vote without a selection model
(tests/fixtures/rules/vote_rules.txt). Each case changes its outcome when its rule changes."""

from __future__ import annotations

import ast
from typing import Any

import pytest

from conftest import FIXTURES, Pair, load_pairs
from sqlchorus.config.settings import Settings
from sqlchorus.core.dependencies import DatabaseResources
from sqlchorus.core.selection import choose
from sqlchorus.core.vote_rules import NAMES, decide
from sqlchorus.core.vote_rules.weights import estimate
from sqlchorus.runs.demo import demo_db_path
from sqlchorus.runs.standalone_selection import selector
from sqlchorus.tools.candidates import selection as sel
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.schema.introspect import introspect

SHARES = load_pairs(FIXTURES / "rules" / "vote_shares.txt")
RULES = load_pairs(FIXTURES / "rules" / "vote_rules.txt")


def expected_lines(pair: Pair) -> list[tuple[str, str]]:
    """The expected part as ``(key, value)`` pairs, in order (a key may come more than once)."""
    return [(k.strip(), v.strip()) for k, v in (line.split(":", 1) for line in pair.expected.splitlines() if line)]


def value(text: str) -> Any:
    """A fixture value: a Python literal, or a word (a candidate's id) as it is; lists of ids too."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        if text.startswith("["):
            return ast.literal_eval(_quoted_words(text))
        return text


def _quoted_words(text: str) -> str:
    import re

    return re.sub(r"([A-Za-z_]\w*)", r"'\1'", text)


# -- the vote's shares, through choose ---------------------------------------------------------


@pytest.fixture(scope="module")
def demo():
    with GuardedDatabase(demo_db_path()) as db:
        yield DatabaseResources(db=db, schema=introspect(db, sample_values=0))


def candidates_of(text: str) -> list[dict[str, Any]]:
    found = []
    for line in text.splitlines():
        cid, status, *fingerprint = line.split()
        found.append({"id": cid, "sql": f"SELECT '{cid}'", "status": status,
                      "fingerprint": fingerprint[0] if fingerprint else None})
    return found


@pytest.mark.parametrize("case", SHARES, ids=[c.name for c in SHARES])
def test_how_the_vote_counts(case, demo):
    settings = Settings(trace_dir=None, cache=False, **{k: value(v) for k, v in case.meta.items()})
    context = selector(None, settings).context(demo)
    out = choose(context, question="How many?", evidence="", candidates=candidates_of(case.input))
    selection = out["selection"]
    assert out["usage"] == [] and selection["model_calls"] == 0
    for key, expected in expected_lines(case):
        if key == "reason":
            assert expected in selection["reason"], selection["reason"]
        elif key in ("confident", "share", "runner_up_share"):
            assert selection["vote"][key] == value(expected.title() if expected in ("true", "false") else expected), key
        elif key == "clusters":
            assert [c["members"] for c in selection["clusters"]] == value(expected)
        else:
            assert selection[key] == value(expected), (key, selection["reason"])
    # A cluster's share is its size over every candidate given, failed ones included.
    total = len(case.input.splitlines())
    assert [c["share"] for c in selection["clusters"]] == [round(c["size"] / total, 4) for c in selection["clusters"]]
    if selection["chosen"] is not None:
        chosen = next(c for c in selection["clusters"] if selection["chosen"] in c["members"])
        assert selection["chosen"] == chosen["members"][0] and selection["confidence"] == chosen["share"]
        assert selection["clusters"][selection["chosen_cluster"]] is chosen


@pytest.mark.parametrize("sizes, total, confident, share, runner_up", [
    ([2, 1], 6, False, 0.3333, 0.1667),   # failures count as votes
    ([2, 1], 3, True, 0.6667, 0.3333),
    ([2, 1], 2, True, 0.6667, 0.3333),    # a total below the clusters' sum is their sum
    ([2, 1], 0, True, 0.6667, 0.3333),
    ([1], 0, True, 1.0, 0.0),
    ([4], 10, True, 0.4, 0.0),            # one cluster is confident at any share
    ([4, 3, 3], 10, True, 0.4, 0.3),      # the top at the confident share, the runner-up under the contender's
    ([5, 4], 10, False, 0.5, 0.4),        # the runner-up over the contender share
    ([7, 7], 20, False, 0.35, 0.35),      # a tie
])
def test_the_shares_are_of_every_vote_cast(sizes, total, confident, share, runner_up):
    outcome = sel.vote([{"size": s} for s in sizes], total, confident_share=0.4, contender_share=0.35)
    assert (outcome["confident"], outcome["share"], outcome["runner_up_share"]) == (confident, share, runner_up)
    assert outcome["votes"] == sizes


def test_a_vote_with_no_cluster_is_not_confident():
    assert sel.vote([], 3, confident_share=0.4, contender_share=0.4) == {
        "confident": False, "votes": [], "share": 0.0, "runner_up_share": 0.0, "reason": "no candidate ran"}


def test_the_voting_pool_is_the_results_with_rows_else_the_empty_ones():
    ok, empty, error = ({"id": s, "status": s} for s in ("ok", "empty", "error"))
    assert sel.voting_pool([error, empty, ok]) == [ok]
    assert sel.voting_pool([error, empty]) == [empty]
    assert sel.voting_pool([error]) == []
    assert sel.cluster([{"id": "a", "status": "error", "fingerprint": None}]) == []


def test_a_cluster_says_its_fingerprint_status_and_members():
    clustered = sel.cluster(candidates_of("c0 ok B\nc1 ok A\nc2 ok A"))
    assert clustered == [
        {"fingerprint": "A", "members": ["c1", "c2"], "size": 2, "status": "ok"},
        {"fingerprint": "B", "members": ["c0"], "size": 1, "status": "ok"},
    ]


# -- the vote's rules, through decide ----------------------------------------------------------


def checked_of(text: str) -> list[dict[str, Any]]:
    found = []
    for line in text.splitlines():
        words = line.split()
        status, rest = words[0], words[1:]
        item: dict[str, Any] = {"status": status, "fingerprint": None, "columns": None}
        plain = [w for w in rest if "=" not in w and w != "degenerate"]
        if plain:
            item["fingerprint"] = plain[0]
        if len(plain) > 1:
            item["columns"] = int(plain[1])
        item["degenerate"] = "degenerate" in rest
        for word in rest:
            key, _, given = word.partition("=")
            if key == "key":
                item["answer_key"] = given
            elif key == "names":
                item["column_names"] = given.split(",")
            elif key == "ints":
                item["integer_columns"] = [w == "1" for w in given.split(",")]
        found.append(item)
    return found


@pytest.mark.parametrize("case", RULES, ids=[c.name for c in RULES])
def test_each_rule_of_the_vote(case):
    meta = case.meta
    rules = [r.strip() for r in meta["rules"].split(",")] if "rules" in meta else list(NAMES)
    weights = [float(w) for w in meta["weights"].split(",")] if "weights" in meta else None
    keys = [k.strip() for k in meta.get("keys", "").split(",") if k.strip()]
    outcome = decide(checked_of(case.input), weights, rules, question=meta.get("question", ""), key_columns=keys)
    assert outcome is not None
    effects = {r["rule"]: r["effect"] for r in outcome["rules"]}
    assert list(effects) == [n for n in NAMES if n in rules]  # every rule in force, in the rules' order
    for key, expected in expected_lines(case):
        if key == "reason":
            assert expected in outcome["reason"], outcome["reason"]
        elif key.startswith("effect "):
            assert effects[key.split()[1]] == expected, effects
        else:
            assert outcome[key] == value(expected), (key, outcome["reason"])


def test_a_vote_with_no_candidate_chooses_nothing():
    assert decide([], None) is None


def test_one_weight_per_candidate():
    with pytest.raises(ValueError, match="^one weight per candidate$"):
        decide(checked_of("ok A 1\nok B 1"), [1.0])


def test_an_unknown_rule_is_named_with_the_known_ones():
    with pytest.raises(ValueError) as refused:
        decide(checked_of("ok A 1"), None, ["errors", "majority", "luck"])
    assert str(refused.value) == f"unknown vote rule(s) luck, majority; known: {', '.join(NAMES)}"


# -- the systems' weights ----------------------------------------------------------------------


def question(*fingerprints: str | None) -> list[dict[str, Any]]:
    """One question's candidates, one per system: a fingerprint, or None for a failed query."""
    return [{"status": "error" if f is None else "ok", "fingerprint": f} for f in fingerprints]


def test_a_systems_weight_is_its_smoothed_agreement_with_the_others():
    # Systems 0 and 1 agree on every question and system 2 with neither; on one question in
    # ten, system 1 fails and agrees with nothing.
    runs = [question("a", "a", "b")] * 9 + [question("a", None, "b")]
    weights = estimate(runs)
    assert weights == [round((9 * 0.5 + 1) / 12, 4), round((9 * 0.5 + 1) / 12, 4), round(1 / 12, 4)]
    # Four systems: a share of the three others.
    four = estimate([question("a", "a", "a", "b")] * 10)
    assert four == [round((10 * 2 / 3 + 1) / 12, 4)] * 3 + [round(1 / 12, 4)]


def test_two_failed_systems_do_not_agree():
    assert estimate([question(None, None, "a")] * 10) == [round(1 / 12, 4)] * 3


def test_a_failed_system_leaves_the_others_scores_as_they_are():
    assert estimate([question(None, "a", "a")] * 10) == [round(1 / 12, 4), round(6 / 12, 4), round(6 / 12, 4)]


@pytest.mark.parametrize("runs, least", [
    ([question("a", "b")] * 9, 10),      # too few questions
    ([question("a", "b")] * 3, 4),
    ([question("a")] * 10, 10),           # one system
    ([question("a", "b")] * 9 + [question("a", "b", "c")], 10),  # lists of different lengths
])
def test_without_enough_record_there_are_no_weights(runs, least):
    assert estimate(runs, min_questions=least) is None


def test_enough_questions_make_a_record():
    assert estimate([question("a", "a")] * 4, min_questions=4) == [round(5 / 6, 4)] * 2
    assert estimate([question("a", "a")] * 10) is not None
    assert estimate([question("a", "a")], min_questions=0) == [round(2 / 3, 4)] * 2


def test_empty_results_of_different_widths_are_different_answers():
    from sqlchorus.core.vote_rules.evidence import describe

    assert describe(["a"], [])["answer_key"] != describe(["a", "b"], [])["answer_key"]
    assert describe(["a"], [])["answer_key"] == describe(["b"], [])["answer_key"]
