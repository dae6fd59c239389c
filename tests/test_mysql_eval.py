"""``sqlchorus eval --engine mysql``: Spider dev's questions asked of, and scored on, its databases
loaded into a MariaDB server the test starts (``scripts/load_spider_engines.py --mysql``), the
gold SQL transpiled from SQLite's dialect."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import spider_db, spider_loader
from servers import allow_writable_role, free_port, mariadb_of_a_test
from sqlchorus.evaluation.engines import EngineTargetError, on_engine
from sqlchorus.evaluation.runs import open_dataset, read_records, subset
from sqlchorus.interfaces.cli import cli
from sqlchorus.testing import oracle_model

DBS = ("concert_singer", "pets_1")
LIMIT = 60
"""Spider dev's first questions: 45 on concert_singer, then pets_1's."""
READER, SECRET = "eval_reader", "eval-Pw-8q1z"


def _spider():
    try:
        return subset(open_dataset("spider-dev"), LIMIT)
    except Exception as e:  # the data folder is absent
        pytest.skip(f"Spider dev is not there: {e}")


@pytest.fixture(scope="module")
def maria():
    for name in DBS:
        if not spider_db(name).exists():
            pytest.skip(f"Spider database {name} is not there")
    for server in mariadb_of_a_test():
        for name in DBS:
            result = spider_loader().load_database(spider_db(name), mysql_url=server.url(""))
            assert result["mysql"]["status"] == "loaded" and result["mysql"]["skipped_keys"] == []
        server.reader("concert_singer", READER, SECRET)  # reads concert_singer, and nothing else
        yield server


def _eval(*args: str) -> dict:
    result = CliRunner().invoke(cli, ["eval", "--dataset", "spider-dev", *args, "--json"])
    assert "Traceback" not in result.output
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.slow
def test_gold_scores_itself_on_mariadb_and_a_scripted_model_answers_there(maria, tmp_path, monkeypatch):
    dataset = _spider()
    gold = tmp_path / "gold.sql"
    gold.write_text("".join(f"{e.gold_sql}\t{e.db_id}\n" for e in dataset.examples), encoding="utf-8")
    with allow_writable_role():  # the server's administrator reads both databases
        out = _eval("--limit", str(LIMIT), "--engine", "mysql", "--databases", maria.url(""), "--predictions",
                    str(gold), "--transpile-predictions", "--out", str(tmp_path / "scored"))
        assert out["engine"] == "mysql" and out["n_scored"] == LIMIT and out["n_missing_db"] == 0
        records = list(read_records(tmp_path / "scored" / "records.jsonl").values())
        # Transpiled the same way on both sides, gold matches itself; what MySQL cannot run as SQLite
        # means it (none among these) would be a gold error.
        assert {r["verdict"] for r in records} <= {"correct", "gold_error"}
        assert out["n_correct"] >= LIMIT - 3
        # Untranspiled, SQLite's spelling of Spider's names and strings does not all run the same.
        raw = _eval("--limit", str(LIMIT), "--engine", "mysql", "--databases", maria.url(""), "--predictions",
                    str(gold), "--no-transpile")
        assert raw["n_correct"] < out["n_correct"]

        moved = on_engine(subset(dataset, 6), "mysql", maria.url(""))
        model = oracle_model({e.question: e.gold_sql for e in moved.examples}.get)
        monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)
        ran = _eval("--limit", "6", "--engine", "mysql", "--databases", maria.url(""), "--model", "openai:x",
                    "--out", str(tmp_path / "run"))
    assert ran["n_correct"] == 6 and ran["engine"] == "mysql"
    meta = json.loads((tmp_path / "run" / "run.json").read_text(encoding="utf-8"))
    assert meta["engine"] == "mysql"
    # The URL's password is nowhere in what the evaluations wrote: records, summary, report,
    # traces, checkpoints.
    password = maria.ADMIN_PASSWORD.encode()
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".sql"]
    assert written and not [str(p) for p in written if password in p.read_bytes()]


@pytest.mark.slow
def test_a_database_the_server_lacks_or_hides_is_missing_not_wrong(maria):
    with allow_writable_role():
        wider = on_engine(subset(open_dataset("spider-dev"), 100), "mysql", maria.url(""))
    # car_1 (after pets_1's questions) is not on the server: MySQL's "Unknown database".
    assert {e.db_id for e in wider.examples if e.db_path is None} == {e.db_id for e in wider.examples} - set(DBS)
    # A reader of concert_singer alone is told only "Access denied" for pets_1: missing for it too.
    reader = on_engine(_spider(), "mysql", f"mysql://{READER}:{SECRET}@127.0.0.1:{maria.port}/")
    assert {e.db_id for e in reader.examples if e.db_path is None} == {"pets_1"}


@pytest.mark.slow
def test_the_administrator_is_refused_without_allow_writable_role(maria, monkeypatch):
    monkeypatch.delenv("SQLCHORUS_ALLOW_WRITABLE_ROLE", raising=False)
    result = CliRunner().invoke(cli, ["eval", "--dataset", "spider-dev", "--limit", "3", "--engine", "mysql",
                                      "--databases", maria.url(""), "--predictions", "none.sql"])
    assert result.exit_code == 2, result.output
    assert maria.ADMIN_PASSWORD not in result.output and "Traceback" not in result.output
    assert "could change or reach past" in result.output and "--allow-writable-role" in result.output


def test_an_unreachable_server_is_one_line(tmp_path):
    pytest.importorskip("pymysql")
    url = f"mariadb://someone:hunter2@127.0.0.1:{free_port()}/"
    result = CliRunner().invoke(cli, ["eval", "--dataset", "spider-dev", "--limit", "3", "--engine", "mysql",
                                      "--databases", url, "--predictions", str(tmp_path / "none.sql")])
    assert result.exit_code == 2, result.output
    assert "hunter2" not in result.output and "Traceback" not in result.output
    assert "Cannot evaluate on mariadb://someone@127.0.0.1" in result.output, result.output


def test_a_url_of_another_engine_is_refused():
    with pytest.raises(EngineTargetError, match="Not a MySQL URL"):
        on_engine(_spider(), "mysql", "postgresql://me@db.example/")
