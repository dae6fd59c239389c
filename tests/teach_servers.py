"""What the teach tests of `serve`, `mcp` and the toolkit share: a Spider database, a scripted
model that reads the taught examples its prompts show, and the store's taught rows read from its
file."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import spider_db, spider_examples

DB = "concert_singer"
TAUGHT_QUESTION = "Which singers are from France and older than forty?"
TAUGHT_SQL = "SELECT Name FROM singer WHERE Country = 'France' AND Age > 40 ORDER BY Name"
LIKE_TAUGHT = "Which French singers are older than forty?"
"""A question like the taught one, which the scripted model has no gold SQL for: it answers it
only from the taught example its prompt shows (a prompt never shows the example of the very
question asked)."""
GOLD_QUESTION = "How many singers do we have?"


def gold() -> dict[str, str]:
    """The database's Spider dev questions and their gold SQL."""
    return {ex["question"]: ex["query"] for ex in spider_examples(DB)}


def teach_folder(folder: Path) -> Path:
    """Make ``folder`` ready for a server under test (after :func:`servers.server_env`): a copy
    of the database, its gold SQL, and ``python:teach_model:model``; the copy's path. Skips
    without the Spider data."""
    if not spider_db(DB).exists():
        pytest.skip(f"Spider database {DB} is not in the shared data")
    db = folder / f"{DB}.sqlite"
    shutil.copy(spider_db(DB), db)
    answers = gold()
    assert TAUGHT_QUESTION not in answers and LIKE_TAUGHT not in answers
    (folder / "gold.json").write_text(json.dumps(answers), encoding="utf-8")
    shutil.copy(Path(__file__).with_name("teach_model.py"), folder / "teach_model.py")
    return db


def kept(store: Path) -> list[dict]:
    """The taught entries in the SQLite store ``store``, read from its file (none before it is made)."""
    if not store.exists():
        return []
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(row) for row in conn.execute("SELECT * FROM sqlchorus_taught ORDER BY created")]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
