"""How alike the retrieved few-shot examples are to the question, before and after the pool.

For every Spider dev and BIRD dev question (the questions only: their SQL is used solely to
score, never shown), the top example N-rep would get from the former 13-example file (token-set
ratio, its old retrieval) and from the pool (:func:`sqlchorus.tools.examples.fewshot.most_similar`,
lexical). Reported per dataset: the share of questions whose top example's SQL has the same
Spider hardness as the question's gold SQL, the mean Jaccard overlap of their skeleton features
(:func:`~sqlchorus.tools.examples.fewshot.sql_features`), and the mean share of the question's content
words the top example's question has. One JSON line::

    SQLCHORUS_DATA=../shared/data .venv/bin/python benchmarks/fewshot_similarity.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rapidfuzz import fuzz, utils

from sqlchorus.tools.examples import fewshot
from sqlchorus.tools.sql.hardness import spider_hardness

ROOT = Path(__file__).resolve().parent.parent
BEFORE_COMMIT = "c7551d7"  # the last commit that shipped prompts/nrep_generate_examples.json


def _before() -> list[dict]:
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{BEFORE_COMMIT}:prompts/nrep_generate_examples.json"],
                          check=True, capture_output=True, text=True).stdout
    return json.loads(text)


def _old_top(pool, question):
    return max(enumerate(pool), key=lambda p: (fuzz.token_set_ratio(question, p[1]["question"], processor=utils.default_process), -p[0]))[1]


def _hardness(sql):
    try:
        return spider_hardness(sql)
    except Exception:
        return None


def _jaccard(a, b):
    return len(a & b) / len(a | b) if a | b else 1.0


def _words_share(q, e):
    a, b = set(fewshot._words(q)), set(fewshot._words(e))
    return len(a & b) / len(a) if a else 0.0


def measure(rows, pick):
    same = jac = words = 0.0
    for question, evidence, sql in rows:
        top = pick(question, evidence)
        same += _hardness(top["sql"]) == _hardness(sql)
        jac += _jaccard(fewshot.sql_features(top["sql"]), fewshot.sql_features(sql))
        words += _words_share(question, top["question"])
    n = len(rows) or 1
    return {"same_hardness": round(same / n, 3), "skeleton_jaccard": round(jac / n, 3), "word_share": round(words / n, 3)}


def main() -> int:
    data = Path(os.environ.get("SQLCHORUS_DATA", ROOT.parent / "shared" / "data"))
    spider = [(r["question"], "", r["query"]) for r in json.loads((data / "spider" / "dev.json").read_text())]
    bird = [(r["question"], r.get("evidence") or "", r["SQL"]) for r in json.loads((data / "bird" / "dev.json").read_text())]
    before, pool = _before(), fewshot.pool()
    retriever = fewshot.Retriever(pool)
    out = {"pool": len(pool), "before_file": len(before)}
    for name, rows in (("spider_dev", spider), ("bird_dev", bird)):
        out[name] = {
            "questions": len(rows),
            "before": measure(rows, lambda q, e: _old_top(before, q)),
            "after": measure(rows, lambda q, e: retriever.top(q, 1, e)[0]),
        }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
