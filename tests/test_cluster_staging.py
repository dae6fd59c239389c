"""What crosses between a command and a Ray worker's node: databases shipped once per node, and a
remote run's checkpoints merged into the run folder's store (no cluster needed)."""

from __future__ import annotations

import shutil
import sqlite3

import pytest

from sqlchorus.cluster import staging
from sqlchorus.cluster.connect import ClusterAddressError, parse_address
from sqlchorus.runs.demo import demo_db_path


@pytest.fixture
def node_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SQLCHORUS_RAY_CACHE", str(tmp_path / "node"))
    return tmp_path / "node" / "databases"


def test_a_database_with_the_same_bytes_is_read_in_place(tmp_path, node_cache):
    db = tmp_path / "demo.sqlite"
    shutil.copy(demo_db_path(), db)
    digest, size = staging.content_digest(db), db.stat().st_size
    assert staging.find_local(str(db), digest, size) == str(db)
    # Other bytes at the same path (another node's file of that name) are not the database.
    db.write_bytes(db.read_bytes()[:-1] + b"x")
    assert staging.find_local(str(db), digest, size) is None


def test_a_shipped_database_is_kept_once_per_node_and_found_again(tmp_path, node_cache):
    data = demo_db_path().read_bytes()
    digest = staging.content_digest(demo_db_path())
    elsewhere = "/nowhere/on/this/node/demo.sqlite"
    assert staging.find_local(elsewhere, digest, len(data)) is None
    kept = staging.keep_shipped(elsewhere, digest, data)
    assert kept == str(node_cache / digest / "demo.sqlite")
    assert staging.find_local(elsewhere, digest, len(data)) == kept
    assert staging.keep_shipped(elsewhere, digest, data) == kept  # a second worker: nothing written
    assert sqlite3.connect(kept).execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0


def test_a_copy_that_arrives_damaged_is_refused_and_leaves_nothing(tmp_path, node_cache):
    data = demo_db_path().read_bytes()
    digest = staging.content_digest(demo_db_path())
    with pytest.raises(OSError, match="arrived damaged"):
        staging.keep_shipped("/x/demo.sqlite", digest, data[:-10])
    assert list((node_cache / digest).iterdir()) == []


def _store(path, thread, db_path):
    con = sqlite3.connect(path)
    con.executescript(
        "CREATE TABLE checkpoints (thread_id TEXT, checkpoint_id TEXT, data TEXT, PRIMARY KEY (thread_id, checkpoint_id));"
        "CREATE TABLE sqlchorus_runs (thread_id TEXT PRIMARY KEY, db_path TEXT);"
        "CREATE TABLE sqlchorus_values (digest TEXT PRIMARY KEY, value BLOB);")
    con.execute("INSERT INTO checkpoints VALUES (?, 'c1', 'one')", (thread,))
    con.execute("INSERT INTO checkpoints VALUES (?, 'c2', 'two')", (thread,))
    con.execute("INSERT INTO sqlchorus_runs VALUES (?, ?)", (thread, db_path))
    con.execute("INSERT INTO sqlchorus_values VALUES ('d1', x'00')")
    con.commit()
    con.close()


def test_a_remote_runs_checkpoints_join_the_run_folders_store(tmp_path):
    target = tmp_path / "traces" / "checkpoints.sqlite"
    _store(tmp_path / "a.sqlite", "run-a", "/worker/cache/db.sqlite")
    _store(tmp_path / "b.sqlite", "run-b", "/here/db.sqlite")
    copied = staging.merge_checkpoints((tmp_path / "a.sqlite").read_bytes(), target,
                                       db_paths={"/worker/cache/db.sqlite": "/here/db.sqlite"})
    assert copied == 4
    staging.merge_checkpoints((tmp_path / "b.sqlite").read_bytes(), target, db_paths={})
    con = sqlite3.connect(target)
    assert con.execute("SELECT thread_id, count(*) FROM checkpoints GROUP BY 1 ORDER BY 1").fetchall() == [
        ("run-a", 2), ("run-b", 2)]
    # The run is reopened on the database as the command named it, not the worker's copy.
    assert con.execute("SELECT thread_id, db_path FROM sqlchorus_runs ORDER BY 1").fetchall() == [
        ("run-a", "/here/db.sqlite"), ("run-b", "/here/db.sqlite")]
    assert con.execute("SELECT count(*) FROM sqlchorus_values").fetchone() == (1,)  # stored once


@pytest.mark.parametrize("address, parsed", [
    ("local", ("local", None, None)), ("auto", ("auto", None, None)),
    ("10.0.0.5:6379", ("gcs", "10.0.0.5", 6379)), ("ray://head:10001", ("client", "head", 10001)),
    ("[::1]:6379", ("gcs", "::1", 6379)),
])
def test_addresses(address, parsed):
    assert parse_address(address) == parsed


@pytest.mark.parametrize("address", ["head", "head:", ":6379", "head:99999", "ray://head", ""])
def test_malformed_addresses_are_bad_input(address):
    with pytest.raises(ClusterAddressError, match="--ray takes local, auto, HOST:PORT or ray://HOST:PORT"):
        parse_address(address)
