"""``benchmarks/selection_pool.py`` on the project's own test pool: no-model selection against
plain majority voting, over candidates from three made-up systems (tests/fixtures/selection_pool)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from sqlchorus.evaluation.datasets import load_dataset
from sqlchorus.evaluation.scoring import write_spider_predictions

REPO = Path(__file__).resolve().parents[1]
POOL = json.loads((REPO / "tests" / "fixtures" / "selection_pool" / "pool.json").read_text())


def load_benchmark():
    path = REPO / "benchmarks" / "selection_pool.py"
    spec = importlib.util.spec_from_file_location("selection_pool", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def pool_files(spider, tmp_path):
    """The fixture pool as a dataset file and one Spider prediction file per system."""
    db = spider(POOL["db_id"])
    dataset = tmp_path / "pool.json"
    dataset.write_text(json.dumps({"examples": [
        {"question": q["question"], "db_id": POOL["db_id"], "gold_sql": q["gold_sql"], "db_path": str(db)}
        for q in POOL["questions"]
    ]}))
    files = []
    for k, name in enumerate(POOL["systems"]):
        path = tmp_path / f"{name}.txt"
        write_spider_predictions(path, [q["candidates"][k] for q in POOL["questions"]])
        files.append(path)
    return dataset, files


def test_majority_vote_baseline():
    bench = load_benchmark()
    checked = [
        {"index": 0, "status": "error", "fingerprint": None},
        {"index": 1, "status": "empty", "fingerprint": "e"},
        {"index": 2, "status": "ok", "fingerprint": "x"},
        {"index": 3, "status": "ok", "fingerprint": "x"},
    ]
    assert bench.majority_vote(checked) == 2
    assert bench.majority_vote(checked[:3]) == 1  # a tie goes to the earlier candidate, empty or not
    assert bench.majority_vote(checked[:1]) is None


def test_selection_beats_majority_on_the_test_pool(pool_files):
    bench = load_benchmark()
    dataset_file, files = pool_files
    dataset = load_dataset(dataset_file)
    pools = [[q["candidates"][k] for q in POOL["questions"]] for k in range(len(POOL["systems"]))]
    figures, records = bench.compare_pool(dataset, pools, POOL["systems"])

    assert len(records) == len(POOL["questions"])
    for q, r in zip(POOL["questions"], records):
        e = q["expect"]
        got = (r["majority"], r["selection"], r["correct"]["majority"], r["correct"]["selection"])
        assert got == (e["majority"], e["selection"], e["majority_correct"], e["selection_correct"]), q["name"]

    n = len(POOL["questions"])
    expect_pct = lambda key: round(100.0 * sum(q["expect"][key] for q in POOL["questions"]) / n, 2)  # noqa: E731
    assert figures["majority_ex"] == expect_pct("majority_correct")
    assert figures["selection_ex"] == expect_pct("selection_correct")
    assert figures["selection_ex"] > figures["majority_ex"]
    assert figures["oracle_ex"] == 100.0
    assert figures["systems"] == {"sys_a": round(100 * 2 / n, 2), "sys_b": round(100 * 8 / n, 2),
                                  "sys_c": round(100 * 9 / n, 2)}
    # sys_a is outvoted most often, so it weighs least; sys_b and sys_c agree with each other.
    weights = figures["weights"]
    assert weights["sys_a"] < weights["sys_b"] and weights["sys_a"] < weights["sys_c"]
    assert figures["n_differ"] == 5
    assert figures["differ_by_rule"] == {
        "empty_set_aside": {"n": 3, "selection_right": 2, "majority_right": 1, "both_wrong": 0},
        "other": {"n": 2, "selection_right": 2, "majority_right": 0, "both_wrong": 0},
    }


def by_name(name):
    return next(k for k, q in enumerate(POOL["questions"]) if q["name"].startswith(name))


@pytest.mark.parametrize("rule, question, without", [
    # each rule has a question selection gets wrong without it: the candidate it would take instead
    ("errors", "two failures do not outvote", 0),
    ("empty", "two empty results outvote", 0),
    ("shape", "three different results, one with two columns", 1),
    ("weights", "three different results with rows", 0),
])
def test_each_rule_has_a_question_it_decides(pool_files, rule, question, without):
    bench = load_benchmark()
    dataset_file, _ = pool_files
    pools = [[q["candidates"][k] for q in POOL["questions"]] for k in range(len(POOL["systems"]))]
    figures, records = bench.compare_pool(load_dataset(dataset_file), pools, POOL["systems"])
    record = records[by_name(question)]
    assert record["correct"]["selection"]
    assert record[f"without_{rule}"] == without and not record["correct"][f"without_{rule}"]
    assert figures["ablation"][f"without_{rule}"]["selection_vs_this"]["wins"] >= 1
    assert figures["selection_cv_ex"] is not None


def test_files_out_of_order_or_partial_are_refused(pool_files, tmp_path, capsys):
    bench = load_benchmark()
    dataset_file, files = pool_files
    lines = files[1].read_text().splitlines()
    shifted = tmp_path / "shifted.txt"
    shifted.write_text("\n".join(lines[1:] + lines[:1]) + "\n")
    partial = tmp_path / "partial.txt"
    partial.write_text("\n".join(lines[:-2]) + "\n")
    for bad in (shifted, partial):
        assert bench.main([str(files[0]), str(bad), "--dataset", str(dataset_file)]) == 2
        err = capsys.readouterr().err
        assert str(bad) in err and "refused" in err
    golds = [q["gold_sql"] for q in POOL["questions"]]
    assert bench.order_problem(golds, golds) is None
    assert "not in the dataset's order" in bench.order_problem(golds * 10, (golds[1:] + golds[:1]) * 10)


def test_a_dataset_without_its_databases_is_refused(tmp_path, capsys):
    bench = load_benchmark()
    dataset = tmp_path / "nodb.json"
    dataset.write_text(json.dumps({"examples": [
        {"question": "How many?", "db_id": "absent", "gold_sql": "SELECT 1", "db_path": str(tmp_path / "absent.sqlite")}
    ]}))
    pred = tmp_path / "pred.txt"
    pred.write_text("SELECT 1\n")
    assert bench.main([str(pred), str(pred), "--names", "a,b", "--dataset", str(dataset)]) == 2
    assert "databases" in capsys.readouterr().err


def test_benchmark_command_prints_one_json_line(pool_files, tmp_path, capsys):
    bench = load_benchmark()
    dataset_file, files = pool_files
    details = tmp_path / "details.jsonl"
    assert bench.main([*map(str, files), "--dataset", str(dataset_file), "--details", str(details)]) == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    figures = json.loads(line)
    assert list(figures["systems"]) == POOL["systems"]
    assert figures["selection_ex"] > figures["majority_ex"]
    differ = [json.loads(l) for l in details.read_text().splitlines()]
    assert [d["index"] for d in differ] == [1, 2, 3, 5, 6]
    assert {d["rule"] for d in differ} == {"empty_set_aside", "other"}


def test_many_pools_print_one_line_with_every_pools_figures(pool_files, tmp_path, capsys):
    """--pools: a spec names each system's file and the pools; one JSON line gives, per pool, the
    best single system, majority, the old rules, every rule, the oracle and the sign tests."""
    bench = load_benchmark()
    dataset_file, files = pool_files
    folder = tmp_path / "predictions"
    folder.mkdir()
    systems = {}
    for path, name in zip(files, POOL["systems"]):
        if name == "sys_c":  # one system as a CSV file with a PREDICTED SQL column, as DIN-SQL publishes
            import csv

            with open(folder / "sys_c.csv", "w", newline="", encoding="utf-8") as f:
                writer = csv.writer(f)
                writer.writerow(["NLQ", "PREDICTED SQL", "GOLD SQL", "DATABASE"])
                for q in POOL["questions"]:
                    writer.writerow([q["question"], q["candidates"][2], q["gold_sql"], POOL["db_id"]])
            systems[name] = {"file": "sys_c.csv"}
        else:
            (folder / path.name).write_text(path.read_text())
            systems[name] = {"file": path.name}
    spec = tmp_path / "pools.json"
    spec.write_text(json.dumps({"target": 50.0, "target_pool_size": 3, "systems": systems,
                                "pools": {"trio1": POOL["systems"], "pair1": ["sys_b", "sys_c"]}}))
    assert bench.main(["--pools", str(spec), "--predictions", str(folder), "--dataset", str(dataset_file)]) == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    figures = json.loads(line)
    assert set(figures["pools"]) == {"trio1", "pair1"}
    whole = figures["pools"]["trio1"]
    n = len(POOL["questions"])
    assert whole["best_single"] == {"system": "sys_c", "ex": round(100 * 9 / n, 2)}
    assert whole["majority"] == round(100.0 * sum(q["expect"]["majority_correct"] for q in POOL["questions"]) / n, 2)
    assert whole["new_rules"] == round(100.0 * sum(q["expect"]["selection_correct"] for q in POOL["questions"]) / n, 2)
    assert whole["oracle"] == 100.0 and whole["old_rules"] is not None
    versus = whole["new_vs_majority"]
    assert versus["wins"] - versus["losses"] == round((whole["new_rules"] - whole["majority"]) * n / 100)
    assert 0 <= versus["sign_test_p"] <= 1
    assert set(whole["without"]) == set(bench.RULES)
    assert bench.BASE_RULES == {"errors", "empty", "shape", "weights"} < bench.RULES
    assert set(whole["halves"]) == {"even_databases", "odd_databases"}
    summary = figures["summary"]
    assert summary["all_pools"]["pools"] == 2 and summary["all_pools"]["pools_of_target_size"] == 1
    assert set(summary) == {"all_pools", "trio", "pair"}  # pools grouped by name without the trailing number
    missing = json.loads(spec.read_text())
    missing["systems"]["sys_a"]["file"] = "absent.txt"
    spec.write_text(json.dumps(missing))
    assert bench.main(["--pools", str(spec), "--predictions", str(folder), "--dataset", str(dataset_file)]) == 2
    assert "absent.txt" in capsys.readouterr().err

