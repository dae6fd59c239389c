"""What the command line imports: `sqlchorus --help` and scoring a prediction file load none of the
graph's, the models', the servers' or the tracing libraries, nor pydantic (the options come from
a plain table of the Settings fields, kept equal to the model here); asserted on module names from
``python -X importtime``, never on time."""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

HEAVY = ("langgraph", "langchain", "langchain_core", "langsmith", "fastapi", "uvicorn", "starlette", "mcp",
         "opentelemetry", "rich", "sqlglot", "httpx", "openai", "anthropic", "pydantic", "pydantic_core",
         "pydantic_settings")


def _imported(*args: str, env: dict[str, str] | None = None) -> tuple[set[str], subprocess.CompletedProcess]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "sqlchorus", *args],
                          capture_output=True, text=True, env=env, timeout=120)
    modules = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                modules.add(name)
    return modules, done


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def test_help_imports_no_heavy_module():
    modules, done = _imported("--help")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "eval" in done.stdout
    assert "sqlchorus.interfaces.cli" in modules
    assert _heavy(modules) == []
    assert "sqlchorus.config.settings" not in modules


def test_the_option_table_is_the_settings_model():
    """The table the options are built from says what the Settings fields say; after changing a
    field, `python scripts/build_settings_table.py` writes the new table."""
    script = Path(__file__).resolve().parent.parent / "scripts" / "build_settings_table.py"
    spec = importlib.util.spec_from_file_location("build_settings_table", script)
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    from sqlchorus.interfaces.settings_table import OPTIONS

    assert OPTIONS == builder.build_table()
    assert builder.main(["--check"]) == 0


def test_scoring_a_prediction_file_imports_no_heavy_module(tmp_path: Path):
    db = tmp_path / "shop.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT, price REAL)")
        conn.executemany("INSERT INTO item VALUES (?, ?, ?)", [(1, "pen", 1.5), (2, "ink", 3.0)])
    conn.close()
    dataset = tmp_path / "shop.json"
    dataset.write_text(json.dumps({"examples": [
        {"question": "How many items?", "db_id": "shop", "gold_sql": "SELECT count(*) FROM item",
         "db_path": "shop.sqlite", "difficulty": "easy"},
        {"question": "Names by price?", "db_id": "shop", "gold_sql": "SELECT DISTINCT name FROM item ORDER BY price",
         "db_path": "shop.sqlite", "difficulty": "medium"},
    ]}), encoding="utf-8")
    preds = tmp_path / "pred.txt"
    preds.write_text("SELECT count(id) FROM item\nSELECT name FROM item ORDER BY price DESC\n", encoding="utf-8")

    modules, done = _imported("eval", "--dataset", str(dataset), "--predictions", str(preds), "--json",
                              env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert (summary["n_scored"], summary["n_correct"]) == (2, 1)
    assert "sqlchorus.evaluation.scoring" in modules
    assert _heavy(modules) == []
    # Scoring runs the statements in this process, through the guard's connection.
    assert "sqlchorus.tools.engines.sqlite" not in modules
    assert "sqlchorus.tools.engines.sqlite_guard" in modules
    assert "sqlchorus.config.settings" not in modules
