"""Scoring, rule by rule: how Spider's scorer rewrites the two texts, when two results are the
same without sorting, one question's verdict over a test suite of databases with its Soft-F1 on
the texts as written, and which R-VES tier a time ratio is in. Each case changes its answer when
its rule changes; the whole path through files, workers and the CLI is tests/test_scoring.py's and
tests/test_bird_metrics.py's."""

from __future__ import annotations

import itertools
import json
import locale
import math
import sqlite3
import threading
import time
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sqlchorus.evaluation import scoring, ves
from sqlchorus.evaluation.datasets import Dataset, Example
from sqlchorus.evaluation.soft_f1 import soft_f1
from sqlchorus.tools.sql.errors import NotAQueryError

SINGERS = [(1, "Ann", 52), (2, "Bob", 30), (3, "Cy", 41), (4, "Di", 25), (5, "Ed", 41)]


def _database(path: Path, singers: list[tuple[int, str, int]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, age INTEGER)")
        conn.executemany("INSERT INTO singer VALUES (?, ?, ?)", singers)
    conn.close()
    return path


@pytest.fixture
def music(tmp_path: Path):
    """``music.sqlite``, and beside it a second database of the same tables (a test suite) in
    which Cy is 39: a query that only happens to give the gold's rows on the first fails there."""
    first = _database(tmp_path / "music" / "music.sqlite", SINGERS)
    _database(tmp_path / "music" / "music_suite.sqlite", [(3, "Cy", 39) if s[0] == 3 else s for s in SINGERS])
    scoring._close_databases()
    yield str(first)
    scoring._close_databases()


def score(db: str, gold: str, pred: str, *, keep: bool = False, f1: bool = False):
    return scoring._score_spider(db, "sqlite", gold, pred, 5.0, keep, f1)


# -- the texts as Spider's scorer runs them ------------------------------------------------------


@pytest.mark.parametrize("gold, pred, keep, expected", [
    ("SELECT DISTINCT a FROM t", "SELECT DISTINCT a FROM t WHERE b = value AND c > = 2", False,
     ("SELECT  a FROM t", "SELECT  a FROM t WHERE b = 1 AND c >= 2", False)),
    ("SELECT DISTINCT a FROM t", "SELECT DISTINCT a FROM t", True,
     ("SELECT DISTINCT a FROM t", "SELECT DISTINCT a FROM t", False)),
    ("SELECT a FROM t ORDER BY a", "SELECT a FROM t WHERE y = YEAR(CURDATE())", False,
     ("SELECT a FROM t ORDER BY a", "SELECT a FROM t WHERE y = 2020", True)),
    # The placeholder is the word between spaces, in the prediction only.
    ("SELECT a FROM t WHERE x = value ", "SELECT a FROM t WHERE x = value ", False,
     ("SELECT a FROM t WHERE x = value ", "SELECT a FROM t WHERE x = 1 ", False)),
])
def test_the_texts_spider_runs(gold, pred, keep, expected):
    assert scoring._spider_texts(gold, pred, keep) == expected


# -- the same rows, without sorting ---------------------------------------------------------------


@pytest.mark.parametrize("gold, pred, same", [
    ([(1, "a")], [(1, "a")], True),
    ([(1,)], [(1.0,)], False),  # equal in Python, not the same values
    ([(0.0,)], [(-0.0,)], False),
    ([(1,), (2,)], [(2,), (1,)], False),  # the same rows in another order
    ([(1,)], [(2,)], False),
    ([], [], True),
])
def test_the_same_rows_are_the_same_values_types_and_order(gold, pred, same):
    assert scoring._same_rows(gold, pred) is same


# -- one question's verdict ----------------------------------------------------------------------


def test_a_query_right_on_every_database_of_the_suite_is_correct(music):
    assert score(music, "SELECT name FROM singer WHERE age > 40", "SELECT name FROM singer WHERE age > 38") \
        == ("wrong", None, None)  # Cy is 39 in the suite's second database
    assert score(music, "SELECT name FROM singer WHERE age > 40", "SELECT name FROM singer WHERE age > 40") \
        == ("correct", None, None)
    # SQLite files are read directly, not through an engine's guard.
    assert all(type(db) is scoring._Reader for db in scoring._local.dbs.values())


def test_rows_in_another_order_are_right_unless_the_gold_orders_them(music):
    assert score(music, "SELECT name FROM singer", "SELECT name FROM singer ORDER BY name DESC")[0] == "correct"
    assert score(music, "SELECT name FROM singer ORDER BY age", "SELECT name FROM singer ORDER BY age DESC")[0] \
        == "wrong"


def test_distinct_counts_only_when_kept(music):
    gold, pred = "SELECT DISTINCT age FROM singer", "SELECT age FROM singer"
    assert score(music, gold, pred)[0] == "correct"
    assert score(music, gold, pred, keep=True)[0] == "wrong"


def test_a_query_that_fails_is_its_own_verdict_with_its_error(music):
    status, error, f1 = score(music, "SELECT name FROM singer", "SELECT nme FROM singer", f1=True)
    assert (status, f1) == ("pred_error", 0.0) and "nme" in error
    status, error, f1 = score(music, "SELECT nme FROM singer", "SELECT name FROM singer", f1=True)
    assert (status, f1) == ("gold_error", 0.0) and "nme" in error


def test_soft_f1_is_of_the_texts_as_written(music):
    gold = "SELECT name FROM singer WHERE age > 40"
    expected = soft_f1([("Ann",), ("Cy",)], [("Ann",), ("Cy",), ("Ed",)])
    assert score(music, gold, "SELECT name FROM singer WHERE age > 45 OR name = 'Cy'", f1=True) \
        == ("wrong", None, expected)
    # Spider's rewrite makes the placeholder a number, and the verdict is of the rewrite; Soft-F1
    # is BIRD's, of the query as written, which has no column named value.
    assert score(music, "SELECT name FROM singer WHERE age > 1 ", "SELECT name FROM singer WHERE age > value ",
                 f1=True) == ("correct", None, 0.0)


# -- R-VES's tiers -------------------------------------------------------------------------------


@pytest.mark.parametrize("ratio, bounds", [
    (0.1, (0.0, 0.25)), (0.25, (0.25, 0.5)), (0.3, (0.25, 0.5)), (0.5, (0.5, 1.0)), (1.0, (1.0, 2.0)),
    (1.99, (1.0, 2.0)), (2.0, (2.0, math.inf)), (1e9, (2.0, math.inf)), (math.inf, (2.0, math.inf)),
])
def test_a_ratio_is_in_the_tier_from_its_lower_bound(ratio, bounds):
    assert ves._tier_bounds(ratio) == bounds
    assert ves.reward(ratio) == ves.reward(bounds[0] or 0.1)


def test_a_ratio_of_zero_earns_nothing_and_one_under_a_quarter_the_floor():
    assert ves.reward(0.0) == 0.0
    assert ves.reward(0.2) == 0.25


# -- the statement check before a query runs -----------------------------------------------------


@pytest.mark.parametrize("sql", [
    "SELECT 1",
    "with x AS (SELECT 1) SELECT * FROM x",
    "  -- why\n/* how */ ((SELECT 1))",  # comments, blanks and parentheses before the keyword
    "SELECT 1" + " " * (scoring.MAX_SQL_CHARS - 8),  # exactly as long as allowed
], ids=["select", "with", "after-comments-and-parentheses", "at-the-length-limit"])
def test_a_read_query_passes_the_check(sql):
    assert scoring._check_query(sql) is None


@pytest.mark.parametrize("sql, message", [
    ("", "The SQL text is empty."),
    (" \n\t ", "The SQL text is empty."),
    ("SELECT 1" + " " * (scoring.MAX_SQL_CHARS - 7), "The SQL text is longer than 20000 characters."),
    ("DELETE FROM singer", "Only read queries (SELECT or WITH) may run."),
    ("-- SELECT\nPRAGMA table_info(singer)", "Only read queries (SELECT or WITH) may run."),
], ids=["empty", "blank", "one-past-the-length-limit", "a-write", "a-select-in-a-comment"])
def test_anything_else_is_refused_with_its_reason_and_its_text(sql, message):
    with pytest.raises(NotAQueryError) as refused:
        scoring._check_query(sql)
    assert (refused.value.message, refused.value.sql) == (message, sql)


# -- the rows of each side, and how each side fails ----------------------------------------------

# Far more virtual-machine steps than a progress handler waits between two calls.
LONG = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 50000) SELECT count(*) FROM c"
PAST = -1.0  # a time limit whose deadline has passed before the query starts


def _readers() -> set[str]:
    return {type(db).__name__ for db in scoring._local.dbs.values()}


@pytest.mark.parametrize("side", [scoring._gold_rows, scoring._pred_rows], ids=["gold", "prediction"])
def test_the_rows_of_a_sqlite_file_are_read_directly(music, side):
    assert side(music, "SELECT name FROM singer WHERE age > 40", 5.0, "sqlite") == [("Ann",), ("Cy",), ("Ed",)]
    assert _readers() == {"_Reader"}


@pytest.mark.parametrize("side, sql, timeout_s, status, error", [
    (scoring._gold_rows, "SELECT nme FROM singer", 5.0, "gold_error", "no such column: nme"),
    (scoring._gold_rows, LONG, PAST, "gold_error", "The query ran longer than its -1 s budget and was stopped."),
    (scoring._pred_rows, "SELECT nme FROM singer", 5.0, "pred_error", "no such column: nme"),
    (scoring._pred_rows, LONG, PAST, "timeout", "The query ran longer than its -1 s budget and was stopped."),
    (scoring._pred_rows, "DELETE FROM singer", 5.0, "pred_error", "Only read queries (SELECT or WITH) may run."),
], ids=["gold-error", "gold-out-of-time-is-a-gold-error", "pred-error", "pred-out-of-time-is-a-timeout",
        "pred-refused"])
def test_a_side_that_fails_is_its_verdict_with_its_message(music, side, sql, timeout_s, status, error):
    with pytest.raises(scoring._QueryFailed) as failed:
        side(music, sql, timeout_s, "sqlite")
    assert (failed.value.status, failed.value.error) == (status, error)


# -- one BIRD question ---------------------------------------------------------------------------


def bird(db: str, gold: str, pred: str, *, f1: bool = True, timeout_s: float = 5.0, engine: str = "sqlite"):
    return scoring._score_bird(db, engine, gold, pred, timeout_s, f1)


@pytest.mark.parametrize("gold, pred, timeout_s, expected", [
    ("SELECT name FROM singer WHERE age > 40", "SELECT name FROM singer WHERE age >= 41", 5.0,
     ("correct", None, 1.0)),
    ("SELECT name FROM singer WHERE age > 40", "SELECT name FROM singer WHERE age > 45", 5.0,
     ("wrong", None, 0.5)),  # Ann against Ann, then a gold row past the prediction's end
    ("SELECT name FROM singer", "SELECT nme FROM singer", 5.0, ("pred_error", "no such column: nme", 0.0)),
    ("SELECT nme FROM singer", "SELECT name FROM singer", 5.0, ("gold_error", "no such column: nme", 0.0)),
    # The prediction runs first: a query out of time on both sides is the prediction's timeout.
    (LONG, LONG, PAST, ("timeout", "The query ran longer than its -1 s budget and was stopped.", 0.0)),
], ids=["correct", "wrong", "pred-error", "gold-error", "timeout"])
def test_a_bird_verdict_runs_the_prediction_then_the_gold(music, gold, pred, timeout_s, expected):
    assert bird(music, gold, pred, timeout_s=timeout_s) == expected
    assert bird(music, gold, pred, timeout_s=timeout_s, f1=False) == (*expected[:2], None)
    assert _readers() == {"_Reader"}


@pytest.fixture
def closed():
    """No database open in this thread before the test, and none left open after it."""
    scoring._close_databases()
    yield
    scoring._close_databases()


@pytest.mark.parametrize("name, content, error", [
    ("broken.sqlite", b"not a database at all " * 50, "{path} is not a SQLite database (its header does not match)."),
    ("missing.sqlite", None, "No database at {path}: the file does not exist."),
], ids=["not-sqlite", "missing"])
def test_an_unreadable_database_is_a_gold_error_not_the_predictions(tmp_path, closed, name, content, error):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    message = error.format(path=path)
    assert bird(str(path), "SELECT 1", "SELECT 1") == ("gold_error", message, 0.0)
    assert bird(str(path), "SELECT 1", "SELECT 1", f1=False) == ("gold_error", message, None)


@pytest.fixture
def duck(tmp_path: Path, closed) -> str:
    """``music.duckdb``, alone in its folder: Ann and Bob."""
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path / "duck" / "music.duckdb"
    path.parent.mkdir()
    conn = duckdb.connect(str(path))
    conn.execute("CREATE TABLE singer (singer_id INTEGER, name TEXT, age INTEGER)")
    conn.execute("INSERT INTO singer VALUES (1, 'Ann', 52), (2, 'Bob', 30)")
    conn.close()
    return str(path)


def test_a_database_on_another_engine_is_read_through_that_engine(duck):
    assert bird(duck, "SELECT name FROM singer ORDER BY age", "SELECT name FROM singer ORDER BY age",
                engine="duckdb") == ("correct", None, 1.0)
    assert _readers() == {"_EngineReader"}


def test_a_file_that_is_not_of_the_datasets_engine_scores_no_soft_f1(duck):
    # A SQLite dataset naming a DuckDB file: the file is unreadable as SQLite, for the verdict and
    # for Soft-F1 alike, though DuckDB could read it.
    message = f"{duck} is not a SQLite database (its header does not match)."
    assert score(duck, "SELECT name FROM singer", "SELECT name FROM singer", f1=True) == ("gold_error", message, 0.0)


# -- one task, as a worker runs it ---------------------------------------------------------------


class _Timed:
    """R-VES's timing replaced by a recorder: which texts it would time, on which database, by which
    deadline, in which thread, warmed up or not; every timing earns 1.25 in 7 iterations."""

    def __init__(self, monkeypatch):
        self.stopwatches: list[tuple[str, float]] = []
        self.timings: list[tuple[str, str, Any, int]] = []
        self.threads: list[tuple[str, bool]] = []
        monkeypatch.setattr(ves, "fresh_connection_stopwatch", self.stopwatch)
        monkeypatch.setattr(ves, "time_reward", self.time_reward)

    def stopwatch(self, db_path, deadline):
        self.stopwatches.append((db_path, deadline))
        return "stopwatch"

    def time_reward(self, pred, gold, stopwatch, *, iterations, warm_up):
        self.timings.append((pred, gold, stopwatch, iterations))
        self.threads.append((threading.current_thread().name, warm_up))
        return ves.Timing(reward=1.25, ratio=3.0, iterations=7)


@pytest.fixture
def timed(monkeypatch):
    return _Timed(monkeypatch)


def _clock(monkeypatch, module, *, perf_counter=None, monotonic=None):
    """``module``'s clock replaced: each function gives its values in turn, the last one for good."""
    def ticks(values):
        values = iter(values)
        last = [None]

        def tick():
            last[0] = next(values, last[0])
            return last[0]
        return tick
    real = SimpleNamespace(perf_counter=time.perf_counter, monotonic=time.monotonic)
    monkeypatch.setattr(module, "time", SimpleNamespace(
        perf_counter=ticks(perf_counter) if perf_counter else real.perf_counter,
        monotonic=ticks(monotonic) if monotonic else real.monotonic,
    ))


@pytest.mark.parametrize("f1", [True, False], ids=["soft-f1", "ex-only"])
def test_a_task_that_breaks_costs_one_verdict_a_gold_error(tmp_path, closed, monkeypatch, f1):
    gone = tmp_path / "gone"  # the database's folder, listed for its test suite, is not there
    _clock(monkeypatch, scoring, perf_counter=[100.0, 100.25])
    task = (3, "spider", str(gone / "music.sqlite"), "sqlite", "SELECT 1", "SELECT 1", 5.0, False, f1, 0)
    assert scoring._score_task(task) == (
        3, "gold_error", f"FileNotFoundError: [Errno 2] No such file or directory: '{gone}'",
        250.0, 0.0 if f1 else None, None, 0,
    )


def test_a_bird_task_is_scored_and_timed_as_written(music, timed):
    gold, pred = "SELECT count(*) FROM singer", "SELECT count(*) AS value FROM singer"
    task = (0, "bird", music, "sqlite", gold, pred, 5.0, False, True, 3)
    index, status, error, _, f1, reward, iterations = scoring._score_task(task)
    assert (index, status, error, f1, reward, iterations) == (0, "correct", None, 1.0, 1.25, 7)
    assert timed.timings == [(pred, gold, "stopwatch", 3)]  # Spider's " value " rewrite is not BIRD's
    assert timed.threads == [("sqlchorus-ves", True)]  # a thread of its own, warmed up, as the official
    assert _readers() == {"_Reader"}


def test_a_spider_task_keeps_distinct_when_told_for_the_verdict_and_the_timing(music, timed):
    def task(gold, pred):
        return (1, "spider", music, "sqlite", gold, pred, 5.0, True, False, 3)
    assert scoring._score_task(task("SELECT DISTINCT age FROM singer", "SELECT age FROM singer"))[1:3] \
        == ("wrong", None)
    assert timed.timings == []
    result = scoring._score_task(task("SELECT DISTINCT age FROM singer", "SELECT DISTINCT age FROM singer"))
    assert (result[1], result[4:]) == ("correct", (None, 1.25, 7))
    assert timed.timings == [("SELECT DISTINCT age FROM singer", "SELECT DISTINCT age FROM singer", "stopwatch", 3)]
    assert _readers() == {"_Reader"}


# -- which questions R-VES times, and what ------------------------------------------------------


@pytest.mark.parametrize("engine, iterations, status, expected", [
    ("sqlite", 0, "correct", (None, 0)),  # R-VES not asked for
    ("duckdb", 3, "correct", (None, 0)),  # another engine's questions are not timed
    ("sqlite", 3, "wrong", (0.0, 0)),
    ("sqlite", 3, "pred_error", (0.0, 0)),
], ids=["not-asked", "another-engine", "wrong", "pred-error"])
def test_only_a_correct_prediction_on_sqlite_is_timed(music, timed, engine, iterations, status, expected):
    assert scoring._ves("bird", music, engine, "SELECT 1", "SELECT 1", 5.0, False, iterations, status) == expected
    assert timed.timings == [] and timed.stopwatches == []


@pytest.mark.parametrize("benchmark, keep, gold, pred, timed_texts", [
    ("bird", False, "SELECT DISTINCT age FROM singer", "SELECT age AS value FROM singer",
     ("SELECT age AS value FROM singer", "SELECT DISTINCT age FROM singer")),
    ("spider", False, "SELECT DISTINCT age FROM singer WHERE age > = 30",
     "SELECT DISTINCT age FROM singer WHERE age > value ",
     ("SELECT  age FROM singer WHERE age > 1 ", "SELECT  age FROM singer WHERE age >= 30")),
    ("spider", True, "SELECT DISTINCT age FROM singer", "SELECT DISTINCT age FROM singer WHERE age > value ",
     ("SELECT DISTINCT age FROM singer WHERE age > 1 ", "SELECT DISTINCT age FROM singer")),
], ids=["bird-as-written", "spider-rewritten", "spider-keeping-distinct"])
def test_r_ves_times_the_texts_the_verdict_ran_within_the_whole_budget(music, timed, benchmark, keep, gold, pred,
                                                                        timed_texts):
    before = time.monotonic()
    assert scoring._ves(benchmark, music, "sqlite", gold, pred, 5.0, keep, 3, "correct") == (1.25, 7)
    after = time.monotonic()
    assert timed.timings == [(*timed_texts, "stopwatch", 3)]
    [(db_path, deadline)] = timed.stopwatches
    assert db_path == music and before + 15.0 <= deadline <= after + 15.0  # 5 s for each of 3 iterations


# -- the summary ---------------------------------------------------------------------------------


def _verdicts(*rows: tuple) -> list[scoring.Verdict]:
    return [
        scoring.Verdict(index=i, question_id=i, db_id="music", difficulty=difficulty, status=status,
                        soft_f1=rest[0] if rest else None, ves_reward=rest[1] if rest else None,
                        ves_iterations=rest[2] if rest else 0)
        for i, (difficulty, status, *rest) in enumerate(rows)
    ]


def test_a_spider_summary_counts_each_status_in_total_and_by_hardness():
    verdicts = _verdicts(
        ("extra", "correct"), ("easy", "correct"), ("easy", "wrong"), ("easy", "missing_db"), ("hard", "pred_error"),
        ("hard", "timeout"), ("b-other", "correct"), ("extra", "gold_error"), ("extra", "missing_prediction"),
        ("a-other", "missing_db"), ("hard", "wrong"),
    )
    summary = scoring.summarize(verdicts, "spider")
    assert summary == {
        "ex": 33.33,  # 3 correct of the 9 whose database is there
        "n_total": 11, "n_scored": 9, "n_correct": 3, "n_missing_db": 2, "n_missing_prediction": 1,
        "n_pred_errors": 1, "n_timeouts": 1, "n_gold_errors": 1,
        "by_difficulty": {
            "easy": {"n": 2, "ex": 50.0, "n_missing_db": 1},
            "hard": {"n": 3, "ex": 0.0, "n_missing_db": 0},
            "extra": {"n": 3, "ex": 33.33, "n_missing_db": 0},
            "a-other": {"n": 0, "ex": None, "n_missing_db": 1},
            "b-other": {"n": 1, "ex": 100.0, "n_missing_db": 0},
        },
    }
    # Spider's hardness order, a level without questions left out, then any other level by name.
    assert list(summary["by_difficulty"]) == ["easy", "hard", "extra", "a-other", "b-other"]


def test_a_bird_summary_with_its_metrics_reports_them_in_total_and_by_difficulty():
    verdicts = _verdicts(
        ("challenging", "correct", 1.0, 0.25, 20), ("simple", "correct", 1.0, 1.25, 100),
        ("simple", "wrong", 0.5, 0.0, 0), ("moderate", "correct", 0.25, 1.0, 20),
        ("challenging", "missing_db", None, None, 0), ("moderate", "pred_error", 0.0, 0.0, 0),
    )
    summary = scoring.summarize(verdicts, "bird", ("ex", "soft_f1", "r_ves"))
    assert summary == {
        "ex": 60.0, "metrics": ["ex", "soft_f1", "r_ves"],
        "soft_f1": 55.0,  # (1 + 1 + 0.5 + 0.25 + 0) / 5
        "r_ves": 52.36,  # (50 + 111.80 + 0 + 100 + 0) / 5
        "ves_iterations": {"total": 140, "timed": 3, "mean": 46.67},
        "n_total": 6, "n_scored": 5, "n_correct": 3, "n_missing_db": 1, "n_missing_prediction": 0,
        "n_pred_errors": 1, "n_timeouts": 0, "n_gold_errors": 0,
        "by_difficulty": {
            "simple": {"n": 2, "ex": 50.0, "n_missing_db": 0, "soft_f1": 75.0, "r_ves": 55.9},
            "moderate": {"n": 2, "ex": 50.0, "n_missing_db": 0, "soft_f1": 12.5, "r_ves": 50.0},
            "challenging": {"n": 1, "ex": 100.0, "n_missing_db": 1, "soft_f1": 100.0, "r_ves": 50.0},
        },
    }
    assert list(summary["by_difficulty"]) == ["simple", "moderate", "challenging"]


def test_r_ves_is_none_where_a_question_was_not_timed():
    # A question on another engine has no reward: R-VES cannot be given, and no timing was taken.
    summary = scoring.summarize(_verdicts(("simple", "correct", 1.0, None, 0)), "bird", ("ex", "r_ves"))
    assert {k: summary[k] for k in ("metrics", "r_ves", "ves_iterations")} == {
        "metrics": ["ex", "r_ves"], "r_ves": None, "ves_iterations": {"total": 0, "timed": 0, "mean": None},
    }
    assert summary["by_difficulty"] == {"simple": {"n": 1, "ex": 100.0, "n_missing_db": 0, "r_ves": None}}


@pytest.mark.parametrize("correct, total, ex", [
    (0, 0, None), (1, 3, 33.33), (2, 3, 66.67), (1, 8, 12.5), (3, 3, 100.0),
], ids=["none-scored", "a-third", "two-thirds", "an-eighth", "all"])
def test_ex_is_the_percentage_correct_to_two_places(correct, total, ex):
    verdicts = _verdicts(*[("easy", "correct")] * correct, *[("easy", "wrong")] * (total - correct))
    assert scoring._percent(verdicts) == ex


def test_an_unknown_metric_is_named_with_the_known_ones():
    with pytest.raises(ValueError) as unknown:
        scoring.parse_metrics("ex, BLEU,rouge-l", "bird")
    assert str(unknown.value) == "Unknown metric 'bleu', 'rouge_l': the metrics are ex, soft_f1, r_ves."


# -- prediction files ----------------------------------------------------------------------------


@pytest.mark.parametrize("sql, line", [
    ("SELECT a -- the name\nFROM t", "SELECT a FROM t"),
    ("SELECT a --x\nFROM t", "SELECT a FROM t"),  # a comment ends at its line's end, whatever its length
    ("SELECT a FROM t -- last", "SELECT a FROM t"),
    ("SELECT 'a--b' FROM t -- c", "SELECT 'a--b' FROM t"),
    ('SELECT "a--b" FROM t -- c', 'SELECT "a--b" FROM t'),
    ("SELECT `a--b` FROM t -- c", "SELECT `a--b` FROM t"),
    ("SELECT [a--b] FROM t -- c", "SELECT [a--b] FROM t"),
    ("SELECT 'it''s' -- c\n,  [x]\n\tFROM t", "SELECT 'it''s' , [x] FROM t"),
    (None, "SELECT"), (" \n", "SELECT"), ("-- nothing but a comment", "SELECT"),
], ids=["comment-line", "short-comment", "comment-at-the-end", "in-single-quotes", "in-double-quotes",
        "in-backquotes", "in-brackets", "doubled-quote-and-blanks", "none", "blank", "only-a-comment"])
def test_a_query_on_one_line_loses_its_comments_but_not_its_quoted_text(sql, line):
    assert scoring.one_line(sql) == line


def _bird_file(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


S = scoring.BIRD_SEPARATOR


@pytest.mark.parametrize("value, sql", [
    (f"SELECT a{S}music", "SELECT a"),
    (f"  SELECT a {S}music", "  SELECT a "),  # the part before the separator, as it is
    ("  SELECT a  ", "SELECT a"),  # no separator: the whole value, stripped
    (f"SELECT a{S}music{S}music", f"SELECT a{S}music{S}music"),  # two separators: the whole value
    (3, None), (None, None),
], ids=["separated", "separated-unstripped", "whole", "two-separators", "a-number", "null"])
def test_a_bird_value_is_the_query_before_its_one_separator(value, sql):
    assert scoring._bird_sql(value) == sql


@pytest.mark.parametrize("key, is_int", [
    ("7", True), (" 12 ", True), ("-3", True), ("3-", False), ("X1", False), ("1.5", False), ("", False),
])
def test_a_key_is_a_question_index_when_it_is_a_whole_number(key, is_int):
    assert scoring._is_int(key) is is_int


@pytest.mark.parametrize("data, sqls", [
    ({"1": f"SELECT b{S}music", "0": f"SELECT a{S}music"}, ["SELECT a", "SELECT b"]),
    ({"2": f"SELECT c{S}music"}, [None, None, "SELECT c"]),
    ({"b": "SELECT b", "a": "SELECT a", "c": 1}, ["SELECT b", "SELECT a", None]),  # by position
    ({}, []),
], ids=["by-key", "sparse", "keys-not-numbers", "empty"])
def test_a_bird_file_is_read_by_question_index(tmp_path, data, sqls):
    assert scoring.read_bird_predictions(_bird_file(tmp_path / "p.json", data)) == sqls


@pytest.mark.parametrize("indices, message", [
    ([1009], None), ([1010], "question index 1010 is out of range for 1 predictions."),
    ([0, 1019], None), ([0, 1020], "question index 1020 is out of range for 2 predictions."),
    ([-1], "negative question index."),
], ids=["last-in-range-for-1", "first-out-for-1", "last-in-range-for-2", "first-out-for-2", "negative"])
def test_a_question_index_far_past_the_entries_is_a_wrong_file(tmp_path, indices, message):
    # Up to ten positions an entry, and a thousand more.
    path = _bird_file(tmp_path / "p.json", {str(i): f"SELECT {i}" for i in indices})
    if message is None:
        sqls = scoring.read_bird_predictions(path)
        assert len(sqls) == max(indices) + 1 and sqls[-1] == f"SELECT {max(indices)}"
        return
    with pytest.raises(ValueError) as wrong:
        scoring.read_bird_predictions(path)
    assert str(wrong.value) == f"{path}: {message}"


def test_a_bird_file_is_a_json_object(tmp_path):
    path = _bird_file(tmp_path / "p.json", ["SELECT 1"])
    with pytest.raises(ValueError) as wrong:
        scoring.read_bird_predictions(path)
    assert str(wrong.value) == f"{path}: a BIRD prediction file is a JSON object."


@pytest.mark.parametrize("text, sqls", [
    ("\n  " + json.dumps({"0": f"SELECT a{S}music"}), ["SELECT a"]),  # blanks before the object
    ("SELECT a\tfrom the model\n\nSELECT b\n\n", ["SELECT a", None, "SELECT b"]),
    ('["SELECT a"]\n', ['["SELECT a"]']),
    ("{ not json\n", ["{ not json"]),
], ids=["bird", "spider", "a-json-list-is-a-line", "not-json-is-a-line"])
def test_a_prediction_file_is_birds_when_it_is_a_json_object(tmp_path, text, sqls):
    path = tmp_path / "pred.txt"
    path.write_text(text, encoding="utf-8")
    assert scoring.read_predictions(path) == sqls


@pytest.fixture
def ascii_locale():
    """The C locale, whose encoding is ASCII: what a file read without naming its encoding is read as."""
    saved = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    yield
    locale.setlocale(locale.LC_CTYPE, saved)


def test_prediction_files_are_utf_8_whatever_the_locale(tmp_path, ascii_locale):
    bird_file = _bird_file(tmp_path / "p.json", {"0": f"SELECT 'café'{S}music"})
    assert scoring.read_bird_predictions(bird_file) == ["SELECT 'café'"]
    assert scoring.read_predictions(bird_file) == ["SELECT 'café'"]
    spider_file = tmp_path / "pred.txt"
    spider_file.write_text("SELECT 'café'\n", encoding="utf-8")
    assert scoring.read_predictions(spider_file) == ["SELECT 'café'"]


def _questions(n: int) -> Dataset:
    return Dataset(name="tiny", benchmark="spider", source=Path("."), examples=[
        Example(question_id=i, db_id="music", db_path=None, question="?", evidence="", gold_sql="SELECT 1",
                difficulty="easy")
        for i in range(n)
    ])


@pytest.mark.parametrize("predictions, aligned", [
    (["SELECT a"], ["SELECT a", None, None]),
    ({1: "SELECT b"}, [None, "SELECT b", None]),
    ({}, [None, None, None]),
], ids=["a-short-list", "by-position", "none"])
def test_predictions_are_aligned_with_the_questions(predictions, aligned):
    assert scoring._aligned(_questions(3), predictions) == aligned


def test_more_predictions_than_questions_is_an_error():
    with pytest.raises(ValueError) as wrong:
        scoring._aligned(_questions(3), ["SELECT 1"] * 4)
    assert str(wrong.value) == "4 predictions for 3 questions of tiny: too many."


# -- Soft-F1 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("pred, gold, f1", [
    # Row by row: (1, 5) against (1, 2) is half a true positive, half a false positive and half a
    # false negative; (3, 4) against itself one true positive: P = R = 1.5 / 2.
    ([(1, 5), (3, 4)], [(1, 2), (3, 4)], 0.75),
    ([(1, 3)], [(1, 2)], 0.5),
    ([(1,)], [], 0.0),
    ([], [(1,)], 0.0),
    ([], [], 1.0),
], ids=["sums-over-rows", "half-right", "no-gold-rows", "no-predicted-rows", "both-empty"])
def test_soft_f1_sums_each_count_over_the_rows(pred, gold, f1):
    assert soft_f1(pred, gold) == f1


def test_a_result_the_official_script_cannot_score_scores_zero():
    assert scoring._soft_f1([(1,)], [()]) == 0.0  # a gold row of no columns: a division by zero


# -- R-VES: cleaning, settling, timing -----------------------------------------------------------


@pytest.mark.parametrize("ratios, kept", [
    ([1.0] * 10 + [0.0], [1.0] * 10),  # 3.02 deviations under the mean
    ([1.0] * 10 + [2.0], [1.0] * 10),  # 3.02 deviations over it
    ([1.0, 7.0] + [4.0] * 16, [4.0] * 16),  # exactly 3 deviations either side: mean 4, deviation 1
    ([2.0, 2.0, 2.0], [2.0, 2.0, 2.0]),  # none strictly within zero deviations: all kept
    ([Fraction(1, 4), Fraction(1, 2)], [0.25, 0.5]),  # any real numbers, as floats
], ids=["low-outlier", "high-outlier", "on-the-bounds", "all-equal", "fractions"])
def test_cleaning_keeps_the_ratios_strictly_within_three_deviations(ratios, kept):
    assert ves.cleaned(ratios) == kept


@pytest.mark.parametrize("n, total, squares, iterations, is_settled", [
    (100, 100.0, 100.0, 100, True),  # all done, though a mean of 1 is on a bound
    (9, 27.0, 81.0, 100, False),  # too few yet, however plain
    (10, 30.0, 90.0, 100, True),  # ten ratios of 3, well inside [2, inf)
    (10, 30.0, 96.4, 100, True),  # deviation 0.8: 4 standard errors are 0.96 < 1
    (10, 30.0, 130.0, 100, False),  # deviation 2: 4 standard errors are 2.4
    (10, 21.0, 44.1, 100, False),  # a fifth of 2.1 reaches under the bound of 2
    (10, 25.0, 62.5, 100, True),  # a fifth of 2.5 reaches the bound of 2 exactly: still inside
    (32, 24.0, 26.0, 64, False),  # 0.75 with 4 standard errors of 0.25 reaches the bound of 1: outside
], ids=["all-run", "too-few", "plain", "narrow-spread", "wide-spread", "near-the-bound", "down-to-the-bound",
        "up-to-the-bound"])
def test_a_tier_is_settled_when_the_whole_runs_mean_cannot_leave_it(n, total, squares, iterations, is_settled):
    assert ves.settled(n, total, squares, iterations) is is_settled


def stopwatch(**times):
    """A stopwatch that gives the statements ``pred`` and ``gold`` their next time in seconds."""
    runs = {sql: iter(seq) for sql, seq in times.items()}
    return lambda sql: next(runs[sql])


@pytest.mark.parametrize("watch, iterations, timing", [
    (stopwatch(pred=itertools.repeat(0.5), gold=itertools.repeat(1.0)), 3, ves.Timing(1.25, 2.0, 3)),
    (stopwatch(pred=itertools.repeat(0.5), gold=itertools.repeat(0.0)), 3, ves.Timing(0.0, 0.0, 3)),
    # Ratios of 3 settle at the first check.
    (stopwatch(pred=itertools.repeat(1.0), gold=itertools.repeat(3.0)), 100, ves.Timing(1.25, 3.0, 10)),
    # Ratios of 2 and 4 in turn (deviation 1): settled after 10 of 20, as it would not be after 10 of 100.
    (stopwatch(pred=itertools.repeat(1.0), gold=itertools.cycle([2.0, 4.0])), 20, ves.Timing(1.25, 3.0, 10)),
    # Ratios of 1 and 5 in turn (deviation 2): never settled early.
    (stopwatch(pred=itertools.repeat(1.0), gold=itertools.cycle([1.0, 5.0])), 20, ves.Timing(1.25, 3.0, 20)),
], ids=["gold-over-prediction", "a-ratio-of-zero", "settled-early", "settled-early-of-fewer", "too-spread-to-settle"])
def test_the_reward_is_the_tier_of_the_mean_ratio(watch, iterations, timing):
    assert ves.time_reward("pred", "gold", watch, iterations=iterations, early_exit=True) == timing


def test_every_iteration_runs_unless_an_early_exit_is_asked():
    watch = stopwatch(pred=itertools.repeat(1.0), gold=itertools.repeat(3.0))
    assert ves.time_reward("pred", "gold", watch) == ves.Timing(1.25, 3.0, 100)


def test_a_warm_up_runs_both_once_and_keeps_neither_time():
    calls = []

    def watch(sql, times=iter([9.0, 0.1, 1.0, 2.0, 1.0, 2.0])):  # the warm-up's 9 s and 0.1 s are not kept
        calls.append(sql)
        return next(times)
    assert ves.time_reward("pred", "gold", watch, iterations=2, warm_up=True) == ves.Timing(1.25, 2.0, 2)
    assert calls == ["pred", "gold", "pred", "gold", "pred", "gold"]


def test_a_warm_up_that_fails_earns_nothing_and_says_why():
    def failing(sql):
        raise sqlite3.OperationalError("no such table: gone")
    assert ves.time_reward("pred", "gold", failing, iterations=2, warm_up=True) \
        == ves.Timing(reward=0.0, ratio=None, iterations=0, error="OperationalError: no such table: gone")


def test_a_timing_runs_in_a_thread_of_its_own_and_its_failure_comes_back():
    seen = []
    timing = ves.Timing(reward=1.0, ratio=1.5, iterations=4)
    assert ves.in_own_thread(lambda: seen.append(threading.current_thread()) or timing) is timing
    assert seen[0] is not threading.current_thread() and not seen[0].is_alive()

    def broken():
        raise KeyError("lost")
    with pytest.raises(KeyError, match="lost"):
        ves.in_own_thread(broken)


def test_a_timing_that_fails_earns_nothing_and_says_why():
    def failing(sql, calls=itertools.count()):
        if next(calls) == 2:
            raise RuntimeError("the database went away")
        return 1.0
    assert ves.time_reward("pred", "gold", failing, iterations=5) \
        == ves.Timing(reward=0.0, ratio=None, iterations=1, error="RuntimeError: the database went away")


def test_the_stopwatch_times_a_statement_on_a_read_only_connection(music, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = ves.fresh_connection_stopwatch(music, time.monotonic() + 3600)
    assert run("SELECT name FROM singer") > 0
    assert run(LONG) > 0  # long enough for the deadline to be checked on the way
    with pytest.raises(sqlite3.OperationalError, match="attempt to write a readonly database"):
        run("CREATE TABLE t (x INTEGER)")
    assert sqlite3.connect(music).execute("SELECT count(*) FROM sqlite_master").fetchone() == (1,)


def test_the_stopwatch_measures_the_run_by_its_clock(music, monkeypatch):
    _clock(monkeypatch, ves, perf_counter=[5.0, 5.25], monotonic=[0.0])
    assert ves.fresh_connection_stopwatch(music, 10.0)("SELECT name FROM singer") == 0.25


@pytest.mark.parametrize("clock, error", [
    ([10.0], None),  # at the deadline, not past it: the run goes on
    ([10.5], "the question's timing budget ran out"),  # past it before the run
    ([9.0, 11.0], "interrupted"),  # past it during the run
], ids=["at-the-deadline", "past-it-before", "past-it-during"])
def test_the_stopwatch_stops_once_its_deadline_has_passed(music, monkeypatch, clock, error):
    _clock(monkeypatch, ves, monotonic=clock)
    run = ves.fresh_connection_stopwatch(music, 10.0)
    if error is None:
        assert run(LONG) > 0
        return
    with pytest.raises((ves._Deadline, sqlite3.OperationalError)) as stopped:
        run(LONG)
    assert str(stopped.value) == error
