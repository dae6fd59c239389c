"""DIN-SQL's later samples are draws of their own: their temperature and schema order."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sqlchorus
from conftest import Recorder, chat_calls, spider_examples
from sqlchorus.config.settings import Settings
from sqlchorus.nodes import generate_din as din_node
from sqlchorus.testing import ScriptedChatModel

SAMPLE_TEMPERATURE = 0.7


def _schema_block(prompt: str) -> str:
    """The question's own schema in a DIN-SQL prompt (after every example's): from its last
    ``【DB_ID】`` line to the first blank line."""
    start = prompt.rfind("【DB_ID】")
    assert start >= 0, prompt[-500:]
    return prompt[start:prompt.index("\n\n", start)]


def _content(block: str) -> list[str]:
    """A schema block's lines in a fixed order, without the commas their place adds."""
    return sorted(line.rstrip(",") for line in block.splitlines())


def test_din_samples_differ_in_temperature_and_schema_order(spider):
    ex = spider_examples("concert_singer")[3]
    gold = {ex["question"]: ex["query"].strip().rstrip(";").strip()}
    calls: list[dict] = []
    real = din_node.try_call_model

    def spy(context, usage, errors, **call):
        calls.append({k: call.get(k) for k in ("role", "sample", "temperature", "top_p", "prompt")})
        return real(context, usage, errors, **call)

    spans = InMemorySpanExporter()
    settings = Settings(model=ScriptedChatModel(Recorder(gold)), generators={"din": 3}, trace_dir=None,
                        cache=False, sample_temperature=SAMPLE_TEMPERATURE)
    assert settings.temperature == 0.0 and settings.shuffle_schema
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(din_node, "try_call_model", spy)
        result = sqlchorus.ask(ex["question"], db=spider("concert_singer"), exporters=[spans], settings=settings)

    candidates = {c["id"]: c for c in result.candidates if c["generator"] == "din"}
    assert set(candidates) == {"din-0", "din-1", "din-2"}
    assert all(c["sql"] == gold[ex["question"]] for c in candidates.values())
    meta = {cid: (c["meta"]["temperature"], c["meta"]["shuffle_seed"]) for cid, c in candidates.items()}
    assert meta == {"din-0": (0.0, None), "din-1": (SAMPLE_TEMPERATURE, 1), "din-2": (SAMPLE_TEMPERATURE, 2)}

    # Three calls a sample (classification, generation, correction). The first sample sends no
    # sample number (the keys earlier runs recorded it under) at the run's temperature; each
    # later one sends its own number with every call, all at the sample temperature.
    by_sample: dict = {}
    for call in calls:
        by_sample.setdefault(call["sample"], []).append(call)
    assert set(by_sample) == {None, 1, 2}
    for sample, its_calls in by_sample.items():
        assert [c["role"] for c in its_calls] == ["generation", "generation", "fixing"], sample
        expected = 0.0 if sample is None else SAMPLE_TEMPERATURE
        assert {c["temperature"] for c in its_calls} == {expected}, sample
    temperatures = sorted(t for _, t, _, _ in chat_calls(spans, "generate_din"))
    assert temperatures == [0.0] * 3 + [SAMPLE_TEMPERATURE] * 6

    # Each sample sees one schema in all three of its calls; the later samples see the first's
    # tables and columns, each in an order of its own.
    blocks = {}
    for sample, its_calls in by_sample.items():
        seen = {_schema_block(c["prompt"]) for c in its_calls}
        assert len(seen) == 1, sample
        blocks[sample] = seen.pop()
    assert len(set(blocks.values())) == 3
    for sample in (1, 2):
        assert _content(blocks[sample]) == _content(blocks[None])
    # Only the schema tells a later sample's prompt from the first's.
    for sample in (1, 2):
        for first, later in zip(by_sample[None], by_sample[sample]):
            assert later["prompt"].replace(blocks[sample], blocks[None]) == first["prompt"]
