"""A benchmark's questions asked of its databases loaded into PostgreSQL, DuckDB or MySQL/MariaDB.

Spider and BIRD ship SQLite files; ``scripts/load_spider_engines.py`` loads them into a
PostgreSQL or a MySQL/MariaDB server (one database per ``db_id``) and into DuckDB files
(``<db_id>.duckdb`` in one folder). :func:`on_engine` points a :class:`~sqlchorus.evaluation.datasets.Dataset` at those
copies: each question's database becomes the engine's, and its gold SQL, written for SQLite, is
transpiled to the engine's dialect with the rewrites of :mod:`sqlchorus.tools.sql.transpile` (names
spelled as the schema does, SQLite's comparison rules made explicit), using the SQLite file's
names when it is there. A gold query that cannot be transpiled keeps its text, and is reported
as a gold error when scored.

Scoring then runs gold and predicted SQL on the engine, under its guard, and compares results
normalised as SQLite would hold them (:func:`~sqlchorus.tools.sql.compare.normalise_rows`).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

from sqlglot.errors import SqlglotError

from sqlchorus.evaluation.datasets import Dataset, Example
from sqlchorus.tools.engines.sqlite import DatabaseOpenError
from sqlchorus.tools.engines.opening import ENGINES, database_url, display_name, engine_of, is_server_url, open_database
from sqlchorus.tools.errors import SqlchorusError
from sqlchorus.tools.sql.transpile import Names, sqlite_names, transpile

__all__ = ["EngineTargetError", "on_engine", "transpile_predictions"]


class EngineTargetError(SqlchorusError, ValueError):
    """The engine's databases cannot be used: an unknown engine, no location, or a server that
    refuses or cannot be reached."""

    kind = "eval_engine"


def on_engine(
    dataset: Dataset, engine: str, where: str | os.PathLike[str] | None, *, transpile_gold: bool = True,
) -> Dataset:
    """``dataset`` with each question's database on ``engine`` and, with ``transpile_gold``, its
    gold SQL in that engine's dialect.

    Args:
        engine: ``sqlite`` (``dataset`` is returned as it is), ``postgresql``, ``duckdb`` or
            ``mysql`` (MySQL and MariaDB).
        where: PostgreSQL: a server URL (``postgresql://user@host:port/``; its database part is
            replaced by each question's ``db_id``; password from ``PG*``/``~/.pgpass`` as
            for ``psql``; None: the server the ``PG*`` variables name). MySQL: likewise
            (``mysql://`` or ``mariadb://``; password from ``~/.my.cnf`` or ``MYSQL_PWD`` as for
            ``mysql``; None: the server ``~/.my.cnf`` names, else localhost). DuckDB: the folder
            of ``<db_id>.duckdb`` files.
        transpile_gold: write the gold SQL (SQLite's) in the engine's dialect.

    A question whose database is not on the engine (no such file, no such database on the
    server) keeps ``db_path=None``: it is counted as a missing database, not scored.

    Raises:
        EngineTargetError: an unknown engine, ``where`` missing, or a server that cannot be used
            (unreachable, the login refused).
    """
    if engine not in ENGINES:
        raise EngineTargetError(f"Unknown engine {engine!r}: choose one of {', '.join(ENGINES)}.")
    if engine == "sqlite":
        return dataset
    if not where and engine == "postgresql":
        where = "postgresql://"  # the server libpq finds from PG* variables, as psql would
    if not where and engine == "mysql":
        where = "mysql://"  # the server ~/.my.cnf names, as the mysql client would find it
    if not where:
        raise EngineTargetError(f"Evaluating on {engine} needs where its databases are: the folder of "
                                "its <db_id>.duckdb files.")
    located = _locations(dataset, engine, str(where))
    names: dict[str, Names | None] = {}
    examples = []
    for example in dataset.examples:
        target = located.get(example.db_id)
        gold = example.gold_sql
        if transpile_gold and target is not None:
            gold = _transpiled(gold, engine, _names(example, names))
        examples.append(replace(example, db_path=target, gold_sql=gold, sqlite_path=example.db_path))
    return replace(dataset, examples=examples, engine=engine)


def transpile_predictions(dataset: Dataset, predictions: list[str | None]) -> list[str | None]:
    """Predictions written for SQLite, in the dialect of ``dataset``'s engine (as its gold):
    each by the names of its question's SQLite database. One that cannot be transpiled is kept
    as written."""
    if dataset.engine == "sqlite":
        return predictions
    names: dict[str, Names | None] = {}
    return [None if sql is None else _transpiled(sql, dataset.engine, _names(example, names))
            for example, sql in zip(dataset.examples, predictions)] + predictions[len(dataset.examples):]


def _transpiled(sql: str, engine: str, names: Names | None) -> str:
    try:
        return transpile(sql, engine, names)
    except (SqlglotError, ValueError, RecursionError):
        return sql


def _names(example: Example, cache: dict[str, Names | None]) -> Names | None:
    """The names of the question's SQLite database, read once per database; None without it."""
    if example.db_id not in cache:
        path = example.sqlite_path or (example.db_path if isinstance(example.db_path, Path) else None)
        try:
            cache[example.db_id] = sqlite_names(path) if path is not None else None
        except Exception:  # an unreadable file: plain sqlglot, which still handles most queries
            cache[example.db_id] = None
    return cache[example.db_id]


def _locations(dataset: Dataset, engine: str, where: str) -> dict[str, str | Path | None]:
    """Each database the questions name, as the engine's database name, or None where the
    engine has none of that name."""
    ids = sorted({e.db_id for e in dataset.examples})
    if engine == "duckdb":
        folder = Path(where).expanduser()
        if not folder.is_dir():
            raise EngineTargetError(f"No folder of DuckDB databases at {folder}.")
        return {i: (folder / f"{i}.duckdb" if (folder / f"{i}.duckdb").is_file() else None) for i in ids}
    if is_server_url(where) and engine_of(where) != engine:
        raise EngineTargetError(f"Not a {_URL_OF[engine]} URL ({_URL_OF[engine].lower()}://user@host:port/): "
                                f"{display_name(where)}")
    try:
        urls = {i: database_url(where, i) for i in ids}
    except ValueError as e:
        raise EngineTargetError(str(e)) from None
    found: dict[str, str | Path | None] = {}
    for db_id, url in urls.items():
        try:
            open_database(url, workers=1, prestart=False).close()
        except DatabaseOpenError as e:
            if not _missing(str(e), db_id):  # unreachable or refused: all would be
                raise EngineTargetError(f"Cannot evaluate on {display_name(where)}: {e}") from None
            found[db_id] = None
        else:
            found[db_id] = url
    return found


_URL_OF = {"postgresql": "PostgreSQL", "mysql": "MySQL"}


def _missing(message: str, db_id: str) -> bool:
    """Whether the server's refusal says only that database ``db_id`` is not there for this user:
    PostgreSQL's ``database "x" does not exist``, MySQL's ``Unknown database 'x'``, or the
    ``Access denied ... to database 'x'`` MySQL gives a user that may not see a database, whether
    or not it exists (any other refusal, of the login or the server, would be every database's)."""
    return (f'database "{db_id}" does not exist' in message or f"Unknown database '{db_id}'" in message
            or bool(re.search(r"Access denied for user .* to database '" + re.escape(db_id) + "'", message)))
