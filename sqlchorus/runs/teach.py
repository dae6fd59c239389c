"""Teaching: a verified question–SQL pair or a glossary term, checked and kept for its database.

Every place an answer is judged teaches through :class:`Teacher`: the debugger, the viewer, the
REST API, the MCP server, the LangChain toolkit and ``sqlchorus teach``. An example is checked
before it is kept: its question is a question (not empty, not over ``max_question_chars``), its
SQL runs through the database's guard and returns rows, and the same question is not already
taught on that database. A glossary entry's SQL expression, when it has one, must run as the
condition of a query on one of the database's tables. Entries are kept per database in the
examples store (``Settings.examples_store``: the checkpoint store by default, SQLite or
PostgreSQL), so servers sharing a store share them; a run on another database never sees them.

A taught question is data: it is stored as text, shown in prompts inside a block marked as
examples, and whatever SQL a model writes after reading it still goes through the guard.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlglot import exp

from sqlchorus.config.question import checked_question
from sqlchorus.config.settings import Settings
from sqlchorus.core.checkpoints import CheckpointFileError, RunRecords
from sqlchorus.core.checkpoints_postgres import open_checkpoints
from sqlchorus.core.dependencies import open_with
from sqlchorus.runs.session import Session
from sqlchorus.tools.sql import text as sql_text
from sqlchorus.tools.engines.sqlite import Database
from sqlchorus.tools.engines.opening import database_name
from sqlchorus.tools.errors import SqlchorusError
from sqlchorus.tools.examples.fewshot import sql_features
from sqlchorus.tools.schema.introspect import introspect
from sqlchorus.tools.examples.taught import EXAMPLE, KINDS, TERM, DuplicateTaughtError, TaughtError, entry_id, sql_skeleton, without_glossary

__all__ = ["EXAMPLE", "KINDS", "TERM", "DuplicateTaughtError", "NoExamplesStoreError", "TaughtError", "TeachReport", "Teacher",
           "UnknownTaughtError", "read_pairs"]

MAX_SQL_CHARS = 20_000
"""Characters a taught SQL statement or expression has at most."""
MAX_TERM_CHARS = 200
"""Characters a glossary term has at most."""


class NoExamplesStoreError(TaughtError):
    """Taught examples are off (``--no-taught``, or no checkpoint store to keep them in)."""

    kind = "no_examples_store"
    http_status = 503


class UnknownTaughtError(TaughtError, LookupError):
    """A database the store keeps nothing for, or an id it does not know."""

    kind = "unknown_taught"
    http_status = 404


@dataclass
class TeachReport:
    """What teaching a file of pairs did: the entries kept, and each line refused with why."""

    added: list[dict[str, Any]] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"n_added": len(self.added), "added": [e["id"] for e in self.added],
                "n_refused": len(self.refused), "refused": [{"line": n, "error": why} for n, why in self.refused]}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def default_author() -> str:
    """Who teaches from this machine, when no one is named: the login name."""
    try:
        return getpass.getuser()
    except Exception:  # no login name (a container's unnamed uid)
        return "unknown"


class Teacher:
    """Teaches and reads taught examples and glossary entries.

    Args:
        session: a :class:`Session` whose databases (under their guards) and examples store are
            used; None: the teacher opens them itself, with no model and no value index (the
            command line's ``teach`` and ``examples``, which ask no question).
        settings: whose ``examples_store``, guard limits and ``max_question_chars`` are used; the
            session's by default.

    Use it as a context manager, or call :meth:`close`, to close what it opened itself.
    """

    def __init__(self, session: Session | None = None, settings: Settings | None = None):
        if session is None and settings is None:
            settings = Settings()
        self.session = session
        self.settings = settings or session.settings  # type: ignore[union-attr]
        self._opened: dict[str, tuple[Database, list[str]]] = {}
        self._store: RunRecords | None = None

    def store(self) -> RunRecords:
        """The examples store.

        Raises:
            NoExamplesStoreError: taught examples are off.
            CheckpointFileError: the store cannot be opened.
        """
        if self.session is not None:
            store = self.session.examples_store(self.settings)
        else:
            path = self.settings.examples_file
            if self._store is None and path is not None:
                self._store = open_checkpoints(path)
            store = self._store
        if store is None:
            raise NoExamplesStoreError(
                "Taught examples are off (--no-taught, or no checkpoint store): give --examples-store FILE or URL.")
        return store

    def _resources(self, db: str | Path | Database) -> tuple[Database, list[str]]:
        """The database under its guard, and its tables' names."""
        if self.session is not None:
            resources = self.session.database(db, self.settings)
            return resources.db, [t.name for t in resources.schema.tables]
        if isinstance(db, Database):
            return db, [t.name for t in introspect(db, sample_values=0).tables]
        key = str(db)
        if key not in self._opened:
            database = open_with(db, self.settings)
            try:
                tables = [t.name for t in introspect(database, sample_values=0).tables]
            except BaseException:
                database.close()
                raise
            self._opened[key] = (database, tables)
        return self._opened[key]

    def _db(self, db: str | Path | Database) -> Database:
        return self._resources(db)[0]

    def close(self) -> None:
        """Close the databases and the store this teacher opened itself."""
        for database, _ in self._opened.values():
            database.close()
        self._opened.clear()
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> Teacher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- teaching ---------------------------------------------------------------------------------

    def check_example(self, db: str | Path | Database, question: str, sql: str, hint: str = "") -> dict[str, Any]:
        """The example as it would be kept, checked (see the module's doc) but not kept.

        Raises:
            TaughtError: the question or SQL is refused, or the SQL returns no rows.
            sqlchorus.tools.sql.errors.DatabaseOpenError: the database cannot be opened.
        """
        question, hint = _checked(question, hint, self.settings.max_question_chars)
        sql = _checked_sql(sql)
        database = self._db(db)
        try:
            result = database.execute(sql, max_rows=1)
        except SqlchorusError as e:
            raise TaughtError(f"The SQL was refused, so it was not taught: {_first_line(e)}") from e
        if not result.rows:
            raise TaughtError("The SQL returned no rows, so it was not taught: a taught answer must return rows.")
        return {"database": database_name(database), "kind": EXAMPLE, "question": question, "sql": sql,
                "hint": hint, "skeleton": sql_skeleton(sql, database.dialect),
                "features": sorted(sql_features(sql))}

    def teach(self, db: str | Path | Database, question: str, sql: str, *, hint: str = "",
              author: str | None = None, run_id: str | None = None, source: str = "cli") -> dict[str, Any]:
        """Keep a verified question–SQL pair for ``db``; the entry kept.

        Args:
            db: the database (a path, URL or open Database) the SQL answers over.
            question, sql, hint: the question, its verified SQL, and a hint it needs.
            author: who verified it (the login name by default).
            run_id: the run it came from, if any.
            source: where it was taught (``cli``, ``debug``, ``ui``, ``rest``, ``mcp``, ``toolkit``).

        Raises:
            TaughtError: refused (empty or over-long question, SQL the guard refuses or that
                returns no rows, the same question taught already), in one line.
            NoExamplesStoreError, CheckpointFileError: no usable store.
        """
        entry = self.check_example(db, question, sql, hint)
        if run_id is not None and entry["hint"]:
            # A run's hint carries the glossary entries its question named: not the user's hint.
            entry["hint"] = without_glossary(entry["hint"], self.store().taught(entry["database"], TERM))
        return self._keep(entry, author, run_id, source)

    def teach_term(self, db: str | Path | Database, term: str, meaning: str = "", sql: str = "", *,
                   author: str | None = None, run_id: str | None = None, source: str = "cli") -> dict[str, Any]:
        """Keep a glossary entry for ``db``: a term and what it means, in words and/or as a SQL
        expression (a condition such as ``status = 'A' AND closed_at IS NULL``); the entry kept.

        Raises:
            TaughtError: no term, or a term over :data:`MAX_TERM_CHARS`, neither meaning nor SQL,
                or an expression that runs as a condition on none of the database's tables.
            NoExamplesStoreError, CheckpointFileError: no usable store.
        """
        term = " ".join((term or "").split())
        meaning = " ".join((meaning or "").split())
        if not term:
            raise TaughtError("The term is empty: give the word or phrase the glossary explains.")
        if len(term) > MAX_TERM_CHARS:
            raise TaughtError(f"The term has {len(term):,} characters; the limit is {MAX_TERM_CHARS}.")
        if not meaning and not (sql or "").strip():
            raise TaughtError(f"Say what {term!r} means: give a meaning, a SQL expression, or both.")
        _, meaning = _checked(term, meaning, self.settings.max_question_chars)
        database, tables = self._resources(db)
        expression = _checked_expression(sql, database, tables) if (sql or "").strip() else ""
        entry = {"database": database_name(database), "kind": TERM, "question": term, "sql": expression,
                 "hint": meaning, "skeleton": "", "features": []}
        return self._keep(entry, author, run_id, source)

    def _keep(self, entry: dict[str, Any], author: str | None, run_id: str | None, source: str) -> dict[str, Any]:
        store = self.store()
        entry = {**entry, "id": entry_id(entry["database"], entry["kind"], entry["question"]),
                 "author": author or default_author(), "created": _now(), "run_id": run_id, "source": source}
        try:
            added = store.add_taught(entry)
        except store.db_errors as e:
            raise CheckpointFileError(f"The examples store {store.path} did not take it: {_first_line(e)}") from e
        if not added:
            what = "question" if entry["kind"] == EXAMPLE else "term"
            raise DuplicateTaughtError(f"This {what} is taught already on this database (as {entry['id']}); "
                              f"remove it first with sqlchorus examples rm {entry['id']}.")
        return entry

    def teach_lines(self, db: str | Path | Database | None, lines: Iterable[str], *, author: str | None = None,
                    source: str = "cli") -> TeachReport:
        """Teach each JSON line of ``lines``: ``{"question", "sql", "hint"?, "db"?}`` for an
        example, ``{"term", "meaning"?, "sql"?, "db"?}`` for a glossary entry; a line's ``db``
        wins over ``db``. A line refused is reported with its number and why; the others are kept.

        Raises:
            NoExamplesStoreError, CheckpointFileError: no usable store (before any line is read).
        """
        self.store()
        report = TeachReport()
        for number, item, problem in read_pairs(lines):
            if problem is None:
                try:
                    target = item.get("db") or db
                    if not target:
                        raise TaughtError("no database: give --db, or a \"db\" on the line")
                    if "term" in item:
                        entry = self.teach_term(target, item["term"], item.get("meaning") or item.get("hint") or "",
                                                item.get("sql") or "", author=item.get("author") or author,
                                                source=source)
                    else:
                        entry = self.teach(target, item.get("question") or "", item.get("sql") or "",
                                           hint=item.get("hint") or item.get("evidence") or "",
                                           author=item.get("author") or author, run_id=item.get("run_id"),
                                           source=source)
                    report.added.append(entry)
                    continue
                except (TaughtError, SqlchorusError) as e:
                    problem = _first_line(e)
            report.refused.append((number, problem))
        return report

    # -- reading ----------------------------------------------------------------------------------

    def entries(self, db: str | Path | Database | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        """The taught entries of ``db`` (every database's when None), of ``kind`` (both when None).

        Raises:
            UnknownTaughtError: the store keeps nothing for ``db`` (naming those it keeps).
        """
        store = self.store()
        if db is None:
            return store.taught(kind=kind)
        database = self.database_of(db)
        return store.taught(database, kind)

    def database_of(self, db: str | Path | Database) -> str:
        """The store's name of ``db``: the database opened, or a name the store knows as it is.

        Raises:
            UnknownTaughtError: the store keeps nothing for it.
        """
        store = self.store()
        known = {name: (n_ex, n_terms) for name, n_ex, n_terms in store.taught_databases()}
        if isinstance(db, str) and db in known:
            return db
        try:
            name = database_name(self._db(db))
        except SqlchorusError:
            name = None
        if name in known:
            return name
        listed = ", ".join(sorted(known)) or "none"
        raise UnknownTaughtError(f"The examples store {store.path} keeps nothing for {name or db}. "
                                 f"It keeps examples for: {listed}.")

    def remove(self, ids: list[str]) -> list[dict[str, Any]]:
        """Remove the entries of ``ids``; the entries removed.

        Raises:
            UnknownTaughtError: an id the store does not know (then none is removed).
        """
        store = self.store()
        found = store.taught(ids=list(ids))
        missing = sorted(set(ids) - {e["id"] for e in found})
        if missing:
            raise UnknownTaughtError(f"No taught entry has the id {', '.join(missing)}; "
                                     "sqlchorus examples list shows the ids.")
        store.remove_taught([e["id"] for e in found])
        return found

    def databases(self) -> list[dict[str, Any]]:
        """Each database the store keeps entries for, with its numbers of examples and terms."""
        return [{"database": db, "examples": n_ex, "terms": n_terms}
                for db, n_ex, n_terms in self.store().taught_databases()]


def exported(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as ``sqlchorus examples export`` writes it: a line ``sqlchorus teach --file``
    takes back."""
    if entry["kind"] == TERM:
        out = {"term": entry["question"], "meaning": entry["hint"], "sql": entry["sql"]}
    else:
        out = {"question": entry["question"], "sql": entry["sql"], "hint": entry["hint"]}
    return {**out, "db": entry["database"], "id": entry["id"], "author": entry["author"],
            "created": entry["created"], "run_id": entry["run_id"], "source": entry["source"]}


def read_pairs(lines: Iterable[str]) -> Iterator[tuple[int, dict[str, Any], str | None]]:
    """Each line of a pairs file: its number, its object, and why it cannot be taught (or None).
    Blank lines are skipped."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as e:
            yield number, {}, f"not JSON ({e})"
            continue
        if not isinstance(item, dict):
            yield number, {}, "not a JSON object"
        elif "term" not in item and not (item.get("question") and item.get("sql")):
            yield number, item, "needs a \"question\" and its \"sql\" (or a \"term\")"
        else:
            yield number, item, None


def _checked(question: str, hint: str, limit: int) -> tuple[str, str]:
    try:
        return checked_question(question, hint, limit)
    except SqlchorusError as e:
        raise TaughtError(str(e)) from e


def _checked_sql(sql: str) -> str:
    if not isinstance(sql, str) or not sql.strip():
        raise TaughtError("The SQL is empty: give the query that answers the question.")
    sql = sql.strip().rstrip(";").strip()
    if len(sql) > MAX_SQL_CHARS:
        raise TaughtError(f"The SQL has {len(sql):,} characters; the limit is {MAX_SQL_CHARS:,}.")
    return sql


def _checked_expression(sql: str, database: Database, tables: list[str]) -> str:
    """A glossary entry's SQL expression, once it has run as a condition on one of the tables."""
    expression = _checked_sql(sql)
    try:
        tree = sql_text.parse_one(expression, dialect=database.dialect)
    except Exception as e:
        raise TaughtError(f"The SQL expression does not parse: {_first_line(e)}") from e
    if isinstance(tree, (exp.Query, exp.Command)) or not isinstance(tree, exp.Expression) or ";" in expression:
        raise TaughtError("The SQL of a term is an expression (a condition such as status = 'A'), not a statement.")
    first: str | None = None
    for table in tables:
        quoted = exp.to_table(table, dialect=database.dialect).sql(dialect=database.dialect)
        try:
            database.execute(f"SELECT 1 FROM {quoted} WHERE {expression} LIMIT 1", max_rows=1)
            return expression
        except SqlchorusError as e:
            first = first or _first_line(e)
    raise TaughtError(f"The SQL expression runs on none of the database's tables: {first or 'it has no tables'}")


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
