"""A cluster that cannot do the work is said in one line before any question is spent: workers
without sqlchorus, of another version, or that cannot open a database."""

from __future__ import annotations

import logging

import pytest

from sqlchorus.cluster import workers
from sqlchorus.cluster.connect import ClusterError
from sqlchorus.cluster.workers import Pool
from sqlchorus.config.settings import Settings

ray = pytest.importorskip("ray")

FAKE = 'raise ModuleNotFoundError("No module named \'sqlchorus\'", name="sqlchorus")\n'


@pytest.fixture
def local_ray():
    started = []

    def start(**kwargs):
        ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.ERROR, **kwargs)
        started.append(True)

    yield start
    if started:
        ray.shutdown()


MODELS = """
from sqlchorus.testing import ScriptedChatModel


def silent():
    return ScriptedChatModel(["SELECT 1"], name="silent")
"""


def _settings() -> Settings:
    return Settings(model="python:preflight_models:silent", trace_dir=None, cache=False)


@pytest.mark.slow
def test_workers_without_sqlchorus(local_ray, tmp_path):
    (tmp_path / "sqlchorus").mkdir()
    (tmp_path / "sqlchorus" / "__init__.py").write_text(FAKE)
    local_ray(runtime_env={"env_vars": {"PYTHONPATH": str(tmp_path)}})
    with pytest.raises(ClusterError) as e:
        Pool(_settings(), 1).start()
    assert str(e.value) == ("A worker of the cluster cannot import sqlchorus: install sqlchorus[ray] (the same "
                            "version) on every node.")


@pytest.mark.slow
def test_workers_of_another_version_and_a_database_they_cannot_open(local_ray, monkeypatch, tmp_path):
    (tmp_path / "preflight_models.py").write_text(MODELS)
    local_ray(runtime_env={"env_vars": {"PYTHONPATH": str(tmp_path)}})
    monkeypatch.setattr(workers, "__version__", "0.0.1")
    with pytest.raises(ClusterError, match=r"has sqlchorus \S+, this command 0.0.1: install the same version"):
        Pool(_settings(), 1).start()
    monkeypatch.undo()
    not_sqlite = tmp_path / "notes.sqlite"
    not_sqlite.write_text("not a database")
    with pytest.raises(ClusterError, match=r"cannot open .*notes.sqlite"):
        Pool(_settings(), 1).start([str(not_sqlite)])
