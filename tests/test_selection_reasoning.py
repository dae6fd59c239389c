"""The selection model reasons before its verdict, which is read from its last line.

Answers to the reasoning prompt and the verdicts read from them are fixtures
(``tests/fixtures/selection/reasoned_verdicts.txt``); the selections run the standalone selector
over a Spider database with a scripted judge.
"""

from __future__ import annotations

import re

import pytest

from conftest import FIXTURES, Recorder, load_pairs
from sqlchorus.config.presets import PRESETS
from sqlchorus.config.settings import Settings
from sqlchorus.core.selection import REASONING_PROMPT, selection_prompt
from sqlchorus.runs.standalone_selection import select
from sqlchorus.testing import ScriptedChatModel, prompt_text
from sqlchorus.tools.candidates.selection import reasoned_verdict

REASONED = load_pairs(FIXTURES / "selection" / "reasoned_verdicts.txt")  # no expected part: None

QUESTION = "How many singers do we have?"
GOLD = "SELECT count(*) FROM singer"
WRONG = "SELECT count(*) + 1 FROM singer"
CANDIDATES = [WRONG, WRONG, GOLD]  # the gold is the smaller cluster: only a verdict can choose it
NO_VERDICT = "ended with no 'Answer: A' or 'Answer: B' line"


@pytest.mark.parametrize("case", REASONED, ids=[c.name for c in REASONED])
def test_reasoned_verdict_reads_the_final_answer_line(case):
    assert reasoned_verdict(case.input) == case.expected


def test_reasoning_is_the_default_and_tiny_keeps_the_terse_prompt():
    assert Settings(trace_dir=None).selection_reasoning is True
    for name in ("balanced", "full", "paper"):
        assert "selection_reasoning" not in PRESETS[name].settings, name
        assert Settings(preset=name, trace_dir=None).selection_reasoning is True, name
    assert PRESETS["tiny"].settings["selection_reasoning"] is False
    assert Settings(preset="tiny", trace_dir=None).selection_reasoning is False
    # A setting given beside the preset still wins over it.
    assert Settings(preset="tiny", selection_reasoning=True, trace_dir=None).selection_reasoning is True


def test_both_prompts_show_the_pair_and_only_one_asks_for_reasoning():
    a = ("SELECT name FROM singer", "name\nJoe Sharp")
    b = ("SELECT Song_Name FROM singer", "Song_Name\nYou")
    args = ("CREATE TABLE singer (name TEXT, Song_Name TEXT)", "Which singers are there?", "")
    terse = selection_prompt(*args, a, b, reasoning=False)
    reasoned = selection_prompt(*args, a, b, reasoning=True)
    assert REASONING_PROMPT == "select_candidate_reasoning"
    assert terse != reasoned
    for prompt in (terse, reasoned):
        for text in (*a, *b, *args[:2]):
            assert text in prompt
        assert "Evidence:\n(none)" in prompt
        # A before B, each query above its own result
        assert prompt.index("Candidate A\n" + a[0] + "\nExecution result\n" + a[1]) < prompt.index(
            "Candidate B\n" + b[0] + "\nExecution result\n" + b[1])
    assert '"Answer: A"' in reasoned and '"Answer: B"' in reasoned
    assert "First reason briefly" in reasoned and "reason briefly" not in terse
    assert "Answer: A" not in terse and "Answer: B" not in terse
    assert terse.rstrip().endswith('Just output the correct answer "A" or "B".')


def _first_letter(text: str) -> str:
    return re.search(r"\b([AB])\b", text).group(1)


@pytest.mark.parametrize("reasoning", [True, False], ids=["reasoning", "terse"])
def test_selection_with_either_prompt_finds_the_gold(spider, reasoning):
    recorder = Recorder({QUESTION: GOLD})
    answers: list[str] = []

    def judge(messages):
        answer = recorder(messages)
        answers.append(answer)
        return answer

    model = ScriptedChatModel(judge)
    settings = Settings(trace_dir=None, cache=False, pairwise="always", selection_reasoning=reasoning)
    out = select(spider("concert_singer"), QUESTION, CANDIDATES, model=model, settings=settings)
    assert out["votes"] == [2, 1]
    assert out["sql"] == GOLD and out["chosen"] == 2, out["reason"]
    assert out["method"] == "pairwise" and not out["errors"]
    assert out["model_calls"] == model.calls == 2
    # The gold won both orders of the pair, read from each answer.
    assert [(v["a"], v["b"], v["winner"]) for v in out["pairwise"]] == [(0, 2, 2), (2, 0, 2)]
    prompts = recorder.of("selection")
    assert len(prompts) == 2
    gold_letters = ["B", "A"]  # the gold is shown second, then first
    if reasoning:
        assert all('"Answer: A" or "Answer: B"' in p for p in prompts)
        for answer, letter in zip(answers, gold_letters):
            assert answer.splitlines()[-1] == f"Answer: {letter}"
            # The reasoning names the loser first, and even says "Answer: <loser>" mid-line: a
            # parser that did not read the last line would give the verdict to the wrong query.
            assert _first_letter(answer) != letter
            assert re.search(r"Answer: ([AB])", answer).group(1) != letter
        assert [v["answer"] for v in out["pairwise"]] == [a.strip() for a in answers]
    else:
        assert all("Answer: A" not in p and 'Just output the correct answer "A" or "B".' in p for p in prompts)
        assert answers == gold_letters
    # each prompt shows the very pair it is asked about
    assert all(GOLD in p and WRONG in p for p in prompts)


def test_a_reasoned_answer_without_a_verdict_scores_nothing(spider):
    # Reasoning that speaks well of the gold but never states a verdict: a lenient reader (the
    # terse prompt's, which takes a lone letter named anywhere) would crown the gold both times.
    def judge(messages):
        prompt = prompt_text(messages)
        shown = re.search(r"Candidate A\n(.*?)\nExecution result", prompt, re.DOTALL).group(1)
        letter = "A" if shown.strip() == GOLD else "B"
        return f"Candidate {letter} counts each singer once, as the question asks."

    model = ScriptedChatModel(judge)
    settings = Settings(trace_dir=None, cache=False, pairwise="always")  # reasoning by default
    out = select(spider("concert_singer"), QUESTION, CANDIDATES, model=model, settings=settings)
    assert out["model_calls"] == model.calls == 2
    assert [v["winner"] for v in out["pairwise"]] == [None, None]
    assert all(v["error"] == f"the answer {NO_VERDICT}" for v in out["pairwise"])
    assert [e["message"] for e in out["errors"]] == [
        f"c0 vs c2: the selection model's answer {NO_VERDICT}.",
        f"c2 vs c0: the selection model's answer {NO_VERDICT}.",
    ]
    assert {e["kind"] for e in out["errors"]} == {"parse"}
    # No verdict counted: the scores are the clusters' own sizes less one, the largest wins.
    assert out["scores"] == {"0": 1, "2": 0}
    assert out["method"] == "fallback"
    assert "no pairwise verdict could be used: took the largest cluster" in out["reason"]
    assert out["sql"] == WRONG and out["cluster"] == [0, 1]
