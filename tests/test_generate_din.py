"""DIN-SQL's generator: classification, the class's prompt, self-correction, and what it records."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sqlchorus
from conftest import FIXTURES, Recorder, run_generator, spider_examples
from sqlchorus.config.settings import Settings
from sqlchorus.nodes.generate_din import generate_din
from sqlchorus.testing import ScriptedChatModel
from sqlchorus.tools.sql.classify import classify_sql
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.models.parsing import parse_classification
from sqlchorus.tools.schema.introspect import introspect
from sqlchorus.tools.schema.links import schema_links_text

DIN = FIXTURES / "din"


def _cases(name):
    return json.loads((DIN / name).read_text())


@pytest.mark.parametrize("case", _cases("classification_answers.json"), ids=lambda c: c["answer"][:30])
def test_parse_classification(case):
    assert parse_classification(case["answer"]) == case["expected"]


@pytest.mark.parametrize("case", _cases("sql_classes.json"), ids=lambda c: c["sql"][:40])
def test_class_of_sql(case):
    assert classify_sql(case["sql"]) == case["class"]


@pytest.mark.parametrize("case", _cases("schema_links.json"), ids=lambda c: c["expected"][:40])
def test_schema_links_text(case, spider):
    with GuardedDatabase(spider("concert_singer")) as db:
        schema = introspect(db, sample_values=0)
    assert schema_links_text(schema, case["links"]) == case["expected"]


def _run(db, question, recorder, **settings):
    exporter = InMemorySpanExporter()
    model = ScriptedChatModel(recorder)
    result = sqlchorus.ask(
        question, db=db, exporters=[exporter],
        settings=Settings(model=model, generators={"din": 1}, trace_dir=None, **settings),
    )
    return result, exporter.get_finished_spans()


def _gold(examples):
    return {ex["question"]: ex["query"].strip().rstrip(";").strip() for ex in examples}


def test_each_class_takes_its_own_prompt(spider):
    path = spider("concert_singer")
    examples = spider_examples("concert_singer")
    gold = _gold(examples)
    wanted = {"EASY": "din_easy", "NON-NESTED": "Intermediate_representation", "NESTED": "sub-question"}
    seen = set()
    for ex in examples:
        label = classify_sql(ex["query"])
        if label in seen:
            continue
        seen.add(label)
        recorder = Recorder(gold)
        result, spans = _run(path, ex["question"], recorder)
        (cand,) = [c for c in result.candidates if c["generator"] == "din"]
        assert cand["sql"] == gold[ex["question"]]
        assert cand["meta"]["class"] == label
        assert cand["meta"]["corrected"] is False
        (generation,) = recorder.of("din:generation")
        if label == "EASY":
            assert "Intermediate_representation" not in generation
        else:
            assert wanted[label] in generation
        if label == "NESTED":
            assert cand["meta"]["sub_questions"] == ["the inner query"]
            assert '["the inner query"]' in generation
        node = next(s for s in spans if s.name == "node:generate_din")
        assert node.attributes["sqlchorus.din.class"] == label
        assert list(node.attributes["sqlchorus.din.sub_questions"]) == cand["meta"]["sub_questions"]
        assert [u["node"] for u in result.usage].count("generate_din") == 3
    assert seen == {"EASY", "NON-NESTED", "NESTED"}


@pytest.mark.parametrize("variant,phrase", [("gentle", "Use the following instructions"), ("generic", "BUGGY SQL")])
def test_self_correction_repairs_the_generated_query(spider, variant, phrase):
    examples = spider_examples("concert_singer")[:2]
    gold = _gold(examples)
    recorder = Recorder(gold, first_answer=lambda q: "SELECT nme FROM singer")
    result, _ = _run(spider("concert_singer"), examples[0]["question"], recorder, din_correction=variant)
    (cand,) = result.candidates
    assert cand["meta"]["generated_sql"] == "SELECT nme FROM singer"
    assert cand["sql"] == gold[examples[0]["question"]]
    assert cand["meta"]["corrected"] is True
    (correction,) = recorder.of("din:correction")
    assert phrase in correction and "SELECT nme FROM singer" in correction


def test_no_correction_makes_two_calls(spider):
    examples = spider_examples("concert_singer")[:2]
    recorder = Recorder(_gold(examples))
    result, _ = _run(spider("concert_singer"), examples[0]["question"], recorder, din_correction="none")
    assert [u["node"] for u in result.usage].count("generate_din") == 2
    assert recorder.of("din:correction") == []


def test_unreadable_class_falls_back_and_says_so(spider):
    examples = spider_examples("concert_singer")[:2]
    gold = _gold(examples)
    recorder = Recorder(gold, override={"din:classification": "I am not sure."})
    result, _ = _run(spider("concert_singer"), examples[0]["question"], recorder)
    (cand,) = result.candidates
    assert cand["meta"]["class"] == "NON-NESTED"
    assert cand["sql"] == gold[examples[0]["question"]]
    assert any(e["node"] == "generate_din" and e["kind"] == "parse" for e in result.errors)


def _links_line(prompt: str, label: str = "Schema_links: ") -> str:
    """The schema links of the prompt's own question (after every example)."""
    return prompt.rsplit(label, 1)[1].splitlines()[0]


def _values_block(prompt: str) -> str:
    return prompt.rsplit("not part of the schema links):\n", 1)[1].split("\n\n", 1)[0]


AGED = "What are the names of the singers older than 32?"
AGED_SQL = "SELECT Name FROM singer WHERE Age > 32"
MODEL_LINKS = "[singer.Name,singer.Age,32]"


def test_the_linking_models_list_reaches_classification_and_generation_verbatim(spider):
    """DIN-SQL passes its linking answer on as written, cell values included."""
    answer = f"... The set of possible cell values are = [32].\nSo the Schema_links are:\nSchema_links: {MODEL_LINKS}"
    recorder = Recorder({AGED: AGED_SQL}, override={"linking": answer})
    result, _ = _run(spider("concert_singer"), AGED, recorder)
    assert len(recorder.of("linking")) == 1  # DIN reuses link_schema's call
    (classify,) = recorder.of("din:classification")
    (generation,) = recorder.of("din:generation")
    assert _links_line(classify, "schema_links: ") == MODEL_LINKS
    assert _links_line(generation) == MODEL_LINKS
    (cand,) = result.candidates
    assert cand["sql"] == AGED_SQL
    assert (cand["meta"]["schema_links"], cand["meta"]["schema_links_from"]) == (MODEL_LINKS, "model")


@pytest.mark.parametrize("model_links", [MODEL_LINKS, ""], ids=["model's links", "no model links"])
def test_retrieved_values_are_a_separate_hint_not_links(spider, model_links):
    """A value retrieved for a column the links leave out (singer.Country, of the linked table
    singer) is shown in the values block only; the links stay the model's, or the resolved
    columns and joins when the model wrote none."""
    values = {
        "singer.Country": [{"value": "France", "score": 100.0, "keyword": "France"}],
        "stadium.Location": [{"value": "Raith Rovers", "score": 90.0, "keyword": "Raith"}],
    }
    recorder = Recorder({AGED: AGED_SQL})
    update, _ = run_generator(
        generate_din, spider("concert_singer"), ScriptedChatModel(recorder), question=AGED,
        links={"singer": ["Name", "Age"]}, inputs={"values": values, "schema_links": model_links},
    )
    expected = model_links or "[singer.Name,singer.Age]"
    (classify,) = recorder.of("din:classification")
    (generation,) = recorder.of("din:generation")
    for prompt in (classify, generation):
        links = _links_line(prompt, "schema_links: " if prompt is classify else "Schema_links: ")
        assert links == expected
        assert _values_block(prompt).splitlines() == ["singer.Country: 'France'", "stadium.Location: 'Raith Rovers'"]
    (cand,) = update["candidates"]
    assert cand["meta"]["schema_links_from"] == ("model" if model_links else "resolved links")
