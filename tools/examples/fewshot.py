"""Few-shot examples: the shipped files, files a user puts in their place, and train-set loaders.

Every prompt's examples live in ``prompts/<prompt>_examples.json``. A user replaces them without
touching code by pointing ``Settings.examples_dir`` at a folder holding a file of the same name;
prompts without such a file keep the shipped examples.

The shipped examples are SQLite's SQL; a database of another engine gets them carried into its
SQL (``dialect``, sqlglot's name of the engine's: see :func:`sqlchorus.prompts.examples`), those
that could not be carried left out. A user's file is shown as it is written, whatever the engine.

The generic example format, which the N-rep prompts use and :func:`load_train_file` writes::

    {"db_id": "college_2", "question": "...", "evidence": "", "sql": "SELECT ...",
     "schema": {"name": "college_2", "tables": [{"name": "course",
                "columns": [["course_id", "TEXT"], ...], "primary_key": ["course_id"],
                "foreign_keys": [["dept_name", "department", "dept_name"]]}, ...]},
     "links": {"course": ["title", "course_id"]}}

The schema is kept as structure rather than text so that an example can be rendered in the same
representation and at the same filter level as the question it accompanies. ``links`` (the
tables and columns the SQL uses) is derived from the SQL when absent.

Examples must never come from the questions a system is evaluated on: :func:`load_train_file`
takes the evaluation questions to leave out, and the test suite checks the shipped files against
the Spider and BIRD dev sets.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from sqlglot import exp
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import build_scope

from sqlchorus import prompts
from sqlchorus.tools.sql import text as sql_text
from sqlchorus.tools.errors import SqlchorusError
from sqlchorus.tools.engines.catalog import Column, DatabaseSchema, ForeignKey, Table
from sqlchorus.tools.schema.introspect import flatten_indices
from sqlchorus.tools.values.scoring import EmbedderError, load_local_embedder


class ExamplesFileError(SqlchorusError, ValueError):
    """An examples file that is missing, not JSON, or not a list of examples."""

    kind = "examples_file"


def examples(name: str, settings: Any = None, dialect: str = "sqlite") -> list[dict[str, Any]]:
    """The few-shot examples of prompt ``name``: the user's file if there is one, else the shipped
    one in ``dialect``'s SQL.

    Args:
        name: the prompt name (the file is ``<name>_examples.json``).
        settings: a ``Settings`` whose ``examples_dir`` may hold a replacement file.
        dialect: sqlglot's name of the database's dialect (``Database.dialect``).

    Raises:
        ExamplesFileError: the user's file exists but is not a usable examples file.
    """
    folder = getattr(settings, "examples_dir", None)
    if folder:
        path = Path(folder) / f"{name}_examples.json"
        if path.exists():
            return load_examples_file(path)
    return prompts.examples(name, dialect)


def load_examples_file(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read an examples file: a JSON list of objects that each have a ``question``.

    Raises:
        ExamplesFileError: the file is not JSON or not such a list.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ExamplesFileError(f"Cannot read examples file {path}: {e}") from e
    if not isinstance(data, list) or not all(isinstance(x, dict) and x.get("question") for x in data):
        raise ExamplesFileError(f"Examples file {path} must be a JSON list of objects with a 'question'.")
    return data


def write_examples(items: Iterable[Mapping[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write examples as a JSON list, one example per line, so that diffs stay readable."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    body = ",\n".join(json.dumps(dict(x), ensure_ascii=False) for x in items)
    target.write_text(f"[\n{body}\n]\n", encoding="utf-8")
    return target


# -- schemas ---------------------------------------------------------------------------------


def compact_schema(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The compact schema of one Spider/BIRD ``tables.json`` entry (original names)."""
    tables = list(entry["table_names_original"])
    types = list(entry.get("column_types") or [])
    columns: dict[int, list[list[str]]] = {i: [] for i in range(len(tables))}
    owner: dict[int, tuple[int, str]] = {}
    for idx, (t_idx, name) in enumerate(entry["column_names_original"]):
        if t_idx < 0:
            continue
        kind = (types[idx] if idx < len(types) else "") or ""
        columns[t_idx].append([name, "" if kind.lower() == "others" else kind.upper()])
        owner[idx] = (t_idx, name)
    primary: dict[int, list[str]] = {i: [] for i in range(len(tables))}
    for item in flatten_indices(entry.get("primary_keys") or []):
        if item in owner:
            primary[owner[item][0]].append(owner[item][1])
    foreign: dict[int, list[list[str]]] = {i: [] for i in range(len(tables))}
    for pair in entry.get("foreign_keys") or []:
        if len(pair) == 2 and pair[0] in owner and pair[1] in owner:
            (t_from, c_from), (t_to, c_to) = owner[pair[0]], owner[pair[1]]
            foreign[t_from].append([c_from, tables[t_to], c_to])
    return {
        "name": entry["db_id"],
        "tables": [
            {"name": t, "columns": columns[i], "primary_key": primary[i], "foreign_keys": foreign[i]}
            for i, t in enumerate(tables)
        ],
    }


def schema_of(compact: Mapping[str, Any]) -> DatabaseSchema:
    """A :class:`DatabaseSchema` from a compact schema, ready for ``render_view``."""
    tables = []
    for t in compact["tables"]:
        pk = set(t.get("primary_key") or [])
        tables.append(
            Table(
                name=t["name"],
                columns=[Column(name=c[0], type=c[1] if len(c) > 1 else "", primary_key=c[0] in pk) for c in t["columns"]],
                foreign_keys=[ForeignKey(column=fk[0], ref_table=fk[1], ref_column=fk[2]) for fk in t.get("foreign_keys") or []],
            )
        )
    return DatabaseSchema(name=compact.get("name", ""), tables=tables)


def sql_links(sql: str, schema: DatabaseSchema) -> dict[str, list[str]]:
    """The tables and columns ``sql`` uses, in the schema's spelling and order.

    Column references are resolved through aliases and sub-queries; a table used only for
    ``COUNT(*)`` is kept with no columns. SQL that does not parse gives no links.
    """
    mapping: dict[str, object] = {
        t.name.lower(): {c.name.lower(): "TEXT" for c in t.columns} for t in schema.tables
    }
    try:
        tree = sql_text.parse_one(sql)
        root = build_scope(qualify(tree, schema=mapping, dialect="sqlite", validate_qualify_columns=False))
    except Exception:  # analysis only: a query sqlglot cannot qualify simply has no links
        return {}
    used: dict[str, set[str]] = {}
    if root is not None:
        for scope in root.traverse():
            for source in scope.sources.values():
                if isinstance(source, exp.Table):
                    used.setdefault(source.name.lower(), set())
            for column in scope.columns:
                owner = scope.sources.get(column.table)
                if isinstance(owner, exp.Table):
                    used.setdefault(owner.name.lower(), set()).add(column.name.lower())
    out: dict[str, list[str]] = {}
    for table in schema.tables:
        if table.name.lower() in used:
            names = used[table.name.lower()]
            out[table.name] = [c.name for c in table.columns if c.name.lower() in names]
    return out


def links_of(example: Mapping[str, Any]) -> dict[str, list[str]]:
    """An example's links: its own ``links``, else derived from its SQL and schema."""
    if example.get("links"):
        return {t: list(cols) for t, cols in example["links"].items()}
    if not example.get("schema") or not example.get("sql"):
        return {}
    return sql_links(example["sql"], schema_of(example["schema"]))


def join_pairs(sql: str, schema: DatabaseSchema) -> list[tuple[str, str, str, str]]:
    """The column equalities of ``sql``'s JOIN ... ON conditions as ``(table, column, table,
    column)``, aliases resolved to the schema's table names, in the order written: DIN-SQL's
    linking answer lists them as the foreign keys the query needs."""
    names = {t.name.lower(): t.name for t in schema.tables}
    try:
        tree = sql_text.parse_one(sql)
    except Exception:  # analysis only
        return []
    out: list[tuple[str, str, str, str]] = []
    for select in tree.find_all(exp.Select):
        aliases = {}
        for table in select.find_all(exp.Table):
            if table.parent_select is select and table.name.lower() in names:
                aliases[table.alias_or_name.lower()] = names[table.name.lower()]
        only = next(iter(aliases.values())) if len(aliases) == 1 else None
        for join in select.args.get("joins") or []:
            for eq in (join.args.get("on") or exp.true()).find_all(exp.EQ):
                left, right = eq.this, eq.expression
                if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
                    continue
                a = aliases.get(left.table.lower(), only) if left.table else only
                b = aliases.get(right.table.lower(), only) if right.table else only
                if a and b:
                    pair = (a, _column_name(schema, a, left.name), b, _column_name(schema, b, right.name))
                    if pair not in out:
                        out.append(pair)
    return out


def _column_name(schema: DatabaseSchema, table: str, column: str) -> str:
    for t in schema.tables:
        if t.name == table:
            return next((c.name for c in t.columns if c.name.lower() == column.lower()), column)
    return column


def sql_values(sql: str) -> list[str]:
    """The literal values ``sql`` compares with, as written (``'Texas'``, ``10``), in order and
    once each: DIN-SQL's linking answer lists the question's cell values. LIMIT counts are left
    out, being no value of a cell."""
    try:
        tree = sql_text.parse_one(sql)
    except Exception:  # analysis only
        return []
    out: list[str] = []
    for node in tree.walk():
        if isinstance(node, exp.Literal) and not node.find_ancestor(exp.Limit):
            if isinstance(node.parent, (exp.Mul, exp.Div)) or isinstance(node.parent, exp.If):
                continue  # arithmetic and CASE branches, not values of the data
            text = node.sql(dialect="sqlite")
            if text not in out:
                out.append(text)
    return out


# -- train-style files -----------------------------------------------------------------------


def _normalise(question: str) -> str:
    return " ".join(question.lower().split())


def load_train_file(
    questions_path: str | os.PathLike[str],
    tables_path: str | os.PathLike[str],
    *,
    exclude_questions: Iterable[str] = (),
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Examples in the generic format from a Spider or BIRD train-style file.

    Spider files give ``query`` and no evidence; BIRD files give ``SQL`` and ``evidence``.
    Questions whose database is not in ``tables_path`` are skipped.

    Args:
        questions_path: ``train_spider.json``, BIRD ``train.json``, or any file of that shape.
        tables_path: the matching ``tables.json`` / ``train_tables.json``.
        exclude_questions: questions to leave out (the evaluation set), compared without case
            and extra spaces.
        limit: keep at most this many examples.
    """
    rows = json.loads(Path(questions_path).read_text(encoding="utf-8"))
    entries = {e["db_id"]: e for e in json.loads(Path(tables_path).read_text(encoding="utf-8"))}
    excluded = {_normalise(q) for q in exclude_questions}
    schemas: dict[str, dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for row in rows:
        sql = (row.get("query") or row.get("SQL") or "").strip().rstrip(";").strip()
        db_id = row.get("db_id")
        if not sql or db_id not in entries or _normalise(row["question"]) in excluded:
            continue
        if db_id not in schemas:
            schemas[db_id] = compact_schema(entries[db_id])
        example = {
            "db_id": db_id,
            "question": row["question"].strip(),
            "evidence": (row.get("evidence") or "").strip(),
            "sql": sql,
            "schema": schemas[db_id],
        }
        example["links"] = links_of(example)
        out.append(example)
        if limit is not None and len(out) >= limit:
            break
    return out


# -- the pool and retrieval by similarity ----------------------------------------------------

POOL = "fewshot_pool"
"""The pool file's name (``prompts/fewshot_pool.json``), which ``Settings.examples_dir`` may
replace like any examples file."""

Embedder = Callable[[list[str]], Any]
"""Texts to vectors (one row per text), e.g. a sentence-transformers model's ``encode``."""

TEXT_WEIGHT = 0.75
"""Share of the score that is the similarity of the question texts; the rest is the SQL skeleton
the question's wording asks for against the example's SQL."""

HINT_BONUS = 0.1
"""Added for an example that has a hint when the question has one (and for one without a hint
when the question has none): BIRD's examples carry evidence and Spider's do not, so an example
of the question's own kind reads more like it."""


def pool(settings: Any = None, dialect: str = "sqlite") -> list[dict[str, Any]]:
    """The retrieval pool: the user's ``fewshot_pool.json`` in ``Settings.examples_dir`` if there
    is one, else the shipped pool in ``dialect``'s SQL, as examples in the generic format (each
    with its schema).

    Raises:
        ExamplesFileError: the user's file exists but is not a usable pool.
    """
    folder = getattr(settings, "examples_dir", None)
    path = Path(folder) / f"{POOL}.json" if folder else None
    if path is not None and path.exists():
        return load_pool_file(path)
    return _shipped_pool(dialect)


def user_examples(name: str, settings: Any = None) -> list[dict[str, Any]] | None:
    """The user's ``<name>_examples.json`` in ``Settings.examples_dir``, or None when there is none."""
    folder = getattr(settings, "examples_dir", None)
    path = Path(folder) / f"{name}_examples.json" if folder else None
    return load_examples_file(path) if path is not None and path.exists() else None


def pool_for(name: str, settings: Any = None, dialect: str = "sqlite") -> list[dict[str, Any]]:
    """What prompt ``name`` retrieves from: the user's ``<name>_examples.json`` when
    ``examples_dir`` holds one (the way every prompt's examples are replaced), else :func:`pool`."""
    own = user_examples(name, settings)
    return own if own is not None else pool(settings, dialect)


@cache
def _shipped_pool(dialect: str = "sqlite") -> list[dict[str, Any]]:
    data = json.loads(resources.files(prompts).joinpath(f"{POOL}.json").read_text(encoding="utf-8"))
    if dialect != "sqlite" and dialect in prompts.DIALECT_NAMES:
        data = {**data, "examples": prompts.carried(POOL, data["examples"], dialect)}
    return _pool_examples(data, POOL)


def load_pool_file(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a pool file: ``{"schemas": {db_id: schema}, "examples": [...]}`` (each schema once),
    or a plain examples file whose examples carry their own schemas.

    Raises:
        ExamplesFileError: the file is not JSON, or an example lacks its question, SQL or schema.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ExamplesFileError(f"Cannot read examples file {path}: {e}") from e
    return _pool_examples(data, path)


def _pool_examples(data: Any, origin: Any) -> list[dict[str, Any]]:
    if isinstance(data, list):
        data = {"schemas": {}, "examples": data}
    rows = data.get("examples") if isinstance(data, dict) else None
    schemas = data.get("schemas") or {} if isinstance(data, dict) else {}
    if not isinstance(rows, list):
        raise ExamplesFileError(f"Pool file {origin} must hold a list of examples.")
    out = []
    for row in rows:
        example = dict(row) if isinstance(row, dict) else {}
        if not example.get("schema") and example.get("db_id") in schemas:
            example["schema"] = schemas[example["db_id"]]
        if not (example.get("question") and example.get("sql") and example.get("schema")):
            raise ExamplesFileError(f"Every example of pool file {origin} needs a question, SQL and a schema: {row!r:.120}")
        example.setdefault("evidence", "")
        out.append(example)
    return out


_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an the of in on at to for by with and or is are was were be been do does did what which who whom "
    "whose how many much that this these those there their its it as from all each every give show list "
    "find return tell me please also than them they his her".split()
)
"""Words too common in questions to say what one is about; ``how many``, ``each`` and the like
still count, as cues of the SQL skeleton (:data:`_CUES`)."""


def _words(text: str) -> list[str]:
    out = []
    for word in _WORD.findall(text.lower()):
        if word in _STOP:
            continue
        # a crude singular, so that "students" meets "student" and "classes" meets "class"
        if len(word) > 4 and word.endswith("ies"):
            word = word[:-3] + "y"
        elif len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        out.append(word)
    return out


_CUES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (feature, re.compile(pattern, re.IGNORECASE))
    for feature, pattern in (
        ("count", r"\bhow many\b|\bnumber of\b|\bcount\b"),
        ("aggregate", r"\baverage\b|\bmean\b|\btotal\b|\bsum\b|\bmaximum\b|\bminimum\b|\b(?:avg|sum|max|min)\s*\("),
        ("group", r"\beach\b|\bper\b|\bevery\b|\bfor all\b"),
        ("superlative", r"\b(?:most|least|highest|lowest|largest|smallest|biggest|greatest|fewest|oldest|youngest|"
                        r"longest|shortest|cheapest|best|worst|top|first|last)\b|\w+est\b|\bmax\s*\(|\bmin\s*\("),
        ("order", r"\bsort|\border|\bdescending\b|\bascending\b|\balphabetic|\branked\b|\bfirst\b"),
        ("having", r"\b(?:more|fewer|less) than (?:\w+ )?(?:times|songs|students|players|members|\w+s)\b|\bat least (?:one|two|three|\d+)\b"),
        ("nested", r"\b(?:above|below|than|over|under) (?:the )?average\b|\bnot\b|\bnever\b|\bno\b|\bwithout\b"),
        ("except", r"\bbut not\b|\bnever\b|\bnot\b|\bwithout\b|\bno\b"),
        ("intersect", r"\bboth\b|\band also\b"),
        ("union", r"\beither\b|\bor\b"),
        ("join", r"\b(?:of|for|by|with|whose|who) (?:the|a|an|each|every)?\s*\w+"),
        ("arithmetic", r"\bpercent|\bratio\b|\bproportion\b|\bshare\b|\bdifference\b|\bdivide\b|\bsubtract\b|\brate\b|[*/]"),
        ("distinct", r"\bdistinct\b|\bdifferent\b|\bunique\b|\bonce\b"),
        ("like", r"\blike\b|\bcontain|\bstart(?:s|ing)? with\b|\bend(?:s|ing)? with\b"),
        ("date", r"\byear\b|\bmonth\b|\bdate\b|\bstrftime\b|\b(?:19|20)\d\d\b"),
    )
)
"""Phrases of a question (and its hint) that predict a part of its SQL's skeleton: the question
has no SQL yet, so its wording stands in for the skeleton an example's SQL shows."""


def question_features(question: str, evidence: str = "") -> frozenset[str]:
    """The skeleton features a question's wording (and its hint) suggests (:data:`_CUES`)."""
    text = f"{question} {evidence}"
    return frozenset(feature for feature, pattern in _CUES if pattern.search(text))


# Each kind of syntax node and the feature it stands for; the first that matches a node counts.
_SQL_NODE_FEATURES: tuple[tuple[Any, str], ...] = (
    (exp.Count, "count"), ((exp.Avg, exp.Sum, exp.Max, exp.Min), "aggregate"), (exp.Group, "group"),
    (exp.Having, "having"), (exp.Order, "order"), (exp.Join, "join"), (exp.Intersect, "intersect"),
    (exp.Union, "union"), (exp.Except, "except"), (exp.Distinct, "distinct"), (exp.Like, "like"),
    ((exp.Div, exp.Mul, exp.Sub, exp.Cast, exp.Case), "arithmetic"), ((exp.Not, exp.NEQ), "except"),
)


@cache
def sql_features(sql: str) -> frozenset[str]:
    """The skeleton of a query as features: the clauses, set operators, nesting, aggregates,
    joins, arithmetic and functions it uses (the same names as :func:`question_features`)."""
    try:
        tree = sql_text.parse_one(sql)
    except Exception:  # an example sqlglot cannot read still has its words to match on
        return frozenset()
    out: set[str] = set()
    for node in tree.walk():
        feature = next((name for kinds, name in _SQL_NODE_FEATURES if isinstance(node, kinds)), None)
        if feature:
            out.add(feature)
        elif isinstance(node, exp.Anonymous) and node.name.lower() == "strftime" or isinstance(node, exp.TimeToStr):
            out.add("date")
        if isinstance(node, exp.Select) and node.parent is not None and not isinstance(node.parent, exp.SetOperation):
            out.add("nested")
        if isinstance(node, exp.Limit) and "order" in out:
            out.add("superlative")
    if isinstance(tree, exp.Select) and tree.args.get("limit") is not None and tree.args.get("order") is not None:
        out.add("superlative")
    return frozenset(out)


def _set_cosine(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / math.sqrt(len(a) * len(b)) if a and b else 0.0


def _text(example: Mapping[str, Any]) -> str:
    return f"{example['question']} {example.get('evidence') or ''}".strip()


RANKINGS_KEPT = 256
"""Questions whose ranking a retriever keeps (then it starts again)."""


class Retriever:
    """Ranks a pool's examples by how similar each is to a question, most similar first.

    The score of an example is ``TEXT_WEIGHT`` times the similarity of the texts (question and
    hint) plus the rest times the cosine of the skeleton features the question's wording suggests
    and those the example's SQL has, plus :data:`HINT_BONUS` when the example's having a hint
    matches the question's. The texts' similarity is the cosine of their embeddings when an
    ``embed`` function is given (N-rep retrieves by embedding similarity), else the TF-IDF cosine
    of their words, with the pool as the corpus. Ties keep the example with a matching hint
    first, then the pool's order, so a question always gets the same examples.
    """

    def __init__(self, examples: Sequence[Mapping[str, Any]], embed: Embedder | None = None):
        self.examples = list(examples)
        self.embed = embed
        counts = [Counter(_words(_text(ex))) for ex in self.examples]
        df: Counter[str] = Counter()
        for c in counts:
            df.update(c.keys())
        n = len(self.examples)
        self._idf = {w: math.log((1 + n) / (1 + d)) + 1.0 for w, d in df.items()}
        self._vectors = [self._weigh(c) for c in counts]
        self._features = [sql_features(ex["sql"]) if ex.get("sql") else frozenset() for ex in self.examples]
        self._embedded: Any = None
        self._ranked: dict[tuple[str, str], list[int]] = {}

    def _weigh(self, counts: Counter[str]) -> dict[str, float]:
        vector = {w: (1 + math.log(k)) * self._idf.get(w, math.log(1 + len(self.examples)) + 1.0) for w, k in counts.items()}
        norm = math.sqrt(sum(v * v for v in vector.values())) or 1.0
        return {w: v / norm for w, v in vector.items()}

    def _text_scores(self, text: str) -> list[float]:
        if self.embed is not None:
            if self._embedded is None:
                self._embedded = [_unit(v) for v in self.embed([_text(ex) for ex in self.examples])]
            query = _unit(self.embed([text])[0])
            return [sum(a * b for a, b in zip(query, v)) for v in self._embedded]
        weights = self._weigh(Counter(_words(text)))
        return [sum(w * v.get(t, 0.0) for t, w in weights.items()) for v in self._vectors]

    def scores(self, question: str, evidence: str = "") -> list[float]:
        """Each example's score for the question, in pool order."""
        text = f"{question} {evidence or ''}".strip()
        wanted = question_features(question, evidence or "")
        has_hint = bool((evidence or "").strip())
        out = []
        for ex, similarity, features in zip(self.examples, self._text_scores(text), self._features):
            score = TEXT_WEIGHT * similarity + (1 - TEXT_WEIGHT) * _set_cosine(wanted, features)
            if bool((ex.get("evidence") or "").strip()) == has_hint:
                score += HINT_BONUS
            out.append(score)
        return out

    def top(self, question: str, k: int, evidence: str = "") -> list[dict[str, Any]]:
        """The ``k`` most similar examples, most similar first; the question itself (an example
        with the same wording) is never among them."""
        if k <= 0:
            return []
        # A question's prompts ask again and again (N-rep: every format and view of every
        # sample): its ranking is made once.
        ranked = self._ranked.get((question, evidence))
        if ranked is None:
            has_hint = bool((evidence or "").strip())
            asked = _normalise(question)
            ranked = [i for *_, i in sorted(
                (-round(score, 9), bool((ex.get("evidence") or "").strip()) != has_hint, i)
                for i, (ex, score) in enumerate(zip(self.examples, self.scores(question, evidence)))
                if _normalise(ex["question"]) != asked
            )]
            if len(self._ranked) >= RANKINGS_KEPT:
                self._ranked.clear()
            self._ranked[(question, evidence)] = ranked
        return [dict(self.examples[i]) for i in ranked[:k]]


def _unit(vector: Any) -> list[float]:
    values = [float(x) for x in vector]
    norm = math.sqrt(sum(x * x for x in values)) or 1.0
    return [x / norm for x in values]


def most_similar(
    pool: Sequence[Mapping[str, Any]], question: str, k: int, *, evidence: str = "", embed: Embedder | None = None,
) -> list[dict[str, Any]]:
    """The ``k`` examples of ``pool`` most similar to the question (see :class:`Retriever`)."""
    return Retriever(pool, embed).top(question, k, evidence)


_RETRIEVERS: dict[tuple[Any, ...], Retriever] = {}


def retrieve(name: str, question: str, k: int, *, evidence: str = "", settings: Any = None,
             dialect: str = "sqlite") -> list[dict[str, Any]]:
    """The ``k`` examples of prompt ``name``'s pool (:func:`pool_for`, in ``dialect``'s SQL) most
    similar to the question: by the embeddings of ``Settings.value_embedder``'s local model when one
    is set and loads, otherwise lexically. The retriever of a pool is built once per process."""
    examples = pool_for(name, settings, dialect)
    model = getattr(settings, "value_embedder", None)
    key = (tuple(ex["question"] for ex in examples), tuple(ex["sql"] for ex in examples), model)
    retriever = _RETRIEVERS.get(key)
    if retriever is None:
        retriever = Retriever(examples, embedder(model))
        if len(_RETRIEVERS) > 16:  # a long-lived process that keeps swapping pool files
            _RETRIEVERS.clear()
        _RETRIEVERS[key] = retriever
    return retriever.top(question, k, evidence)


@cache
def embedder(model: str | None) -> Embedder | None:
    """The embedding function of the sentence-transformers model in folder ``model``, or None
    when none is named or it cannot be loaded (the package missing, no model there): few-shot
    retrieval then falls back to lexical similarity, where value retrieval reports the problem."""
    if not model:
        return None
    try:
        return load_local_embedder(model)
    except EmbedderError:
        return None
