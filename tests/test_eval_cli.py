"""``sqlchorus eval`` end to end with scripted models on a small Spider subset."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from test_evaluate import N_MISSING, N_SPIDER, oracle_for, small_dataset, spider_dev

from sqlchorus.evaluation.runs import read_records
from sqlchorus.evaluation.scoring import write_predictions
from sqlchorus.interfaces.cli import cli
from sqlchorus.testing import ScriptedChatModel, role_of_call

LIMIT = 6
REQUIRED_KEYS = {"ex", "n_scored", "n_missing_db", "by_difficulty"}


@pytest.fixture
def use_model(monkeypatch):
    """Make the CLI use a given scripted model whatever --model names."""

    def install(model):
        monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)
        return model

    return install


def run(*args):
    result = CliRunner().invoke(cli, ["eval", *map(str, args)])
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def run_json(*args) -> dict:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    return json.loads(lines[0])


@pytest.mark.slow
def test_oracle_on_spider_dev(use_model, tmp_path):
    data = spider_dev()
    model = use_model(oracle_for(data))
    out = run_json("--dataset", "spider-dev", "--limit", LIMIT, "--model", "openai:x", "--out", tmp_path / "run")
    assert REQUIRED_KEYS <= set(out)
    assert (out["ex"], out["n_scored"], out["n_missing_db"]) == (100.0, LIMIT, 0)
    assert sum(v["n"] for v in out["by_difficulty"].values()) == LIMIT
    assert out["cost"]["model_calls"] == model.calls > 0
    page = (tmp_path / "run" / "report.html").read_text(encoding="utf-8")
    for title in ("Accuracy by difficulty", "Accuracy by generator of the chosen candidate",
                  "Selection upper bound vs actual", "Cost per question", "Latency per question"):
        assert f"<figcaption>{title}</figcaption>" in page
    assert out["files"]["predictions"].endswith("pred.txt")
    assert len((tmp_path / "run" / "pred.txt").read_text().splitlines()) == LIMIT
    traces = list((tmp_path / "run" / "traces").glob("*.jsonl"))
    assert len(traces) == LIMIT


@pytest.mark.slow
def test_a_wrong_model_gives_lower_ex(use_model, tmp_path):
    data = spider_dev()
    use_model(oracle_for(data, wrong={0, 3}))
    out = run_json("--dataset", "spider-dev", "--limit", LIMIT, "--model", "openai:x", "--out", tmp_path / "run")
    assert out["ex"] == round(100.0 * (LIMIT - 2) / LIMIT, 2)


@pytest.mark.slow
def test_rerun_resumes_without_model_calls(use_model, tmp_path, monkeypatch):
    data = spider_dev()
    model = use_model(oracle_for(data))
    monkeypatch.chdir(tmp_path)
    first = run_json("--dataset", "spider-dev", "--limit", 3, "--model", "openai:x", "--run-name", "mine")
    calls = model.calls
    assert first["out_dir"] == "evals/mine" and first["run"]["n_run"] == 3
    again = run("--dataset", "spider-dev", "--limit", 4, "--model", "openai:x", "--run-name", "mine")
    assert again.exit_code == 0, again.output
    assert "resuming: 3 question(s) already recorded" in again.stderr
    assert "EX 100% on 4 question(s)" in again.stdout
    records = read_records(tmp_path / "evals" / "mine" / "records.jsonl")
    assert sorted(records) == [0, 1, 2, 3]
    assert model.calls - calls == records[3]["model_calls"] > 0  # one new question, not four


@pytest.mark.slow
def test_missing_databases_are_counted(use_model, tmp_path):
    data = small_dataset(tmp_path)
    use_model(oracle_for(data))
    out = run_json("--dataset", data.source, "--model", "openai:x", "--out", tmp_path / "run")
    assert (out["ex"], out["n_scored"], out["n_missing_db"]) == (100.0, N_SPIDER, N_MISSING)
    text = run("--dataset", data.source, "--model", "openai:x", "--out", tmp_path / "run")
    assert f"{N_MISSING} question(s) not scored: their database is missing" in text.stdout


def test_scoring_the_gold_file_gives_100(tmp_path):
    data = spider_dev()
    pred = tmp_path / "pred.txt"
    write_predictions(pred, data, [e.gold_sql for e in data.examples[:20]])
    out = run_json("--dataset", "spider-dev", "--predictions", pred, "--limit", 20)
    assert (out["ex"], out["n_scored"], out["n_missing_db"]) == (100.0, 20, 0)
    assert out["out_dir"] is None and out["files"] == {}


def test_a_preset_runs_and_an_unknown_one_is_refused(use_model, tmp_path):
    data = spider_dev()
    use_model(oracle_for(data))
    out = run_json("--dataset", "spider-dev", "--limit", 2, "--model", "openai:x", "--preset", "fast",
                   "--out", tmp_path / "run")
    assert out["run"]["settings"]["preset"] == "fast" and out["ex"] == 100.0
    bad = run("--dataset", "spider-dev", "--limit", 2, "--model", "openai:x", "--preset", "fastest",
              "--out", tmp_path / "run2")
    assert bad.exit_code == 2 and "'fastest' is not one of 'fast', 'balanced', 'full'" in bad.output


@pytest.mark.parametrize("args,env,message", [
    (["--dataset", "spider-train"], {}, "Unknown dataset 'spider-train'"),
    (["--dataset", "spider-dev"], {"SQLCHORUS_DATA": "{tmp}/empty"}, "set SQLCHORUS_DATA"),
    (["--dataset", "spider-dev", "--predictions", "{tmp}/none.txt"], {}, "Cannot read the prediction file"),
    (["--dataset", "spider-dev", "--predictions", "{tmp}/binary.txt"], {}, "Cannot read the prediction file"),
    (["--dataset", "spider-dev", "--model", "gpt-4o", "--out", "{tmp}/run", "--limit", 1], {}, "provider:model"),
])
def test_bad_input_is_explained(args, env, message, tmp_path, monkeypatch):
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00\x81")
    for key, value in env.items():
        monkeypatch.setenv(key, value.format(tmp=tmp_path))
    if "SQLCHORUS_DATA" not in env:
        spider_dev()
    result = run(*(str(a).format(tmp=tmp_path) for a in args))
    assert result.exit_code == 2
    assert message in result.output
    if env:
        assert str(tmp_path / "empty") in result.output


@pytest.mark.slow
def test_full_preset_with_a_wrong_generator_exports_selection_pairs(use_model, tmp_path):
    data = spider_dev()
    oracle = oracle_for(data)

    def respond(messages):
        if role_of_call() == "generation:query_plan":
            return "**Final Optimized SQL Query:**\nSELECT 'not the answer'"
        return oracle.responses(messages)

    use_model(ScriptedChatModel(respond))
    pairs = tmp_path / "pairs.jsonl"
    out = run_json("--dataset", "spider-dev", "--limit", 3, "--model", "openai:x", "--preset", "full",
                   "--out", tmp_path / "run", "--export-pairs", pairs)
    gens = out["candidate_generators"]
    assert gens["query_plan"]["ex"] == 0.0 and gens["divide_conquer"]["ex"] == 100.0
    assert out["upper_bound"] == 100.0 and out["ex"] <= out["upper_bound"]
    assert out["pairs"]["questions"] == 3 and out["pairs"]["pairs"] == 3  # one right, one wrong cluster each
    lines = [json.loads(line) for line in pairs.read_text().splitlines()]
    assert len(lines) == 3 and {line["messages"][1]["content"] for line in lines} <= {"A", "B"}
    bad = run("--dataset", "spider-dev", "--predictions", tmp_path / "run" / "pred.txt", "--export-pairs", pairs)
    assert bad.exit_code == 2 and "--export-pairs needs the candidates of a run" in bad.output
