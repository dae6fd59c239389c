"""Value index: build cost against CHESS's settings, recall of gold literals, query latency.

Prints ONE JSON line. Usage: ``python benchmarks/values.py [--quick] [--repeat N]``.

Builds. Every build runs in its own child process, which reports its build time (wall and CPU)
and its peak resident memory (``VmHWM`` of ``/proc/self/status``, else ``ru_maxrss``; the figure
includes the interpreter and imports, the same for both sides). Imports happen before the clock
starts on both sides, and neither side starts the database's worker process (a build reads
through the guard's in-process lookups only). The CHESS baseline reads the very same values
(the same reader, the same skip rules) and then does what CHESS's preprocessing does: one
``datasketch.MinHash(num_perm=100)`` per value fed 3-grams one at a time, inserted into a
``MinHashLSH(threshold=0.01, num_perm=100)``, and both pickled to disk. Each database is built
``--repeat`` times by each side, the two sides alternating which goes first; the figures are
medians. Compared side by side: Spider dev's databases, the largest of them on its own, and a
synthetic table of 100,000 distinct values (20,000 with ``--quick``). The table of a million
distinct values is built by sqlchorus only: CHESS's settings would need about 25 GB of memory
for it here (their peak grows by about 2.4 GB per 100,000 values), so its CHESS time is the
100,000-value sample's scaled by ten and labelled as extrapolated.

Recall@5: for every Spider dev question whose gold SQL compares a column to a string literal
(``=``, ``!=``, ``IN``) and whose literal occurs in that column (case-insensitively), is the
literal among the top five values returned for that column? Keywords are the question's word
1- to 3-grams that neither start nor end with a stop word (no LLM), and again with one random
letter inserted into each keyword. The same searches are run again without the LSH lookup,
without the one-edit lookup and without the column-name lookup, to show what each adds, and the
number of values a search returns (over all columns, every question of those databases) shows
what the recall costs in noise. On the synthetic tables: 500 stored values drawn at random,
searched as they are and with one random letter inserted.

Latency: each search (one question's keywords, for every question of those databases, as they
are and with the typos; one value on the synthetic tables) is timed once, wall clock, before any
other search of the same keywords (every index already open, none searched yet); ``p50`` and
``p95`` are of those single runs. Beside them: the best of five runs of each search (what the
search costs without other processes taking the CPU away) and its thread CPU time.

Builds are also compared less the reading both sides share (``read_s``: the values read
through the same reader, nothing built; ``ratio_after_reading``).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import re
import resource
import sqlite3
import statistics
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from sqlchorus.tools.sql import text as sql_text
from sqlchorus.tools import values as vi
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.values import index as index_module
from sqlchorus.tools.values import lookup
from sqlchorus.tools.values.reading import _quote, _read_columns, _text_columns

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SQLCHORUS_DATA", REPO.parent / "shared" / "data")).resolve()
SPIDER = DATA / "spider"
_TOKEN = re.compile(r"\w+(?:['’.-]\w+)*")
SYNTHETIC_QUERIES = 500


# -- child processes: one build each --------------------------------------------------------------


def _chess_values(db: GuardedDatabase, max_values: int) -> dict[str, dict[str, list[str]]]:
    plans, _ = _text_columns(db)
    values: dict[str, dict[str, list[str]]] = {}
    for read in _read_columns(db, plans, max_values, 300.0):
        if read.reason or read.error:
            continue
        for page in read.pages:
            values.setdefault(read.plan.table, {}).setdefault(read.plan.column, []).extend(page)
    return values


def _chess_build(db_path: str, out_dir: str, max_values: int) -> int:
    from datasketch import MinHash, MinHashLSH

    db = GuardedDatabase(db_path, prestart=False)
    unique = _chess_values(db, max_values)
    lsh = MinHashLSH(threshold=0.01, num_perm=100)
    minhashes = {}
    n = 0
    for table, columns in unique.items():
        for column, values in columns.items():
            for i, value in enumerate(values):
                m = MinHash(num_perm=100)
                for gram in (value[j:j + 3] for j in range(len(value) - 2)):
                    m.update(gram.encode("utf8"))
                key = f"{table}_{column}_{i}"
                minhashes[key] = (m, table, column, value)
                lsh.insert(key, m)
                n += 1
    with open(Path(out_dir) / "chess_lsh.pkl", "wb") as f:
        pickle.dump(lsh, f)
    with open(Path(out_dir) / "chess_minhashes.pkl", "wb") as f:
        pickle.dump(minhashes, f)
    return n


def _peak_rss_kb() -> int:
    # Linux carries ru_maxrss across fork+exec, so a child spawned by a large parent reports the
    # parent's peak; VmHWM belongs to the child's own address space.
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _child(kind: str, db_path: str, out_dir: str, max_values: int) -> None:
    # Imports stay off the clock on both sides: datasketch for CHESS, and the SQL parser's
    # dialect modules, which both readers load on their first statement.
    if kind == "chess":
        import datasketch  # noqa: F401
    sql_text.parse("SELECT 1")
    start, cpu = time.perf_counter(), _cpu_seconds()
    extra: dict[str, Any] = {}
    if kind == "read":  # what both sides share: reading the values through the guard
        n = sum(len(v) for columns in _chess_values(GuardedDatabase(db_path, prestart=False),
                                                    max_values).values() for v in columns.values())
        seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    elif kind.startswith("ours"):
        db = GuardedDatabase(db_path, prestart=False)
        index = vi.ValueIndex.build(db, cache_dir=out_dir, max_values_per_column=max_values)
        n = index.stats["values"]
        seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
        if kind == "ours+query":
            extra = _synthetic_searches(db, index)
    else:
        n = _chess_build(db_path, out_dir, max_values)
        seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    size = sum(p.stat().st_size for p in Path(out_dir).iterdir() if p.is_file())
    peak_kb = _peak_rss_kb()
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "peak_mb": peak_kb / 1024,
                      "values": n, "bytes": size, **extra}))


def _measure(kind: str, db_path: Path, max_values: int = 100_000) -> dict:
    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", kind, str(db_path), out, str(max_values)],
            capture_output=True, text=True, check=True,
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _side_by_side(db_path: Path, repeat: int, max_values: int = 100_000) -> dict:
    """Both sides built ``repeat`` times, alternating which goes first, and the values they
    share read as often; medians. ``ratio_after_reading``: the two sides' times less the
    reading both do, compared."""
    runs: dict[str, list[dict]] = {"ours": [], "chess": [], "read": []}
    for r in range(repeat):
        for kind in (("ours", "chess", "read") if r % 2 == 0 else ("read", "chess", "ours")):
            runs[kind].append(_measure(kind, db_path, max_values))
    out: dict[str, Any] = {"values": runs["ours"][0]["values"]}
    for kind, got in runs.items():
        out[f"{kind}_s"] = round(statistics.median(g["seconds"] for g in got), 4)
        out[f"{kind}_cpu_s"] = round(statistics.median(g["cpu_seconds"] for g in got), 4)
        if kind != "read":
            out[f"{kind}_peak_mb"] = round(max(g["peak_mb"] for g in got), 1)
            out[f"{kind}_bytes"] = got[0]["bytes"]
    out["ratio"] = round(out["chess_s"] / out["ours_s"], 1)
    out["cpu_ratio"] = round(out["chess_cpu_s"] / out["ours_cpu_s"], 1)
    after_chess, after_ours = out["chess_s"] - out["read_s"], out["ours_s"] - out["read_s"]
    out["ratio_after_reading"] = round(after_chess / after_ours, 1) if after_ours > 0 else None
    return out


# -- synthetic database ---------------------------------------------------------------------------


def _synthetic(path: Path, n: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    seen: set[str] = set()
    letters = string.ascii_lowercase + " "
    while len(seen) < n:
        s = "".join(rng.choices(letters, k=rng.randint(4, 20))).strip()
        if s:
            seen.add(s)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
    conn.executemany("INSERT INTO items (name) VALUES (?)", ((s,) for s in sorted(seen)))
    conn.commit()
    conn.close()


def _synthetic_searches(db: GuardedDatabase, index: vi.ValueIndex) -> dict:
    """Recall@5 and latency of searches for stored values, as they are and with a typo."""
    rng = random.Random(1)
    rows = db.execute(f"SELECT name FROM items ORDER BY random() LIMIT {SYNTHETIC_QUERIES}",
                      max_rows=SYNTHETIC_QUERIES).rows
    out: dict[str, Any] = {}
    for label, keywords in (("clean", [[v] for (v,) in rows]),
                            ("typo", [[with_typo(v, rng)] for (v,) in rows])):
        hits, timing = 0, _Timing()
        for (value,), kws in zip(rows, keywords):
            result = timing.search(index, kws)
            hits += value in [h["value"] for h in result.get("items.name", [])]
        out[f"recall_at5_{label}"] = round(hits / max(len(rows), 1), 4)
        out[f"query_{label}"] = timing.summary()
    return out


# -- recall and latency ---------------------------------------------------------------------------


def keywords_of(question: str) -> list[str]:
    tokens = _TOKEN.findall(question)
    out: list[str] = []
    for n in (1, 2, 3):
        for i in range(len(tokens) - n + 1):
            gram = tokens[i:i + n]
            if gram[0].lower() in vi.STOPWORDS or gram[-1].lower() in vi.STOPWORDS:
                continue
            out.append(" ".join(gram))
    return list(dict.fromkeys(out))


def with_typo(keyword: str, rng: random.Random) -> str:
    pos = rng.randint(0, len(keyword))
    return keyword[:pos] + rng.choice(string.ascii_lowercase) + keyword[pos:]


def gold_literals(sql: str) -> list[tuple[list[str], str, str]]:
    """(tables of the query, column, literal) for each column-vs-string comparison."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.ParseError:
        return []
    tables = [t.name for t in tree.find_all(exp.Table)]
    found = []
    for node in tree.find_all(exp.EQ, exp.NEQ, exp.In):
        if isinstance(node, exp.In):
            col, lits = node.this, node.expressions
        else:
            col, lits = node.this, [node.expression]
            if isinstance(col, exp.Literal):
                col, lits = node.expression, [node.this]
        if not isinstance(col, exp.Column):
            continue
        for lit in lits:
            if isinstance(lit, exp.Literal) and lit.is_string and lit.this.strip():
                found.append((tables, col.name, lit.this))
    return found


def _resolve(db: GuardedDatabase, index: vi.ValueIndex, tables: list[str], column: str,
             literal: str) -> str | None:
    names = {n.lower(): n for n in index.columns.values()}
    for table in dict.fromkeys(tables):
        name = names.get(f"{table}.{column}".lower())
        if name is None:
            continue
        t, c = name.split(".", 1)
        rows = db.execute(
            f"SELECT 1 FROM {_quote(t)} WHERE lower({_quote(c)}) = lower(?) LIMIT 1",
            parameters=(literal.strip(),),
        ).rows
        if rows:
            return name
    return None


class _Timing:
    """Each search timed once (wall), then its best of five runs (wall and thread CPU)."""

    BEST_OF = 5

    def __init__(self) -> None:
        self.single: list[float] = []
        self.best: list[float] = []
        self.cpu: list[float] = []

    def search(self, index: vi.ValueIndex, keywords: list[str]) -> dict:
        start = time.perf_counter()
        result = index.search(keywords, top_k=5)
        self.single.append((time.perf_counter() - start) * 1000)
        best, cpu = float("inf"), float("inf")
        for _ in range(self.BEST_OF):
            start, thread = time.perf_counter(), time.thread_time()
            index.search(keywords, top_k=5)
            best = min(best, (time.perf_counter() - start) * 1000)
            cpu = min(cpu, (time.thread_time() - thread) * 1000)
        self.best.append(best)
        self.cpu.append(cpu)
        return result

    def summary(self) -> dict:
        return {"searches": len(self.single),
                "ms_p50": _percentile(self.single, 50), "ms_p95": _percentile(self.single, 95),
                "best_of_5_ms_p50": _percentile(self.best, 50),
                "best_of_5_ms_p95": _percentile(self.best, 95),
                "cpu_ms_p50": _percentile(self.cpu, 50), "cpu_ms_p95": _percentile(self.cpu, 95)}


def _percentile(values: list[float], p: int) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))], 3)


def _recall(db_ids: list[str], cache: Path, max_questions: int | None) -> dict:
    questions = json.loads((SPIDER / "dev.json").read_text())
    if max_questions:
        questions = questions[:max_questions]
    rng = random.Random(0)
    noise_rng = random.Random(1)  # typos of questions without literals: rng's draws stay as they were
    cases = []  # (db_id, keywords, typo keywords, gold column, literal)
    searches = []  # (db_id, keywords, typo keywords) of every question, literals or not
    absent = 0
    dbs: dict[str, tuple[GuardedDatabase, vi.ValueIndex]] = {}
    for q in questions:
        if q["db_id"] not in db_ids:
            continue
        if q["db_id"] not in dbs:
            db = GuardedDatabase(SPIDER / "database" / q["db_id"] / f"{q['db_id']}.sqlite")
            dbs[q["db_id"]] = (db, vi.ValueIndex.load_or_build(db, cache))
        lits = gold_literals(q["query"])
        kws = keywords_of(q["question"])
        if not lits:
            searches.append((q["db_id"], kws, [with_typo(k, noise_rng) for k in kws]))
            continue
        db, index = dbs[q["db_id"]]
        typo = [with_typo(k, rng) for k in kws]
        searches.append((q["db_id"], kws, typo))
        for tables, column, literal in lits:
            name = _resolve(db, index, tables, column, literal)
            if name is None:
                absent += 1
                continue
            cases.append((q["db_id"], kws, typo, name, literal))

    def run(typo: bool) -> list[bool]:
        """Whether each case's literal is in its column's top five."""
        found: list[bool] = []
        for db_id, kws, tkws, name, literal in cases:
            result = dbs[db_id][1].search(tkws if typo else kws, top_k=5)
            target = literal.strip().lower()
            found.append(any(h["value"].strip().lower() == target for h in result.get(name, [])))
        return found

    def without(name: str) -> tuple[float, float]:
        """The same searches without one lookup's candidates."""
        if name == "column_name":
            saved_names = {db_id: index._names for db_id, (_, index) in dbs.items()}
            for _, index in dbs.values():
                index._names = index_module._ColumnNames([])
            try:
                return _rate(run(False)), _rate(run(True))
            finally:
                for db_id, (_, index) in dbs.items():
                    index._names = saved_names[db_id]
        saved = getattr(lookup, name)
        setattr(lookup, name, 0)
        try:
            return _rate(run(False)), _rate(run(True))
        finally:
            setattr(lookup, name, saved)

    def returned(typo: bool) -> float:
        counts = []
        for db_id, kws, tkws in searches:
            result = dbs[db_id][1].search(tkws if typo else kws, top_k=5)
            counts.append(sum(len(hits) for hits in result.values()))
        return statistics.mean(counts) if counts else 0.0

    # Latency: every question's search, with and without typos (first, so that no search has
    # been run before it is timed).
    timings: dict[str, _Timing] = {}
    for typo_run in (False, True):
        for db_id, kws, tkws in searches:
            timings.setdefault(db_id, _Timing()).search(dbs[db_id][1], tkws if typo_run else kws)
    every = _Timing()
    for t in timings.values():
        every.single += t.single
        every.best += t.best
        every.cpu += t.cpu
    clean, typo = run(False), run(True)
    no_lsh, no_edit, no_names = without("LSH_CANDIDATES"), without("EDIT_CANDIDATES"), \
        without("column_name")
    largest = max(dbs, key=lambda d: dbs[d][1].stats["values"])
    in_largest = [c[0] == largest for c in cases]
    return {
        "recall_at5": _rate(clean),
        "recall_at5_typo": _rate(typo),
        "recall_at5_without_lsh": no_lsh[0],
        "recall_at5_typo_without_lsh": no_lsh[1],
        "recall_at5_without_one_edit": no_edit[0],
        "recall_at5_typo_without_one_edit": no_edit[1],
        "recall_at5_without_column_names": no_names[0],
        "recall_at5_typo_without_column_names": no_names[1],
        "recall_literals": len(cases),
        "recall_literals_absent_from_db": absent,
        "recall_misses": [f"{c[3]}={c[4]!r}" for c, hit in zip(cases, clean) if not hit],
        "recall_misses_typo": [f"{c[3]}={c[4]!r}" for c, hit in zip(cases, typo) if not hit],
        "values_returned_per_search_mean": round(returned(False), 2),
        "values_returned_per_search_typo_mean": round(returned(True), 2),
        "query": every.summary(),
        "keywords_per_question_median": statistics.median(len(c[1]) for c in cases) if cases else 0,
        "largest_db_recall": {
            "database": largest,
            "values": dbs[largest][1].stats["values"],
            "literals": sum(in_largest),
            "recall_at5": _rate([hit for hit, mine in zip(clean, in_largest) if mine]),
            "recall_at5_typo": _rate([hit for hit, mine in zip(typo, in_largest) if mine]),
            "query": timings[largest].summary() if largest in timings else {},
        },
    }


def _rate(found: list[bool]) -> float:
    return round(sum(found) / max(len(found), 1), 4)


# -- main -----------------------------------------------------------------------------------------


def _fingerprint_ms(path: Path, full: bool) -> float:
    start = time.perf_counter()
    vi.database_fingerprint(path, full=full)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer databases, smaller synthetic")
    parser.add_argument("--repeat", type=int, help="builds of each database by each side "
                        "(default 3; 1 with --quick)")
    parser.add_argument("--sample-repeat", type=int, default=2,
                        help="builds of the synthetic sample by each side (CHESS's take minutes)")
    args = parser.parse_args()
    repeat = args.repeat or (1 if args.quick else 3)

    db_paths = sorted((SPIDER / "database").glob("*/*.sqlite"))
    if args.quick:
        db_paths = db_paths[:5] + [p for p in db_paths[5:] if p.stem == "world_1"]
    synthetic_n = 100_000 if args.quick else 1_000_000
    chess_sample = 20_000 if args.quick else 100_000

    per_db = {path.stem: _side_by_side(path, repeat) for path in db_paths}
    largest = max(per_db, key=lambda name: per_db[name]["values"])
    ours_total = sum(d["ours_s"] for d in per_db.values())
    chess_total = sum(d["chess_s"] for d in per_db.values())

    with tempfile.TemporaryDirectory() as tmp:
        big, sample = Path(tmp) / "synthetic.sqlite", Path(tmp) / "synthetic_sample.sqlite"
        _synthetic(big, synthetic_n)
        _synthetic(sample, chess_sample)  # same generator and seed: a prefix-like subsample
        ours_big = _measure("ours+query", big, synthetic_n)
        sample_side = _side_by_side(sample, args.sample_repeat, chess_sample)
        fp_full_ms = _fingerprint_ms(big, True)
        fp_sample_ms = _fingerprint_ms(big, False)
        big_mb = big.stat().st_size / 1e6

    chess_big_s = sample_side["chess_s"] * synthetic_n / chess_sample

    with tempfile.TemporaryDirectory() as cache:
        recall = _recall([p.stem for p in db_paths], Path(cache), 200 if args.quick else None)
    largest_recall = recall.pop("largest_db_recall")

    print(json.dumps({
        "benchmark": "values",
        "quick": args.quick,
        "repeat": repeat,
        "sample_repeat": args.sample_repeat,
        # Every build measured on the same values on both sides, side by side: the Spider
        # databases and the synthetic sample. The 1M-value figure for CHESS is extrapolated.
        "build_ratio_vs_chess": round(
            (chess_total + sample_side["chess_s"]) / (ours_total + sample_side["ours_s"]), 1),
        "spider_build_ratio_vs_chess": round(chess_total / ours_total, 1),
        "spider_dbs": len(per_db),
        "spider_values": sum(d["values"] for d in per_db.values()),
        "spider_ours_seconds": round(ours_total, 3),
        "spider_chess_seconds": round(chess_total, 3),
        "spider_ours_peak_mb_max": max(d["ours_peak_mb"] for d in per_db.values()),
        "spider_chess_peak_mb_max": max(d["chess_peak_mb"] for d in per_db.values()),
        "largest_db": {"database": largest, **per_db[largest], **{
            k: v for k, v in largest_recall.items() if k not in ("database", "values")}},
        "synthetic_sample": sample_side,
        "synthetic_1m": {
            "values": ours_big["values"],
            "ours_s": round(ours_big["seconds"], 2),
            "ours_cpu_s": round(ours_big["cpu_seconds"], 2),
            "ours_peak_mb": round(ours_big["peak_mb"], 1),
            "ours_bytes": ours_big["bytes"],
            "chess_s_extrapolated": round(chess_big_s, 1),
            "ratio_extrapolated": round(chess_big_s / ours_big["seconds"], 1),
            "recall_at5": ours_big["recall_at5_clean"],
            "recall_at5_typo": ours_big["recall_at5_typo"],
            "query": ours_big["query_clean"],
            "query_typo": ours_big["query_typo"],
        },
        **recall,
        "fingerprint_full_ms": round(fp_full_ms, 2),
        "fingerprint_sampled_ms": round(fp_sample_ms, 2),
        "fingerprint_file_mb": round(big_mb, 1),
        "per_db": per_db,
    }))


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        main()
