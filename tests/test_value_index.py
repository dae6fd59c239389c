"""Value index: retrieval cases from a fixture table, recall on a fixture of keywords with and
without typos, datasketch equivalence, the batch computations against their one-value
definitions, reading as SQLite lists values, file format and cache behaviour."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from datasketch import MinHash, MinHashLSH

from sqlchorus.tools import values as vi
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.values import hashing
from sqlchorus.tools.values import index as index_module
from sqlchorus.tools.values.building import _write_index
from sqlchorus.tools.values.hashing import _WORD
from sqlchorus.tools.values.reading import _column_pages, _read_columns, _text_columns
from sqlchorus.tools.values.storage import _VID_MASK, _index_path, _pack

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
    # Every column of the five tables but the BLOB-declared one and each table's rowid
    # (``id INTEGER PRIMARY KEY``), which can hold nothing but an integer.
    assert total == 9


def test_cache_reuse_and_invalidation(tmp_path, monkeypatch):
    path = _make_db(tmp_path / "music.sqlite")
    cache = tmp_path / "cache"
    builds = []
    monkeypatch.setattr("sqlchorus.tools.values.index._write_index",
                        lambda *a, **k: (builds.append(1), _write_index(*a, **k)))

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
        target, _ = _index_path(db, tmp_path)
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


def test_local_embedder_names_what_is_missing(monkeypatch, tmp_path):
    # Asked for by a setting, a missing model or package is an error that says what to do.
    with pytest.raises(vi.EmbedderError, match="not a folder"):
        vi.load_local_embedder("all-MiniLM-L6-v2")
    monkeypatch.setitem(__import__("sys").modules, "sentence_transformers", None)
    with pytest.raises(vi.EmbedderError, match="embeddings"):
        vi.load_local_embedder(str(tmp_path))


# -- typos: the one-edit lookup --------------------------------------------------------------------


def _one_edit_variants(token: str, rng) -> list[str]:
    """One insertion, deletion, substitution and (inside one half) transposition of ``token``."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    i = rng.randrange(len(token))
    out = [token[:i] + rng.choice(letters) + token[i:],
           token[:i] + token[i + 1:],
           token[:i] + rng.choice([c for c in letters if c != token[i]]) + token[i + 1:]]
    half = len(token) // 2
    if half >= 2:  # a swap within the first half leaves the second half intact
        j = rng.randrange(half - 1)
        out.append(token[:j] + token[j + 1] + token[j] + token[j + 2:])
    return [v for v in out if len(v) >= 1]


def test_half_keys_find_every_token_within_one_edit():
    import random

    rng = random.Random(7)
    for _ in range(400):
        token = "".join(rng.choice("abcdefgh xyz") for _ in range(rng.randint(3, 14))).strip()
        if len(token) < 3:
            continue
        stored = set(vi.half_keys([token]).ravel().tolist())
        for typo in _one_edit_variants(token, rng):
            if len(typo) >= 3:
                assert stored & set(vi.query_half_keys(typo)), (token, typo)


def test_half_keys_do_not_match_distant_tokens():
    stored = set(vi.half_keys(["france", "germany", "boston"]).ravel().tolist())
    for far in ["italy", "japan", "spain", "kenya", "peru"]:
        assert not stored & set(vi.query_half_keys(far)), far
    # Same halves but another length: the length is part of the key.
    assert not set(vi.half_keys(["fran"]).ravel().tolist()) & set(vi.query_half_keys("francesca"))


@pytest.mark.parametrize("keyword, column, value", [
    ("Fraxnce", "country.name", "France"),        # insertion
    ("Grmany", "country.name", "Germany"),        # deletion
    ("Finlend", "country.name", "Finland"),       # substitution
    ("Bsoton", "city.name", "Boston"),            # transposition in the first half
    ("Pariz", "city.name", "Paris"),              # substitution in a short value
    ("Swifft", "singer.name", "Taylor Swift"),    # one word of a multi-word value
    ("Beatels", "singer.name", "The Beatles"),
])
def test_one_typo_finds_the_value_first(index, keyword, column, value):
    hits = index.search([keyword])[column]
    assert hits[0]["value"] == value, hits
    assert 80 <= hits[0]["score"] < 99


def test_typos_on_real_databases_need_the_one_edit_lookup(spider, tmp_path, monkeypatch):
    """Typos that 3-gram MinHash misses (short words, an edit in the middle): found first with
    the one-edit lookup, and not found without it."""
    cases = [("pets_1", "cjat", "Pets.PetType", "cat"),
             ("pets_1", "dgog", "Pets.PetType", "dog"),
             ("battle_death", "Baoril", "battle.bulgarian_commander", "Boril"),
             ("student_transcripts_tracking", "Wiard", "Students.last_name", "Ward"),
             ("voter_1", "NhY", "VOTES.state", "NY"),
             ("cre_Doc_Template_Mgt", "dSummer", "Documents.Document_Name", "Summer Show"),
             ("car_1", "Ftrance", "countries.CountryName", "france")]
    indexes = {}
    for name in {c[0] for c in cases}:
        with GuardedDatabase(spider(name)) as db:
            indexes[name] = vi.ValueIndex.build(db, cache_dir=tmp_path)

    def first(db_name, keyword, column):
        hits = indexes[db_name].search([keyword]).get(column, [])
        return hits[0]["value"] if hits else None

    assert [first(d, k, c) for d, k, c, _ in cases] == [v for *_, v in cases]
    monkeypatch.setattr("sqlchorus.tools.values.lookup.EDIT_CANDIDATES", 0)
    missed = [k for d, k, c, v in cases if first(d, k, c) != v]
    assert len(missed) >= 6, missed
    for built in indexes.values():
        built.close()


def test_far_typos_are_not_returned_first(tmp_path):
    path = tmp_path / "people.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE person (name TEXT)")
    conn.executemany("INSERT INTO person VALUES (?)",
                     [(n,) for n in ["Ward", "Edward", "Howard", "Wardle", "Sward", "Wilde",
                                     "Warden Hill", "Margaret"]])
    conn.commit()
    conn.close()
    with GuardedDatabase(path) as db, vi.ValueIndex.build(db, cache_dir=tmp_path) as index:
        hits = index.search(["Wiard"], threshold=0)["person.name"]
        assert hits[0]["value"] == "Ward"  # one edit beats two ("Sward", "Wardle") or more
        scores = {h["value"]: h["score"] for h in index.search(["Wiard"], threshold=0, top_k=10)
                  ["person.name"]}
        assert scores["Ward"] > max(s for v, s in scores.items() if v != "Ward")
        # Three edits away from every value: nothing reaches the default threshold.
        assert index.search(["Wxqrd"]) == {}
        assert "Margaret" not in {h["value"] for h in hits}


def test_plural_keywords_find_singular_values(tmp_path):
    path = tmp_path / "pets.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE pet (kind TEXT, make TEXT)")
    conn.executemany("INSERT INTO pet VALUES (?, ?)", [("cat", "volvo"), ("dog", "saab")])
    conn.commit()
    conn.close()
    with GuardedDatabase(path) as db, vi.ValueIndex.build(db, cache_dir=tmp_path) as index:
        assert index.search(["cats"])["pet.kind"] == [
            {"value": "cat", "score": 98.0 - vi.SINGULAR_PENALTY, "keyword": "cats"}]
        # A typo in a plural is two edits from the singular value; its singular, one.
        assert index.search(["zdogs"])["pet.kind"][0]["value"] == "dog"
        assert index.search(["vjolvos"])["pet.make"][0]["value"] == "volvo"
    assert vi.singular("cities") == "city" and vi.singular("boxes") == "box"
    assert vi.singular("new yorks") == "new york"
    assert vi.singular("class") is None and vi.singular("bus") is None


def test_acronyms_of_capitalised_names(tmp_path):
    path = tmp_path / "codes.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE place (code TEXT, name TEXT)")
    conn.executemany("INSERT INTO place VALUES (?, ?)",
                     [("USA", "America"), ("UK", "Britain"), ("NY", "New York"), ("UN", "x")])
    conn.commit()
    conn.close()
    with GuardedDatabase(path) as db, vi.ValueIndex.build(db, cache_dir=tmp_path) as index:
        assert index.search(["United Kingdom"])["place.code"][0] == {
            "value": "UK", "score": 98.0, "keyword": "United Kingdom"}
        assert index.search(["United States"])["place.code"][0]["value"] == "USA"
        assert "place.code" not in index.search(["united states"])  # not a capitalised name
        assert vi.acronym("United States of America") == "usa"
        assert vi.acronym("New") is None and vi.acronym("New York 2") is None


# -- storage: format, spilling, damage ------------------------------------------------------------


def test_spilled_build_equals_in_memory_build(db_path, tmp_path, monkeypatch):
    keywords = ["new yrok", "Frnce", "swift", "Beyonce", "york", "United States", "1999"]
    with GuardedDatabase(db_path) as db:
        in_memory = vi.ValueIndex.build(db, cache_dir=tmp_path / "a")
        monkeypatch.setattr("sqlchorus.tools.values.building.SPILL_POSTINGS", 10)
        spilled = vi.ValueIndex.build(db, cache_dir=tmp_path / "b")
    assert spilled.search(keywords) == in_memory.search(keywords)
    assert in_memory.search(keywords)["city.name"][0]["value"] == "York"
    assert not list((tmp_path / "b").glob(".*"))  # scratch files are gone
    in_memory.close()
    spilled.close()


def _postings_of(index: vi.ValueIndex, key: int) -> np.ndarray:
    """The value ids the index file stores under ``key``."""
    packed = index._fetch(np.array([key], dtype=np.int64))
    low = _pack(np.array([key], dtype=np.int64), np.zeros(1, dtype=np.int64))[0]
    start = np.searchsorted(packed, low, side="left")
    end = np.searchsorted(packed, low | np.uint64(_VID_MASK), side="right")
    return (packed[start:end] & np.uint64(_VID_MASK)).astype(np.int32)


def test_postings_per_key_are_capped(db_path, tmp_path, monkeypatch):
    monkeypatch.setattr("sqlchorus.tools.values.building.MAX_POSTINGS", 2)
    with GuardedDatabase(db_path) as db, vi.ValueIndex.build(db, cache_dir=tmp_path) as index:
        key = int(vi.string_keys(["extra"], _WORD)[0])
        assert len(_postings_of(index, key)) == 2  # 20 values hold the word "extra"


def _old_format_file(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
        CREATE TABLE cols (id INTEGER PRIMARY KEY, tbl TEXT, col TEXT, n_values INTEGER,
                           truncated INTEGER);
        CREATE TABLE skipped (tbl TEXT, col TEXT, reason TEXT);
        CREATE TABLE vals (id INTEGER PRIMARY KEY, col_id INTEGER, value TEXT, norm TEXT);
        CREATE TABLE words (word TEXT, vid INTEGER, PRIMARY KEY (word, vid)) WITHOUT ROWID;
        CREATE TABLE lsh (key INTEGER, vid INTEGER, PRIMARY KEY (key, vid)) WITHOUT ROWID;
        INSERT INTO meta VALUES ('format_version', '1'), ('num_perm', '16'), ('bands', '8');
        INSERT INTO cols VALUES (1, 'city', 'name', 1, 0);
        INSERT INTO vals VALUES (1, 1, 'Paris', 'paris');
    """)
    conn.commit()
    conn.close()


def test_an_index_of_the_old_format_is_refused_with_a_clear_message(tmp_path):
    old = tmp_path / "old.sqlite"
    _old_format_file(old)
    with pytest.raises(ValueError, match=rf"format 1, not {vi.FORMAT_VERSION}.*Rebuild it"):
        vi.ValueIndex.open(old)
    not_an_index = tmp_path / "other.sqlite"
    sqlite3.connect(not_an_index).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(ValueError, match="is not a value index"):
        vi.ValueIndex.open(not_an_index)


def test_an_old_format_file_in_the_cache_is_rebuilt(db_path, tmp_path):
    with GuardedDatabase(db_path) as db:
        target, _ = _index_path(db, tmp_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        _old_format_file(target)
        index = vi.ValueIndex.load_or_build(db, tmp_path)
    assert not index.stats["from_cache"] and index.meta["format_version"] == str(vi.FORMAT_VERSION)
    assert index.search(["Pariss"])["city.name"][0]["value"] == "Paris"
    index.close()


def test_the_format_version_is_part_of_the_cache_file_name(db_path, tmp_path, monkeypatch):
    with GuardedDatabase(db_path) as db:
        current, _ = _index_path(db, tmp_path)
        monkeypatch.setattr("sqlchorus.tools.values.storage.FORMAT_VERSION",
                            vi.FORMAT_VERSION - 1)
        older, _ = _index_path(db, tmp_path)
    assert current != older


@pytest.mark.parametrize("damage", [
    "UPDATE post SET postings = x'0102'",  # a bucket
    "UPDATE vals SET ends = x'01000000' WHERE chunk = 0",  # a value chunk, read in memory too
])
def test_a_damaged_index_is_an_error_not_a_crash(db_path, tmp_path, damage):
    with GuardedDatabase(db_path) as db:
        path = vi.ValueIndex.build(db, cache_dir=tmp_path).path
    conn = sqlite3.connect(path)
    conn.execute(damage)
    conn.commit()
    conn.close()
    with vi.ValueIndex.open(path) as index, pytest.raises(ValueError, match="damaged; rebuild"):
        index.search(["France"])


def test_module_import_stays_light():
    import subprocess
    import sys

    code = ("import sys, sqlchorus.tools.values; "
            "print(sorted(m for m in ('datasketch', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_page_made_from_the_sample_is_the_page_sqlite_makes(tmp_path):
    import dataclasses

    path = tmp_path / "edge.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (a TEXT, b TEXT)")
    odd = ["", "x\x00y", "é", "e", "É", "Zeta", "zeta", "a" * 201, "a" * 200, "日本", "😀", "abc",
           "ABC", " lead", "trail ", "abc", "\x00abc", "x\x00" + "y" * 250]
    conn.executemany("INSERT INTO t VALUES (?, ?)",
                     [(v, f"k{i}") for i, v in enumerate(odd * 20)] + [(1, None), (2.5, b"\x00")])
    conn.commit()
    conn.close()
    with GuardedDatabase(path) as db:
        plans, _ = _text_columns(db)
        for plan in plans:
            for limit in (100_000, 3):
                reason, pages = _column_pages(db, plan, limit, 30.0)
                from_sample = [v for page in pages for v in page]
                # A declared collation makes the reader ask SQLite for the page instead.
                _, pages = _column_pages(db, dataclasses.replace(plan, collated=True), limit, 30.0)
                assert reason is None and from_sample == [v for page in pages for v in page]
                # SQLite's length() stops at a NUL: of the 17 distinct texts, the empty one, the
                # 201-character one and "\x00abc" are left out; TEXT affinity made 1 and 2.5 text.
                assert len(from_sample) == min(limit, 16 if plan.column == "a" else 360)


def _previous_format_file(built: Path, target: Path) -> None:
    """``built`` as format 2 wrote it: the same tables, but columns without ``first_vid``."""
    import shutil

    shutil.copy(built, target)
    conn = sqlite3.connect(target)
    conn.executescript("""
        UPDATE meta SET value = '2' WHERE key = 'format_version';
        CREATE TABLE cols2 (id INTEGER PRIMARY KEY, tbl TEXT, col TEXT, n_values INTEGER,
                            truncated INTEGER);
        INSERT INTO cols2 SELECT id, tbl, col, n_values, truncated FROM cols;
        DROP TABLE cols;
        ALTER TABLE cols2 RENAME TO cols;
    """)
    conn.commit()
    conn.close()


def test_an_index_of_the_previous_format_is_rebuilt_not_misread(db_path, tmp_path):
    with GuardedDatabase(db_path) as db:
        built = vi.ValueIndex.build(db, cache_dir=tmp_path / "built")
        built.close()
        target, _ = _index_path(db, tmp_path / "cache")
        target.parent.mkdir(parents=True)
        _previous_format_file(built.path, target)
        with pytest.raises(vi.IndexFormatError, match=rf"format 2, not {vi.FORMAT_VERSION}"):
            vi.ValueIndex.open(target)
        index = vi.ValueIndex.load_or_build(db, tmp_path / "cache")
    assert not index.stats["from_cache"] and index.meta["format_version"] == str(vi.FORMAT_VERSION)
    assert index.search(["Yelow"])["song.mixed"][0]["value"] == "Yellow"
    index.close()


# -- recall on a fixture: every lookup has cases only it finds ------------------------------------

RECALL_VALUES = {
    "country": {"name": ["France", "Germany", "United Kingdom", "United States", "Netherlands",
                         "New Zealand", "Côte d'Ivoire"],
                "continent": ["Europe", "Asia", "North America", "Oceania", "Africa"],
                "code": ["FRA", "DEU", "GBR", "USA", "NLD", "NZL", "CIV"]},
    "language": {"language": ["English", "French", "German", "Dutch", "Maori"],
                 "is_official": ["T", "F"]},
    "address": {"state": ["NorthCarolina", "SouthDakota", "New York", "California"]},
    "department": {"name": ["engineer", "history", "mathematics", "computer science"]},
    "pet": {"kind": ["cat", "dog", "bird"]},
}
RECALL_CASES = [
    # (keywords of a question, keywords with one typo each, column, value)
    (["France"], ["Frannce"], "country.name", "France"),
    (["german"], ["germna"], "language.language", "German"),
    (["Kingdom"], ["Kingdon"], "country.name", "United Kingdom"),            # word
    (["new zealand"], ["new zeland"], "country.name", "New Zealand"),
    (["cote d ivoire"], ["cote d ivorie"], "country.name", "Côte d'Ivoire"),  # accents
    (["European"], ["Europeaan"], "country.continent", "Europe"),             # LSH
    (["North Carolina"], ["North Carolna"], "address.state", "NorthCarolina"),  # written together
    (["engineering"], ["enngineering"], "department.name", "engineer"),      # LSH
    (["computer science"], ["computr science"], "department.name", "computer science"),
    (["cats"], ["catts"], "pet.kind", "cat"),                                # plural
    (["United States"], ["United States"], "country.code", "USA"),           # initials
    (["official language"], ["offical language"], "language.is_official", "T"),  # column name
    (["official"], ["oficial"], "language.is_official", "T"),
    (["dog"], ["dgog"], "pet.kind", "dog"),                                  # one edit, short
]


@pytest.fixture(scope="module")
def recall_index(tmp_path_factory):
    folder = tmp_path_factory.mktemp("recall")
    path = folder / "world.sqlite"
    conn = sqlite3.connect(path)
    for table, columns in RECALL_VALUES.items():
        conn.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, {', '.join(columns)})")
        longest = max(len(v) for v in columns.values())
        rows = [[values[i % len(values)] for values in columns.values()] for i in range(longest)]
        conn.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
                         f"({', '.join('?' * len(columns))})", rows)
    conn.commit()
    conn.close()
    with GuardedDatabase(path) as db:
        index = vi.ValueIndex.build(db, cache_dir=folder / "cache")
    yield index
    index.close()


def _recall_at5(index: vi.ValueIndex, typo: bool) -> tuple[float, list[str]]:
    missed = []
    for clean, typos, column, value in RECALL_CASES:
        hits = index.search(typos if typo else clean, top_k=5).get(column, [])
        if value not in [h["value"] for h in hits]:
            missed.append(f"{typos if typo else clean} -> {value}")
    return 1 - len(missed) / len(RECALL_CASES), missed


@pytest.mark.parametrize("typo", [False, True], ids=["clean", "one typo"])
def test_recall_at_5_on_the_fixture(recall_index, typo):
    recall, missed = _recall_at5(recall_index, typo)
    assert recall == 1.0, missed


@pytest.mark.parametrize("bound, lost", [
    ("LSH_CANDIDATES", {"European -> Europe", "engineering -> engineer"}),
    ("EDIT_CANDIDATES", {"dgog -> dog", "North Carolna -> NorthCarolina"}),
])
def test_each_lookup_finds_what_the_others_miss(recall_index, monkeypatch, bound, lost):
    monkeypatch.setattr(f"sqlchorus.tools.values.lookup.{bound}", 0)
    missed = {m.replace("['", "").replace("']", "") for m in
              _recall_at5(recall_index, False)[1] + _recall_at5(recall_index, True)[1]}
    assert lost & missed, missed


def test_column_names_find_the_values_of_flag_columns(recall_index, monkeypatch):
    hits = recall_index.search(["official"])["language.is_official"]
    assert {h["value"] for h in hits} == {"T", "F"}
    assert all(h["score"] == vi.FLAG_SCORE and h["keyword"] == "official" for h in hits)
    assert "language.is_official" in recall_index.search(["offical"])  # within one edit
    assert "language.is_official" not in recall_index.search(["official"], threshold=81)
    # A column of more values is not found by its name: "language" names no value of its own.
    assert "language.language" not in recall_index.search(["language"])
    # Without the column-name lookup, nothing in the question spells T.
    monkeypatch.setattr(recall_index, "_names", index_module._ColumnNames([]))
    assert "language.is_official" not in recall_index.search(["official language"])


def test_only_columns_of_short_values_are_found_by_their_name(tmp_path):
    """A few values of at most five characters are a flag or a code; a few longer ones are
    spelt by the question itself, so naming their column brings nothing."""
    path = tmp_path / "small.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE dogs (size TEXT, gender TEXT, breed TEXT)")
    conn.executemany("INSERT INTO dogs VALUES (?, ?, ?)", [
        ("Small", "False", "Eskimo dog"), ("Medium", "True", "Husky"), ("Large", "True", "Husky")])
    conn.commit()
    conn.close()
    with GuardedDatabase(path) as db:
        index = vi.ValueIndex.build(db, cache_dir=tmp_path / "cache")
    try:
        assert {h["value"] for h in index.search(["gender"])["dogs.gender"]} == {"True", "False"}
        # "Medium" has six characters: the column is not a flag, and "size" names no value.
        assert index.search(["size"]) == {}
        assert index.search(["breed"]) == {}
        assert [h["value"] for h in index.search(["medium"])["dogs.size"]] == ["Medium"]
    finally:
        index.close()


def test_column_name_words():
    assert index_module._name_words("IsOfficial") == ["official"]
    assert index_module._name_words("Hight_definition_TV") == ["hight", "definition"]
    assert index_module._name_words("PetType") == ["pet", "type"]
    assert index_module._name_words("HTTPStatus") == ["http", "status"]


# -- searching in memory and from the file ---------------------------------------------------------


def test_a_search_from_the_file_equals_one_in_memory(db_path, tmp_path, monkeypatch):
    keywords = ["new yrok", "Frnce", "swift", "Beyonce", "york", "United States", "1999", "cats"]
    with GuardedDatabase(db_path) as db:
        index = vi.ValueIndex.build(db, cache_dir=tmp_path)
    in_memory = index.search(keywords, threshold=0)
    assert index._memory is not None
    monkeypatch.setattr(index_module, "MEMORY_BYTES", 0)
    with vi.ValueIndex.open(index.path) as from_file:
        assert from_file.search(keywords, threshold=0) == in_memory
        assert from_file._memory is None
    index.close()


# -- reading: as SQLite lists the values ----------------------------------------------------------


def _distinct(path: Path, table: str, column: str) -> list[str]:
    conn = sqlite3.connect(path)
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    rows = conn.execute(f'SELECT DISTINCT "{column}" FROM "{table}" WHERE typeof("{column}") = '
                        f'\'text\' AND length("{column}") BETWEEN 1 AND {vi.MAX_VALUE_CHARS} '
                        f'ORDER BY "{column}"').fetchall()
    conn.close()
    return [r[0] for r in rows]


@pytest.mark.parametrize("rows,whole_rows", [(40, 20_000), (900, 20_000), (2500, 20_000),
                                             (2500, 100)])
def test_tables_small_and_large_are_read_as_sqlite_lists_them(tmp_path, monkeypatch, rows,
                                                              whole_rows):
    """A table no larger than the sample is read whole; a larger one column by column: each
    column's values whole, joined into one string, when they are few enough, else distinct
    values in pages joined into one string each (with a NUL inside a value, row by row): the
    values are SQLite's ``SELECT DISTINCT`` whichever way."""
    import dataclasses

    monkeypatch.setattr("sqlchorus.tools.values.reading.WHOLE_ROWS", whole_rows)

    path = tmp_path / "wide.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, word TEXT, mixed, nul TEXT, num INTEGER)")
    conn.executemany("INSERT INTO t (word, mixed, nul, num) VALUES (?, ?, ?, ?)", [
        (f"word {i % 700:04d}", [None, i, f"m{i % 37}", b"\x01", 2.5][i % 5],
         f"a\x00b{i % 3}" if i % 11 == 0 else f"n{i % 50}", i if i % 97 else "N/A")
        for i in range(rows)])
    conn.commit()
    conn.close()
    monkeypatch.setattr("sqlchorus.tools.values.reading.PAGE_BYTES", 2_000)  # many pages
    with GuardedDatabase(path) as db:
        plans, _ = _text_columns(db)
        assert [p.column for p in plans] == ["word", "mixed", "nul", "num"]  # not the rowid
        reads = list(_read_columns(db, plans, 100_000, 30.0))
        for read in reads:
            got = [v for page in read.pages for v in page]
            assert got == _distinct(path, "t", read.plan.column), read.plan.column
            assert read.known_truncated() in (False, None)
        # The same values when each column is read on its own (a collation asks SQLite).
        for plan in plans:
            _, pages = _column_pages(db, dataclasses.replace(plan, collated=True), 100_000, 30.0)
            assert [v for page in pages for v in page] == _distinct(path, "t", plan.column)
        # Fewer values wanted than there are: the first ones in key order, and said so.
        limited = list(_read_columns(db, plans[:1], 100, 30.0))[0]
        assert [v for page in limited.pages for v in page] == _distinct(path, "t", "word")[:100]
        assert limited.known_truncated() is True or rows <= 100


@pytest.mark.parametrize("whole_rows", [20_000, 2_000], ids=["read-whole", "larger-than-whole"])
def test_a_sqlite_table_is_read_in_one_statement_or_sampled_by_it(tmp_path, monkeypatch, whole_rows):
    """A table of at most WHOLE_ROWS rows is read in one statement, every column at once; a
    larger one is sampled by that statement (its first rows), and only the columns the sample
    does not skip are read again, each on its own. The values are each column's read on its own."""
    import dataclasses

    monkeypatch.setattr("sqlchorus.tools.values.reading.WHOLE_ROWS", whole_rows)
    path = tmp_path / "mid.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, note TEXT, code)")
    conn.executemany("INSERT INTO t (name, note, code) VALUES (?, ?, ?)", [
        (f"name {i % 1500}", "a long remark " * 10 + str(i), i if i < 1200 else f"c{i % 7}")
        for i in range(3000)])
    conn.commit()
    conn.close()
    with GuardedDatabase(path) as db:
        statements = []
        lookup = db.lookup

        def counted(sql, **kw):
            statements.append(sql)
            return lookup(sql, **kw)
        db.lookup = counted
        plans, _ = _text_columns(db)
        reads = list(_read_columns(db, plans, 100_000, 30.0))
        values = [[v for page in read.pages for v in page] for read in reads]  # pages read lazily
        assert statements[0] == f'SELECT "name", "note", "code" FROM "t" LIMIT {whole_rows + 1}'
        if whole_rows >= 3000:
            assert len(statements) == 1
        else:  # "note" is skipped by the sample, "name" and "code" read on their own
            assert len(statements) > 1 and not any('"note"' in sql for sql in statements[1:])
            assert any('"name"' in sql for sql in statements[1:]) and any('"code"' in sql for sql in statements[1:])
        assert [r.reason for r in reads] == [None, "free text (sampled values average 143 characters)", None]
        for read, got in zip(reads[::2], values[::2]):
            assert got == _distinct(path, "t", read.plan.column)
            alone = _column_pages(db, dataclasses.replace(read.plan, collated=True), 100_000, 30.0)[1]
            assert got == [v for page in alone for v in page]
            assert read.known_truncated() is False


# -- the batch computations against their one-value definitions -----------------------------------


@pytest.mark.parametrize("run_chars", [1, 5, 64, 1 << 16])
def test_segment_keys_are_the_same_whatever_the_runs_they_are_hashed_in(monkeypatch, run_chars):
    """Segments hashed from one running sum or from several (whole segments each, a segment
    longer than a run alone) give the same keys as each segment hashed on its own."""
    import random

    from sqlchorus.tools.values import hashing

    rng = random.Random(run_chars)
    monkeypatch.setattr(hashing, "RUN_CHARS", run_chars)
    for _ in range(60):
        tokens = ["".join(rng.choice("ab東\U0001f600é") for _ in range(rng.randint(1, 40)))
                  for _ in range(rng.randint(1, 30))]
        tags = [rng.randint(0, 1 << 40) for _ in tokens]
        together = hashing.tagged_keys(tokens, tags).tolist()
        monkeypatch.setattr(hashing, "RUN_CHARS", 1 << 30)
        alone = [hashing.tagged_keys([t], [g]).tolist()[0] for t, g in zip(tokens, tags)]
        monkeypatch.setattr(hashing, "RUN_CHARS", run_chars)
        assert together == alone


def test_normalize_many_equals_normalize():
    import random

    rng = random.Random(3)
    alphabet = "abcAB Z_-'\x00\n\t.,éÉ東京 1ßİﬁ\u0301\u00a0Ωω   \u20d7\u034f\u05b8\u0951"
    for _ in range(500):
        texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
                 for _ in range(rng.randint(1, 12))]
        kind = rng.random()
        if kind < 0.33:  # all ASCII: one pass
            texts = [t.encode("ascii", "ignore").decode().replace("\x00", "") for t in texts]
        elif kind < 0.67:  # no NUL of their own: the ASCII ones in one pass, the others in another
            texts = [t.replace("\x00", "") for t in texts]
        assert vi.normalize_many(texts) == [vi.normalize(t) for t in texts], texts


def test_value_blocks_equal_each_pages_block():
    """Columns keyed together give each the block it gets alone."""
    import random

    from sqlchorus.tools.values.parts import value_block, value_blocks

    rng = random.Random(5)
    for _ in range(50):
        pages = [["".join(rng.choice("ab cd!é the") for _ in range(rng.randint(0, 9)))
                  for _ in range(rng.randint(0, 20))] for _ in range(rng.randint(1, 6))]
        together = value_blocks(pages)
        assert len(together) == len(pages)
        for block, page in zip(together, pages):
            alone = value_block(page, 0)
            assert (block.first, block.text, block.lengths.tolist(), block.postings.tolist()) == (
                alone.first, alone.text, alone.lengths.tolist(), alone.postings.tolist())


def test_columns_keyed_together_make_the_parts_each_makes_alone(monkeypatch):
    """Columns read whole are keyed in batches; a skipped or unreadable column among them, a
    column read in pages and a column of more values than a batch keep their own outcome, and
    every part is the one its column makes on its own."""
    from sqlchorus.tools.sql.errors import QueryTimeoutError
    from sqlchorus.tools.values import parts as parts_module
    from sqlchorus.tools.values.parts import BuildPlan
    from sqlchorus.tools.values.reading import ColumnPlan, _ColumnRead

    plans = [ColumnPlan("t", f"c{i}") for i in range(7)]
    big = [f"value {i:05d}" for i in range(vi.HASH_BATCH + 5)]

    def reads(*_):
        return iter([
            _ColumnRead(plans[0], None, [["Paris", "Oslo"]], False),
            _ColumnRead(plans[1], "free text (sampled values average 300 characters)", (), None),
            _ColumnRead(plans[2], None, (), None, QueryTimeoutError("timed out")),
            _ColumnRead(plans[3], None, iter([["a b", "c"], ["d"]]), False),  # read in pages
            _ColumnRead(plans[4], None, [big], False),
            _ColumnRead(plans[5], None, (), False),
            _ColumnRead(plans[6], None, [["!!", "Rome"]], False),
        ])

    monkeypatch.setattr(parts_module, "_read_columns", reads)
    batches = []
    keyed = parts_module.value_blocks
    monkeypatch.setattr(parts_module, "value_blocks",
                        lambda pages: batches.append(len(pages)) or keyed(pages))
    plan = BuildPlan(tuple(plans))
    together = plan.parts(None, plan.col_ids)
    assert batches == [3, 2]  # columns 1-3 together, then 6 and 7 (4 has pages, 5 is too big)

    def shape(part):
        return (part.col_id, part.text, part.lengths.tolist(), part.postings.tolist(),
                part.n_values, part.indexed, part.truncated, part.reason)

    for part in together:
        alone = parts_module.column_part(None, list(reads())[part.col_id - 1], part.col_id,
                                         plan.max_values_per_column, plan.timeout_s)
        assert shape(part) == shape(alone)
    assert [p.reason for p in together][1:3] == [
        "free text (sampled values average 300 characters)", "unreadable: timed out"]
    assert [p.n_values for p in together] == [2, 0, 0, 3, len(big), 0, 1]


def test_value_keys_equal_the_keys_of_each_value():
    """The batch keys are what the lookups' definitions give value by value: exact key, word
    keys of the words of a multi-word value (no stop words), one-edit keys of the value and of
    those words (two characters or more), band keys."""
    import random

    rng = random.Random(9)
    for _ in range(100):
        norms = [n for n in vi.normalize_many(
            ["".join(rng.choice("ab cd the of xé東") for _ in range(rng.randint(1, 14)))
             for _ in range(rng.randint(1, 30))]) if n]
        expected = set()
        for vid, norm in enumerate(norms, start=7):
            keys = [*vi.string_keys([norm], hashing._EXACT).tolist(),
                    *vi.band_keys(vi.signatures([norm]))[0].tolist()]
            tokens = [norm] if len(norm) > 1 else []
            if " " in norm:
                words = [w for w in norm.split(" ") if w not in vi.STOPWORDS]
                keys += vi.string_keys(words, _WORD).tolist()
                tokens += [w for w in words if len(w) > 1]
            keys += vi.half_keys(tokens).ravel().tolist()
            expected |= {(k, vid) for k in keys}
        got_keys, got_vids = vi.value_keys(norms, 7)
        assert set(zip(got_keys.tolist(), got_vids.tolist())) == expected


def test_permutations_are_datasketchs():
    a, b = hashing._permutations(vi.NUM_PERM)
    datasketch = MinHash(num_perm=vi.NUM_PERM, seed=vi.SEED).permutations
    assert np.array_equal(np.stack([a, b]), datasketch)
    drawn = hashing._draw_permutations(vi.NUM_PERM, vi.SEED)
    assert np.array_equal(a, drawn[0]) and np.array_equal(b, drawn[1])


def test_unique_helpers_equal_numpys():
    rng = np.random.default_rng(0)
    for size in (0, 1, 2, 50):
        values = rng.integers(0, 10, size)
        assert np.array_equal(hashing.sorted_unique(values), np.unique(values))
        got, counts = hashing.unique_counts(values)
        want, want_counts = np.unique(values, return_counts=True)
        assert np.array_equal(got, want) and np.array_equal(counts, want_counts)


# -- the retrieve_values node ---------------------------------------------------------------------


def test_retrieve_values_returns_the_index_search(recall_index, tmp_path):
    from types import SimpleNamespace

    from sqlchorus.config.settings import Settings
    from sqlchorus.nodes import retrieve_values as node

    settings = Settings(trace_dir=None, cache=False)
    # The fields of the run's context that the node reads.
    context = SimpleNamespace(settings=settings, value_index=recall_index, tracer=None,
                              value_index_error=None)
    keywords = ["North Carolna", "official language", "cats"]
    update = node.retrieve_values({"question": "q", "keywords": keywords},
                                  SimpleNamespace(context=context))
    assert "errors" not in update
    assert update["values"] == recall_index.search(keywords, top_k=settings.values_per_keyword,
                                                   threshold=settings.value_threshold)
    assert update["values"]["address.state"][0]["value"] == "NorthCarolina"
    missing = SimpleNamespace(settings=settings, value_index=None, tracer=None,
                              value_index_error="the cache folder cannot be written")
    update = node.retrieve_values({"keywords": keywords}, SimpleNamespace(context=missing))
    assert update["values"] == {} and "cannot be written" in update["errors"][0]["message"]
