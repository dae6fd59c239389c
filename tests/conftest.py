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
def _fresh_response_cache(tmp_path, monkeypatch):
    # Every model the settings name is cached; each test starts with an empty response cache,
    # so that no answer leaks from one test into another (value indexes stay shared).
    monkeypatch.setattr("sqlchorus.tools.cache.default_cache_dir", lambda: tmp_path / "response-cache")


@pytest.fixture(autouse=True)
def _isolated_cwd(tmp_path, monkeypatch):
    # Runs write traces/ into the working directory by default; keep the repository clean.
    monkeypatch.chdir(tmp_path)


class Recorder:
    """A scripted responder around the oracle: records every prompt by role, and ``override``
    replaces the answer of a role (an exception in its place is raised, as a failing model)."""

    def __init__(self, gold, override=None, **oracle_kw):
        from sqlchorus.testing import oracle_model

        self.inner = oracle_model(gold.get, **oracle_kw).responses
        self.override = override or {}
        self.prompts: list[tuple[str | None, str]] = []

    def __call__(self, messages):
        from sqlchorus.testing import prompt_text, role_of_call

        text = prompt_text(messages)
        role = role_of_call()
        self.prompts.append((role, text))
        if role in self.override:
            answer = self.override[role]
            if isinstance(answer, Exception):
                raise answer
            return answer
        return self.inner(messages)

    def of(self, role):
        return [p for r, p in self.prompts if r == role]


def run_generator(fn, db_path, model, *, question, sample=0, links=None, **settings):
    """Run one generator node directly over a database, as its Send branch would; returns its
    update and the schema view it was given."""
    from types import SimpleNamespace

    from sqlchorus.config.settings import ROLES, Settings
    from sqlchorus.core.context import Context
    from sqlchorus.core.state import GeneratorInput
    from sqlchorus.tools.database import GuardedDatabase
    from sqlchorus.tools.schema import introspect
    from sqlchorus.tools.views import render_view

    settings = Settings(trace_dir=None, cache=False, **settings)
    with GuardedDatabase(db_path) as db:
        schema = introspect(db, sample_values=settings.sample_values)
        context = Context(db=db, models={r: model for r in ROLES}, settings=settings, schema=schema)
        view = render_view(schema, settings.schema_format, sample_values=settings.sample_values)
        state = GeneratorInput(
            question=question, evidence="", keywords=[], values={}, links=links or {},
            schema_view=view, generator="", sample=sample,
        )
        return fn(state, SimpleNamespace(context=context)), view
