"""Value index: build cost against CHESS's settings, recall of gold literals, query latency.

Prints ONE JSON line. Every build runs in its own child process, which reports its build time
and its peak resident memory (``VmHWM`` of ``/proc/self/status``, else ``ru_maxrss``; the figure
includes the interpreter and imports, the same for both sides). Imports happen before the clock
starts on both sides, and neither side starts the database's worker process (a build reads
through the guard's in-process lookups only). The CHESS baseline reads the
very same values (same reader, same skip rules) and then does what CHESS's preprocessing does:
one ``datasketch.MinHash(num_perm=100)`` per value fed 3-grams one at a time, inserted into a
``MinHashLSH(threshold=0.01, num_perm=100)``, and both pickled to disk.

Recall@5: for every Spider dev question whose gold SQL compares a column to a string literal
(``=``, ``!=``, ``IN``) and whose literal occurs in that column (case-insensitively), is the
literal among the top five values returned for that column? Keywords are the question's word
1- to 3-grams that neither start nor end with a stop word (no LLM), and again with one random
letter inserted into each keyword. The same searches are run again without the LSH lookup and
without the one-edit lookup, to show what each adds, and the number of values a search returns
(over all columns, every question of those databases) shows what the recall costs in noise.

Usage: ``python benchmarks/values.py [--quick]``.
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

import sqlglot
from sqlglot import exp

from sqlchorus.tools.sql import text as sql_text
from sqlchorus.tools import values as vi
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.values import lookup
from sqlchorus.tools.values.reading import _column_pages, _quote, _text_columns

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("SQLCHORUS_DATA", REPO.parent / "shared" / "data")).resolve()
SPIDER = DATA / "spider"
_TOKEN = re.compile(r"\w+(?:['’.-]\w+)*")


# -- child processes: one build each --------------------------------------------------------------


def _chess_values(db: GuardedDatabase, max_values: int) -> dict[str, dict[str, list[str]]]:
    plans, _ = _text_columns(db)
    values: dict[str, dict[str, list[str]]] = {}
    for plan in plans:
        reason, pages = _column_pages(db, plan, max_values, 300.0)
        if reason:
            continue
        for page in pages:
            values.setdefault(plan.table, {}).setdefault(plan.column, []).extend(page)
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


def _child(kind: str, db_path: str, out_dir: str, max_values: int) -> None:
    # Imports stay off the clock on both sides: datasketch for CHESS, and the SQL parser's
    # dialect modules, which both readers load on their first statement.
    if kind == "chess":
        import datasketch  # noqa: F401
    sql_text.parse("SELECT 1")
    start = time.perf_counter()
    extra = {}
    if kind.startswith("ours"):
        db = GuardedDatabase(db_path, prestart=False)
        index = vi.ValueIndex.build(db, cache_dir=out_dir, max_values_per_column=max_values)
        n = index.stats["values"]
        seconds = time.perf_counter() - start
        if kind == "ours+query":  # latency at scale: typo'd copies of 200 random stored values
            rng = random.Random(1)
            rows = db.execute("SELECT name FROM items ORDER BY random() LIMIT 200").rows
            times = []
            for (value,) in rows:
                t = time.perf_counter()
                index.search([with_typo(value, rng)])
                times.append((time.perf_counter() - t) * 1000)
            extra["query_ms_median"] = statistics.median(times)
    else:
        n = _chess_build(db_path, out_dir, max_values)
        seconds = time.perf_counter() - start
    size = sum(p.stat().st_size for p in Path(out_dir).iterdir() if p.is_file())
    peak_kb = _peak_rss_kb()
    print(json.dumps({"seconds": seconds, "peak_mb": peak_kb / 1024, "values": n, "bytes": size,
                      **extra}))


def _measure(kind: str, db_path: Path, max_values: int = 100_000) -> dict:
    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", kind, str(db_path), out, str(max_values)],
            capture_output=True, text=True, check=True,
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


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


# -- recall ---------------------------------------------------------------------------------------


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

    def run(typo: bool) -> tuple[float, list[float], list[float]]:
        hits, latencies, per_kw = 0, [], []
        for db_id, kws, tkws, name, literal in cases:
            keywords = tkws if typo else kws
            start = time.perf_counter()
            result = dbs[db_id][1].search(keywords, top_k=5)
            ms = (time.perf_counter() - start) * 1000
            latencies.append(ms)
            per_kw.append(ms / max(len(keywords), 1))
            target = literal.strip().lower()
            hits += any(h["value"].strip().lower() == target for h in result.get(name, []))
        return hits / max(len(cases), 1), latencies, per_kw

    def without(bound: str) -> tuple[float, float]:
        saved = getattr(lookup, bound)
        setattr(lookup, bound, 0)  # ablation: the same searches without this lookup's candidates
        try:
            return run(False)[0], run(True)[0]
        finally:
            setattr(lookup, bound, saved)

    def returned(typo: bool) -> float:
        counts = []
        for db_id, kws, tkws in searches:
            result = dbs[db_id][1].search(tkws if typo else kws, top_k=5)
            counts.append(sum(len(hits) for hits in result.values()))
        return statistics.mean(counts) if counts else 0.0

    recall, lat, per_kw = run(False)
    recall_typo, lat_t, _ = run(True)
    recall_no_lsh, recall_typo_no_lsh = without("LSH_CANDIDATES")
    recall_no_edit, recall_typo_no_edit = without("EDIT_CANDIDATES")
    return {
        "recall_at5": round(recall, 4),
        "recall_at5_typo": round(recall_typo, 4),
        "recall_at5_without_lsh": round(recall_no_lsh, 4),
        "recall_at5_typo_without_lsh": round(recall_typo_no_lsh, 4),
        "recall_at5_without_one_edit": round(recall_no_edit, 4),
        "recall_at5_typo_without_one_edit": round(recall_typo_no_edit, 4),
        "recall_literals": len(cases),
        "recall_literals_absent_from_db": absent,
        "values_returned_per_search_mean": round(returned(False), 2),
        "values_returned_per_search_typo_mean": round(returned(True), 2),
        "query_ms_median": round(statistics.median(lat + lat_t), 3),
        "query_ms_per_keyword_median": round(statistics.median(per_kw), 3),
        "keywords_per_question_median": statistics.median(len(c[1]) for c in cases) if cases else 0,
    }


# -- main -----------------------------------------------------------------------------------------


def _fingerprint_ms(path: Path, full: bool) -> float:
    start = time.perf_counter()
    vi.database_fingerprint(path, full=full)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer databases, smaller synthetic")
    args = parser.parse_args()

    db_paths = sorted((SPIDER / "database").glob("*/*.sqlite"))
    if args.quick:
        db_paths = db_paths[:5]
    synthetic_n = 100_000 if args.quick else 1_000_000
    chess_sample = 20_000 if args.quick else 100_000

    per_db = {}
    for path in db_paths:
        ours, chess = _measure("ours", path), _measure("chess", path)
        per_db[path.stem] = {
            "values": ours["values"],
            "ours_s": round(ours["seconds"], 4), "ours_peak_mb": round(ours["peak_mb"], 1),
            "chess_s": round(chess["seconds"], 4), "chess_peak_mb": round(chess["peak_mb"], 1),
            "ours_bytes": ours["bytes"], "chess_bytes": chess["bytes"],
        }
    ours_total = sum(d["ours_s"] for d in per_db.values())
    chess_total = sum(d["chess_s"] for d in per_db.values())

    with tempfile.TemporaryDirectory() as tmp:
        big, sample = Path(tmp) / "synthetic.sqlite", Path(tmp) / "synthetic_sample.sqlite"
        _synthetic(big, synthetic_n)
        _synthetic(sample, chess_sample)  # same generator and seed: a prefix-like subsample
        ours_big = _measure("ours+query", big, synthetic_n)
        ours_sample = _measure("ours", sample, chess_sample)
        chess_sample_run = _measure("chess", sample, chess_sample)
        fp_full_ms = _fingerprint_ms(big, True)
        fp_sample_ms = _fingerprint_ms(big, False)
        big_mb = big.stat().st_size / 1e6

    scale = synthetic_n / chess_sample
    chess_big_s = chess_sample_run["seconds"] * scale

    with tempfile.TemporaryDirectory() as cache:
        recall = _recall([p.stem for p in db_paths], Path(cache), 200 if args.quick else None)

    print(json.dumps({
        "benchmark": "values",
        "quick": args.quick,
        # Every build measured on the same values on both sides: the Spider databases and the
        # synthetic sample. The 1M-value figure for CHESS is extrapolated, so it stays out.
        "build_ratio_vs_chess": round(
            (chess_total + chess_sample_run["seconds"]) / (ours_total + ours_sample["seconds"]), 2),
        "spider_build_ratio_vs_chess": round(chess_total / ours_total, 2),
        "spider_dbs": len(per_db),
        "spider_values": sum(d["values"] for d in per_db.values()),
        "spider_ours_seconds": round(ours_total, 3),
        "spider_chess_seconds": round(chess_total, 3),
        "spider_ours_peak_mb_max": max(d["ours_peak_mb"] for d in per_db.values()),
        "spider_chess_peak_mb_max": max(d["chess_peak_mb"] for d in per_db.values()),
        "per_db": per_db,
        "synthetic_values": ours_big["values"],
        "synthetic_ours_seconds": round(ours_big["seconds"], 2),
        "synthetic_ours_peak_mb": round(ours_big["peak_mb"], 1),
        "synthetic_ours_bytes": ours_big["bytes"],
        "synthetic_query_ms_median": round(ours_big["query_ms_median"], 3),
        "synthetic_sample_values": chess_sample_run["values"],
        "synthetic_sample_ours_seconds": round(ours_sample["seconds"], 2),
        "synthetic_sample_ours_peak_mb": round(ours_sample["peak_mb"], 1),
        "synthetic_sample_chess_seconds": round(chess_sample_run["seconds"], 2),
        "synthetic_sample_chess_peak_mb": round(chess_sample_run["peak_mb"], 1),
        "synthetic_sample_chess_bytes": chess_sample_run["bytes"],
        "synthetic_sample_build_ratio_vs_chess": round(
            chess_sample_run["seconds"] / ours_sample["seconds"], 2),
        "chess_synthetic_seconds_extrapolated": round(chess_big_s, 1),
        "chess_synthetic_seconds_extrapolated_from": chess_sample_run["values"],
        "synthetic_build_ratio_vs_chess_extrapolated": round(chess_big_s / ours_big["seconds"], 2),
        "fingerprint_full_ms": round(fp_full_ms, 2),
        "fingerprint_sampled_ms": round(fp_sample_ms, 2),
        "fingerprint_file_mb": round(big_mb, 1),
        **recall,
    }))


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        main()
