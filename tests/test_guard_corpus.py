"""The guard holds on every statement of four corpora: functions, time, parsing and resources.

Each statement runs in a process of its own (so that a crash is seen as a failure, not as the
end of the test run), on a private copy of a Spider database, in a working folder of its own
that is also its temporary folder. It must end as the corpus says (refused with a typed error,
stopped at its budget, or run), with the process alive, the database byte-identical and no file
created. A statement that is stopped runs no less than its budget, and not far past it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, load_pairs, sha256

CORPUS = FIXTURES / "guard_corpus"
SLOW_CLASSES = {"time", "resources"}
GRACE_S = 20.0

RUNNER = r"""
import json, sys, time
from pathlib import Path
from sqlchorus.tools.engines.sqlite import GuardedDatabase, SqlError
db_path, sql_path, budget = sys.argv[1], sys.argv[2], float(sys.argv[3])
sql = Path(sql_path).read_text(encoding="utf-8")
with GuardedDatabase(db_path, timeout_s=budget) as db:
    start = time.monotonic()
    try:
        result = db.execute(sql)
        outcome = "ok, truncated" if result.truncated else "ok"
    except SqlError as e:
        outcome = e.kind
    seconds = time.monotonic() - start
print(json.dumps({"outcome": outcome, "seconds": seconds}))
"""


def _cases():
    out = []
    for path in sorted(CORPUS.glob("*.sql")):
        for pair in load_pairs(path):
            marks = [pytest.mark.slow] if path.stem in SLOW_CLASSES else []
            out.append(pytest.param(path.stem, pair, id=f"{path.stem}-{pair.name}", marks=marks))
    return out


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.parametrize("corpus,pair", _cases())
def test_the_guard_holds(corpus, pair, spider, tmp_path):
    work = tmp_path / "work"
    scratch = work / "tmp"
    scratch.mkdir(parents=True)
    db = work / "concert_singer.sqlite"
    shutil.copy(spider("concert_singer"), db)
    sql = eval(pair.input) if pair.meta.get("python") else pair.input  # fixture data of our own
    sql_file = tmp_path / "statement.sql"
    sql_file.write_text(sql, encoding="utf-8")
    budget = float(pair.meta.get("budget", 1))
    before_hash, before_files = sha256(db), _files(work)

    out = subprocess.run(
        [sys.executable, "-c", RUNNER, str(db), str(sql_file), str(budget)],
        capture_output=True, text=True, timeout=budget + 60, cwd=scratch,
        env={"PATH": "/usr/bin:/bin", "TMPDIR": str(scratch), "HOME": str(scratch),
             "SQLCHORUS_CACHE": str(scratch / "cache")},
    )

    assert out.returncode == 0, f"the process died (code {out.returncode}): {out.stderr[-2000:]}"
    report = json.loads(out.stdout)
    assert report["outcome"] == pair.expected
    if report["outcome"] == "timeout":
        # The budget's clock starts after the runner's, so a stop never comes sooner than it.
        assert report["seconds"] >= budget, f"stopped after {report['seconds']:.2f} s of a {budget:g} s budget"
    # Generous room for a busy machine: the point is that the guard stops the statement at all.
    assert report["seconds"] <= budget + GRACE_S, f"ran {report['seconds']:.2f} s against a {budget:g} s budget"
    assert sha256(db) == before_hash
    assert _files(work) == before_files


def test_every_class_has_a_corpus():
    assert {p.stem for p in CORPUS.glob("*.sql")} == {"functions", "time", "parsing", "resources"}
    assert all(len(load_pairs(p)) >= 6 for p in CORPUS.glob("*.sql"))
