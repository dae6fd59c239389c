"""sqlchorus index: builds a database's value index once, reuses it, and retrieval uses it."""

from __future__ import annotations

import json
import shutil
import sqlite3

from click.testing import CliRunner

import sqlchorus
from sqlchorus.interfaces.cli import cli
from sqlchorus.testing import ScriptedChatModel


def test_index_builds_then_reuses_then_rebuilds_on_change(spider, tmp_path):
    db = tmp_path / "concert.sqlite"
    shutil.copy(spider("concert_singer"), db)
    cache = tmp_path / "cache"
    first = CliRunner().invoke(cli, ["index", "--db", str(db), "--cache-dir", str(cache), "--json"])
    assert first.exit_code == 0, first.output
    built = json.loads(first.output)
    assert built["from_cache"] is False and built["values"] > 20
    second = json.loads(CliRunner().invoke(cli, ["index", "--db", str(db), "--cache-dir", str(cache), "--json"]).output)
    assert second["from_cache"] is True and second["path"] == built["path"]
    conn = sqlite3.connect(db)
    conn.execute("UPDATE singer SET Name = 'Changed Name' WHERE Singer_ID = 1")
    conn.commit()
    conn.close()
    third = json.loads(CliRunner().invoke(cli, ["index", "--db", str(db), "--cache-dir", str(cache), "--json"]).output)
    assert third["from_cache"] is False and third["path"] != built["path"]


def test_index_text_output_and_bad_db(tmp_path):
    out = CliRunner().invoke(cli, ["index", "--db", str(tmp_path / "none.sqlite")])
    assert out.exit_code == 2 and "does not exist" in out.output


def test_typo_keyword_finds_the_value_in_state(demo_db):
    model = ScriptedChatModel(["['new yrok', 'orders']", "Schema_links: [orders.*]",
                               "**Final Optimized SQL Query:**\nSELECT count(*) FROM orders"])
    result = sqlchorus.ask("How many orders went to new yrok?", db=demo_db, model=model)
    found = {v["value"] for hits in result.state["values"].values() for v in hits}
    assert {"New York", "new york", "NEW YORK"} & found


def test_question_is_answered_when_the_value_index_cannot_be_built(demo_db, tmp_path):
    """A cache folder that cannot be written costs the value lookup, not the answer."""
    from sqlchorus.config.settings import Settings

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    model = ScriptedChatModel(["['customers']", "Schema_links: [customers.*]",
                               "**Final Optimized SQL Query:**\nSELECT count(*) FROM customers"])
    result = sqlchorus.ask("How many customers do we have?", db=demo_db, model=model,
                           settings=Settings(value_cache_dir=str(blocker / "values")))
    assert result.ok, result.error
    assert result.state["values"] == {}
    assert any(e["node"] == "retrieve_values" and "No value lookup" in e["message"] for e in result.errors)
