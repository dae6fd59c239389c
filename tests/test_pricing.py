"""Prices per model, and the cost of a run per node and in total: in ``ask --json`` and the trace."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from sqlchorus.interfaces.cli import cli
from sqlchorus.testing import oracle_model
from sqlchorus.tools.models.pricing import (
    BUILTIN_PRICES,
    Price,
    PriceFileError,
    PriceTable,
    cost_text,
    load_prices,
    usage_cost,
)

LOOKUPS = json.loads((FIXTURES / "pricing" / "lookups.json").read_text(encoding="utf-8"))
BAD_FILES = json.loads((FIXTURES / "pricing" / "bad_files.json").read_text(encoding="utf-8"))


@pytest.fixture(params=["json", "toml"])
def prices_file(request, tmp_path):
    prices = LOOKUPS["prices"]
    path = tmp_path / f"prices.{request.param}"
    if request.param == "json":
        path.write_text(json.dumps({"models": prices}), encoding="utf-8")
    else:
        path.write_text(
            "".join(f'[models."{n}"]\ninput = {p["input"]}\noutput = {p["output"]}\n' for n, p in prices.items()),
            encoding="utf-8",
        )
    return path


@pytest.mark.parametrize("case", LOOKUPS["cases"], ids=lambda c: c["model"] or "empty")
def test_cost_of_one_call(case, prices_file):
    cost = PriceTable(path=prices_file).cost(case["model"], case["input_tokens"], case["output_tokens"])
    if case["cost"] is None:
        assert cost is None
    else:
        assert cost == pytest.approx(case["cost"], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("bad", BAD_FILES, ids=lambda b: b["name"])
def test_bad_price_files_say_what_is_wrong(bad, tmp_path):
    path = tmp_path / bad["name"]
    path.write_text(bad["text"], encoding="utf-8")
    with pytest.raises(PriceFileError, match=bad["error"]):
        load_prices(path)


def test_missing_price_file_and_table_reload(tmp_path):
    with pytest.raises(PriceFileError, match="Cannot read"):
        PriceTable(path=tmp_path / "nope.json")
    path = tmp_path / "p.json"
    path.write_text('{"models": {"m": {"input": 1, "output": 1}}}', encoding="utf-8")
    assert PriceTable(path=path).price_for("m") == Price(1.0, 1.0)
    path.write_text('{"models": {"m": {"input": 2, "output": 3}}}', encoding="utf-8")
    assert PriceTable(path=path).price_for("m") == Price(2.0, 3.0)  # a table reads the file as it is now
    assert PriceTable(builtin=False).price_for("gpt-4o") is None
    assert PriceTable().price_for("gpt-4o") == BUILTIN_PRICES["gpt-4o"]


def _ask_json(monkeypatch, tmp_path, *extra):
    from conftest import spider_examples

    examples = spider_examples("concert_singer")
    gold = {ex["question"]: ex["query"] for ex in examples}
    model = oracle_model(gold.get, first_answer=lambda q: "SELECT nme FROM singer", name="oracle-priced")
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)
    from conftest import spider_db

    db = spider_db("concert_singer")
    if not db.exists():
        pytest.skip("Spider data not found")
    out = CliRunner().invoke(cli, [
        "ask", examples[0]["question"], "--db", str(db), "--model", "openai:x", "--json",
        "--trace-dir", str(tmp_path / "traces"), *extra,
    ])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def test_configured_price_gives_cost_per_node_and_run_in_json_and_trace(monkeypatch, tmp_path):
    prices = tmp_path / "prices.toml"
    prices.write_text('[models.oracle-priced]\ninput = 2.0\noutput = 10.0\n', encoding="utf-8")
    answer = _ask_json(monkeypatch, tmp_path, "--prices", str(prices))
    cost = answer["cost"]

    expected_by_node: dict[str, float] = {}
    for u in answer["usage"]:
        expected = (u["input_tokens"] * 2.0 + u["output_tokens"] * 10.0) / 1e6
        assert u["cost_usd"] == pytest.approx(expected)
        expected_by_node[u["node"]] = expected_by_node.get(u["node"], 0.0) + expected
    assert set(cost["by_node"]) == {"extract_keywords", "link_schema", "generate_divide_conquer", "fix_candidates"}
    for node, value in expected_by_node.items():
        assert cost["by_node"][node]["cost_usd"] == pytest.approx(value)
    assert cost["cost_usd"] == pytest.approx(sum(expected_by_node.values()))
    assert cost["cost_usd"] > 0
    assert cost["unpriced_models"] == []

    spans = [json.loads(line) for line in open(answer["trace_path"], encoding="utf-8")]
    llm = [s for s in spans if s["attributes"].get("gen_ai.operation.name") == "chat"]
    assert len(llm) == len(answer["usage"])
    assert sum(s["attributes"]["sqlchorus.cost_usd"] for s in llm) == pytest.approx(cost["cost_usd"])
    for node, value in expected_by_node.items():
        (node_span,) = [s for s in spans if s["name"] == f"node:{node}"]
        assert node_span["attributes"]["sqlchorus.cost_usd"] == pytest.approx(value)
    (root,) = [s for s in spans if not s.get("parent_id")]
    assert root["attributes"]["sqlchorus.cost_usd"] == pytest.approx(cost["cost_usd"])


def test_unpriced_model_costs_nothing_and_is_named(monkeypatch, tmp_path):
    answer = _ask_json(monkeypatch, tmp_path)
    assert answer["cost"]["cost_usd"] == 0
    assert answer["cost"]["unpriced_models"] == ["oracle-priced"]
    assert answer["cost"]["unpriced_calls"] == len(answer["usage"]) > 0
    assert all(c["unpriced_calls"] == c["calls"] for c in answer["cost"]["by_node"].values())
    assert all(u["cost_usd"] == 0 and u["priced"] is False for u in answer["usage"])
    spans = [json.loads(line) for line in open(answer["trace_path"], encoding="utf-8")]
    llm = [s for s in spans if s["attributes"].get("gen_ai.operation.name") == "chat"]
    assert llm and all(s["attributes"]["sqlchorus.priced"] is False for s in llm)


@pytest.mark.parametrize("cost, unpriced, said", [
    (0.0, 0, "$0.000000"),            # priced, and free (a local model)
    (0.0012346, 0, "$0.001235"),
    (0.0, 3, "unpriced"),             # no call had a price: not $0
    (0.0012346, 1, "$0.001235 + unpriced"),  # some had: the dollars are theirs only
    (None, True, "unpriced"),
])
def test_a_cost_reads_unpriced_where_calls_had_no_price(cost, unpriced, said):
    assert cost_text(cost, unpriced) == said


def test_usage_cost_counts_unpriced_calls_in_total_and_per_node():
    usage = [
        {"node": "a", "model": "m1", "input_tokens": 10, "output_tokens": 1, "latency_ms": 1.0, "cost_usd": 0.5,
         "priced": True},
        {"node": "a", "model": "m2", "input_tokens": 10, "output_tokens": 1, "latency_ms": 1.0, "cost_usd": 0.0,
         "priced": False},
        {"node": "b", "model": "m2", "input_tokens": 10, "output_tokens": 1, "latency_ms": 1.0, "cost_usd": 0.0,
         "priced": False},
    ]
    cost = usage_cost(usage)
    assert (cost["cost_usd"], cost["unpriced_calls"], cost["unpriced_models"]) == (0.5, 2, ["m2"])
    assert {n: c["unpriced_calls"] for n, c in cost["by_node"].items()} == {"a": 1, "b": 1}
    assert cost_text(cost["cost_usd"], cost["unpriced_calls"]) == "$0.500000 + unpriced"
    assert cost_text(cost["by_node"]["b"]["cost_usd"], cost["by_node"]["b"]["unpriced_calls"]) == "unpriced"


def _ask_text(monkeypatch, tmp_path, *extra):
    from conftest import spider_db, spider_examples

    examples = spider_examples("concert_singer")
    model = oracle_model({ex["question"]: ex["query"] for ex in examples}.get, name="oracle-priced")
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)
    out = CliRunner().invoke(cli, ["ask", examples[0]["question"], "--db", str(spider_db("concert_singer")),
                                   "--model", "openai:x", "--no-trace", *extra], env={"COLUMNS": "400"})
    assert out.exit_code == 0, out.output
    return out.output


def test_the_command_line_says_unpriced_not_dollars_zero(monkeypatch, tmp_path):
    printed = _ask_text(monkeypatch, tmp_path)
    assert "cost: unpriced, " in printed and "$0" not in printed
    assert "no price for oracle-priced: their calls are unpriced" in printed
    prices = tmp_path / "prices.json"
    prices.write_text('{"models": {"oracle-priced": {"input": 2.0, "output": 10.0}}}', encoding="utf-8")
    priced = _ask_text(monkeypatch, tmp_path, "--prices", str(prices))
    assert re.search(r"cost: \$0\.\d{6}, ", priced) and "unpriced" not in priced


def test_the_report_says_unpriced_and_plots_only_known_costs(tmp_path):
    from sqlchorus.evaluation.report import build_summary, render_html

    def record(i, unpriced):
        return {"index": i, "question_id": i, "db_id": "d", "difficulty": "easy", "question": f"q{i}?",
                "gold_sql": "SELECT 1", "prediction": "SELECT 1", "status": "answered", "ran": True, "correct": True,
                "verdict": "correct", "candidates": [], "model_calls": 2, "input_tokens": 10, "output_tokens": 2,
                "cost_usd": 0.0 if unpriced else 0.25, "unpriced_calls": 2 if unpriced else 0,
                "unpriced_models": ["m"] if unpriced else [], "seconds": 1.0}

    records = [record(0, True), record(1, False), record(2, False)]
    summary = build_summary(records, {"ex": 100.0, "n_scored": 3, "n_correct": 3, "by_difficulty": {}})
    cost = summary["cost"]
    assert (cost["cost_usd"], cost["unpriced_calls"], cost["unpriced_questions"]) == (0.5, 2, 1)
    assert cost["cost_usd_per_question"] == 0.25  # over the questions whose cost is known
    page = render_html(summary, records)
    assert "<td>cost</td><td>$0.500000 + unpriced</td>" in page
    assert re.findall(r'<tr class="correct">(?:<td[^>]*>[^<]*</td>){10}<td>([^<]*)</td>', page) == [
        "unpriced", "$0.250000", "$0.250000"]
    assert "USD per question (n=2," in page and "1 question(s) with their calls are unpriced" in page


def test_bad_prices_file_is_a_configuration_error(monkeypatch, tmp_path):
    model = oracle_model(lambda q: "SELECT 1")
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    out = CliRunner().invoke(cli, ["ask", "How many?", "--model", "openai:x", "--prices", str(bad), "--no-trace"])
    assert out.exit_code == 2
    assert "does not parse" in out.output
