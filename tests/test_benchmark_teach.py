"""``benchmarks/teach.py`` in short modes: on a tiny Spider-shaped data folder made here (where
taught examples must beat the shipped pool), and, as a slow test, ``--quick`` on Spider dev.
Shapes and sanity only: timings are checked to be measured, never how fast they are."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, data_dir, repo_module

bench = repo_module("benchmarks/teach.py")

# Two databases: "kilns" has a file, "ghost" has none (as wta_1 has none in Spider dev). In each,
# the first half is taught and every asked question is a rewording of a taught one with the very
# same SQL, on tables no shipped example names: the taught examples must find every skeleton,
# their copied SQL must run and be right, and the pool's copied SQL cannot run here.
ROWS = [
    {"db_id": "kilns", "question": "How many kilns fire above 1200 degrees?",
     "query": "SELECT count(*) FROM kiln WHERE max_temp > 1200"},
    {"db_id": "kilns", "question": "List the names of potters sorted by their first firing year.",
     "query": "SELECT potter_name FROM potter ORDER BY first_year"},
    {"db_id": "kilns", "question": "What is the number of kilns whose top temperature is over 1200 degrees?",
     "query": "SELECT count(*) FROM kiln WHERE max_temp > 1200"},
    {"db_id": "kilns", "question": "Give the potter names ordered by the year of their first firing.",
     "query": "SELECT potter_name FROM potter ORDER BY first_year"},
    {"db_id": "ghost", "question": "Which glaze recipes use cobalt?",
     "query": "SELECT recipe FROM glaze WHERE oxide = 'cobalt'"},
    {"db_id": "ghost", "question": "Show the glaze recipes that contain the oxide cobalt.",
     "query": "SELECT recipe FROM glaze WHERE oxide = 'cobalt'"},
]


@pytest.fixture
def tiny_data(tmp_path: Path) -> Path:
    spider = tmp_path / "spider"
    (spider / "database" / "kilns").mkdir(parents=True)
    (spider / "dev.json").write_text(json.dumps(ROWS))
    with sqlite3.connect(spider / "database" / "kilns" / "kilns.sqlite") as conn:
        conn.executescript("""
            CREATE TABLE kiln (kiln_id INTEGER PRIMARY KEY, max_temp INTEGER);
            INSERT INTO kiln VALUES (1, 1000), (2, 1250), (3, 1300);
            CREATE TABLE potter (potter_id INTEGER PRIMARY KEY, potter_name TEXT, first_year INTEGER);
            INSERT INTO potter VALUES (1, 'Lucie', 1938), (2, 'Bernard', 1920), (3, 'Hans', 1945);
        """)
    conn.close()
    return tmp_path


def _check_shares(figures: dict) -> None:
    for key, value in figures.items():
        if key.endswith("_share"):
            assert 0.0 <= value <= 1.0, key
    assert figures["top3_gain"] == pytest.approx(figures["taught_top3_share"] - figures["pool_top3_share"], abs=1e-4)
    assert figures["taught_top3_share"] <= figures["taught_any_share"]
    assert figures["pool_top3_share"] <= figures["pool_any_share"]
    assert figures["taught_top1_share"] <= figures["taught_top3_share"]
    assert figures["pool_top3_share"] <= figures["taught_and_pool_top3_share"] >= figures["taught_top3_share"]
    for name in ("taught", "pool"):
        assert 0.0 <= figures[f"ex_{name}"] <= 100.0
        assert sum(figures[f"ex_{name}_statuses"].values()) == figures["ex_questions"]
    assert figures["ex_gain_points"] == pytest.approx(figures["ex_taught"] - figures["ex_pool"], abs=0.011)
    assert figures["ex_questions"] + figures["ex_skipped_no_database"] == figures["questions"]


def _check_timing(timing: dict, sizes: list[int]) -> None:
    assert list(timing) == [str(s) for s in sizes]
    for size, t in timing.items():
        assert t["examples"] == int(size) and t["queries"] > 0
        assert t["build_s"] >= 0 and 0 < t["p50_ms"] <= t["p95_ms"], size


def test_split_teaches_the_first_half_of_each_database():
    halves = bench.split(ROWS)
    taught, asked = halves["kilns"]
    assert [t["question"] for t in taught] == [r["question"] for r in ROWS[:2]]
    assert [(a["index"], a["db_id"]) for a in asked] == [(2, "kilns"), (3, "kilns")]
    assert [len(t) for t, _ in halves.values()] == [2, 1] and [len(a) for _, a in halves.values()] == [2, 1]
    alternate = bench.split(ROWS, "alternate")
    assert [a["index"] for a in alternate["kilns"][1]] == [1, 3]
    with pytest.raises(ValueError):
        bench.split(ROWS, "random")


def test_synthetic_examples_are_sized_seeded_and_from_dev():
    examples = bench.synthetic_examples(ROWS, 40, seed=3)
    assert len(examples) == 40 and len({e["id"] for e in examples}) == 40
    assert examples == bench.synthetic_examples(ROWS, 40, seed=3)
    # the pairs as they are first, then varied wordings of the same pairs with the same SQL
    assert [e["question"] for e in examples[:6]] == [r["question"] for r in ROWS]
    assert all(e["sql"] == ROWS[i % 6]["query"] for i, e in enumerate(examples))
    assert any(e["question"] != ROWS[i % 6]["question"] for i, e in enumerate(examples[6:], 6))


def test_taught_examples_beat_the_pool_on_the_tiny_fixture(tiny_data: Path, capsys):
    assert bench.main(["--data", str(tiny_data), "--sizes", "10", "50", "--queries", "3",
                       "--workers", "1", "--timeout", "30"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    figures = json.loads(lines[0])
    _check_shares(figures)
    assert (figures["questions"], figures["taught_examples"], figures["databases"]) == (3, 3, 2)
    assert figures["taught_top3_share"] == figures["taught_top1_share"] == 1.0
    assert figures["taught_top3_share"] >= figures["pool_top3_share"] and figures["top3_gain"] >= 0
    # both kilns questions copy a taught query that is their gold; the pool's SQL cannot run here
    assert (figures["ex_questions"], figures["ex_skipped_no_database"]) == (2, 1)
    assert figures["ex_taught"] == 100.0 and figures["ex_taught_statuses"] == {"correct": 2}
    assert figures["ex_pool"] == 0.0 and figures["ex_gain_points"] == 100.0
    _check_timing(figures["timing"], [10, 50])
    assert figures["goal_met_at_10000"] is None  # 10,000 was not timed
    assert figures["params"] == {"data": str(tiny_data), "split": "halves", "limit": None, "k": 3, "sizes": [10, 50],
                                 "queries": 3, "timeout_s": 30.0, "workers": 1, "seed": 0, "quick": False}


def test_quick_sets_short_defaults_unless_given():
    args = bench.parse_args(["--quick", "--limit=7"])
    assert (args.limit, args.queries, args.sizes) == (7, 50, [100, 10_000])
    assert bench.parse_args([]).sizes == [100, 10_000, 100_000]


@pytest.mark.slow
def test_quick_run_on_spider_dev():
    if not (data_dir() / "spider" / "dev.json").is_file():
        pytest.skip(f"Spider dev not found under {data_dir()}")
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "teach.py"), "--quick", "--timeout", "60"],
                         capture_output=True, text=True, timeout=600, check=True)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1
    figures = json.loads(lines[0])
    _check_shares(figures)
    assert figures["questions"] == 60 and figures["databases"] == 20
    _check_timing(figures["timing"], [100, 10_000])
    assert isinstance(figures["goal_met_at_10000"], bool)
