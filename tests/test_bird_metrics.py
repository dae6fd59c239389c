"""BIRD's Soft-F1 and R-VES: each question's figure against the official formulas, the timing's
tiers and early exit under a scripted stopwatch, and both through scoring, the CLI and the report.

The fixture files hold small cases whose expected figures were computed with bird-bench/mini_dev's
``evaluation_f1.calculate_f1_score`` and ``evaluation_ves`` (``clean_abnormal``, the reward tiers,
``compute_ves``); each case says in ``why`` how to check it by hand.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from sqlchorus.evaluation import ves
from sqlchorus.evaluation.datasets import load_dataset
from sqlchorus.evaluation.report import render_html
from sqlchorus.evaluation.runs import score_prediction_file
from sqlchorus.evaluation.scoring import (
    METRICS,
    default_metrics,
    parse_metrics,
    score_predictions,
    write_bird_predictions,
)
from sqlchorus.evaluation.soft_f1 import mean_percent, soft_f1
from sqlchorus.interfaces.cli import cli

FIXTURES = Path(__file__).parent / "fixtures" / "bird_metrics"
F1_CASES = json.loads((FIXTURES / "soft_f1_cases.json").read_text(encoding="utf-8"))
VES_CASES = json.loads((FIXTURES / "r_ves_cases.json").read_text(encoding="utf-8"))


def rows(cells: list[list]) -> list[tuple]:
    return [tuple(r) for r in cells]


# -- Soft-F1 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", F1_CASES, ids=[c["name"] for c in F1_CASES])
def test_soft_f1_is_the_official_float(case):
    assert soft_f1(rows(case["pred"]), rows(case["gold"])) == case["soft_f1"], case["why"]


def test_soft_f1_aggregate_is_the_official_mean():
    values = [c["soft_f1"] for c in F1_CASES]
    assert mean_percent(values) == round(sum(values) / len(values) * 100, 2)
    assert mean_percent([]) is None


# -- R-VES --------------------------------------------------------------------------------------


def scripted(ratios: list[float]):
    """A stopwatch that times each prediction 1 s and each gold ``ratio`` s, in turn: the
    prediction runs first in every iteration, so the calls alternate."""
    calls = iter([t for r in ratios for t in (1.0, r)])
    return lambda sql: next(calls)


@pytest.mark.parametrize("case", VES_CASES["timings"], ids=[c["name"] for c in VES_CASES["timings"]])
def test_reward_tiers_of_the_official_script(case):
    ratios = case["pattern"] * case["repeat"] + case["tail"]
    timing = ves.time_reward("pred", "gold", scripted(ratios), early_exit=False)
    assert (timing.reward, timing.ratio, timing.iterations) == (case["reward"], case["ratio"], 100), case["why"]
    assert ves.reward(case["ratio"]) == case["reward"]


def test_r_ves_aggregate_is_the_official_one():
    aggregate = VES_CASES["aggregate"]
    assert ves.r_ves(aggregate["rewards"]) == round(aggregate["r_ves"], 2), aggregate["why"]
    assert ves.r_ves([]) is None


def test_a_settled_tier_stops_early_with_the_full_runs_reward():
    ratios = [0.125, 0.0625] * 50  # a prediction ten times slower than its gold, steadily
    early = ves.time_reward("pred", "gold", scripted(ratios), early_exit=True)
    full = ves.time_reward("pred", "gold", scripted(ratios))
    assert early.iterations == ves.MIN_ITERATIONS < full.iterations == ves.ITERATIONS
    assert early.reward == full.reward == 0.25


def test_a_mean_near_a_bound_runs_every_iteration():
    # As fast as the gold, give or take 2%: the official 100 timings decide the tier, so no fewer.
    timing = ves.time_reward("pred", "gold", scripted([0.98, 1.0] * 50), early_exit=True)
    assert timing.iterations == ves.ITERATIONS
    assert timing.reward == 0.75


def test_every_ratio_equal_keeps_the_ratio():
    assert ves.cleaned([2.0] * 5) == [2.0] * 5
    assert ves.time_reward("p", "g", scripted([2.0] * 100)).reward == 1.25


def test_a_failed_timing_earns_nothing():
    def broken(sql):
        raise sqlite3.OperationalError("interrupted")

    timing = ves.time_reward("p", "g", broken)
    assert (timing.reward, timing.ratio) == (0.0, None)
    assert "interrupted" in timing.error
    # A prediction timed at zero seconds divides by zero, which the official script scores 0.
    assert ves.time_reward("p", "g", lambda sql: 0.0).reward == 0.0


def test_the_stopwatch_stops_at_the_deadline(tmp_path):
    db = tmp_path / "t.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (x)")
    watch = ves.fresh_connection_stopwatch(db, deadline=0.0)
    with pytest.raises(Exception, match="budget"):
        watch("SELECT 1")


def test_the_stopwatch_cannot_write(tmp_path):
    db = tmp_path / "t.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (x)")
    watch = ves.fresh_connection_stopwatch(db, deadline=float("inf"))
    assert watch("SELECT count(*) FROM t") >= 0
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        watch("INSERT INTO t VALUES (1)")


# -- through scoring ----------------------------------------------------------------------------


@pytest.fixture
def bird_files(tmp_path):
    """A BIRD dataset of one small database, and predictions whose Soft-F1 the fixtures give."""
    folder = tmp_path / "db" / "pets"
    folder.mkdir(parents=True)
    with sqlite3.connect(folder / "pets.sqlite") as conn:
        conn.executescript(
            "CREATE TABLE pet (id INTEGER, name TEXT, owner TEXT);"
            "INSERT INTO pet VALUES (1, 'rex', 'ann'), (2, 'tom', NULL), (3, 'kit', 'bob'), (3, 'kit', 'bob');"
        )
    two = "SELECT id, name FROM pet WHERE id < 3 ORDER BY id"
    cases = [  # (gold, prediction, difficulty)
        (two, two, "simple"),
        (two, "SELECT name, id FROM pet WHERE id < 3 ORDER BY id", "simple"),
        ("SELECT id FROM pet WHERE id > 2", "SELECT DISTINCT id FROM pet WHERE id > 2", "moderate"),
        ("SELECT owner FROM pet WHERE id = 2", "SELECT owner FROM pet WHERE id = 2", "moderate"),
        ("SELECT id FROM pet ORDER BY id", "SELECT id FROM pet WHERE id = 1", "challenging"),
        ("SELECT id FROM pet", "SELECT id FROM no_such_table", "challenging"),
        ("SELECT id FROM pet", None, "challenging"),
    ]
    examples = [{"question": f"q{i}", "db_id": "pets", "gold_sql": g, "difficulty": d}
                for i, (g, _, d) in enumerate(cases)]
    dataset = tmp_path / "bird.json"
    dataset.write_text(json.dumps({"benchmark": "bird", "db_root": "db", "examples": examples}), encoding="utf-8")
    preds = tmp_path / "predict.json"
    write_bird_predictions(preds, [p for _, p, _ in cases], ["pets"] * len(cases))
    data = json.loads(preds.read_text(encoding="utf-8"))
    data["6"] = None  # no prediction for the last question
    preds.write_text(json.dumps(data), encoding="utf-8")
    # Each question's Soft-F1 by the fixtures' rules: identical; columns swapped; duplicates
    # dropped; NULL matches NULL; one of three gold rows (1 of 3 after duplicates: P 1, R 1/3);
    # a failed prediction; none.
    expected_f1 = [1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 0.0]
    expected_ex = ["correct", "wrong", "correct", "correct", "wrong", "pred_error", "missing_prediction"]
    return dataset, preds, expected_f1, expected_ex


def test_scoring_reports_the_three_metrics_for_bird(bird_files):
    dataset_path, preds, expected_f1, expected_ex = bird_files
    run = score_prediction_file(load_dataset(dataset_path), preds, ves_iterations=10)
    assert [v.status for v in run.score.verdicts] == expected_ex
    assert [v.soft_f1 for v in run.score.verdicts] == expected_f1
    rewards = [v.ves_reward for v in run.score.verdicts]
    for reward, status in zip(rewards, expected_ex):
        assert reward in (1.25, 1.0, 0.75, 0.5, 0.25) if status == "correct" else reward == 0.0
    s = run.summary
    assert s["metrics"] == list(METRICS)
    assert s["soft_f1"] == round(sum(expected_f1) / len(expected_f1) * 100, 2)
    assert s["r_ves"] == ves.r_ves(rewards)
    assert s["by_difficulty"]["moderate"]["soft_f1"] == 100.0
    assert s["by_difficulty"]["challenging"]["r_ves"] == 0.0
    assert s["ves_iterations"]["timed"] == expected_ex.count("correct")
    # Every correct prediction is timed as often as asked, as the official script times it: an
    # early exit leaves the machine quieter for the other questions' timings and lowers R-VES.
    assert s["ves_iterations"]["mean"] == 10
    assert [r.get("soft_f1") for r in run.records] == expected_f1
    assert [r.get("ves_reward") for r in run.records] == rewards


def test_ex_alone_on_request_and_by_default_for_spider(bird_files):
    dataset_path, preds, _, expected_ex = bird_files
    data = load_dataset(dataset_path)
    run = score_prediction_file(data, preds, metrics=["ex"])
    assert {"soft_f1", "r_ves", "metrics"}.isdisjoint(run.summary)
    assert all(v.soft_f1 is None and v.ves_reward is None for v in run.score.verdicts)
    assert default_metrics("spider") == ("ex",) and default_metrics("bird") == METRICS
    assert parse_metrics("soft_f1", "spider") == ("ex", "soft_f1")
    assert parse_metrics(["R-VES"], "spider") == ("ex", "r_ves")
    with pytest.raises(ValueError, match="Unknown metric 'f2'"):
        parse_metrics("ex,f2", "bird")


def test_soft_f1_on_a_spider_dataset_runs_the_queries_as_written(tmp_path):
    folder = tmp_path / "db" / "t"
    folder.mkdir(parents=True)
    with sqlite3.connect(folder / "t.sqlite") as conn:
        conn.executescript("CREATE TABLE t (a); INSERT INTO t VALUES (1), (1), (2);")
    examples = [{"question": "q", "db_id": "t", "gold_sql": "SELECT DISTINCT a FROM t", "difficulty": "easy"}]
    path = tmp_path / "spider.json"
    path.write_text(json.dumps({"benchmark": "spider", "db_root": "db", "examples": examples}), encoding="utf-8")
    # Spider's EX drops DISTINCT from both; Soft-F1 compares the rows of the queries as written.
    report = score_predictions(load_dataset(path), ["SELECT a FROM t WHERE a = 1"], metrics=("ex", "soft_f1"))
    verdict = report.verdicts[0]
    assert verdict.status == "wrong"
    assert verdict.soft_f1 == soft_f1([(1,), (1,)], [(1,), (2,)]) == pytest.approx(2 / 3)


def test_cli_json_report_and_option_errors(bird_files, tmp_path):
    dataset_path, preds, expected_f1, _ = bird_files
    runner = CliRunner()
    result = runner.invoke(cli, ["eval", "--dataset", str(dataset_path), "--predictions", str(preds),
                                 "--ves-iterations", "10", "--out", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["soft_f1"] == round(sum(expected_f1) / len(expected_f1) * 100, 2)
    assert out["r_ves"] is not None and out["metrics"] == list(METRICS)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert (summary["soft_f1"], summary["r_ves"]) == (out["soft_f1"], out["r_ves"])
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "<figcaption>Soft-F1 and R-VES by difficulty</figcaption>" in page
    assert f"<td>Soft-F1</td><td>{out['soft_f1']:g}%</td>" in page

    text = runner.invoke(cli, ["eval", "--dataset", str(dataset_path), "--predictions", str(preds),
                               "--metrics", "ex,soft_f1"])
    assert text.exit_code == 0, text.output
    assert f"Soft-F1 {out['soft_f1']:g}%" in text.output and "R-VES" not in text.output

    bad = runner.invoke(cli, ["eval", "--dataset", str(dataset_path), "--predictions", str(preds),
                              "--metrics", "ex,speed"])
    assert bad.exit_code == 2
    assert "Unknown metric 'speed'" in bad.output


def test_report_without_bird_metrics_has_no_bird_chart():
    summary = {"dataset": "d", "ex": 50.0, "by_difficulty": {"easy": {"n": 2, "ex": 50.0}}}
    page = render_html(summary, [])
    assert "Soft-F1" not in page and "R-VES" not in page


def test_the_viewer_shows_the_summarys_bird_metrics(bird_files, tmp_path):
    import contextlib

    from starlette.testclient import TestClient

    from sqlchorus.config.settings import Settings
    from sqlchorus.interfaces.viewer import NoModel, create_app
    from sqlchorus.runs.run_index import RunIndex
    from sqlchorus.runs.service import RunService

    dataset_path, preds, _, _ = bird_files
    run = score_prediction_file(load_dataset(dataset_path), preds, ves_iterations=10,
                                out_dir=tmp_path / "evals" / "bird")
    service = RunService(settings=Settings(trace_dir=str(tmp_path / "traces"), checkpoints=str(tmp_path / "c.sqlite"),
                                           cache=False), model=NoModel())
    app = create_app(service, RunIndex(tmp_path / "traces", tmp_path / "evals"))
    with contextlib.closing(service), TestClient(app, base_url="http://127.0.0.1:8080") as client:
        page = client.get("/api/evals/bird").json()
    assert page["metrics"] == {"soft_f1": run.summary["soft_f1"], "r_ves": run.summary["r_ves"]}
