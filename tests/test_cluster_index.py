"""A value index built from parts (as a Ray cluster builds it) is the local build's file, byte
for byte.

The quick tests compute the parts in this process, in shuffled order and through pickle (what a
task's result goes through), and merge them; the slow one starts a real cluster of two nodes on
loopback, builds there (the file read in place, then shipped to the nodes), and runs
``sqlchorus index --ray ADDRESS --json``.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from sqlchorus.cluster import index_build
from sqlchorus.cluster.index_build import DatabaseSource, build_index_on_cluster, cluster_parts
from sqlchorus.cluster.staging import content_digest
from conftest import spider_loader
from servers import PostgresServer, allow_writable_role, postgres_bin
from sqlchorus.tools import values as vi
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.engines.opening import open_database

SPIDER_DBS = ("world_1", "car_1", "flight_2", "student_transcripts_tracking")


def _local_bytes(path: Path, cache: Path, **options) -> bytes:
    with open_database(path, prestart=False, workers=1) as db, \
            vi.ValueIndex.build(db, cache_dir=cache, **options) as index:
        return index.path.read_bytes()


def _duckdb_copy(sqlite_path: Path, folder: Path) -> Path:
    pytest.importorskip("duckdb")
    loader = spider_loader()
    schema = loader.read_schema(sqlite_path)
    loader.load_duckdb(schema, folder)
    return folder / f"{schema.name}.duckdb"


def _from_parts(path: Path, target: Path, order: list[int] | None = None, *,
                max_values_per_column: int = vi.DEFAULT_MAX_VALUES,
                through_pickle: bool = True) -> bytes:
    """The file merged from parts computed here, column by column in ``order``."""
    with open_database(path, prestart=False, workers=1) as db:
        plan = vi.plan_build(db, max_values_per_column=max_values_per_column)
        _, fingerprint = vi.index_path(db)
        ids = list(plan.col_ids) if order is None else order
        parts = plan.parts(db, ids)
        if through_pickle:
            parts = pickle.loads(pickle.dumps(parts))
        vi.write_index(target, plan, parts, fingerprint=fingerprint, database=str(db.path))
    return target.read_bytes()


@pytest.mark.parametrize("name", SPIDER_DBS)
def test_parts_in_any_order_make_the_local_file(spider, tmp_path, name):
    path = spider(name)
    local = _local_bytes(path, tmp_path / "local")
    assert local == _local_bytes(path, tmp_path / "again")  # nothing in the file differs
    with GuardedDatabase(path, prestart=False) as db:
        columns = len(vi.plan_build(db).columns)
    for seed in range(3):
        order = random.Random(seed).sample(range(1, columns + 1), columns)
        assert _from_parts(path, tmp_path / f"parts{seed}.sqlite", order) == local, order


@pytest.mark.slow
def test_a_duckdb_database_from_parts_is_its_local_file(spider, tmp_path):
    path = _duckdb_copy(spider("world_1"), tmp_path / "duck")
    local = _local_bytes(path, tmp_path / "local")
    with open_database(path, prestart=False, workers=1) as db:
        columns = len(vi.plan_build(db).columns)
    order = random.Random(7).sample(range(1, columns + 1), columns)
    assert _from_parts(path, tmp_path / "parts.sqlite", order) == local
    with vi.ValueIndex.open(next((tmp_path / "local").glob("*.sqlite"))) as index:
        assert index.stats["values"] > 1000


def test_truncated_columns_and_spilled_postings_keep_the_bytes(spider, tmp_path, monkeypatch):
    path = spider("world_1")
    small = _local_bytes(path, tmp_path / "small", max_values_per_column=7)
    with vi.ValueIndex.open(next((tmp_path / "small").glob("*.sqlite"))) as index:
        assert index.stats["truncated"] > 0  # the case is exercised
    columns = len(vi.plan_build(GuardedDatabase(path, prestart=False)).columns)
    order = list(range(columns, 0, -1))
    assert _from_parts(path, tmp_path / "small.sqlite", order, max_values_per_column=7) == small
    local = _local_bytes(path, tmp_path / "local")
    monkeypatch.setattr("sqlchorus.tools.values.building.SPILL_POSTINGS", 1000)
    assert _local_bytes(path, tmp_path / "spilled") == local
    assert _from_parts(path, tmp_path / "spilled_parts.sqlite", order) == local


def test_build_with_a_parts_source_is_the_local_build(spider, tmp_path):
    path = spider("car_1")
    local = _local_bytes(path, tmp_path / "local")
    seen: list[tuple[int, int]] = []

    def elsewhere(plan, progress):
        with GuardedDatabase(path, prestart=False) as db:
            parts = plan.parts(db, reversed(plan.col_ids))
        progress(len(parts), len(plan.columns))
        return parts

    with GuardedDatabase(path, prestart=False) as db, vi.ValueIndex.build(
            db, cache_dir=tmp_path / "parts", parts=elsewhere,
            progress=lambda d, t: seen.append((d, t))) as index:
        assert index.path.read_bytes() == local
        assert index.stats["from_cache"] is False and index.stats["build_seconds"] >= 0
    assert seen and seen[-1][0] == seen[-1][1]


def test_a_part_missing_or_given_twice_is_refused(spider, tmp_path):
    path = spider("pets_1")
    with GuardedDatabase(path, prestart=False) as db:
        plan = vi.plan_build(db)
        parts = plan.parts(db, plan.col_ids)
    target = tmp_path / "index.sqlite"
    with pytest.raises(ValueError, match="never came"):
        vi.write_index(target, plan, parts[:-1], fingerprint="f", database="d")
    with pytest.raises(ValueError, match="given twice"):
        vi.write_index(target, plan, parts + parts[:1], fingerprint="f", database="d")
    with pytest.raises(ValueError, match="no column"):
        vi.write_index(target, vi.BuildPlan(plan.columns[:1]), parts[1:2], fingerprint="f",
                       database="d")
    assert not target.exists() and not list(tmp_path.iterdir())  # no file, no scratch left


def test_a_node_uses_the_same_file_in_place_or_keeps_one_copy(tmp_path, monkeypatch, spider):
    monkeypatch.setenv("SQLCHORUS_RAY_CACHE", str(tmp_path / "node"))
    monkeypatch.setattr(index_build, "_FOUND", {})
    path = spider("pets_1")
    digest, size = content_digest(path), path.stat().st_size
    fetched: list[str] = []

    class FakeRay:
        def get(self, ref):
            fetched.append(ref)
            return path.read_bytes()

    monkeypatch.setattr(index_build, "ray_module", lambda: FakeRay())
    here = DatabaseSource(path=str(path), digest=digest, size=size, shipped=("ref",))
    assert index_build._node_file(here) == str(path) and not fetched
    assert index_build._node_file(here) == str(path)  # found again without hashing the file
    monkeypatch.setattr(index_build, "_FOUND", {})  # a node where the driver's path is not
    elsewhere = DatabaseSource(path=str(tmp_path / "absent" / path.name), digest=digest, size=size,
                               shipped=("ref",))
    copy = index_build._node_file(elsewhere)
    assert Path(copy).read_bytes() == path.read_bytes() and fetched == ["ref"]
    assert Path(copy).parent.name == digest and Path(copy).name == path.name
    monkeypatch.setattr(index_build, "_FOUND", {})  # another process of the node: no fetch again
    assert index_build._node_file(elsewhere) == copy and fetched == ["ref"]


def test_a_database_with_a_write_ahead_log_is_shipped_as_a_snapshot(tmp_path):
    path = tmp_path / "wal.sqlite"
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("CREATE TABLE t (name TEXT)")
    writer.executemany("INSERT INTO t VALUES (?)", [(f"name {i}",) for i in range(50)])
    writer.commit()  # the rows are in the log, not yet in the file
    try:
        assert (tmp_path / "wal.sqlite-wal").stat().st_size > 0
        (tmp_path / "scratch").mkdir()
        snapshot = index_build._readable_copy(path, "sqlite", tmp_path / "scratch")
    finally:
        writer.close()
    assert snapshot != path
    with sqlite3.connect(snapshot) as copy:
        assert copy.execute("SELECT count(*) FROM t").fetchone() == (50,)


def test_a_malformed_address_is_said_before_anything_is_read(spider, tmp_path):
    from sqlchorus.cluster.connect import ClusterAddressError

    with GuardedDatabase(spider("pets_1"), prestart=False) as db, \
            pytest.raises(ClusterAddressError):
        build_index_on_cluster(db, "head", cache_dir=tmp_path)


def test_building_on_a_cluster_without_a_connection_says_so(spider, tmp_path):
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("this process is connected to a cluster")
    from sqlchorus.cluster.connect import ClusterError

    with GuardedDatabase(spider("pets_1"), prestart=False) as db, \
            pytest.raises(ClusterError, match="Not connected"):
        vi.ValueIndex.build(db, cache_dir=tmp_path, parts=cluster_parts(db))


@pytest.mark.slow
def test_cluster_of_two_nodes_builds_the_local_file(spider, tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    # The nodes' processes inherit it: their cache of shipped databases is this test's.
    monkeypatch.setenv("SQLCHORUS_RAY_CACHE", str(tmp_path / "nodes"))
    path = spider("world_1")
    local = _local_bytes(path, tmp_path / "local")
    # Starting a cluster writes its address where `ray.init("auto")` looks on this machine; what
    # was there (another cluster of this machine's) is put back.
    address_file = Path(ray._private.utils.get_ray_address_file(None))
    previous = address_file.read_text() if address_file.exists() else None
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    _put_back(address_file, previous)
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        seen: list[tuple[int, int]] = []
        with GuardedDatabase(path, prestart=False) as db:
            built = build_index_on_cluster(db, cluster.address, cache_dir=tmp_path / "ray",
                                           rebuild=True, progress=lambda d, t: seen.append((d, t)))
            with built:
                assert built.path.read_bytes() == local
                assert built.path.name == next((tmp_path / "local").glob("*.sqlite")).name
            done = [d for d, _ in seen]
            assert done == sorted(done) and seen[-1][0] == seen[-1][1] > 0
            # The same again with the file shipped to the nodes instead of read in place.
            with vi.ValueIndex.build(db, cache_dir=tmp_path / "shipped",
                                     parts=cluster_parts(db, in_place=False)) as shipped:
                assert shipped.path.read_bytes() == local
        copies = list((tmp_path / "nodes" / "databases").glob("*/world_1.sqlite"))
        assert len(copies) == 1 and copies[0].read_bytes() == path.read_bytes()
        # A DuckDB file, shipped: the nodes open their copy as DuckDB.
        duck = _duckdb_copy(path, tmp_path / "duck")
        with open_database(duck, prestart=False, workers=1) as db, vi.ValueIndex.build(
                db, cache_dir=tmp_path / "duck_ray",
                parts=cluster_parts(db, in_place=False)) as built:
            assert built.path.read_bytes() == _local_bytes(duck, tmp_path / "duck_local")
        if postgres_bin() is not None:  # a database on a server: every worker opens its URL
            server = PostgresServer().start()
            try:
                spider_loader().load_database(path, postgres_url=server.url())
                url = server.url("world_1")
                with allow_writable_role(), open_database(url, workers=1) as db:
                    on_server = _local_bytes(url, tmp_path / "pg_local")
                    with vi.ValueIndex.build(db, cache_dir=tmp_path / "pg_ray",
                                             parts=cluster_parts(db, source=url)) as built:
                        assert built.path.read_bytes() == on_server
                        assert built.stats["values"] > 1000
            finally:
                server.stop()
        ray.shutdown()  # the command joins as a driver of its own

        sqlchorus = Path(sys.executable).with_name("sqlchorus")
        done = subprocess.run(
            [str(sqlchorus), "index", "--db", str(path), "--cache-dir", str(tmp_path / "cli"),
             "--ray", cluster.address, "--json"],
            capture_output=True, text=True, timeout=600, env={**os.environ, "NO_COLOR": "1"},
        )
        assert done.returncode == 0, done.stderr
        stats = json.loads(done.stdout)
        assert stats["from_cache"] is False and stats["values"] > 0
        assert Path(stats["path"]).read_bytes() == local
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


def _put_back(address_file: Path, previous: str | None) -> None:
    if previous is None:
        address_file.unlink(missing_ok=True)
    else:
        address_file.write_text(previous)
