"""Evaluation runs: records, resume after interruption, missing databases, scoring, files."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from conftest import data_dir
from sqlchorus.config.settings import Settings
from sqlchorus.evaluation.datasets import load_dataset
from sqlchorus.evaluation.runs import (
    EvalError,
    open_dataset,
    read_records,
    run_eval,
    score_prediction_file,
)
from sqlchorus.evaluation.scoring import read_predictions, write_predictions
from sqlchorus.runs.session import ask as real_ask
from sqlchorus.testing import oracle_model

WRONG = "SELECT 'not the answer'"
N_SPIDER = 8  # the first concert_singer questions of Spider dev
N_MISSING = 2


@functools.lru_cache(maxsize=1)
def _spider_dev():
    return load_dataset("spider-dev")  # parses every gold query for its hardness: once


def spider_dev():
    if not (data_dir() / "spider" / "dev.json").is_file():
        pytest.skip(f"Spider dev not found under {data_dir()}")
    return _spider_dev()


def small_dataset(tmp_path: Path, benchmark: str = "spider", missing: int = N_MISSING):
    """Spider dev's first questions plus ``missing`` questions on a database that is not there."""
    examples = [
        {"question": e.question, "db_id": e.db_id, "gold_sql": e.gold_sql, "difficulty": e.difficulty}
        for e in spider_dev().examples[:N_SPIDER]
    ]
    for k in range(missing):
        examples.insert(3 + k, {"question": f"How many ships are there ({k})?", "db_id": "no_such_db",
                                "gold_sql": "SELECT count(*) FROM ship", "difficulty": "easy"})
    path = tmp_path / f"small-{benchmark}.json"
    path.write_text(json.dumps({"benchmark": benchmark,
                                "db_root": str(data_dir() / "spider" / "database"),
                                "examples": examples}))
    return load_dataset(path)


def oracle_for(dataset, wrong: set[int] = frozenset()):
    """A scripted model answering each question with its gold SQL, or WRONG for ``wrong``."""
    answers = {}
    for i, e in enumerate(dataset.examples):
        answers.setdefault(e.question, WRONG if i in wrong else e.gold_sql)
    return oracle_model(answers.get)


def settings_for(model, tmp_path: Path, **kw) -> Settings:
    return Settings(model=model, trace_dir=str(tmp_path / "traces"), cache=False, **kw)


class CountingAsk:
    """``ask`` that remembers the questions it was given, and can stop the run at one."""

    def __init__(self, stop_at: str | None = None, fail_at: str | None = None):
        self.asked: list[str] = []
        self.stop_at, self.fail_at = stop_at, fail_at

    def __call__(self, question, **kw):
        if question == self.stop_at:
            raise KeyboardInterrupt  # what Ctrl-C raises in the main thread
        self.asked.append(question)
        if question == self.fail_at:
            raise RuntimeError("the provider hung up")
        return real_ask(question, **kw)


def test_oracle_is_correct_and_missing_databases_are_counted(tmp_path):
    data = small_dataset(tmp_path)
    model = oracle_for(data)
    run = run_eval(data, settings_for(model, tmp_path), out_dir=tmp_path / "run", progress=False)
    s = run.summary
    assert (s["ex"], s["n_scored"], s["n_missing_db"], s["n_total"]) == (100.0, N_SPIDER, N_MISSING,
                                                                       N_SPIDER + N_MISSING)
    assert s["upper_bound"] == 100.0
    assert s["by_generator"] == {"divide_conquer": {"n": N_SPIDER, "n_correct": N_SPIDER, "ex": 100.0}}
    assert sum(v["n"] for v in s["by_difficulty"].values()) == N_SPIDER
    assert s["cost"]["model_calls"] == model.calls
    assert [r["index"] for r in run.records] == list(range(len(data.examples)))
    missing = [r for r in run.records if r["status"] == "missing_db"]
    assert [r["db_id"] for r in missing] == ["no_such_db"] * N_MISSING
    assert all(r["model_calls"] == 0 and r["verdict"] == "missing_db" for r in missing)

    for record in run.records:
        if record["status"] == "missing_db":
            continue
        assert record["correct"] and record["verdict"] == "correct"
        assert record["chosen_generator"] == "divide_conquer"
        assert record["candidates"] and all(c["generator"] and c["correct"] for c in record["candidates"])
        assert record["model_calls"] >= 3 and record["input_tokens"] > 0
        assert record["seconds"] > 0 and Path(record["trace_path"]).is_file()
        assert "cost_usd" in record

    # The files of the run, and the records file equals the returned records.
    folder = tmp_path / "run"
    assert {p.name for p in folder.iterdir()} >= {"records.jsonl", "pred.txt", "gold.sql", "summary.json",
                                                  "report.html", "run.json"}
    assert read_records(folder / "records.jsonl") == {r["index"]: r for r in run.records}
    assert json.loads((folder / "summary.json").read_text())["ex"] == 100.0
    preds = read_predictions(folder / "pred.txt")
    assert len(preds) == len(data.examples)
    gold_lines = (folder / "gold.sql").read_text().splitlines()
    assert [ln.split("\t")[1] for ln in gold_lines] == [e.db_id for e in data.examples]


@pytest.mark.slow
def test_a_wrong_model_scores_lower(tmp_path):
    data = small_dataset(tmp_path, missing=0)
    wrong = {0, 2, 5}
    run = run_eval(data, settings_for(oracle_for(data, wrong), tmp_path), out_dir=tmp_path / "run",
                   progress=False)
    assert run.summary["ex"] == round(100.0 * (N_SPIDER - len(wrong)) / N_SPIDER, 2)
    assert {r["index"] for r in run.records if not r["correct"]} == wrong
    assert all(r["verdict"] == "wrong" for r in run.records if r["index"] in wrong)
    # One candidate per question: selection cannot do better than it did.
    assert run.summary["upper_bound"] == run.summary["ex"]


@pytest.mark.slow
def test_resume_after_an_interruption_runs_only_the_rest(tmp_path):
    data = small_dataset(tmp_path)
    full_model = oracle_for(data)
    full = run_eval(data, settings_for(full_model, tmp_path), out_dir=tmp_path / "full", progress=False)

    model = oracle_for(data)
    stop = CountingAsk(stop_at=data.examples[6].question)
    with pytest.raises(KeyboardInterrupt):
        run_eval(data, settings_for(model, tmp_path), out_dir=tmp_path / "run", progress=False, ask=stop)
    kept = read_records(tmp_path / "run" / "records.jsonl")
    assert sorted(kept) == [0, 1, 2, 3, 4, 5]  # 3 and 4 are the missing-db questions
    calls_before = model.calls

    again = CountingAsk()
    run = run_eval(data, settings_for(model, tmp_path), out_dir=tmp_path / "run", progress=False, ask=again)
    assert again.asked == [e.question for e in data.examples[6:]]
    assert (run.n_resumed, run.n_run) == (6, len(data.examples) - 6)
    assert model.calls == full_model.calls  # no model call was made twice
    assert model.calls - calls_before == sum(r["model_calls"] for r in full.records[6:])
    assert run.summary["ex"] == 100.0
    assert [r["prediction"] for r in run.records] == [r["prediction"] for r in full.records]


@pytest.mark.slow
def test_a_torn_last_record_is_ignored_and_rerun(tmp_path):
    data = small_dataset(tmp_path, missing=0)
    model = oracle_for(data)
    run_eval(data, settings_for(model, tmp_path), out_dir=tmp_path / "run", progress=False)
    path = tmp_path / "run" / "records.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]) + lines[3][: len(lines[3]) // 2])  # died mid-write

    again = CountingAsk()
    run = run_eval(data, settings_for(model, tmp_path), out_dir=tmp_path / "run", progress=False, ask=again)
    assert again.asked == [e.question for e in data.examples[3:]]
    assert run.summary["ex"] == 100.0
    assert sorted(read_records(path)) == list(range(len(data.examples)))
    assert len(path.read_text().splitlines()) == len(data.examples)


@pytest.mark.slow
def test_a_question_that_raised_is_recorded_then_retried(tmp_path):
    data = small_dataset(tmp_path, missing=0)
    model = oracle_for(data)
    failing = CountingAsk(fail_at=data.examples[2].question)
    first = run_eval(data, settings_for(model, tmp_path), out_dir=tmp_path / "run", progress=False, ask=failing)
    record = first.records[2]
    assert record["status"] == "error" and "the provider hung up" in record["error"]
    assert not record["correct"] and first.summary["n_run_errors"] == 1
    assert record["verdict"] == "missing_prediction" and first.summary["n_missing_prediction"] == 1
    assert first.summary["ex"] == round(100.0 * (N_SPIDER - 1) / N_SPIDER, 2)

    again = CountingAsk()
    second = run_eval(data, settings_for(model, tmp_path), out_dir=tmp_path / "run", progress=False, ask=again)
    assert again.asked == [data.examples[2].question]
    assert second.summary["ex"] == 100.0


@pytest.mark.slow
def test_no_resume_starts_over(tmp_path):
    data = small_dataset(tmp_path, missing=0)
    model = oracle_for(data)
    run_eval(data, settings_for(model, tmp_path), out_dir=tmp_path / "run", limit=3, progress=False)
    again = CountingAsk()
    run = run_eval(data, settings_for(model, tmp_path), out_dir=tmp_path / "run", limit=3, resume=False,
                   progress=False, ask=again)
    assert len(again.asked) == 3 and run.n_resumed == 0
    assert len(run.records) == 3 and len(read_predictions(tmp_path / "run" / "pred.txt")) == 3


@pytest.mark.slow
def test_two_workers_give_the_same_records(tmp_path):
    data = small_dataset(tmp_path)
    one = run_eval(data, settings_for(oracle_for(data, {1, 6}), tmp_path), out_dir=tmp_path / "one",
                   progress=False)
    two = run_eval(data, settings_for(oracle_for(data, {1, 6}), tmp_path), out_dir=tmp_path / "two",
                   workers=2, progress=False)
    keys = ("index", "prediction", "verdict", "correct", "status", "chosen_generator")
    assert [{k: r[k] for k in keys} for r in one.records] == [{k: r[k] for k in keys} for r in two.records]
    assert one.summary["ex"] == two.summary["ex"] == 75.0


@pytest.mark.slow
def test_bird_semantics_write_the_bird_submission_format(tmp_path):
    data = small_dataset(tmp_path, benchmark="bird", missing=1)
    run = run_eval(data, settings_for(oracle_for(data, {0}), tmp_path), out_dir=tmp_path / "run", progress=False)
    pred = run.paths["predictions"]
    assert pred.name == "predict_small_bird.json"
    assert list(json.loads(pred.read_text())) == [str(i) for i in range(len(data.examples))]
    assert run.summary["n_missing_db"] == 1 and run.summary["benchmark"] == "bird"
    assert run.summary["ex"] == round(100.0 * (N_SPIDER - 1) / N_SPIDER, 2)


def test_a_run_folder_of_another_dataset_is_refused(tmp_path):
    data = small_dataset(tmp_path, missing=0)
    model = oracle_for(data)
    run_eval(data, settings_for(model, tmp_path), out_dir=tmp_path / "run", limit=1, progress=False)
    other = small_dataset(tmp_path, benchmark="bird", missing=0)
    with pytest.raises(EvalError, match="holds a run of 'small-spider'"):
        run_eval(other, settings_for(model, tmp_path), out_dir=tmp_path / "run", limit=1, progress=False)


def test_scoring_a_gold_prediction_file(tmp_path):
    data = small_dataset(tmp_path)
    pred = tmp_path / "pred.txt"
    write_predictions(pred, data, [e.gold_sql for e in data.examples])
    run = score_prediction_file(data, pred, out_dir=tmp_path / "scored")
    assert (run.summary["ex"], run.summary["n_scored"], run.summary["n_missing_db"]) == (100.0, N_SPIDER,
                                                                                        N_MISSING)
    assert run.summary["cost"]["model_calls"] == 0
    assert (tmp_path / "scored" / "report.html").is_file()
    pred.write_text(pred.read_text() + "SELECT 1\nSELECT 2\n")
    with pytest.raises(EvalError, match="holds 12 predictions"):
        score_prediction_file(data, pred)


@pytest.mark.parametrize("content,message", [
    (b"\xff\xfe\x00 not text", "Cannot read the prediction file"),
    (None, "Cannot read the prediction file"),
])
def test_an_unreadable_prediction_file(tmp_path, content, message):
    data = small_dataset(tmp_path)
    path = tmp_path / "pred.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(EvalError, match=message):
        score_prediction_file(data, path)


def test_dataset_errors_say_what_to_do(tmp_path, monkeypatch):
    with pytest.raises(EvalError, match="Unknown dataset 'spider-train'.*spider-dev"):
        open_dataset("spider-train")
    monkeypatch.setenv("SQLCHORUS_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(EvalError, match=r"SQLCHORUS_DATA.*spider/ and bird/") as info:
        open_dataset("bird-mini-dev")
    assert str(tmp_path / "nowhere") in str(info.value)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(EvalError, match="Cannot read dataset"):
        open_dataset(bad)


@pytest.mark.slow
def test_a_shorter_rerun_keeps_the_records_beyond_its_limit(tmp_path):
    data = small_dataset(tmp_path, missing=0)
    model = oracle_for(data)
    run_eval(data, settings_for(model, tmp_path), out_dir=tmp_path / "run", progress=False)
    short = run_eval(data, settings_for(model, tmp_path), out_dir=tmp_path / "run", limit=2, progress=False)
    assert short.n_run == 0 and len(short.records) == 2 and short.summary["n_scored"] == 2
    calls = model.calls
    again = CountingAsk()
    full = run_eval(data, settings_for(model, tmp_path), out_dir=tmp_path / "run", progress=False, ask=again)
    assert again.asked == [] and model.calls == calls and full.n_resumed == N_SPIDER
