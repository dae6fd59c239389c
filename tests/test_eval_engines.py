"""``sqlchorus eval --engine postgresql|duckdb``: a benchmark's questions asked of, and scored on,
its databases loaded into another engine, with the gold SQL transpiled from SQLite's dialect."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from test_evaluate import WRONG

from conftest import spider_db, spider_loader
from servers import allow_writable_role, postgres_of_a_test
from sqlchorus.evaluation.engines import EngineTargetError, on_engine
from sqlchorus.evaluation.runs import open_dataset, read_records, subset
from sqlchorus.interfaces.cli import cli
from sqlchorus.testing import oracle_model

DBS = ("concert_singer", "pets_1")
LIMIT = 60
"""Spider dev's first questions: 45 on concert_singer, then pets_1's."""


def _spider():
    try:
        return subset(open_dataset("spider-dev"), LIMIT)
    except Exception as e:  # the data folder is absent
        pytest.skip(f"Spider dev is not there: {e}")


def _eval(*args: str) -> dict:
    result = CliRunner().invoke(cli, ["eval", "--dataset", "spider-dev", "--limit", str(LIMIT), *args, "--json"])
    assert "Traceback" not in result.output
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.splitlines()[-1])


def _gold_file(tmp_path, dataset) -> str:
    path = tmp_path / "gold.sql"
    path.write_text("".join(f"{e.gold_sql}\t{e.db_id}\n" for e in dataset.examples), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def duckdb_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("duck")
    for name in DBS:
        if not spider_db(name).exists():
            pytest.skip(f"Spider database {name} is not there")
        spider_loader().load_database(spider_db(name), duckdb_path=folder / f"{name}.duckdb")
    return folder


def test_gold_is_transpiled_and_every_database_found(duckdb_dir):
    dataset = _spider()
    moved = on_engine(dataset, "duckdb", duckdb_dir)
    assert moved.engine == "duckdb" and len(moved.examples) == LIMIT
    assert {e.db_path.name for e in moved.examples} == {f"{n}.duckdb" for n in DBS}
    assert all(e.sqlite_path == d.db_path for e, d in zip(moved.examples, dataset.examples))
    first = moved.examples[2]  # SELECT name, country, age FROM singer ORDER BY age DESC
    assert '"Name"' in first.gold_sql and '"singer"' in first.gold_sql, first.gold_sql
    kept = on_engine(dataset, "duckdb", duckdb_dir, transpile_gold=False)
    assert [e.gold_sql for e in kept.examples] == [e.gold_sql for e in dataset.examples]


def test_a_database_the_engine_lacks_is_missing_not_wrong(duckdb_dir, tmp_path):
    (tmp_path / "concert_singer.duckdb").write_bytes((duckdb_dir / "concert_singer.duckdb").read_bytes())
    moved = on_engine(_spider(), "duckdb", tmp_path)
    assert sum(e.db_path is None for e in moved.examples) == LIMIT - 45


def test_where_the_databases_are_is_required_and_checked(tmp_path):
    with pytest.raises(EngineTargetError, match="needs where its databases are"):
        on_engine(_spider(), "duckdb", None)
    with pytest.raises(EngineTargetError, match="No folder of DuckDB databases"):
        on_engine(_spider(), "duckdb", tmp_path / "absent")
    with pytest.raises(EngineTargetError, match="Not a PostgreSQL or MySQL URL"):
        on_engine(_spider(), "postgresql", "/some/folder")
    result = CliRunner().invoke(cli, ["eval", "--dataset", "spider-dev", "--databases", str(tmp_path)])
    assert result.exit_code == 2 and "go with --engine" in result.output


@pytest.mark.slow
def test_gold_scores_itself_on_duckdb_except_where_the_engine_refuses_it(duckdb_dir, tmp_path):
    dataset = _spider()
    out = _eval("--engine", "duckdb", "--databases", str(duckdb_dir), "--predictions",
                _gold_file(tmp_path, dataset), "--transpile-predictions", "--out", str(tmp_path / "run"))
    assert out["engine"] == "duckdb" and out["n_scored"] == LIMIT and out["n_missing_db"] == 0
    records = list(read_records(tmp_path / "run" / "records.jsonl").values())
    # A gold query DuckDB refuses (a bare column beside GROUP BY) is a gold error; every other
    # one, transpiled the same way on both sides, is correct.
    assert {r["verdict"] for r in records} <= {"correct", "gold_error"}
    assert sum(r["verdict"] == "correct" for r in records) == out["n_correct"] >= LIMIT - 10
    assert all(r["db_path"].endswith(".duckdb") for r in records)


@pytest.mark.slow
def test_the_pipeline_answers_over_duckdb_with_a_scripted_model(duckdb_dir, tmp_path, monkeypatch):
    dataset = on_engine(_spider(), "duckdb", duckdb_dir)
    wrong = {1, 50}
    answers = {}
    for i, e in enumerate(dataset.examples):
        answers.setdefault(e.question, WRONG if i in wrong else e.gold_sql)
    model = oracle_model(answers.get)
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)
    limit = 8
    result = CliRunner().invoke(cli, ["eval", "--dataset", "spider-dev", "--limit", str(limit), "--engine", "duckdb",
                                      "--databases", str(duckdb_dir), "--model", "openai:x", "--out",
                                      str(tmp_path / "run"), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout.splitlines()[-1])
    assert out["engine"] == "duckdb" and out["n_scored"] == limit
    records = read_records(tmp_path / "run" / "records.jsonl")
    assert records[1]["verdict"] != "correct"
    assert out["n_correct"] == limit - 1, [(r["index"], r["verdict"], r["verdict_error"]) for r in records.values()]
    meta = json.loads((tmp_path / "run" / "run.json").read_text(encoding="utf-8"))
    assert meta["engine"] == "duckdb"
    # The same folder does not resume as a run on another engine.
    again = CliRunner().invoke(cli, ["eval", "--dataset", "spider-dev", "--limit", str(limit), "--model", "openai:x",
                                     "--out", str(tmp_path / "run")])
    assert again.exit_code == 2 and "holds a run on duckdb, not on sqlite" in again.output


@pytest.fixture(scope="module")
def postgres():
    # The test server's role is its superuser: let open, as an administrator would.
    with allow_writable_role():
        yield from postgres_of_a_test()


@pytest.mark.slow
def test_gold_and_the_pipeline_on_postgresql(postgres, spider, tmp_path, monkeypatch):
    for name in DBS:
        spider_loader().load_database(spider(name), postgres_url=postgres.url())
    dataset = _spider()
    out = _eval("--engine", "postgresql", "--databases", postgres.url(), "--predictions",
                _gold_file(tmp_path, dataset), "--transpile-predictions")
    assert out["engine"] == "postgresql" and out["n_scored"] == LIMIT and out["n_missing_db"] == 0
    assert out["n_correct"] >= LIMIT - 10
    # Untranspiled, SQLite's spelling of Spider's names does not resolve on PostgreSQL.
    raw = _eval("--engine", "postgresql", "--databases", postgres.url(), "--predictions",
                _gold_file(tmp_path, dataset), "--no-transpile")
    assert raw["n_correct"] < out["n_correct"]

    # A database the server lacks (car_1, after pets_1's questions) is missing, not an error.
    wider = on_engine(subset(open_dataset("spider-dev"), 100), "postgresql", postgres.url())
    assert {e.db_id for e in wider.examples if e.db_path is None} == {e.db_id for e in wider.examples} - set(DBS)
    moved = on_engine(subset(dataset, 6), "postgresql", postgres.url())
    model = oracle_model({e.question: e.gold_sql for e in moved.examples}.get)
    monkeypatch.setattr("sqlchorus.core.models.resolve_model", lambda spec, **kw: model)
    ran = _eval_limit(6, "--engine", "postgresql", "--databases", postgres.url(), "--model", "openai:x",
                      "--out", str(tmp_path / "run"))
    assert ran["n_correct"] == 6 and ran["engine"] == "postgresql"


def _eval_limit(limit: int, *args: str) -> dict:
    result = CliRunner().invoke(cli, ["eval", "--dataset", "spider-dev", "--limit", str(limit), *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.splitlines()[-1])


def test_without_a_url_the_server_is_the_one_the_pg_variables_name(monkeypatch):
    from servers import free_port

    monkeypatch.setenv("PGHOST", "127.0.0.1")
    monkeypatch.setenv("PGPORT", str(free_port()))
    with pytest.raises(EngineTargetError, match="Cannot evaluate on postgresql://: .*refused"):
        on_engine(_spider(), "postgresql", None)


def test_an_unreachable_server_is_one_line(tmp_path):
    from servers import free_port

    url = f"postgresql://someone:hunter2@127.0.0.1:{free_port()}/"
    result = CliRunner().invoke(cli, ["eval", "--dataset", "spider-dev", "--limit", "3", "--engine", "postgresql",
                                      "--databases", url, "--predictions", str(tmp_path / "none.sql")])
    assert result.exit_code == 2, result.output
    assert "hunter2" not in result.output and "Traceback" not in result.output
    assert "Cannot evaluate on postgresql://someone@127.0.0.1" in result.output, result.output
