"""Scoring: datasets, prediction files in both submission formats, verdicts and summaries."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from sqlchorus.evaluation.datasets import load_dataset
from sqlchorus.evaluation.scoring import (
    BIRD_SEPARATOR,
    read_bird_predictions,
    read_predictions,
    read_spider_predictions,
    score_file,
    score_predictions,
    write_bird_predictions,
    write_predictions,
    write_spider_predictions,
)

FIXTURES = Path(__file__).parent / "fixtures" / "compare"
CASES = json.loads((FIXTURES / "scoring_cases.json").read_text(encoding="utf-8"))

SINGERS = [
    (1, "Ann", "France", 52), (2, "Bob", "France", 30), (3, "Cy", "Peru", 41),
    (4, "Di", "Chile", 25), (5, "Ed", "Peru", 41),
]


@pytest.fixture
def db_root(tmp_path: Path) -> Path:
    """A scratch folder with one database, ``music/music.sqlite``."""
    path = tmp_path / "dbs" / "music" / "music.sqlite"
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, "
                     "country TEXT, age INTEGER)")
        conn.executemany("INSERT INTO singer VALUES (?, ?, ?, ?)", SINGERS)
    conn.close()
    return tmp_path / "dbs"


def _dataset(tmp_path: Path, benchmark: str, golds: list[str], db_ids: list[str] | None = None,
             difficulties: list[str] | None = None):
    examples = [
        {"question": f"q{i}", "db_id": (db_ids or ["music"] * len(golds))[i], "gold_sql": g,
         **({"difficulty": difficulties[i]} if difficulties else {})}
        for i, g in enumerate(golds)
    ]
    path = tmp_path / f"{benchmark}-set.json"
    path.write_text(json.dumps({"benchmark": benchmark, "db_root": "dbs", "examples": examples}))
    return load_dataset(path)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_verdicts(case, db_root, tmp_path):
    dataset = _dataset(tmp_path, case["benchmark"], [case["gold"]])
    report = score_predictions(dataset, [case["pred"]], timeout_s=case.get("timeout_s"))
    assert report.verdicts[0].status == case["status"], report.verdicts[0].error


def test_summary_counts_missing_databases_and_predictions(db_root, tmp_path):
    golds = ["SELECT name FROM singer", "SELECT count(*) FROM singer", "SELECT 1", "SELECT 2"]
    dataset = _dataset(tmp_path, "bird", golds, db_ids=["music", "music", "absent", "music"],
                       difficulties=["simple", "moderate", "simple", "challenging"])
    assert dataset.examples[2].db_path is None
    preds = ["SELECT name FROM singer", "SELECT 0", "SELECT 1"]  # the fourth is missing
    summary = score_predictions(dataset, preds).summary
    assert summary["n_total"] == 4
    assert summary["n_missing_db"] == 1
    assert summary["n_scored"] == 3
    assert summary["n_missing_prediction"] == 1
    assert summary["n_correct"] == 1
    assert summary["ex"] == pytest.approx(33.33)
    assert summary["by_difficulty"] == {
        "simple": {"n": 1, "ex": 100.0, "n_missing_db": 1},
        "moderate": {"n": 1, "ex": 0.0, "n_missing_db": 0},
        "challenging": {"n": 1, "ex": 0.0, "n_missing_db": 0},
    }


def test_too_many_predictions_is_an_error(db_root, tmp_path):
    dataset = _dataset(tmp_path, "spider", ["SELECT 1"])
    with pytest.raises(ValueError, match="too many"):
        score_predictions(dataset, ["SELECT 1", "SELECT 2"])


@pytest.mark.parametrize("executor", ["process", "thread"])
def test_parallel_verdicts_equal_inline(executor, db_root, tmp_path):
    cases = [c for c in CASES if "timeout_s" not in c and c["benchmark"] == "spider"]
    dataset = _dataset(tmp_path, "spider", [c["gold"] for c in cases])
    preds = [c["pred"] for c in cases]
    inline = score_predictions(dataset, preds)
    parallel = score_predictions(dataset, preds, workers=2, executor=executor)
    assert [v.status for v in parallel.verdicts] == [v.status for v in inline.verdicts]
    assert [v.status for v in inline.verdicts] == [c["status"] for c in cases]


def test_progress_and_hook(db_root, tmp_path):
    dataset = _dataset(tmp_path, "spider", ["SELECT 1", "SELECT 2"])
    seen = []
    report = score_predictions(dataset, ["SELECT 1", "SELECT 3"], progress=True,
                               on_verdict=seen.append)
    assert sorted(v.index for v in seen) == [0, 1]
    assert report.summary["ex"] == 50.0


# -- prediction files ------------------------------------------------------------------------


def test_spider_file_round_trip(tmp_path):
    sqls = ["SELECT a\nFROM t -- the table\nWHERE b = '--x'", None, "SELECT\tc FROM t"]
    path = tmp_path / "pred.txt"
    write_spider_predictions(path, sqls)
    lines = path.read_text().splitlines()
    assert lines == ["SELECT a FROM t WHERE b = '--x'", "SELECT", "SELECT c FROM t"]
    assert read_spider_predictions(path) == lines


def test_spider_reader_cuts_at_tab_and_keeps_blank_lines_as_missing(tmp_path):
    path = tmp_path / "pred.txt"
    path.write_text("SELECT 1\tconcert_singer\n\n  SELECT 2  \n\n\n")
    assert read_spider_predictions(path) == ["SELECT 1", None, "SELECT 2"]
    assert read_predictions(path) == ["SELECT 1", None, "SELECT 2"]


def test_bird_file_round_trip(tmp_path):
    path = tmp_path / "predict_dev.json"
    write_bird_predictions(path, ["SELECT 1", None], ["db_a", "db_b"])
    data = json.loads(path.read_text())
    assert data == {"0": f"SELECT 1{BIRD_SEPARATOR}db_a", "1": f"SELECT{BIRD_SEPARATOR}db_b"}
    assert read_bird_predictions(path) == ["SELECT 1", "SELECT"]
    assert read_predictions(path) == ["SELECT 1", "SELECT"]


def test_bird_reader_matches_by_key_and_follows_official_fallbacks(tmp_path):
    path = tmp_path / "predict.json"
    path.write_text(json.dumps({
        "2": f"SELECT 2{BIRD_SEPARATOR}x",
        "0": "  SELECT 0  ",                    # no separator: taken whole, stripped
        "3": 42,                                 # not a string: missing
    }))
    assert read_bird_predictions(path) == ["SELECT 0", None, "SELECT 2", None]
    path.write_text(
        json.dumps({"a": f"SELECT 1{BIRD_SEPARATOR}x", "b": f"SELECT 2{BIRD_SEPARATOR}y"})
    )
    assert read_bird_predictions(path) == ["SELECT 1", "SELECT 2"]


def test_score_file_in_either_format(db_root, tmp_path):
    for benchmark in ("spider", "bird"):
        dataset = _dataset(tmp_path, benchmark, ["SELECT name FROM singer", "SELECT 1"])
        path = tmp_path / f"preds-{benchmark}"
        write_predictions(path, dataset, ["SELECT name FROM singer", "SELECT 2"])
        report = score_file(dataset, path)
        assert [v.status for v in report.verdicts] == ["correct", "wrong"]


# -- datasets --------------------------------------------------------------------------------


def test_user_dataset_validation(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"question": "q", "db_id": "x"}]))
    with pytest.raises(ValueError, match="gold_sql"):
        load_dataset(path)
    path.write_text(json.dumps({"benchmark": "other", "examples": []}))
    with pytest.raises(ValueError, match="benchmark"):
        load_dataset(path)
    with pytest.raises(FileNotFoundError):
        load_dataset(tmp_path / "absent.json")


def test_user_dataset_paths_and_defaults(db_root, tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps([
        {"question": "q", "db_id": "music", "query": "SELECT count(*) FROM singer",
         "db_path": "dbs/music/music.sqlite"},
        {"question": "q", "db_id": "music", "SQL": "SELECT 1"},
    ]))
    dataset = load_dataset(path)
    assert dataset.benchmark == "spider"
    first, second = dataset.examples
    assert first.db_path == db_root / "music" / "music.sqlite"
    assert first.difficulty == "easy" and first.question_id == 0
    assert second.db_path is None  # looked up beside the file, where it is not


def test_builtin_datasets():
    try:
        spider = load_dataset("spider-dev")
        bird = load_dataset("bird-mini-dev")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    assert len(spider) == 1034
    assert spider.n_missing_db == sum(1 for e in spider.examples if e.db_id == "wta_1")
    assert {e.difficulty for e in spider.examples} == {"easy", "medium", "hard", "extra"}
    assert len(bird) == 500
    assert {e.difficulty for e in bird.examples} == {"simple", "moderate", "challenging"}
    assert all(e.evidence is not None for e in bird.examples)


def test_spider_dev_gold_scores_100_where_the_database_exists():
    try:
        spider = load_dataset("spider-dev")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    if spider.n_missing_db == len(spider):
        pytest.skip("no Spider databases")
    report = score_predictions(spider, [e.gold_sql for e in spider.examples])
    summary = report.summary
    assert summary["ex"] == 100.0
    assert summary["n_scored"] + summary["n_missing_db"] == 1034
    assert summary["n_gold_errors"] == 0
