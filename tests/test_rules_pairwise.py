"""Pairwise selection, rule by rule: which clusters meet, in which order, how each match and the
final are scored and who wins (tests/fixtures/rules/pairwise.txt, the tournament without a
model), and how selection turns the selection model's verdicts, unusable ones included, into its
choice, its method, its reason and its record (through ``choose`` with a scripted judge)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from conftest import FIXTURES, load_pairs
from sqlchorus.config.settings import Settings
from sqlchorus.core.dependencies import DatabaseResources
from sqlchorus.core.selection import choose
from sqlchorus.runs.demo import demo_db_path
from sqlchorus.runs.standalone_selection import selector
from sqlchorus.testing import ScriptedChatModel, prompt_text
from sqlchorus.tools.candidates import selection as sel
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.schema.introspect import introspect

TOURNAMENTS = load_pairs(FIXTURES / "rules" / "pairwise.txt")


def judge_of(spec: str):
    kind, _, rest = spec.partition(" ")
    if kind == "strength":
        rank = [int(r) for r in rest.split()]
        return lambda a, b: a if rank[a] < rank[b] else b
    if kind == "pairs":
        table = {}
        for item in rest.split():
            pair, winner = item.split("=")
            table[tuple(int(i) for i in pair.split(","))] = int(winner)
        return lambda a, b: table.get((a, b))
    return {"first": lambda a, b: a, "second": lambda a, b: b, "none": lambda a, b: None}[kind]


def numbers(text: str) -> list[int]:
    return [int(n) for n in text.split()]


@pytest.mark.parametrize("case", TOURNAMENTS, ids=[c.name for c in TOURNAMENTS])
def test_the_tournament(case):
    judge = judge_of(case.input)
    asked: list[tuple[int, int]] = []

    def compare(first: int, second: int) -> int | None:
        asked.append((first, second))
        return judge(first, second)

    sizes = numbers(case.meta["sizes"])
    budget = int(case.meta["budget"])
    max_clusters = int(case.meta["max_clusters"])
    played = sel.play(sizes, max_clusters, budget, compare)
    expected = dict(line.split(":", 1) for line in case.expected.splitlines())
    got = {
        "asked": " ".join(f"{a},{b}" for a, b in asked),
        "ladder": " ".join(f"{m['a']},{m['b']}={m['winner']}" for m in played["ladder"]),
        "finalists": " ".join(map(str, played["finalists"])),
        "scores": " ".join(map(str, played["scores"])),
        "winner": str(played["winner"]),
        "tied": " ".join(map(str, played["tied"])),
    }
    assert {k: got[k] for k in expected} == {k: v.strip() for k, v in expected.items()}
    # What was asked is what the record says, and what the budget said it would cost.
    assert [(v["first"], v["second"]) for v in played["verdicts"]] == asked
    assert [v["winner"] for v in played["verdicts"]] == [judge(a, b) for a, b in asked]
    assert len(asked) == sel.tournament_calls(len(sizes), max_clusters, budget)
    if budget:
        assert len(asked) <= budget
    stages = [v["stage"] for v in played["verdicts"]]
    assert stages == ["ladder"] * (2 * len(played["ladder"])) + ["final"] * (len(stages) - 2 * len(played["ladder"]))
    assert played["entrants"] == sel.tournament(len(sizes), max_clusters, budget)[0]


@pytest.mark.parametrize("n, max_clusters, budget, expected", [
    (5, 4, 0, (4, 4)),
    (3, 4, 0, (3, 3)),
    (5, 5, 20, (5, 5)),      # every pair of five is 20 calls
    (5, 5, 19, (5, 4)),      # a call short: a ladder of two for the fourth place
    (5, 5, 14, (5, 4)),
    (5, 5, 13, (5, 3)),
    (5, 5, 9, (5, 2)),
    (5, 5, 8, (5, 2)),
    (5, 5, 7, (4, 2)),       # a ladder of e entrants costs 2 * (e - 1)
    (5, 5, 2, (2, 2)),
    (5, 5, 1, (1, 1)),
    (2, 0, 0, (0, 0)),
    (2, -1, 0, (0, 0)),
])
def test_the_budget_decides_entrants_and_finalists(n, max_clusters, budget, expected):
    assert sel.tournament(n, max_clusters, budget) == expected
    entrants, finalists = expected
    calls = sel.tournament_calls(n, max_clusters, budget)
    assert calls == 2 * (entrants - finalists) + finalists * (finalists - 1)
    if budget:
        assert calls <= budget


@pytest.mark.parametrize("text, letter", [
    ("Candidate A counts twice.\nAnswer: B", "B"),
    ("Answer: A\nOn second thought the join is wrong.\nAnswer: B", "B"),
    ("**Final answer:** `A`", "A"),
    ("Verdict = candidate B.", "B"),
    ("A looks right.\nB", "B"),
    ("Candidate A seems right", None),
    ("", None),
    (None, None),
    ("answer: a", "A"),
])
def test_a_reasoned_verdict_is_its_last_answer_line(text, letter):
    assert sel.reasoned_verdict(text) == letter


# -- choose with a scripted selection model ----------------------------------------------------


@pytest.fixture(scope="module")
def demo():
    with GuardedDatabase(demo_db_path()) as db:
        yield DatabaseResources(db=db, schema=introspect(db, sample_values=0))


def candidates(*fingerprints: str) -> list[dict[str, Any]]:
    """One candidate per fingerprint, ``c0``, ``c1``, ...; each query returns its fingerprint,
    so candidates of one fingerprint share their result."""
    return [{"id": f"c{i}", "sql": f"SELECT '{f}' AS answer", "status": "ok", "fingerprint": f}
            for i, f in enumerate(fingerprints)]


def prefers(best: str, reasoning: bool = True):
    """A judge that prefers the query returning ``best``, whichever place it is shown in."""

    def answer(messages: Any) -> str:
        task = prompt_text(messages)
        shown = re.findall(r"^SELECT '(\w+)' AS answer$", task, flags=re.MULTILINE)
        letter = "A" if shown[0] == best else "B" if shown[1] == best else "A"
        return f"The two differ.\nAnswer: {letter}" if reasoning else letter

    return answer


def fails(messages: Any) -> str:
    raise RuntimeError("the provider is down")


def run(demo, fingerprints, answers, *, made=None, evidence="", **settings) -> tuple[dict[str, Any], dict[str, Any]]:
    model = ScriptedChatModel(answers)
    context = selector(model, Settings(trace_dir=None, cache=False, model_retries=0, **settings)).context(demo)
    out = choose(context, question="Which answer?", evidence=evidence, candidates=made or candidates(*fingerprints))
    return out, out["selection"]


def verdicts(selection: dict[str, Any]) -> list[str]:
    return [f"{v['a']}-{v['b']}:{v['winner']}" for v in selection["pairwise"]]


def test_an_unconfident_vote_goes_to_the_judge_which_picks_the_smaller_cluster(demo):
    out, selection = run(demo, ["A", "A", "A", "B", "B"], prefers("B"))
    assert (selection["method"], selection["chosen"], selection["chosen_cluster"]) == ("pairwise", "c3", 1)
    assert verdicts(selection) == ["c0-c3:c3", "c3-c0:c3"]
    assert selection["scores"] == {"c0": 2, "c3": 7}  # 1 + 3 for each of two wins over three
    assert selection["model_calls"] == 2 == len(out["usage"]) and out["errors"] == []
    assert selection["confidence"] == 0.4
    assert selection["reason"] == ("vote not confident (the runner-up has 2 of 5 votes, at least the 40% of a strong "
                                   "contender); highest pairwise score 7 over 2 comparison(s)")
    assert [v["stage"] for v in selection["pairwise"]] == ["final", "final"]
    assert [v["answer"][-9:] for v in selection["pairwise"]] == ["Answer: B", "Answer: A"]


def test_a_confident_vote_asks_no_judge(demo):
    out, selection = run(demo, ["A", "A", "A", "B"], prefers("B"))
    assert (selection["method"], selection["chosen"], selection["model_calls"]) == ("vote", "c0", 0)
    assert selection["reason"].startswith("confident vote: ")
    assert selection["pairwise"] == [] and out["usage"] == []


def test_pairwise_always_asks_the_judge_even_of_a_confident_vote(demo):
    _, selection = run(demo, ["A", "A", "A", "B"], prefers("B"), pairwise="always")
    assert (selection["method"], selection["chosen"]) == ("pairwise", "c3")
    assert not selection["reason"].startswith("vote not confident")


def test_one_cluster_needs_no_judge_even_when_pairwise_is_always(demo):
    _, selection = run(demo, ["A", "A"], prefers("B"), pairwise="always")
    assert (selection["method"], selection["model_calls"], selection["chosen"]) == ("vote", 0, "c0")


def test_a_split_verdict_is_a_tie_broken_by_size_then_order(demo):
    _, selection = run(demo, ["B", "A", "A", "B"], ["Answer: A"])
    assert verdicts(selection) == ["c0-c1:c0", "c1-c0:c1"]
    assert selection["scores"] == {"c0": 3, "c1": 3}
    assert (selection["method"], selection["chosen"]) == ("pairwise", "c0")
    assert "; tie among c0, c1 broken by cluster size, then candidate order" in selection["reason"]


@pytest.mark.parametrize("answer, kind, note", [
    ("I cannot tell.", "parse", "ended with no 'Answer: A' or 'Answer: B' line"),
    (fails, "model", "the provider is down"),
])
def test_no_usable_verdict_falls_back_to_the_largest_cluster(demo, answer, kind, note):
    out, selection = run(demo, ["B", "A", "A"], answer, pairwise="always")
    assert (selection["method"], selection["chosen"]) == ("fallback", "c1")
    assert selection["reason"] == "no pairwise verdict could be used: took the largest cluster"
    assert selection["model_calls"] == 2 and [v["winner"] for v in selection["pairwise"]] == [None, None]
    assert all(note in v["error"] for v in selection["pairwise"])
    assert [e["kind"] for e in out["errors"]] == [kind, kind]
    assert out["errors"][0]["node"] == "select_candidate" and out["errors"][0]["message"].startswith("c1 vs c0: ")
    assert selection["scores"] == {"c1": 1, "c0": 0}


def test_one_usable_verdict_of_two_is_enough(demo):
    answers = iter(["Answer: B", "nonsense"])
    out, selection = run(demo, ["A", "A", "B"], lambda messages: next(answers), pairwise="always")
    assert (selection["method"], selection["chosen"]) == ("pairwise", "c2")
    assert verdicts(selection) == ["c0-c2:c2", "c2-c0:None"]
    assert [e["kind"] for e in out["errors"]] == ["parse"]


def test_the_terse_prompt_reads_the_letter_alone(demo):
    _, selection = run(demo, ["A", "A", "B"], prefers("B", reasoning=False), selection_reasoning=False,
                       pairwise="always")
    assert (selection["method"], selection["chosen"]) == ("pairwise", "c2")
    assert [v["answer"] for v in selection["pairwise"]] == ["B", "A"]
    _, terse = run(demo, ["A", "A", "B"], ["Answer: B"], selection_reasoning=False, pairwise="always")
    assert verdicts(terse) == ["c0-c2:c2", "c2-c0:c0"]


def test_the_reasoned_prompt_reads_only_the_last_answer_line(demo):
    out, selection = run(demo, ["A", "A", "B"], ["Candidate B is wrong.\nB is the one."], pairwise="always")
    assert selection["method"] == "fallback"
    assert [e["kind"] for e in out["errors"]] == ["parse", "parse"]
    assert all("ended with no 'Answer: A' or 'Answer: B' line" in e["message"] for e in out["errors"])


def test_clusters_beyond_the_bound_are_not_compared_and_the_reason_says_so(demo):
    _, selection = run(demo, ["A", "A", "B", "C"], prefers("C"), pairwise_max_clusters=2, pairwise="always")
    assert verdicts(selection) == ["c0-c2:c0", "c2-c0:c2"]  # the best, c3, is never shown
    assert selection["chosen"] == "c0"
    assert selection["reason"].endswith("; 1 smaller cluster(s) not compared (pairwise_max_clusters=2)")
    assert selection["tournament"] == {"budget": None, "entrants": 2, "finalists": ["c0", "c2"], "ladder": []}
    assert selection["scores"] == {"c0": 2, "c2": 2, "c3": 0}


def test_a_call_budget_plays_a_ladder_and_the_record_keeps_it(demo):
    _, selection = run(demo, ["A", "B", "C"], prefers("C"), pairwise="always", max_pairwise_calls=5)
    assert verdicts(selection) == ["c1-c2:c2", "c2-c1:c2", "c0-c2:c2", "c2-c0:c2"]
    assert [v["stage"] for v in selection["pairwise"]] == ["ladder", "ladder", "final", "final"]
    assert selection["chosen"] == "c2" and selection["method"] == "pairwise"
    assert selection["tournament"] == {"budget": 5, "entrants": 3, "finalists": ["c0", "c2"],
                                       "ladder": [{"a": "c1", "b": "c2", "winner": "c2"}]}
    assert selection["reason"] == ("highest pairwise score 2 over 2 comparison(s) of the final round (4 in all); "
                                   "within 5 calls, 2 cluster(s) played a ladder of 1 match(es) for the last of "
                                   "2 final place(s)")


def test_a_budget_that_leaves_clusters_out_names_it(demo):
    _, selection = run(demo, ["A", "B", "C", "D"], prefers("A"), pairwise="always", max_pairwise_calls=4,
                       pairwise_max_clusters=10)
    assert selection["model_calls"] == 4
    assert selection["reason"].endswith("; 1 smaller cluster(s) not compared (max_pairwise_calls=4, pairwise_max_clusters=10)")


def test_each_pair_is_judged_over_its_own_results(demo):
    seen: list[str] = []

    def judge(messages: Any) -> str:
        seen.append(prompt_text(messages))
        return "Answer: A"

    run(demo, ["A", "B"], judge, pairwise="always")
    first, second = seen
    assert first.index("SELECT 'A' AS answer") < first.index("SELECT 'B' AS answer")
    assert second.index("SELECT 'B' AS answer") < second.index("SELECT 'A' AS answer")
    assert "Question:\nWhich answer?" in first


def test_a_verdicts_record_keeps_the_end_of_a_reasoned_answer_and_the_start_of_a_terse_one(demo):
    reasoned = "The first query joins twice. " * 20 + "\nAnswer: B"
    _, selection = run(demo, ["A", "B"], [reasoned], pairwise="always")
    assert [v["answer"] for v in selection["pairwise"]] == [reasoned.strip()[-400:]] * 2
    terse = "Both look plausible; weighing the join. " * 8 + "\nB"
    _, selection = run(demo, ["A", "B"], [terse], pairwise="always", selection_reasoning=False)
    assert [v["answer"] for v in selection["pairwise"]] == [terse.strip()[:200]] * 2
    assert [v["winner"] for v in selection["pairwise"]] == ["c1", "c0"]


def test_each_call_is_in_the_usage_and_each_verdict_on_the_span(demo):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    answers = iter(["Answer: B", "nonsense"])
    with provider.get_tracer("test").start_as_current_span("node:select_candidate"):
        out, selection = run(demo, ["A", "A", "B"], lambda messages: next(answers), pairwise="always")
    assert [u["node"] for u in out["usage"]] == ["select_candidate", "select_candidate"]
    assert all(u["role"] == "selection" for u in out["usage"])
    (node,) = [s for s in spans.get_finished_spans() if s.name == "node:select_candidate"]
    events = [(e.name, dict(e.attributes)) for e in node.events]
    assert events[0] == ("vote", {"votes": "[2, 1]", "confident": True,
                                  "reason": "the largest cluster has 2 of 3 votes and no strong contender"})
    assert events[1:] == [("pairwise", {"a": "c0", "b": "c2", "winner": "c2"}),
                          ("pairwise", {"a": "c2", "b": "c0", "winner": "none"})]
    assert node.attributes["sqlchorus.selection.method"] == "pairwise"
    assert node.attributes["sqlchorus.selection.confidence"] == selection["confidence"] == 0.3333
    assert node.attributes["sqlchorus.selection.model_calls"] == 2


def test_the_judge_sees_each_querys_result_the_tables_both_use_and_the_hint(demo):
    seen: list[str] = []

    def judge(messages: Any) -> str:
        seen.append(prompt_text(messages))
        return "Answer: A"

    made = [{"id": "c0", "sql": "SELECT COUNT(*) AS n FROM customers", "status": "ok", "fingerprint": "X"},
            {"id": "c1", "sql": "SELECT COUNT(*) AS n FROM orders", "status": "ok", "fingerprint": "Y"}]
    run(demo, [], judge, made=made, evidence="a customer is a row of customers", pairwise="always")
    prompt = seen[0]
    schema = prompt.split("Database Schema", 1)[1].split("Question:", 1)[0]
    assert "customers" in schema and "orders" in schema and "products" not in schema
    assert "Evidence:\na customer is a row of customers" in prompt
    db = demo.db
    for sql in (made[0]["sql"], made[1]["sql"]):
        (count,), = db.execute(sql).rows
        shown = prompt.split(sql, 1)[1].split("**************************", 1)[0]
        assert "Execution result" in shown and str(count) in shown


def test_a_terse_verdict_may_be_a_sentence_and_an_unusable_one_says_so(demo):
    _, stated = run(demo, ["A", "B"], ["The correct answer is B."], pairwise="always", selection_reasoning=False)
    assert verdicts(stated) == ["c0-c1:c1", "c1-c0:c0"]
    out, unusable = run(demo, ["A", "B"], ["Both are fine."], pairwise="always", selection_reasoning=False)
    assert all(v["error"] == "the answer named neither A nor B" for v in unusable["pairwise"])
    assert out["errors"][0]["message"] == "c0 vs c1: the selection model's answer named neither A nor B."


def test_the_cost_of_a_tournament_without_a_budget_is_every_pair():
    assert sel.tournament_calls(5, 5) == 20 and sel.tournament_calls(5, 3) == 6


def test_a_selection_role_without_a_model_falls_back_to_the_largest_cluster(demo):
    context = selector(None, Settings(trace_dir=None, cache=False)).context(demo)
    context.models["selection"] = None
    out = choose(context, question="Which answer?", evidence="", candidates=candidates("A", "B", "B", "A"))
    selection = out["selection"]
    assert (selection["method"], selection["chosen"], selection["model_calls"]) == ("fallback", "c0", 0)
    assert selection["reason"] == ("vote not confident (the two largest clusters tie (2 votes each of 4)) and no "
                                   "selection model is configured: took the largest cluster (ties go to the "
                                   "earliest candidate)")


def test_a_lone_candidate_is_the_whole_vote(demo):
    context = selector(None, Settings(trace_dir=None, cache=False)).context(demo)
    selection = choose(context, question="q", evidence="", candidates=candidates("A"))["selection"]
    assert (selection["method"], selection["confidence"], selection["clusters"][0]["share"]) == ("vote", 1.0, 1.0)
    nothing = choose(context, question="q", evidence="", candidates=[])["selection"]
    assert (nothing["method"], nothing["reason"], nothing["chosen"]) == ("none", "no candidate query ran", None)


def test_the_tournament_without_a_budget_is_a_round_robin_of_the_largest():
    assert sel.tournament(5, 4) == (4, 4) and sel.tournament(3, 4) == (3, 3)


@pytest.mark.parametrize("question, evidence, detailed", [
    ("What is each supplier's email?", "", "suppliers"),
    ("Which one?", "a store's city is stores.city", "stores"),
])
def test_queries_that_name_no_table_show_the_schema_the_question_and_hint_need(demo, question, evidence, detailed):
    seen: list[str] = []

    def judge(messages: Any) -> str:
        seen.append(prompt_text(messages))
        return "Answer: A"

    context = selector(ScriptedChatModel(judge), Settings(trace_dir=None, cache=False, model_retries=0,
                                                          max_schema_tokens=256)).context(demo)
    choose(context, question=question, evidence=evidence, candidates=candidates("A", "B"))
    # Within a schema budget the view keeps the details of what the question or its hint names.
    schema = seen[0].split("Database Schema", 1)[1].split("Other columns", 1)[0]
    assert f"# Table: {detailed}" in schema


def test_a_failed_judges_call_is_in_the_usage(demo):
    out, selection = run(demo, ["B", "A", "A"], fails, pairwise="always")
    assert selection["model_calls"] == 2
    assert [(u["node"], u["role"]) for u in out["usage"]] == [("select_candidate", "selection")] * 2
