"""The value index's embedding re-rank, from a sentence-transformers model on disk.

No model is downloaded: a deterministic fake embedder stands for one, and the loader is replaced
where a test needs a folder to load.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sqlchorus.config.settings import ROLES, Settings
from sqlchorus.core.context import Context
from sqlchorus.nodes import retrieve_values as node
from sqlchorus.testing import ScriptedChatModel
from sqlchorus.tools import values as vi
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.schema.introspect import introspect

CITIES = ["New York", "Newark", "York", "East York", "Yorkshire", "Boston", "Paris"]
KEYWORD = "Newyork"
DB_NAME = "cities.sqlite"


class FakeEmbedder:
    """A toy sentence embedder, deterministic and offline: texts that mean the same (by the
    table below, on normalised text) share a unit vector, every other text gets one of its own
    dimension. It calls "Newyork" and "Newark" the same place, unlike edit distance, which puts
    "New York" first. Keeps every batch it embeds in ``calls``."""

    MEANINGS = {"newyork": "newark-ish", "newark": "newark-ish"}

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self._dims: dict[str, int] = {}

    def __call__(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        meanings = [self.MEANINGS.get(vi.normalize(t), vi.normalize(t)) for t in texts]
        for meaning in meanings:
            self._dims.setdefault(meaning, len(self._dims))
        size = 16
        assert len(self._dims) <= size
        return [[1.0 if d == self._dims[m] else 0.0 for d in range(size)] for m in meanings]


@pytest.fixture
def city_db(tmp_path) -> Path:
    path = tmp_path / DB_NAME
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE city (id INTEGER PRIMARY KEY, name TEXT)")
    conn.executemany("INSERT INTO city (name) VALUES (?)", [(c,) for c in CITIES])
    conn.commit()
    conn.close()
    return path


@pytest.fixture
def city_index(city_db, tmp_path):
    with GuardedDatabase(city_db) as db:
        index = vi.ValueIndex.build(db, cache_dir=tmp_path / "value-cache")
    assert index.embedder is None  # a search's own embedder is the only one
    yield index
    index.close()


@pytest.fixture(autouse=True)
def _no_cached_embedders():
    # retrieve_values keeps a loaded model per folder for the process: no test sees another's.
    node._cached_embedder.cache_clear()
    yield
    node._cached_embedder.cache_clear()


def _ranked(result: dict) -> list[str]:
    return [hit["value"] for hit in result.get("city.name", [])]


def test_the_embedder_given_to_a_search_changes_the_order(city_index):
    plain = city_index.search([KEYWORD], threshold=0)
    embedder = FakeEmbedder()
    blended = city_index.search([KEYWORD], threshold=0, embedder=embedder)
    assert _ranked(plain)[:2] == ["New York", "Newark"]  # edit distance alone
    assert _ranked(blended)[:2] == ["Newark", "New York"]  # the embedding's neighbour first
    scores = {h["value"]: h["score"] for h in blended["city.name"]}
    plain_scores = {h["value"]: h["score"] for h in plain["city.name"]}
    assert scores["Newark"] > plain_scores["Newark"] and scores["New York"] < plain_scores["New York"]
    # The keyword is embedded first, beside the fuzzy candidates it is compared with.
    assert embedder.calls and all(batch[0] == KEYWORD for batch in embedder.calls)
    assert {"New York", "Newark"} <= {t for batch in embedder.calls for t in batch[1:]}
    # The embedder belongs to that search only: the index is unchanged, the next search plain.
    assert city_index.embedder is None
    assert city_index.search([KEYWORD], threshold=0) == plain
    # An exact match is never re-ranked below 100.
    assert city_index.search(["New York"], embedder=FakeEmbedder())["city.name"][0] == {
        "value": "New York", "score": 100.0, "keyword": "New York"}


def _run_node(index, db_path: Path, **settings) -> dict:
    """The ``retrieve_values`` node's update for the keyword, over ``index``."""
    settings = Settings(trace_dir=None, cache=False, **settings)
    model = ScriptedChatModel(["unused"])
    with GuardedDatabase(db_path) as db:
        context = Context(db=db, models={r: model for r in ROLES}, settings=settings,
                          schema=introspect(db, sample_values=0), value_index=index)
        return node.retrieve_values({"question": "Which city is Newyork?", "keywords": [KEYWORD]},
                                    SimpleNamespace(context=context))


def test_retrieve_values_uses_the_settings_embedder(city_index, monkeypatch, tmp_path):
    folder = tmp_path / "minilm"
    folder.mkdir()
    loaded: list[str] = []
    fake = FakeEmbedder()

    def load(path):
        loaded.append(path)
        return fake

    monkeypatch.setattr(node, "load_local_embedder", load)
    without = _run_node(city_index, tmp_path / DB_NAME)
    assert loaded == [] and fake.calls == []  # unset: no model is loaded
    assert _ranked(without["values"]) == ["New York"]  # edit distance alone, at the default threshold
    assert "errors" not in without

    first = _run_node(city_index, tmp_path / DB_NAME, value_embedder=str(folder))
    second = _run_node(city_index, tmp_path / DB_NAME, value_embedder=str(folder))
    assert loaded == [str(folder)]  # loaded once per folder and process, then reused
    assert fake.calls  # and used
    for update in (first, second):
        assert _ranked(update["values"]) == ["Newark"]  # the re-rank lifts Newark, drops New York
        assert "errors" not in update


def test_a_missing_embedder_is_a_clear_error_and_values_still_come(city_index, tmp_path):
    missing = tmp_path / "no-such-model"
    update = _run_node(city_index, tmp_path / DB_NAME, value_embedder=str(missing))
    # The values still come, ranked by edit distance alone ...
    assert _ranked(update["values"]) == ["New York"]
    assert update["values"]["city.name"][0]["score"] == pytest.approx(93.33, abs=0.01)
    # ... and the run's errors say why there was no re-rank.
    (error,) = update["errors"]
    assert error["node"] == "retrieve_values" and error["kind"] == "values"
    assert error["message"].startswith("No embedding re-rank: ")
    assert repr(str(missing)) in error["message"] and "not a folder" in error["message"]
    assert "never downloads" in error["message"]
    # A failed load is not remembered: once the folder holds a model, the next run uses it.
    assert node._cached_embedder.cache_info().currsize == 0


def test_load_local_embedder_says_how_to_install(monkeypatch, tmp_path):
    # A folder that does not exist: nothing is downloaded in its place, and the error says so.
    with pytest.raises(vi.EmbedderError) as missing:
        vi.load_local_embedder(str(tmp_path / "all-MiniLM-L6-v2"))
    assert "not a folder" in str(missing.value)
    assert "already on disk" in str(missing.value) and "never downloads" in str(missing.value)
    # A folder, without the optional package: how to install it.
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(vi.EmbedderError) as no_package:
        vi.load_local_embedder(str(tmp_path))
    assert "sentence-transformers" in str(no_package.value)
    assert "pip install 'sqlchorus[embeddings]'" in str(no_package.value)
    # The error is the package's kind of error, and a ValueError for callers that catch those.
    assert isinstance(no_package.value, ValueError)
    assert vi.EmbedderError.kind == "value_embedder"
