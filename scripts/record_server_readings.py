"""Record what a PostgreSQL and a MariaDB server say about the statements of the guard's layer tests.

Two layers of the guards judge the server's own account of a statement: PostgreSQL's plan
(:func:`sqlchorus.tools.engines.postgres_check.check_plan`, on ``EXPLAIN (VERBOSE, FORMAT JSON)``)
and MariaDB's reading (:func:`sqlchorus.tools.engines.mysql_check.check_note`, on ``EXPLAIN
EXTENDED``'s note 1003). ``tests/test_layers_postgres.py`` and ``tests/test_layers_mysql.py`` test
them on live servers, in the slow tier; ``tests/test_server_readings.py`` tests them again in the
quick tier (the one mutation testing runs) from what this script records once.

It starts a PostgreSQL server and a MariaDB server of its own, as the slow tests do
(``tests/servers.py``, and the preparation of the layer modules' own fixtures, ``pg`` and
``admin_db``, ``my``), and writes:

* ``tests/fixtures/server_readings/postgres_plans.json``: the server's version; the
  :class:`~sqlchorus.tools.engines.postgres_check.ServerNames` the guard reads from its catalogue
  (each set as a sorted list); and for every statement of ``PLAN_ATTACKS`` (list ``refused``) and
  of ``READS`` less the padding calls (list ``passes``) its plan, as ``check_plan`` receives it;
* ``tests/fixtures/server_readings/mariadb_notes.json``: the server's version; and for every
  statement of ``NOTE_ATTACKS`` (``refused``) and of ``READS`` (``passes``) the server's reading,
  or, where the server would not explain the statement, its error (``error``: code and message).

Each case is keyed by its name in the layer tests (a question a module writes itself, which has
none there, by ``question: <its text>``), in name order, with its statement and its list. Where an
attack names a file beside the server's data, the server's folder (a new temporary one on each
run) is written back as the corpus writes it (``/outside``, ``{outside}``), in the reading as in
the statement; nothing else is changed.

Run it again after the corpus (tests/fixtures/guard_corpus_postgres, guard_corpus_mysql), the
layer tests' lists, or the servers (another PostgreSQL or MariaDB version) change, and review the
difference: ``tests/test_server_readings.py`` fails while the cases recorded differ from the ones
the layer tests select, and its slow tests while a live server reads a handful of them otherwise
than recorded. It needs PostgreSQL's and MariaDB's server programs and Spider's concert_singer
(``SQLCHORUS_DATA``)::

    SQLCHORUS_DATA=/work/shared/data .venv/bin/python scripts/record_server_readings.py [postgres] [mariadb]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

import psycopg  # noqa: E402
import pymysql  # noqa: E402

import test_layers_mysql as layers_my  # noqa: E402
import test_layers_postgres as layers_pg  # noqa: E402
from servers import mariadb_of_a_test, postgres_of_a_test  # noqa: E402

from sqlchorus.tools.engines.postgres_check import ServerNames  # noqa: E402

READINGS = TESTS / "fixtures" / "server_readings"
PLANS_FILE = READINGS / "postgres_plans.json"
NOTES_FILE = READINGS / "mariadb_notes.json"
ABOUT = "Written by scripts/record_server_readings.py (see its docstring); do not edit by hand."


# -- what the layer tests select --------------------------------------------------------------


def _named_reads(layers: Any) -> list[tuple[str, str]]:
    """A layer module's ``READS``, each named: a corpus case by its case name, a question the
    module writes itself by ``question: <its text>``."""
    corpus = {p.input: name for name, p in layers.CASES.items() if p.expected == "ok"}
    return [(corpus.get(sql, f"question: {sql}"), sql) for sql in layers.READS]


def _selection(refused: list[tuple[str, str]], passes: list[tuple[str, str]]) -> dict[str, dict[str, str]]:
    cases = [(name, "refused", sql) for name, sql in refused] + [(name, "passes", sql) for name, sql in passes]
    names = [name for name, _, _ in cases]
    if len(set(names)) != len(names):
        raise ValueError(f"a case name given twice: {sorted(n for n in names if names.count(n) > 1)}")
    return {name: {"list": which, "sql": sql} for name, which, sql in sorted(cases)}


def postgres_selection() -> dict[str, dict[str, str]]:
    """What ``test_layers_postgres`` runs through ``check_plan`` now, by name (each its list and
    statement): ``PLAN_ATTACKS``, refused; ``READS`` less the statements with ``lpad`` (the filter
    of ``test_the_plan_check_alone_lets_questions_through``: a padding call passes the plan only
    once the first reading checked it), passes."""
    return _selection(layers_pg.PLAN_ATTACKS, [(n, sql) for n, sql in _named_reads(layers_pg) if "lpad" not in sql])


def mariadb_selection() -> dict[str, dict[str, str]]:
    """What ``test_layers_mysql`` runs through ``check_note`` now: ``NOTE_ATTACKS``, refused;
    ``READS``, passes."""
    return _selection(layers_my.NOTE_ATTACKS, _named_reads(layers_my))


# -- readings ---------------------------------------------------------------------------------


def with_placeholder(value: Any, folder: str, placeholder: str) -> Any:
    """``value`` (JSON-like) with the server's temporary ``folder`` written ``placeholder`` again."""
    quoted = lambda text: json.dumps(text)[1:-1]  # noqa: E731
    return json.loads(json.dumps(value).replace(quoted(folder), quoted(placeholder)))


def names_as_json(names: ServerNames) -> dict[str, list[str] | None]:
    return {field: None if value is None else sorted(value) for field, value in vars(names).items()}


def names_of_json(recorded: dict[str, list[str] | None]) -> ServerNames:
    return ServerNames(**{field: None if value is None else frozenset(value) for field, value in recorded.items()})


def plan_reading(pg: dict, sql: str) -> dict[str, Any]:
    """The server's plan of ``sql`` (the corpus's spelling: its folder is put in, then taken out
    again), as ``test_layers_postgres._plan`` makes it: ``{"plan": ...}``, or ``{"error": ...}``."""
    folder = str(pg["outside"])
    try:
        reading = {"plan": layers_pg._plan(pg, layers_pg._outside(sql, pg))}
    except psycopg.Error as e:
        reading = {"error": {"sqlstate": e.sqlstate, "message": str(e)}}
    return with_placeholder(reading, folder, layers_pg.OUTSIDE)


def note_reading(my: dict, sql: str) -> dict[str, Any]:
    """The server's reading of ``sql``, as ``test_layers_mysql._note`` takes it: ``{"note": ...}``,
    or ``{"error": {"code": ..., "message": ...}}`` where the server would not explain it (no code
    where it explained it but gave no reading)."""
    folder = str(my["server"].outside)
    try:
        reading: dict[str, Any] = {"note": layers_my._note(my, layers_my._outside(sql, my))}
    except pymysql.err.MySQLError as e:
        code = e.args[0] if e.args and isinstance(e.args[0], int) else None
        reading = {"error": {"code": code, "message": str(e.args[1] if len(e.args) > 1 else e)}}
    except AssertionError as e:  # _note's "the server gave no reading"
        reading = {"error": {"code": None, "message": str(e).splitlines()[0]}}
    return with_placeholder(reading, folder, layers_my.OUTSIDE)


def postgres_version(pg: dict) -> str:
    with psycopg.connect(pg["admin"], autocommit=True) as conn:
        return conn.execute("SELECT version()").fetchone()[0]


def mariadb_version(my: dict) -> str:
    return my["server"].admin_sql("SELECT VERSION()")[0][0][0]


# -- the servers, prepared as the layer tests' fixtures prepare them ------------------------------


def fixture_function(fixture: Any) -> Any:
    """A pytest fixture's own function, to call outside pytest (pytest refuses a direct call)."""
    return fixture.__wrapped__


@contextlib.contextmanager
def postgres_prepared() -> Iterator[tuple[dict, Any]]:
    """``test_layers_postgres``'s ``pg`` and ``admin_db`` on a server of its own, stopped after."""
    servers = postgres_of_a_test()
    server = next(servers)
    try:
        pg = fixture_function(layers_pg.pg)(server)
        databases = fixture_function(layers_pg.admin_db)(pg)
        admin_db = next(databases)
        try:
            yield pg, admin_db
        finally:
            databases.close()
    finally:
        servers.close()


@contextlib.contextmanager
def mariadb_prepared() -> Iterator[dict]:
    """``test_layers_mysql``'s ``my`` on a server of its own, stopped after."""
    servers = mariadb_of_a_test()
    server = next(servers)
    try:
        yield fixture_function(layers_my.my)(server)
    finally:
        servers.close()


# -- recording --------------------------------------------------------------------------------


def _record(selection: dict[str, dict[str, str]], read: Any) -> dict[str, dict[str, Any]]:
    cases = {}
    for number, (name, case) in enumerate(selection.items(), start=1):
        cases[name] = {**case, **read(case["sql"])}
        if "error" in cases[name]:
            print(f"  {number}/{len(selection)} {name}: the server refused it: {cases[name]['error']}", file=sys.stderr)
    return cases


def record_postgres() -> dict[str, Any]:
    with postgres_prepared() as (pg, admin_db):
        return {"about": ABOUT, "server": {"version": postgres_version(pg)}, "names": names_as_json(admin_db.names),
                "cases": _record(postgres_selection(), lambda sql: plan_reading(pg, sql))}


def record_mariadb() -> dict[str, Any]:
    with mariadb_prepared() as my:
        return {"about": ABOUT, "server": {"version": mariadb_version(my)},
                "cases": _record(mariadb_selection(), lambda sql: note_reading(my, sql))}


def write(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    cases = document["cases"].values()
    counts = {which: sum(c["list"] == which for c in cases) for which in ("refused", "passes")}
    errors = sum("error" in c for c in cases)
    print(f"{path.relative_to(ROOT)}: {document['server']['version']}; {counts['refused']} refused, "
          f"{counts['passes']} passes, {errors} the server would not read")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("engines", nargs="*", metavar="postgres|mariadb",
                        help="the servers to record from (default: both)")
    engines = parser.parse_args(argv).engines or ["postgres", "mariadb"]
    unknown = set(engines) - {"postgres", "mariadb"}
    if unknown:
        parser.error(f"no such server: {', '.join(sorted(unknown))} (postgres or mariadb)")
    if "postgres" in engines:
        write(PLANS_FILE, record_postgres())
    if "mariadb" in engines:
        write(NOTES_FILE, record_mariadb())
    return 0


if __name__ == "__main__":
    sys.exit(main())
