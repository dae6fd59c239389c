"""Old runs go: ``prune`` removes the runs past --keep-runs / --keep-days from the checkpoint
store (every table, then the values no remaining checkpoint shares) and their trace files, never a
run a server may be working on nor one a kept run resumes from; the servers prune as they go."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from conftest import sha256, wait_for
from servers import postgres_of_a_test
from sqlchorus import Session
from sqlchorus.config.settings import Settings
from sqlchorus.core.checkpoints import _DIGEST, RunCheckpoints
from sqlchorus.interfaces.cli import cli
from sqlchorus.runs.demo import load_demo_questions
from sqlchorus.runs.retention import RetentionLimitError, prune
from sqlchorus.runs.service import RunService
from sqlchorus.testing import oracle_model

GOLD = {q["question"]: q["sql"] for q in load_demo_questions()}
QUESTIONS = list(GOLD)[:3]
SQLITE_TABLES = ("checkpoints", "writes", "sqlchorus_runs", "sqlchorus_calls", "sqlchorus_status")
POSTGRES_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "sqlchorus_runs", "sqlchorus_calls",
                   "sqlchorus_status")


def _runs(settings: Settings, questions: list[str]) -> list[str]:
    """Run ``questions`` in turn; their ids, oldest first."""
    with Session(settings, model=oracle_model(GOLD.get)) as session:
        return [session.ask(q).run_id for q in questions]


@pytest.fixture
def folder(tmp_path):
    return tmp_path / "traces"


@pytest.fixture
def made(folder):
    """Four runs (oldest first) in ./traces and its checkpoints.sqlite; the first and the last ask
    the same question, so that their checkpoints share stored values."""
    return _runs(Settings(trace_dir=str(folder), cache=False), [*QUESTIONS, QUESTIONS[0]])


def _rows_of(path, run_id, tables=SQLITE_TABLES) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t} WHERE thread_id = ?", (run_id,)).fetchone()[0]
                for t in tables}


def _refs(path, run_ids) -> set[str]:
    """The stored values the checkpoints of ``run_ids`` refer to."""
    with sqlite3.connect(path) as conn:
        known = {row[0] for row in conn.execute("SELECT digest FROM sqlchorus_values")}
        marks = ", ".join("?" * len(run_ids))
        found = set()
        for (data,) in conn.execute(f"SELECT checkpoint FROM checkpoints WHERE thread_id IN ({marks})", run_ids):
            found |= {m.decode() for m in _DIGEST.findall(bytes(data))} & known
    return found


def _values(path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {row[0] for row in conn.execute("SELECT digest FROM sqlchorus_values")}


def test_the_oldest_runs_go_from_every_table_and_the_kept_ones_still_read_and_resume(folder, made):
    store = folder / "checkpoints.sqlite"
    old, kept = made[:2], made[2:]
    shared_before = _refs(store, kept)
    only_old = _refs(store, old) - shared_before
    assert shared_before & _refs(store, old), "the runs share a stored value (the schema view)"
    assert only_old, "the old runs have values of their own"

    report = prune(str(store), folder, keep_runs=2)

    assert report.runs_removed == old and report.runs_kept == 2 and not report.dry_run
    assert sorted(report.trace_files_removed) == sorted(str(folder / f"{r}.jsonl") for r in old)
    assert report.values_removed == len(only_old) and report.bytes_freed > report.trace_bytes_freed > 0
    for run_id in old:
        assert set(_rows_of(store, run_id).values()) == {0}
        assert not (folder / f"{run_id}.jsonl").exists()
    values = _values(store)
    assert shared_before <= values and not (only_old & values)
    # The kept runs read back whole (every checkpoint's values put back) and go on again.
    with Session(Settings(trace_dir=str(folder), cache=False), model=oracle_model(GOLD.get)) as session:
        saver = session.checkpoints()
        for run_id in kept:
            assert (folder / f"{run_id}.jsonl").exists() and all(_rows_of(store, run_id)[t] for t in SQLITE_TABLES[:4])
            for item in saver.list({"configurable": {"thread_id": run_id}}):
                assert not any(isinstance(v, dict) and "__sqlchorus_value__" in v
                               for v in item.checkpoint["channel_values"].values())
            assert session.replay(run_id).ok
            assert session.replay(run_id, latest=True).error is None


def test_runs_a_server_may_be_working_on_and_parents_of_kept_runs_stay(folder, made):
    store_path = folder / "checkpoints.sqlite"
    store = RunCheckpoints(store_path)
    try:
        # The oldest run is running on some server; a resume of the second, newest of all, is done.
        store.set_status(made[0], "running", owner="elsewhere", question="q", database="demo")
        resume = "20991231T000000-abcdef12"
        store.set_status(resume, "done", owner="elsewhere", question="q", database="demo", kind="resume",
                         parent=made[1])
        report = prune(store, folder, keep_runs=1)
    finally:
        store.close()
    assert report.runs_removed == made[2:]
    assert report.protected == sorted(made[:2]) and report.runs_kept == 3
    assert all(_rows_of(store_path, run_id)["checkpoints"] for run_id in made[:2])
    assert _rows_of(store_path, resume)["sqlchorus_status"] == 1


def test_ages_come_from_the_store_and_a_stray_trace_file_by_its_time(folder, made):
    store = folder / "checkpoints.sqlite"
    ten_days_ago = (datetime.now(timezone.utc) - timedelta(days=10)).isoformat(timespec="milliseconds")
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE sqlchorus_runs SET created = ? WHERE thread_id IN (?, ?)", (ten_days_ago, *made[2:]))
    stray_old, stray_new = folder / "20200101T000000-00000000.jsonl", folder / "20200101T000000-11111111.jsonl"
    stray_old.write_text("", encoding="utf-8")
    stray_new.write_text("", encoding="utf-8")
    old = time.time() - 20 * 86400
    os.utime(stray_old, (old, old))
    os.utime(folder / f"{made[0]}.jsonl", (old, old))  # a run's own trace is aged by its record

    report = prune(str(store), folder, keep_days=5)

    assert sorted(report.runs_removed) == sorted([stray_old.stem, *made[2:]])
    assert not stray_old.exists() and stray_new.exists() and (folder / f"{made[0]}.jsonl").exists()
    assert (folder / "checkpoints.sqlite").exists()  # not a trace file
    # Both limits: a run goes only when past both.
    both = prune(str(store), folder, keep_runs=1, keep_days=5, dry_run=True)
    assert both.runs_removed == []


def test_dry_run_changes_nothing(folder, made):
    store = folder / "checkpoints.sqlite"
    before = sha256(store), sorted(p.name for p in folder.iterdir())
    out = CliRunner().invoke(cli, ["prune", "--keep-runs", "1", "--dry-run", "--trace-dir", str(folder)])
    assert out.exit_code == 0, out.output
    assert (sha256(store), sorted(p.name for p in folder.iterdir())) == before
    assert [line.split()[-1] for line in out.output.splitlines()[:-1]] == made[:3]
    assert out.output.splitlines()[-1].startswith("Would remove 3 run(s) and 3 trace file(s)")


def test_the_command_removes_and_says_so_and_refuses_without_a_limit(folder, made, tmp_path):
    refused = CliRunner().invoke(cli, ["prune", "--trace-dir", str(folder)])
    assert refused.exit_code == 2
    assert refused.output.count("\n") == 1 and refused.output.startswith("Error: Say what to keep: --keep-runs")
    with pytest.raises(RetentionLimitError):
        prune(None, folder, keep_runs=-1)

    store = tmp_path / "elsewhere.sqlite"
    (folder / "checkpoints.sqlite").rename(store)
    out = CliRunner().invoke(cli, ["prune", "--keep-runs", "3", "--checkpoints", str(store),
                                   "--trace-dir", str(folder), "--vacuum"])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[0] == f"removed {made[0]}"
    assert out.output.splitlines()[-1].startswith("Removed 1 run(s) and 1 trace file(s)")
    assert set(_rows_of(store, made[0]).values()) == {0} and _rows_of(store, made[1])["checkpoints"]
    with sqlite3.connect(store) as conn:
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental from now on
    # A store that is not there is not made: the trace files alone are pruned.
    gone = tmp_path / "none.sqlite"
    out = CliRunner().invoke(cli, ["prune", "--keep-runs", "1", "--checkpoints", str(gone), "--trace-dir", str(folder)])
    assert out.exit_code == 0 and not gone.exists() and len(list(folder.glob("*.jsonl"))) == 1


def test_a_value_collected_while_a_checkpoint_was_written_is_stored_again(tmp_path):
    store = RunCheckpoints(tmp_path / "c.sqlite")
    try:
        digest = store._store("bytes", b"x" * 600)
        store._write("DELETE FROM sqlchorus_values WHERE digest = ?", (digest,))
        store._keep_stored({digest: ("bytes", b"x" * 600)})
        assert store._load(digest) == b"x" * 600
    finally:
        store.close()


def test_a_checkpoint_written_while_values_are_collected_keeps_its_values(folder, made):
    path = folder / "checkpoints.sqlite"
    unshared = sorted(_refs(path, made[1:3]) - _refs(path, [made[0], made[3]]))
    assert len(unshared) >= 2
    store = RunCheckpoints(path)
    try:
        store.delete_runs(made[1:3])
        scanned = store._orphans

        def then_a_run_writes(referred):
            orphans = scanned(referred)
            # A run writes, after the scan, a checkpoint that refers to one of the values.
            store._write("INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, type, checkpoint, metadata) "
                         "VALUES ('late', '', 'c1', 'msgpack', ?, ?)", (unshared[0].encode(), b"{}"))
            return orphans

        store._orphans = then_a_run_writes
        assert store.collect_values() == len(unshared) - 1
    finally:
        store.close()
    assert unshared[0] in _values(path) and not set(unshared[1:]) & _values(path)


def test_a_server_prunes_when_it_starts_and_after_finished_runs(folder, made):
    settings = Settings(trace_dir=str(folder), cache=False, keep_runs=2)
    service = RunService(settings=settings, model=oracle_model(GOLD.get))
    try:
        service.retention.wait(10)
        assert service.retention.last.runs_removed == made[:2]
        service.retention.every = 2
        for question in QUESTIONS[:2]:
            live = service.start(question)
            wait_for(live.done.is_set, "the run's end")
        wait_for(lambda: service.retention.last.runs_removed == made[2:], "the second prune")
        service.retention.wait(10)
    finally:
        service.close()
    left = sorted(p.stem for p in folder.glob("*.jsonl"))
    assert len(left) == 2 and not set(left) & set(made)


@pytest.fixture(scope="module")
def postgres():
    yield from postgres_of_a_test()


@pytest.mark.slow
def test_the_same_prune_in_postgresql(postgres, tmp_path):
    import psycopg

    url = postgres.new_database()
    folder = tmp_path / "traces"
    settings = Settings(checkpoints=url, trace_dir=str(folder), cache=False)
    made = _runs(settings, QUESTIONS[:3])
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE sqlchorus_runs SET created = %s WHERE thread_id = %s",
                     ((datetime.now(timezone.utc) - timedelta(days=3)).isoformat(), made[0]))

    dry = prune(url, folder, keep_days=1, dry_run=True)
    assert dry.runs_removed == [made[0]] and (folder / f"{made[0]}.jsonl").exists()
    report = prune(url, folder, keep_runs=1, keep_days=1, vacuum=True)
    assert report.runs_removed == [made[0]] and report.store_bytes_freed > 0

    with psycopg.connect(url) as conn:
        def count(table, run_id):
            return conn.execute(f"SELECT COUNT(*) FROM {table} WHERE thread_id = %s", (run_id,)).fetchone()[0]

        assert {t: count(t, made[0]) for t in POSTGRES_TABLES} == dict.fromkeys(POSTGRES_TABLES, 0)
        assert all(count("checkpoints", run_id) and count("sqlchorus_runs", run_id) for run_id in made[1:])
    assert not (folder / f"{made[0]}.jsonl").exists()
    with Session(settings, model=oracle_model(GOLD.get)) as session:
        assert session.replay(made[1]).ok
        assert json.loads(json.dumps(session.checkpoints().run(made[2])))["question"] == QUESTIONS[2]
