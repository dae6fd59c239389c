"""``sqlchorus select`` on a JSON Lines file, and the selection training pairs exporter."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import spider_loader
from sqlchorus.interfaces.cli import cli
from sqlchorus.runs.standalone_selection import export_pairs

GOLD = "SELECT count(*) FROM singer"
WRONG = "SELECT count(*) FROM stadium"
WORSE = "SELECT count(*) FROM singer_in_concert"


def write_lines(path, items):
    path.write_text("".join((json.dumps(i) if not isinstance(i, str) else i) + "\n" for i in items))
    return path


def test_select_command(spider, tmp_path):
    db = str(spider("concert_singer"))
    q = "How many singers do we have?"
    file = write_lines(tmp_path / "in.jsonl", [
        {"db": db, "question": q, "candidates": [GOLD, GOLD, WRONG]},  # 2 of 3: confident
        {"db": db, "question": q, "evidence": "", "candidates": [WRONG, GOLD]},  # a tie, no model
        "not json",
        {"db": str(tmp_path / "missing.sqlite"), "question": q, "candidates": [GOLD]},
        {"db": db, "question": q},
    ])
    result = CliRunner().invoke(cli, ["select", "--candidates", str(file)], env={"SQLCHORUS_SELECTION_MODEL": ""})
    lines = [json.loads(l) for l in result.output.splitlines()]
    assert result.exit_code == 1  # some lines had no answer
    confident, tie, bad_json, missing_db, missing_field = lines
    assert (confident["chosen"], confident["method"], confident["votes"], confident["cluster"]) == (0, "vote", [2, 1], [0, 1])
    assert confident["confidence"] == round(2 / 3, 4) and confident["sql"] == GOLD
    assert (tie["chosen"], tie["method"], tie["model_calls"]) == (0, "fallback", 0)
    assert "no selection model is configured" in tie["reason"]
    assert bad_json["line"] == 3 and "error" in bad_json
    assert "does not exist" in missing_db["error"]
    assert "candidates" in missing_field["error"]


def test_select_command_writes_a_file(spider, tmp_path):
    file = write_lines(tmp_path / "in.jsonl", [
        {"db": str(spider("concert_singer")), "question": "How many singers?", "candidates": [GOLD]},
    ])
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(cli, ["select", "--candidates", str(file), "--out", str(out)], env={"SQLCHORUS_SELECTION_MODEL": ""})
    assert result.exit_code == 0, result.output
    (line,) = [json.loads(l) for l in out.read_text().splitlines()]
    assert line["sql"] == GOLD and line["method"] == "vote"


def test_export_pairs(spider, tmp_path):
    db = str(spider("concert_singer"))
    records = [
        {"db": db, "question": "How many singers do we have?", "evidence": "",
         "candidates": [{"sql": GOLD, "correct": True}, {"sql": WRONG, "correct": False},
                        {"sql": WRONG, "correct": False}, {"sql": WORSE, "correct": False},
                        {"sql": "SELECT nme FROM singer", "correct": False}]},
        {"db": db, "question": "All right", "candidates": [{"sql": GOLD, "correct": True}]},
        {"db": str(tmp_path / "missing.sqlite"), "question": "q", "candidates": []},
    ]
    path = tmp_path / "pairs.jsonl"
    counts = export_pairs(records, path)
    assert counts == {"questions": 3, "pairs": 3, "skipped": 2}
    pairs = [json.loads(l) for l in path.read_text().splitlines()]
    assert len(pairs) == 3
    for pair in pairs:
        user, assistant = pair["messages"]
        assert (user["role"], assistant["role"]) == ("user", "assistant")
        assert "There is correct one and incorrect one" in user["content"]
        label = assistant["content"]
        a = user["content"].split("Candidate A\n", 1)[1].split("\n", 1)[0]
        b = user["content"].split("Candidate B\n", 1)[1].split("\n", 1)[0]
        assert {"A": a, "B": b}[label] == GOLD
        assert "singer" in user["content"].split("Database Schema", 1)[1]
    # the seeded order puts the correct query in both positions, and the file is reproducible
    assert {p["messages"][1]["content"] for p in pairs} == {"A", "B"}
    again = tmp_path / "again.jsonl"
    export_pairs(records, again)
    assert again.read_text() == path.read_text()
    assert export_pairs(records, tmp_path / "one.jsonl", max_pairs_per_question=1)["pairs"] == 1


def test_select_weighs_each_system_by_its_agreement_over_the_whole_file(spider, tmp_path):
    db = str(spider("concert_singer"))
    q = "How many singers do we have?"
    # Systems 0 and 1 agree with no one on the other lines; systems 2, 3 and 4 always agree.
    filler = [{"db": db, "question": q, "candidates": [f"SELECT {100 + i}", f"SELECT {200 + i}", "SELECT 3",
                                                      "SELECT 3", "SELECT 3"]} for i in range(12)]
    # On the last line the two unreliable systems agree on a wrong answer; of the reliable
    # ones, one answers and two fail.
    target = {"db": db, "question": q, "candidates": [WRONG, WRONG, GOLD, "SELECT nope", "SELECT nope"]}

    def chosen(lines):
        file = write_lines(tmp_path / "in.jsonl", lines)
        result = CliRunner().invoke(cli, ["select", "--candidates", str(file)], env={"SQLCHORUS_SELECTION_MODEL": ""})
        assert result.exit_code == 0, result.output
        return json.loads(result.output.splitlines()[-1])

    weighed = chosen([*filler, target])
    assert weighed["sql"] == GOLD and weighed["chosen"] == 2
    # With too short a record (under 10 lines) every vote weighs 1: two votes beat one.
    unweighed = chosen([*filler[:3], target])
    assert unweighed["sql"] == WRONG and unweighed["chosen"] == 0


def _duckdb_of(spider, folder):
    """concert_singer as a DuckDB file in ``folder`` (loaded as the engine tests load it)."""
    pytest.importorskip("duckdb")
    spider_loader().load_database(spider("concert_singer"), duckdb_path=folder)
    return folder / "concert_singer.duckdb"


def test_select_over_duckdb_names_a_file_beside_the_lines_or_by_url(spider, tmp_path, monkeypatch):
    db = _duckdb_of(spider, tmp_path / "dbs")
    before = db.read_bytes()
    q = "How many singers do we have?"
    file = write_lines(tmp_path / "in.jsonl", [
        {"db": "dbs/concert_singer.duckdb", "question": q, "candidates": [GOLD, WRONG, GOLD]},  # beside the file
        {"db": f"duckdb://{db}", "question": q, "candidates": [WRONG, WRONG, GOLD]},
        {"db": "duckdb://dbs/concert_singer.duckdb", "question": q, "candidates": [GOLD]},  # a URL: not beside the file
    ])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = CliRunner().invoke(cli, ["select", "--candidates", str(file)], env={"SQLCHORUS_SELECTION_MODEL": ""})
    beside, by_url, relative_url = [json.loads(l) for l in result.output.splitlines()]
    assert (beside["sql"], beside["cluster"], beside["candidates"][0]["row_count"]) == (GOLD, [0, 2], 1)
    assert (by_url["sql"], by_url["cluster"]) == (WRONG, [0, 1])
    assert "does not exist" in relative_url["error"] and str(elsewhere) in relative_url["error"]
    assert result.exit_code == 1  # one line had no answer
    assert db.read_bytes() == before and not list(elsewhere.iterdir())


def test_select_takes_an_open_database_of_any_engine(spider, tmp_path):
    from sqlchorus.runs.standalone_selection import select
    from sqlchorus.tools.engines.opening import open_database

    db = _duckdb_of(spider, tmp_path)
    with open_database(db) as database:
        chosen = select(database, "How many singers do we have?", [WRONG, GOLD, GOLD])
        assert database.execute("SELECT 1").rows  # still open: the caller's to close
    assert (chosen["sql"], chosen["cluster"]) == (GOLD, [1, 2])
    assert select(str(db), "How many singers do we have?", [GOLD])["sql"] == GOLD


@pytest.fixture(scope="module")
def postgres():
    from servers import allow_writable_role, postgres_of_a_test

    pytest.importorskip("psycopg")
    # The test server's role is its superuser: let open, as an administrator would.
    with allow_writable_role():
        yield from postgres_of_a_test()


@pytest.mark.slow
def test_select_over_postgresql_takes_the_url_as_it_is(spider, postgres, tmp_path):
    spider_loader().load_database(spider("concert_singer"), postgres_url=postgres.url())
    file = write_lines(tmp_path / "in.jsonl", [
        {"db": postgres.url("concert_singer"), "question": "How many singers?", "candidates": [WRONG, GOLD, GOLD]},
    ])
    result = CliRunner().invoke(cli, ["select", "--candidates", str(file)], env={"SQLCHORUS_SELECTION_MODEL": ""})
    assert result.exit_code == 0, result.output
    (line,) = [json.loads(l) for l in result.output.splitlines()]
    assert (line["sql"], line["cluster"], line["db"]) == (GOLD, [1, 2], postgres.url("concert_singer"))
