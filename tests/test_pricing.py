"""Prices per model, and the cost of a run per node and in total: in ``ask --json`` and the trace."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from sqlchorus.interfaces.cli import cli
from sqlchorus.testing import oracle_model
from sqlchorus.tools.pricing import BUILTIN_PRICES, Price, PriceFileError, PriceTable, load_prices

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
        "ask", examples[0]["question"], "--db", str(db), "--model", "x:y", "--json",
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
    assert all(u["cost_usd"] == 0 and u["priced"] is False for u in answer["usage"])


def test_bad_prices_file_is_a_configuration_error(monkeypatch, tmp_path):
    model = oracle_model(lambda q: "SELECT 1")
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    out = CliRunner().invoke(cli, ["ask", "How many?", "--model", "x:y", "--prices", str(bad), "--no-trace"])
    assert out.exit_code == 2
    assert "does not parse" in out.output
