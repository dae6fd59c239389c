"""N-rep's generator: views, one linking call per representation, filtered examples."""

from __future__ import annotations

import json
import re

import pytest

import sqlchorus
from conftest import FIXTURES, Recorder, spider_examples
from sqlchorus.config.settings import NREP_VIEWS, Settings, linking_formats, parse_view
from sqlchorus.graph.generators import GENERATORS
from sqlchorus.testing import ScriptedChatModel, prompt_text, role_of_call
from sqlchorus.tools.models.parsing import parse_links

NREP = FIXTURES / "nrep"


def _cases(name):
    return json.loads((NREP / name).read_text())


@pytest.mark.parametrize("case", _cases("views.json"), ids=lambda c: c["spec"])
def test_parse_view(case):
    if "error" in case:
        with pytest.raises(ValueError, match=case["error"]):
            parse_view(case["spec"])
        with pytest.raises(ValueError):
            Settings(nrep_views=(case["spec"],))
    else:
        assert tuple(parse_view(case["spec"])) == tuple(case["expected"])


@pytest.mark.parametrize("case", _cases("link_answers.json"), ids=lambda c: c["answer"][:30])
def test_parse_links(case):
    assert parse_links(case["answer"]) == case["expected"]


@pytest.mark.parametrize("case", _cases("call_counts.json"), ids=lambda c: ",".join(c["views"])[:40])
def test_linking_calls(case):
    assert linking_formats(case["views"], case["schema_format"]) == case["linking"]
    settings = Settings(nrep_views=tuple(case["views"]), schema_format=case["schema_format"])
    assert GENERATORS["nrep"].calls(settings) == case["calls"]


def _question(db_id="concert_singer"):
    examples = spider_examples(db_id)
    gold = {ex["question"]: ex["query"].strip().rstrip(";").strip() for ex in examples}
    ex = next(e for e in examples if " JOIN " in e["query"].upper())
    return ex["question"], gold


def _run(path, question, recorder, **kw):
    settings = Settings(model=ScriptedChatModel(recorder), generators={"nrep": 1}, trace_dir=None, **kw)
    return sqlchorus.ask(question, db=path, settings=settings)


def test_one_candidate_per_view_and_one_linking_call_per_representation(spider):
    question, gold = _question()
    recorder = Recorder(gold)
    result = _run(spider("concert_singer"), question, recorder)
    cands = [c for c in result.candidates if c["generator"] == "nrep"]
    assert [c["id"] for c in cands] == [f"nrep-{i}" for i in range(5)]
    assert [c["meta"]["view"] for c in cands] == list(NREP_VIEWS)
    assert all(c["sql"] == gold[question] and c["status"] == "ok" for c in cands)
    # M-Schema links come from link_schema; MAC-Schema and DDL link once each.
    assert [c["meta"]["links_from"] for c in cands] == [None, "mac-schema linking", "link_schema", "link_schema", "ddl linking"]
    links = recorder.of("nrep:linking")
    assert len(links) == 2
    assert "CREATE TABLE" in links[1] and "CREATE TABLE" not in links[0]
    assert [u["node"] for u in result.usage].count("generate_nrep") == 7
    assert len(recorder.of("nrep:generation")) == 5


def _task(prompt):
    return prompt.split("======= Your task =======")[1]


def _examples_part(prompt):
    return prompt.split("======= Your task =======")[0].split("Examples from other databases:")[1]


def test_views_and_their_examples_are_filtered_the_same_way(spider):
    question, gold = _question()
    recorder = Recorder(gold)
    result = _run(spider("concert_singer"), question, recorder)
    generations = recorder.of("nrep:generation")
    ddl = next(p for p in generations if "CREATE TABLE" in _task(p))
    cand = next(c for c in result.candidates if c["meta"]["view"] == "ddl:columns")
    shown = set(re.findall(r"CREATE TABLE (\w+)", _task(ddl)))
    assert shown == set(cand["meta"]["links"]) and len(shown) < 4
    # each example's DDL shows only the tables its own SQL uses
    for block in _examples_part(ddl).strip().split("\n\nDatabase schema:\n"):
        tables = set(re.findall(r"CREATE TABLE (\w+)", block))
        sql = block.split("```sql\n", 1)[1].split("\n```", 1)[0]
        assert tables and all(re.search(rf"\b{t}\b", sql, re.I) for t in tables), (tables, sql)
    every_table = [
        p for p in generations
        if all(f"# Table: {t}\n" in _task(p) for t in ("stadium", "singer", "concert", "singer_in_concert"))
    ]
    assert len(every_table) == 1  # only mac-schema:full shows the whole schema


def test_a_failed_linking_call_leaves_its_views_unfiltered(spider):
    question, gold = _question()
    recorder = Recorder(gold, override={"nrep:linking": "no idea"})
    result = _run(spider("concert_singer"), question, recorder)
    by_view = {c["meta"]["view"]: c for c in result.candidates}
    assert by_view["mac-schema:columns"]["meta"]["level"] == "full"
    assert by_view["ddl:columns"]["meta"]["level"] == "full"
    assert by_view["m-schema:columns"]["meta"]["level"] == "columns"
    assert sum(1 for e in result.errors if e["node"] == "generate_nrep" and e["kind"] == "parse") == 2


def test_a_failed_generation_loses_only_its_view(spider):
    question, gold = _question()
    calls = {"n": 0}
    inner = Recorder(gold)

    def flaky(messages):
        if role_of_call() == "nrep:generation" and "CREATE TABLE" in _task(prompt_text(messages)):
            raise RuntimeError("provider down")
        calls["n"] += 1
        return inner(messages)

    result = sqlchorus.ask(question, db=spider("concert_singer"), settings=Settings(
        model=ScriptedChatModel(flaky), generators={"nrep": 1}, trace_dir=None))
    assert [c["meta"]["view"] for c in result.candidates] == list(NREP_VIEWS[:4])
    assert any("ddl:columns" in e["message"] for e in result.errors if e["node"] == "generate_nrep")
    assert result.ok


def test_balanced_views_borrow_links_and_stay_within_eight_calls(spider):
    question, gold = _question()
    recorder = Recorder(gold)
    result = sqlchorus.ask(question, db=spider("concert_singer"), settings=Settings(
        model=ScriptedChatModel(recorder), preset="balanced", trace_dir=None))
    assert len(result.usage) == 8
    ddl = next(c for c in result.candidates if c["meta"]["view"] == "ddl:columns@m-schema")
    assert ddl["meta"]["links_from"] == "link_schema" and ddl["meta"]["level"] == "columns"


PAPER_CONDITIONS = [
    "- Always include default conditions for filtering invalid data, e.g., deleted_at IS NULL and status != 'cancelled' if relevant.",
    "- Ensure these conditions match the query's intent unless explicitly omitted in the user request.",
]


def _system_prompts(spider, **settings):
    """The system message of every N-rep generation call of one run."""
    question, gold = _question()
    recorder = Recorder(gold)
    systems = []

    def respond(messages):
        if role_of_call() == "nrep:generation":
            systems.append("\n".join(str(m.content) for m in messages if m.type == "system"))
        return recorder(messages)

    _run(spider("concert_singer"), question, respond, **settings)
    assert len(systems) == len(NREP_VIEWS)
    return systems


def test_the_system_prompt_is_the_papers_by_default(spider):
    """The paper's Figure 6 (``paper_system_prompt.txt``), its conditions rule included."""
    paper = (NREP / "paper_system_prompt.txt").read_text(encoding="utf-8").strip()
    assert Settings().nrep_conditions == "paper"
    assert {s.strip() for s in _system_prompts(spider)} == {paper}
    assert all(rule in paper.splitlines() for rule in PAPER_CONDITIONS)


def test_the_question_conditions_variant_changes_only_that_rule(spider):
    paper = (NREP / "paper_system_prompt.txt").read_text(encoding="utf-8").strip().splitlines()
    (variant,) = {s.strip() for s in _system_prompts(spider, nrep_conditions="question")}
    removed = [line for line in paper if line not in variant.splitlines()]
    added = [line for line in variant.splitlines() if line not in paper]
    assert removed == PAPER_CONDITIONS
    assert len(added) == 1 and "only the conditions" in added[0] and "deleted_at IS NULL" in added[0]
    with pytest.raises(ValueError, match="Unknown N-rep conditions rule"):
        Settings(nrep_conditions="strict")
