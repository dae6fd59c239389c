"""Value index: retrieval cases from a fixture table, datasketch equivalence, cache behaviour."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from datasketch import MinHash, MinHashLSH

from sqlchorus.tools import value_index as vi
from sqlchorus.tools.database import GuardedDatabase

FIXTURES = Path(__file__).parent / "fixtures" / "value_index"
CASES = json.loads((FIXTURES / "search_cases.json").read_text())

CITIES = ["New York", "new york", "York", "East York", "Newark", "Yorkshire", "Boston", "Paris"]
COUNTRIES = ["France", "Germany", "Greece", "Finland", "United States"]
SINGERS = [("Taylor Swift", "United States"), ("Beyoncé Knowles", "United States"),
           ("O'Brien", "Ireland"), ("Jon Smith", "France"), ("John Smith", "France"),
           ("The Beatles", "United Kingdom"), (None, None)]


def _make_db(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE city (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE country (id INTEGER PRIMARY KEY, name VARCHAR(40));
        CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT, country TEXT, photo BLOB,
                             bio TEXT, uid TEXT);
        CREATE TABLE song (id INTEGER PRIMARY KEY, year_text TEXT, mixed TEXT);
        CREATE TABLE unused (id INTEGER PRIMARY KEY, label TEXT);
    """)
    conn.executemany("INSERT INTO city (name) VALUES (?)", [(c,) for c in CITIES])
    conn.executemany("INSERT INTO country (name) VALUES (?)", [(c,) for c in COUNTRIES])
    conn.executemany(
        "INSERT INTO singer (name, country, photo, bio, uid) VALUES (?, ?, ?, ?, ?)",
        [(n, c, b"\x89PNG\x00\x01", "A long biography. " * 10, f"{i:032x}")
         for i, (n, c) in enumerate(SINGERS)] + [(f"Extra {i}", None, None, None, f"{i + 99:032x}")
                                                 for i in range(20)],
    )
    # A TEXT column holding BLOBs, NULLs and numbers: only its text values are indexed.
    conn.executemany("INSERT INTO song (year_text, mixed) VALUES (?, ?)",
                     [("1999", b"\x00\xff"), ("2001", None), ("2001", 42), (None, "Yellow")])
    conn.commit()
    conn.close()
    return path


@pytest.fixture(scope="module")
def db_path(tmp_path_factory) -> Path:
    return _make_db(tmp_path_factory.mktemp("db") / "music.sqlite")


@pytest.fixture(scope="module")
def index(db_path, tmp_path_factory) -> vi.ValueIndex:
    with GuardedDatabase(db_path) as db:
        built = vi.ValueIndex.build(db, cache_dir=tmp_path_factory.mktemp("cache"))
    yield built
    built.close()


@pytest.mark.parametrize("case", CASES, ids=[c["case"] for c in CASES])
def test_search_cases(index, case):
    result = index.search([case["keyword"]])
    values = [hit["value"] for hit in result.get(case["column"], [])]
    if case.get("absent"):
        assert case["value"] not in values
    else:
        assert case["value"] in values, result
        assert values.index(case["value"]) + 1 == case["rank"], result


def test_result_shape_and_order(index):
    result = index.search(["new york", "france"], top_k=2)
    for hits in result.values():
        assert 1 <= len(hits) <= 2
        assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
        assert set(hits[0]) == {"value", "score", "keyword"}
    best = [hits[0]["score"] for hits in result.values()]
    assert best == sorted(best, reverse=True)
    assert result["city.name"][0] == {"value": "new york", "score": 100.0, "keyword": "new york"}


def test_threshold_filters(index):
    assert "city.name" in index.search(["new yrok"], threshold=80)
    assert "city.name" not in index.search(["new yrok"], threshold=95)


def test_columns_blobs_nulls_and_skips(index):
    # city 8, country 5, singer.name 6 + 20, singer.country 4, song.year_text 2, song.mixed 2
    # (TEXT affinity stores the integer 42 as the text '42'; the BLOB and the NULL are left out).
    assert index.stats["values"] == 8 + 5 + 26 + 4 + 2 + 2
    skipped = {(s["table"], s["column"]): s["reason"] for s in index.skipped}
    assert skipped[("singer", "photo")] == "BLOB column"
    assert skipped[("singer", "bio")].startswith("free text")
    assert skipped[("singer", "uid")].startswith("identifiers")
    assert "song.mixed" in index.columns.values()
    assert index.search(["yellow"])["song.mixed"][0]["value"] == "Yellow"
    assert "unused.label" not in index.columns.values()


def test_truncation_is_recorded(db_path, tmp_path):
    with GuardedDatabase(db_path) as db:
        small = vi.ValueIndex.build(db, cache_dir=tmp_path, max_values_per_column=3)
    reasons = {(s["table"], s["column"]): s["reason"] for s in small.skipped}
    assert reasons[("city", "name")].startswith("truncated")
    assert ("country", "name") in reasons
    assert ("song", "year_text") not in reasons  # two distinct values fit
    assert small.stats["values"] <= 3 * len(small.columns)
    small.close()


def test_empty_databases(tmp_path):
    no_tables = tmp_path / "none.sqlite"
    conn = sqlite3.connect(no_tables)
    conn.executescript("CREATE TABLE t (x); DROP TABLE t;")
    conn.close()
    empty_table = tmp_path / "empty.sqlite"
    conn = sqlite3.connect(empty_table)
    conn.execute("CREATE TABLE t (name TEXT)")
    conn.close()
    for path in (no_tables, empty_table):
        with GuardedDatabase(path) as db:
            index = vi.ValueIndex.build(db, cache_dir=tmp_path / "cache")
        assert index.stats["values"] == 0 and index.columns == {}
        assert index.search(["anything", "new york"]) == {}
        index.close()


def test_progress_reports_every_column(db_path, tmp_path):
    calls = []
    with GuardedDatabase(db_path) as db:
        vi.ValueIndex.build(db, cache_dir=tmp_path, progress=lambda d, t: calls.append((d, t))).close()
    total = calls[-1][1]
    assert [d for d, _ in calls] == list(range(1, total + 1))
    assert total == 14  # every column of the five tables but the BLOB-declared one


def test_cache_reuse_and_invalidation(tmp_path, monkeypatch):
    path = _make_db(tmp_path / "music.sqlite")
    cache = tmp_path / "cache"
    builds = []
    real = vi._write_index
    monkeypatch.setattr(vi, "_write_index", lambda *a, **k: (builds.append(1), real(*a, **k)))

    with GuardedDatabase(path) as db:
        first = vi.ValueIndex.load_or_build(db, cache)
        second = vi.ValueIndex.load_or_build(db, cache)
    assert len(builds) == 1
    assert (first.stats["from_cache"], second.stats["from_cache"]) == (False, True)
    assert second.path == first.path and second.stats["values"] == first.stats["values"]
    first.close()
    second.close()

    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO city (name) VALUES ('Springfield')")
    conn.commit()
    conn.close()
    with GuardedDatabase(path) as db:
        third = vi.ValueIndex.load_or_build(db, cache)
    assert len(builds) == 2 and not third.stats["from_cache"]
    assert third.path != first.path
    assert third.search(["springfeld"])["city.name"][0]["value"] == "Springfield"
    third.close()


def test_damaged_cache_file_is_rebuilt(db_path, tmp_path):
    with GuardedDatabase(db_path) as db:
        target, _ = vi._index_path(db, tmp_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"not an index at all")
        index = vi.ValueIndex.load_or_build(db, tmp_path)
    assert not index.stats["from_cache"] and index.stats["values"] > 0
    assert target.read_bytes().startswith(b"SQLite format 3\x00")
    index.close()


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("SQLCHORUS_CACHE", str(tmp_path))
    assert vi.default_cache_dir() == tmp_path / "values"
    monkeypatch.delenv("SQLCHORUS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert vi.default_cache_dir() == tmp_path / "xdg" / "sqlchorus" / "values"


def test_fingerprint_tracks_content(tmp_path):
    path = _make_db(tmp_path / "a.sqlite")
    before = (vi.database_fingerprint(path), vi.database_fingerprint(path, full=True))
    assert before == (vi.database_fingerprint(path), vi.database_fingerprint(path, full=True))
    conn = sqlite3.connect(path)
    conn.execute("UPDATE city SET name = 'Boston!' WHERE name = 'Boston'")
    conn.commit()
    conn.close()
    after = (vi.database_fingerprint(path), vi.database_fingerprint(path, full=True))
    assert before[0] != after[0] and before[1] != after[1]


@pytest.mark.parametrize("text", ["new york", "a", "ab", "beyonce knowles", "東京 tower", "x" * 150])
def test_bulk_signatures_equal_datasketch(text):
    norm = vi.normalize(text)
    bulk = vi.signatures([norm, "padding value"])[0]
    one = MinHash(num_perm=vi.NUM_PERM, seed=vi.SEED, hashfunc=vi.shingle_hash32)
    one.update_batch(vi.shingles(norm))
    assert np.array_equal(bulk, one.hashvalues)


def test_band_table_matches_datasketch_lsh(index):
    values = [vi.normalize(v) for v in CITIES + COUNTRIES + [s for s, _ in SINGERS if s]]
    values = list(dict.fromkeys(values))
    sigs = vi.signatures(values)
    keys = vi.band_keys(sigs)
    lsh = MinHashLSH(num_perm=vi.NUM_PERM, params=(vi.BANDS, vi.ROWS))
    for i, sig in enumerate(sigs):
        lsh.insert(i, MinHash(num_perm=vi.NUM_PERM, seed=vi.SEED, hashvalues=sig, scheme="affine32"))
    for query in ["new yrok", "frnce", "york", "taylor swfit", "greec"]:
        qsig = vi.signatures([query])[0]
        expected = set(lsh.query(MinHash(num_perm=vi.NUM_PERM, seed=vi.SEED, hashvalues=qsig,
                                         scheme="affine32")))
        qkeys = set(vi.band_keys(qsig[None, :])[0].tolist())
        ours = {i for i in range(len(values)) if qkeys & set(keys[i].tolist())}
        assert ours == expected, query


def test_normalize():
    assert vi.normalize("  O'Brien-Café  ") == "o brien cafe"
    assert vi.normalize("NEW   York") == "new york"
    assert vi.normalize("___") == ""


def test_embedder_blends_fuzzy_scores(db_path, tmp_path):
    with GuardedDatabase(db_path) as db:
        index = vi.ValueIndex.build(db, cache_dir=tmp_path)
    plain = {h["value"]: h["score"] for h in index.search(["Newyork"], threshold=0)["city.name"]}
    # A toy embedding that calls "Newyork" and "Newark" the same thing and everything else other.
    index.embedder = lambda texts: [[1.0, 0.0] if vi.normalize(t) in ("newyork", "newark")
                                    else [0.0, 1.0] for t in texts]
    blended = {h["value"]: h["score"] for h in index.search(["Newyork"], threshold=0)["city.name"]}
    assert blended["Newark"] > plain["Newark"]
    assert blended["New York"] < plain["New York"]
    assert index.search(["New York"])["city.name"][0]["score"] == 100.0  # exact stays exact
    index.close()


def test_local_embedder_is_optional(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "sentence_transformers", None)
    assert vi.load_local_embedder("all-MiniLM-L6-v2") is None
