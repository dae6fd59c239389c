"""Shared fixtures: benchmark data, databases, scripted models, an in-memory span exporter."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def data_dir() -> Path:
    return Path(os.environ.get("SQLCHORUS_DATA", REPO.parent / "shared" / "data")).resolve()


def spider_db(name: str) -> Path:
    return data_dir() / "spider" / "database" / name / f"{name}.sqlite"


def spider_examples(db_id: str) -> list[dict]:
    """Spider dev questions on one database, with their gold SQL."""
    with open(data_dir() / "spider" / "dev.json", encoding="utf-8") as f:
        return [ex for ex in json.load(f) if ex["db_id"] == db_id]


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def spider():
    """A function from a Spider dev database name to its path; skips when the data is absent."""

    def get(name: str) -> Path:
        path = spider_db(name)
        if not path.exists():
            pytest.skip(f"Spider database {name} not found under {data_dir()}")
        return path

    return get


@pytest.fixture
def demo_db() -> Path:
    from sqlchorus.demo import demo_db_path

    return demo_db_path()


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    # Value indexes go to a cache folder; tests must not write into the user's own.
    folder = tmp_path_factory.mktemp("cache")
    previous = os.environ.get("SQLCHORUS_CACHE")
    os.environ["SQLCHORUS_CACHE"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("SQLCHORUS_CACHE", None)
    else:
        os.environ["SQLCHORUS_CACHE"] = previous


@pytest.fixture(autouse=True)
def _isolated_cwd(tmp_path, monkeypatch):
    # Runs write traces/ into the working directory by default; keep the repository clean.
    monkeypatch.chdir(tmp_path)
