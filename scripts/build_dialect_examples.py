"""Build ``prompts/examples_<dialect>.json``: every shipped few-shot example in PostgreSQL's,
DuckDB's and MySQL's SQL, each known to run there.

The shipped examples (``prompts/<prompt>_examples.json`` and the retrieval pool
``prompts/fewshot_pool.json``) are written in SQLite's SQL. For each engine, each example is
carried into the engine's SQL and run on a copy of its database on that engine:

* its database: the bundled demo database for the examples over it (with its rows), else an empty
  database with the example's schema (Spider's compact schema, or its ``CREATE TABLE`` text),
  made as a SQLite file and loaded into the engine by ``scripts/load_spider_engines.py``, names,
  types and keys kept;
* its SQL: :func:`sqlchorus.tools.sql.transpile.transpile` with ``idiomatic=True`` and the copy's
  names: every query (``sql``, DIN-SQL's ``sub_sql``, LIST's ``steps``), the SQL in reasoning
  (the divide-and-conquer answers' pseudo-SQL, whose ``<...>`` placeholders are kept, their SQL and
  final query; the fixer's ``Final Answer``), the expressions a hint says a phrase ``refers to``,
  and function calls named in prose, with a bare mention of a function renamed along. Text that
  reads the same in the engine's dialect is kept as written;
* the query-plan examples' plans: SQLite's plan of the SQLite query, its expressions written in
  the engine's SQL (:func:`sqlchorus.tools.engines.query_plan.plan_for_schema`);
* the fixer's examples: the failed query runs on the copy and its ``result`` is the engine's own
  error, as the fixer would be shown it (or, for an empty result, it must be empty there too);
* every complete query then runs on the copy, under the engine's guard.

An example that cannot be carried (its SQL does not transpile, a query fails on the engine, its
reasoning names a function the engine spells otherwise and cannot be rewritten, the fixer's
failed query does not fail there) is left out of that engine's prompts, and listed with why in
the file's ``not_carried``. The file keeps, per prompt, only what differs from the shipped example
(and its question, to match them), and ``counts``: examples with SQL, carried, share.

Run (the servers' users must be able to CREATE DATABASE; the scratch databases are named
``sqlchorus_ex_*`` and dropped afterwards)::

    python scripts/build_dialect_examples.py --postgres postgresql://me@localhost/ --mysql mysql://me@localhost/
    python scripts/build_dialect_examples.py --only duckdb            # DuckDB needs no server
    python scripts/build_dialect_examples.py ... --check              # exit 1 when a file is out of date

Prints one JSON line of counts per dialect.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from load_spider_engines import load_duckdb, load_mysql, load_postgres, mysql_quote, quote, read_schema
from sqlchorus.tools.engines.opening import database_url
from sqlchorus.tools.engines.query_plan import plan_for_schema
from sqlchorus.tools.sql.errors import SqlError
from sqlchorus.tools.sql.transpile import Names, sqlite_names, transpile

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ROOT / "prompts"
DEMO = ROOT / "sqlchorus" / "data" / "demo.sqlite"
POOL = "fewshot_pool"
DIALECTS = {"postgres": "postgresql", "duckdb": "duckdb", "mysql": "mysql"}
"""Each dialect carried into (sqlglot's name) and its engine's name."""
PREFIX = "sqlchorus_ex_"
"""The scratch databases' names start so (one per example database, on each server)."""
EMPTY = "The query ran but returned no rows (an empty result)."
"""The fixer's words for an empty result (``nodes.fix_candidates.result_text``)."""


class NotCarried(Exception):
    """An example that cannot be carried into an engine's SQL; the message says why."""


# -- the shipped examples and their databases ----------------------------------------------------


def shipped() -> dict[str, list[dict[str, Any]]]:
    """Every shipped example with SQL, by prompt (the pool as ``fewshot_pool``, each example with
    its schema)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(PROMPTS.glob("*_examples.json")):
        examples = json.loads(path.read_text(encoding="utf-8"))
        if any(key in ex for ex in examples for key in ("sql", "answer")):
            out[path.name[: -len("_examples.json")]] = examples
    pool = json.loads((PROMPTS / f"{POOL}.json").read_text(encoding="utf-8"))
    out[POOL] = [{**ex, "schema": pool["schemas"][ex["db_id"]]} for ex in pool["examples"]]
    return out


@dataclass(frozen=True)
class Source:
    """An example's database: ``kind`` demo (the bundled file), compact (Spider's compact schema,
    JSON text) or ddl (``CREATE TABLE`` text); ``name`` the copy's name on every engine."""

    kind: str
    name: str
    payload: str = ""


def source_of(example: dict[str, Any]) -> Source:
    schema = example.get("schema")
    if isinstance(schema, dict):
        if schema.get("name") == "demo":
            return Source("demo", f"{PREFIX}demo")
        text = json.dumps(schema, sort_keys=True)
        return Source("compact", f"{PREFIX}{_slug(schema.get('name') or 'db')}_{_digest(text)}", text)
    if isinstance(schema, str) and schema.lstrip().upper().startswith("CREATE"):
        return Source("ddl", f"{PREFIX}ddl_{_digest(schema)}", schema)
    # LIST's M-Schema text names the demo database (【DB_ID】 demo); the direct generator's
    # examples have no schema: both are over the demo database.
    return Source("demo", f"{PREFIX}demo")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_]", "_", name.lower())[:24]


def _compact_ddl(schema: dict[str, Any]) -> str:
    statements = []
    for table in schema["tables"]:
        parts = [f"{quote(c[0])} {c[1] if len(c) > 1 else ''}".rstrip() for c in table["columns"]]
        if table.get("primary_key"):
            parts.append(f"PRIMARY KEY ({', '.join(quote(c) for c in table['primary_key'])})")
        for column, ref_table, ref_column in table.get("foreign_keys") or []:
            parts.append(f"FOREIGN KEY ({quote(column)}) REFERENCES {quote(ref_table)} ({quote(ref_column)})")
        statements.append(f"CREATE TABLE {quote(table['name'])} ({', '.join(parts)});")
    return "\n".join(statements)


def sqlite_copy(source: Source, folder: Path) -> Path:
    """The example's database as a SQLite file named for its copies (made once per folder)."""
    path = folder / f"{source.name}.sqlite"
    if path.exists():
        return path
    if source.kind == "demo":
        path.write_bytes(DEMO.read_bytes())
        return path
    ddl = _compact_ddl(json.loads(source.payload)) if source.kind == "compact" else source.payload
    conn = sqlite3.connect(path)
    try:
        conn.executescript(ddl)
        conn.commit()
    finally:
        conn.close()
    return path


def plan_ddl(example: dict[str, Any], copy: Path) -> str:
    """The ``CREATE`` statements the query-plan example's plan is made over (its own schema text)."""
    schema = example.get("schema")
    if isinstance(schema, str):
        return schema
    conn = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    try:
        return ";\n".join(r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL"))
    finally:
        conn.close()


# -- carrying text -------------------------------------------------------------------------------


def _reads_the_same(original: str, carried: str, dialect: str) -> bool:
    """Whether ``original`` reads, in ``dialect``, exactly as ``carried`` does: then it is kept
    as written."""
    try:
        return (sqlglot.parse_one(original, read=dialect).sql(dialect=dialect)
                == sqlglot.parse_one(carried, read=dialect).sql(dialect=dialect))
    except sqlglot.errors.SqlglotError:
        return False


_PLACEHOLDER = re.compile(r"<[^<>]+>")


@dataclass
class Carrier:
    """Carries one example's text into ``dialect``'s SQL, with its database's ``names``."""

    dialect: str
    names: Names
    renamed: dict[str, str] = field(default_factory=dict)
    """SQLite function names whose calls were carried under another name (``STRFTIME`` ->
    ``TO_CHAR``), so that a bare mention in prose follows."""

    def sql(self, text: str, *, pseudo: bool = False) -> str:
        """A query or expression; ``pseudo``: pseudo-SQL, whose ``<...>`` placeholders are kept.

        Raises:
            NotCarried: it does not parse as SQLite's.
        """
        holders: dict[str, str] = {}

        def hold(m: re.Match[str]) -> str:
            key = f"sqlchorus_placeholder_{len(holders)}"
            holders[key] = m.group(0)
            return key

        held = _PLACEHOLDER.sub(hold, text) if pseudo else text
        try:
            carried = transpile(held, DIALECTS[self.dialect], self.names, idiomatic=True)
        except (sqlglot.errors.SqlglotError, ValueError) as e:
            raise NotCarried(f"its SQL does not parse as SQLite's ({text[:60]!r}: {str(e).splitlines()[0]})") from None
        self._note_renames(held)
        if _reads_the_same(held, carried, self.dialect):
            return text
        for key, value in holders.items():
            carried = re.sub(rf"([`\"]?){key}\1", lambda _m, v=value: v, carried)
        return carried

    def _note_renames(self, source: str) -> None:
        """Each function of ``source`` that the engine's dialect writes under another name."""
        for node in sqlglot.parse_one(source, read="sqlite").find_all(exp.Func):
            old, new = _CALL.match(node.sql(dialect="sqlite")), _CALL.match(node.sql(dialect=self.dialect))
            if old and new and old.group(1).upper() != new.group(1).upper():
                self.renamed[old.group(1).upper()] = new.group(1)

    def prose(self, text: str) -> str:
        """Prose: each function call in it carried as SQL; a bare mention of a renamed function
        follows its calls."""
        out, i = [], 0
        for start, end in _calls(text):
            span = text[start:end]
            try:
                tree = sqlglot.parse_one(span, read="sqlite")
            except sqlglot.errors.SqlglotError:
                continue
            if not isinstance(tree, exp.Func) or isinstance(tree, exp.Anonymous):
                continue
            out.append(text[i:start])
            out.append(self.sql(span))
            i = end
        out.append(text[i:])
        carried = "".join(out)
        for old, new in self.renamed.items():
            carried = re.sub(rf"\b{re.escape(old)}\b(?!\s*\()", new, carried, flags=re.IGNORECASE)
        return carried

    def evidence(self, text: str) -> str:
        """A hint: what each phrase ``refers to`` carried when it is SQL, the rest kept."""
        parts = []
        for part in text.split(";"):
            m = re.match(r"(?s)(.*?\brefers to\s+)(.+?)(\s*)$", part)
            if m:
                try:
                    sqlglot.parse_one(m.group(2), read="sqlite")
                except sqlglot.errors.SqlglotError:
                    parts.append(self.prose(part))
                    continue
                parts.append(m.group(1) + self.sql(m.group(2)) + m.group(3))
            else:
                parts.append(self.prose(part))
        return ";".join(parts)

    def answer(self, text: str) -> tuple[str, list[str]]:
        """Reasoning that ends in SQL (the divide-and-conquer generator's, the fixer's): its SQL
        lines carried, its prose as prose; and the complete queries in it, to run."""
        lines = text.split("\n")
        queries: list[str] = []
        out = []
        final_next = False
        for line in lines:
            if final_next and line.strip():
                out.append(self.sql(line))
                queries.append(out[-1])
                final_next = False
                continue
            m = re.match(r"^(\s*\*\s*\*\*(?:Pseudo SQL|SQL):\*\*\s*)(.+)$", line)
            f = re.match(r"^(\s*Final Answer:\s*)(.+)$", line)
            if m:
                carried = self.sql(m.group(2), pseudo="Pseudo" in m.group(1))
                out.append(m.group(1) + carried)
                if "Pseudo" not in m.group(1) and _is_query(carried):
                    queries.append(carried)
            elif f:
                out.append(f.group(1) + self.sql(f.group(2)))
                queries.append(out[-1][len(f.group(1)):])
            else:
                out.append(self.prose(line))
                if line.strip().startswith("**Final Optimized SQL Query:**"):
                    final_next = True
        return "\n".join(out), queries


def _is_query(text: str) -> bool:
    return bool(re.match(r"\s*(select|with)\b", text, re.IGNORECASE))


_CALL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def _calls(text: str) -> Iterator[tuple[int, int]]:
    """The spans of outermost ``name(...)`` calls in ``text`` (brackets balanced)."""
    i = 0
    while True:
        m = _CALL.search(text, i)
        if not m:
            return
        depth, j = 0, m.end() - 1
        while j < len(text):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1
        if depth != 0:
            return
        yield m.start(), j + 1
        i = j + 1


# -- carrying an example -------------------------------------------------------------------------


@dataclass
class Carried:
    """One example in an engine's SQL: what differs from the shipped one, the queries to run on its
    copy, and (the fixer's) the failed query to run for the engine's own result."""

    changes: dict[str, Any]
    queries: list[str]
    failed: str | None = None


def carry(prompt: str, example: dict[str, Any], dialect: str, names: Names, copy: Path) -> Carried:
    """``example`` of ``prompt`` in ``dialect``'s SQL, not yet run.

    Raises:
        NotCarried: why it cannot be.
    """
    c = Carrier(dialect, names)
    new: dict[str, Any] = {}
    queries: list[str] = []
    failed = None
    if "sql" in example:
        if prompt == "fix_candidates":  # the failed query is carried as written, to fail there too
            failed = new["sql"] = c.sql(example["sql"])
        else:
            new["sql"] = c.sql(example["sql"])
            queries.append(new["sql"])
    if "sub_sql" in example:
        new["sub_sql"] = [c.sql(s) for s in example["sub_sql"]]
        queries += new["sub_sql"]
    if "steps" in example:
        new["steps"] = [{**step, "sql": c.sql(step["sql"])} for step in example["steps"]]
        queries += [step["sql"] for step in new["steps"]]
    if example.get("evidence"):
        new["evidence"] = c.evidence(example["evidence"])
    if "answer" in example:
        new["answer"], more = c.answer(example["answer"])
        queries += more
    if "plan" in example:
        written = new["sql"]
        try:
            new["plan"] = plan_for_schema(plan_ddl(example, copy), example["sql"], written=written, dialect=dialect)
        except (SqlError, sqlglot.errors.SqlglotError) as e:
            raise NotCarried(f"its plan cannot be made ({e})") from None
    only = _SQLITE_ONLY[dialect]
    for text in _texts(new):
        left = [name for name in only if re.search(rf"\b{name}\b", text, re.IGNORECASE)]
        if left:
            raise NotCarried(f"its text still names SQLite's {', '.join(left)}")
    changes = {"question": example["question"]}
    changes.update({k: v for k, v in new.items() if v != example.get(k)})
    return Carried(changes, queries, failed)


_SQLITE_ONLY = {"postgres": ("STRFTIME", "JULIANDAY"), "mysql": ("STRFTIME", "JULIANDAY"), "duckdb": ("JULIANDAY",)}
"""SQLite's date functions that the engine does not have (DuckDB has a ``strftime`` of its own, with
the arguments the other way round, which carrying writes): left in an example's text, they would
teach SQLite's SQL."""


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v)


# -- the engines' copies -------------------------------------------------------------------------


class Copies:
    """Each example database loaded into one engine, opened under its guard, dropped at the end."""

    def __init__(self, dialect: str, folder: Path, postgres: str | None = None, mysql: str | None = None):
        self.dialect, self.folder, self.postgres, self.mysql = dialect, folder, postgres, mysql
        self.open: dict[str, Any] = {}

    def database(self, source: Source, copy: Path) -> Any:
        if source.name in self.open:
            return self.open[source.name]
        from sqlchorus.tools.engines.opening import open_database

        schema = read_schema(copy)
        if self.dialect == "duckdb":
            load_duckdb(schema, self.folder / "duckdb", replace=True)
            name: str = str(self.folder / "duckdb" / f"{source.name}.duckdb")
        elif self.dialect == "postgres":
            load_postgres(schema, self.postgres, replace=True)
            name = database_url(self.postgres, source.name)
        else:
            load_mysql(schema, self.mysql, replace=True)
            name = database_url(self.mysql, source.name)
        db = self.open[source.name] = open_database(name, workers=1, prestart=False, allow_writable_role=True)
        return db

    def close(self) -> None:
        for db in self.open.values():
            db.close()
        if self.dialect == "postgres" and self.open:
            import psycopg
            from psycopg import sql

            with psycopg.connect(self.postgres, autocommit=True) as admin:
                for name in self.open:
                    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        if self.dialect == "mysql" and self.open:
            from load_spider_engines import _mysql_connect

            conn = _mysql_connect(self.mysql)
            try:
                with conn.cursor() as cur:
                    for name in self.open:
                        cur.execute(f"DROP DATABASE IF EXISTS {mysql_quote(name)}")
            finally:
                conn.close()


@contextmanager
def copies(dialect: str, folder: Path, postgres: str | None, mysql: str | None) -> Iterator[Copies]:
    made = Copies(dialect, folder, postgres, mysql)
    try:
        yield made
    finally:
        made.close()


def build(dialect: str, *, postgres: str | None = None, mysql: str | None = None,
          run: bool = True, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The content of ``examples_<dialect>.json``. With ``run`` off, nothing runs on an engine (no
    server needed): the text carried is the same, the fixer's results are left as they are and no
    example is left out for failing on the engine, which the file's other ``not_carried`` reasons
    then are not checked against (the up-to-date test of the text)."""
    if dialect == "postgres" and run and not postgres:
        raise SystemExit("carrying into PostgreSQL's SQL needs --postgres URL")
    if dialect == "mysql" and run and not mysql:
        raise SystemExit("carrying into MySQL's SQL needs --mysql URL")
    examples: dict[str, list[dict[str, Any] | None]] = {}
    not_carried: list[dict[str, Any]] = []
    by_prompt: dict[str, list[int]] = {}
    with tempfile.TemporaryDirectory(prefix="sqlchorus-examples-") as scratch:
        folder = Path(scratch)
        names_of: dict[str, Names] = {}
        with copies(dialect, folder, postgres, mysql) as engine:
            for prompt, items in shipped().items():
                examples[prompt] = []
                for i, example in enumerate(items):
                    source = source_of(example)
                    copy = sqlite_copy(source, folder)
                    if source.name not in names_of:
                        names_of[source.name] = sqlite_names(copy)
                    try:
                        carried = carry(prompt, example, dialect, names_of[source.name], copy)
                        if dialect == "mysql":
                            _grouped_as_mysql_8(carried, table_columns(copy))
                        if run:
                            _run_on(engine.database(source, copy), carried, example)
                    except NotCarried as e:
                        examples[prompt].append(None)
                        not_carried.append({"prompt": prompt, "index": i, "question": example["question"],
                                            "reason": str(e)})
                        continue
                    examples[prompt].append(carried.changes)
                kept = sum(x is not None for x in examples[prompt])
                by_prompt[prompt] = [kept, len(items)]
                if progress:
                    progress(f"{dialect:<8} {prompt:<32} {kept}/{len(items)} carried")
    total = sum(n for _, n in by_prompt.values())
    kept = sum(k for k, _ in by_prompt.values())
    return {"dialect": dialect,
            "counts": {"examples": total, "carried": kept, "share": round(kept / total, 4) if total else None,
                       "by_prompt": by_prompt},
            "not_carried": not_carried, "examples": examples}


def table_columns(copy: Path) -> dict[str, tuple[set[str], set[str]]]:
    """Each table's columns and primary key columns (lower-cased) in the SQLite copy."""
    conn = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        out = {}
        for t in tables:
            info = conn.execute(f"PRAGMA table_info({quote(t)})").fetchall()
            out[t.lower()] = ({r[1].lower() for r in info}, {r[1].lower() for r in info if r[5]})
        return out
    finally:
        conn.close()


def ungrouped(sql: str, dialect: str, tables: dict[str, tuple[set[str], set[str]]]) -> str | None:
    """A column MySQL's ONLY_FULL_GROUP_BY (MySQL 8's default SQL mode; MariaDB's default is
    without it) refuses, or None: in the SELECT list, HAVING or ORDER BY of a grouped query,
    outside any aggregate, neither grouped nor functionally dependent on what is (every column of
    a table whose primary key is grouped, or equal to a grouped column by the query's ON and
    WHERE conditions), as MySQL 8 decides."""
    tree = sqlglot.parse_one(sql, read=dialect)
    for select in tree.find_all(exp.Select):
        group = select.args.get("group")
        if group is None:
            continue
        sources = {t.alias_or_name.lower(): t.name.lower() for t in select.find_all(exp.Table)
                   if t.find_ancestor(exp.Select) is select}

        def resolve(column: exp.Column) -> tuple[str, str] | None:
            if column.table:
                table = sources.get(column.table.lower())
                return (table, column.name.lower()) if table else None
            owners = [t for t in set(sources.values()) if column.name.lower() in tables.get(t, (set(), set()))[0]]
            return (owners[0], column.name.lower()) if len(owners) == 1 else None

        grouped = {resolve(c) for g in group.expressions for c in ([g] if isinstance(g, exp.Column) else [])}
        equal = [(resolve(eq.this), resolve(eq.expression)) for eq in select.find_all(exp.EQ)
                 if isinstance(eq.this, exp.Column) and isinstance(eq.expression, exp.Column)
                 and eq.find_ancestor(exp.Select) is select and not eq.find_ancestor(exp.Or)]
        changed = True
        while changed:
            changed = False
            for a, b in equal:
                for x, y in ((a, b), (b, a)):
                    if x in grouped and y is not None and y not in grouped:
                        grouped.add(y)
                        changed = True
        covered = {t for t, (_, pk) in tables.items() if pk and all((t, c) in grouped for c in pk)}
        aliases = {e.alias.lower() for e in select.expressions if isinstance(e, exp.Alias)}
        parts = [*select.expressions, select.args.get("having"), select.args.get("order")]
        for part in (p for p in parts if p is not None):
            for column in part.find_all(exp.Column):
                if column.find_ancestor(exp.AggFunc) or column.find_ancestor(exp.Select) is not select:
                    continue
                if not column.table and column.name.lower() in aliases:
                    continue
                where = resolve(column)
                if where is None or where in grouped or where[0] in covered:
                    continue
                return column.sql(dialect=dialect)
    return None


def _grouped_as_mysql_8(carried: Carried, tables: dict[str, tuple[set[str], set[str]]]) -> None:
    """MariaDB, which the build may run on, lets a column beside GROUP BY through that MySQL 8
    refuses: such an example is not carried, so that MySQL's examples run on both.

    Raises:
        NotCarried: a query has such a column.
    """
    for sql in carried.queries:
        bare = ungrouped(sql, "mysql", tables)
        if bare:
            raise NotCarried(f"MySQL's ONLY_FULL_GROUP_BY (MySQL 8's default) refuses {bare} beside GROUP BY "
                             f"in {sql[:80]!r}")


def _run_on(db: Any, carried: Carried, example: dict[str, Any]) -> None:
    """Run the carried queries on the engine's copy; the fixer's failed query gives its result.

    Raises:
        NotCarried: a query fails there, or the fixer's failed query does not fail alike.
    """
    for sql in carried.queries:
        try:
            db.execute(sql)
        except SqlError as e:
            raise NotCarried(f"{db.engine} refuses {sql[:80]!r}: {e.message}") from None
    if carried.failed is None:
        return
    try:
        rows = db.execute(carried.failed).rows
    except SqlError as e:
        if example["result"] == EMPTY:
            raise NotCarried(f"its query fails on {db.engine} ({e.message}) where SQLite's was empty") from None
        result = f"Error: {e.message}"
    else:
        if example["result"] != EMPTY or rows:
            raise NotCarried(f"its failed query runs on {db.engine} ({len(rows)} rows)")
        result = EMPTY
    if result != example["result"]:
        carried.changes["result"] = result


def write(content: dict[str, Any], path: Path) -> None:
    """The file, one example per line so that diffs stay readable."""
    lines = ["{", f'"dialect": {json.dumps(content["dialect"])},',
             f'"counts": {json.dumps(content["counts"])},', '"not_carried": [']
    lines.append(",\n".join(json.dumps(x, ensure_ascii=False) for x in content["not_carried"]))
    lines.append('],\n"examples": {')
    prompts = []
    for prompt, items in content["examples"].items():
        body = ",\n".join(json.dumps(x, ensure_ascii=False) for x in items)
        prompts.append(f"{json.dumps(prompt)}: [\n{body}\n]")
    lines.append(",\n".join(prompts))
    lines.append("}\n}\n")
    path.write_text("\n".join(lines), encoding="utf-8")


def target(dialect: str) -> Path:
    return PROMPTS / f"examples_{dialect}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", metavar="URL", help="PostgreSQL server (a role that can CREATE DATABASE)")
    parser.add_argument("--mysql", metavar="URL", help="MySQL or MariaDB server (a user that can CREATE DATABASE)")
    parser.add_argument("--only", action="append", choices=sorted(DIALECTS), help="only this dialect (repeatable)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for dialect in args.only or sorted(DIALECTS):
        content = build(dialect, postgres=args.postgres, mysql=args.mysql,
                        progress=lambda line: print(line, file=sys.stderr, flush=True))
        path = target(dialect)
        if args.check:
            if not path.exists() or json.loads(path.read_text(encoding="utf-8")) != content:
                stale.append(path.name)
        else:
            write(content, path)
        print(json.dumps({"dialect": dialect, **{k: v for k, v in content["counts"].items() if k != "by_prompt"}}))
    if stale:
        print(f"out of date: {', '.join(stale)}; run scripts/build_dialect_examples.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
