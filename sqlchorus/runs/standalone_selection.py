"""Selection on its own: choose among candidate queries from any source, and export training pairs.

:func:`select` runs the graph's selection (clusters, confidence-aware vote, CHASE-SQL's pairwise
agent) on SQL that came from anywhere, so users can ensemble their own systems. Each candidate
runs through the guarded executor first; its result decides its cluster. :func:`select_file` does
it for a JSON Lines file, one question a line::

    {"db": "path.sqlite", "question": "...", "evidence": "...", "candidates": ["SELECT ...", ...]}

where ``db`` names a database of any engine (a SQLite or DuckDB file, a PostgreSQL URL).

:func:`export_pairs` writes the pairs CHASE-SQL trains its selection model on, from runs over a
labelled set: for each question with a correct and an incorrect result cluster, one example per
(correct, incorrect) pair of clusters, in the selection prompt the graph uses, in the chat
fine-tuning JSON Lines format (``{"messages": [user, assistant]}``). Which candidate is shown
first is drawn from a seeded generator, so the model cannot learn an order bias and the file is
reproducible. A model fine-tuned on it is used by naming it as the ``selection`` model.

Without a selection model, the choice is a vote over execution results (:func:`decide`), whose
rules are data (:mod:`sqlchorus.core.vote_rules`, one module each, applied in this order), each
of which can be turned off (``rules``) to measure what it buys:

* ``weights``: each candidate's vote weighs its system's agreement with the others, estimated
  from the candidates alone, without gold answers (:func:`agreement_weights`): over all the
  questions of a run, the mean share of the other systems whose result equals its own. N-rep
  reads the vote count as confidence; this weighs each vote by its generator's record. A single
  question has no record: every vote weighs 1.
* ``errors``: a candidate that fails votes for no answer (off: failed candidates form a cluster
  of their own, counted as a result with rows, which can win).
* ``agreed_empty``: empty results that hold at least 3/4 of the (weighted) votes of the
  candidates that ran are an answer like any other, which ``empty`` then leaves alone.
* ``empty``: an empty result votes only when no candidate has rows.
* ``agreed_degenerate``: a result of one row of zeros or NULLs that holds at least 4/5 of the
  (weighted) votes of the candidates that ran (one answer's votes: a 0 and a NULL do not add up)
  is an answer like any other, which ``degenerate`` then leaves alone.
* ``degenerate``: a result of one row of zeros or NULLs (a count or sum over nothing) votes only
  when no candidate has another result with rows.
* ``key_only``: a result made only of key values (whole numbers in primary or foreign key
  columns), to a question that asks for no id, code, number or key, votes only when no other
  candidate answers.
* ``shape``: only candidates with the column count most of the voters give (weighted, counted
  over every candidate that ran) can win, when any has it.
* ``column_order``: results with the same rows in another column order are one answer.

Ties go to the larger cluster, then the earlier candidate. The reason of a choice says what each
rule did; ``vote_rules`` in :func:`select`'s answer lists it rule by rule.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlchorus.config.settings import Settings
from sqlchorus.core.dependencies import DatabaseResources, Dependencies, open_with
from sqlchorus.core.llm import ModelAuthError
from sqlchorus.core.models import ModelConfigError
from sqlchorus.core.selection import PREVIEW_ROWS, choose, pair_schema, selection_prompt
from sqlchorus.core.vote_rules import BASE, NAMES
from sqlchorus.core.vote_rules import decide as _decide
from sqlchorus.core.vote_rules import evidence as result_evidence
from sqlchorus.core.vote_rules import weights as _weights
from sqlchorus.tools.engines.sqlite import Database, SqlError
from sqlchorus.tools.candidates.results import fingerprint, preview
from sqlchorus.tools.engines.catalog import DatabaseSchema
from sqlchorus.tools.schema.introspect import introspect

SELECT_NODE = "select"
RULES = frozenset(NAMES)
"""The rules of the vote without a model, all on by default (see the module's docstring)."""
BASE_RULES = BASE
"""The four rules the vote had first (``errors``, ``empty``, ``shape``, ``weights``)."""
MIN_HISTORY = _weights.MIN_HISTORY
"""Questions a run needs before per-system weights are estimated; with fewer, votes weigh 1."""
agreement_weights = _weights.estimate


def _open(db: str | os.PathLike[str] | Database, settings: Settings) -> tuple[Database, bool]:
    if isinstance(db, Database):
        return db, False
    return _open_path(db, settings), True


def check(db: Database, sqls: Sequence[str]) -> list[dict[str, Any]]:
    """Run each query through the guard once: ``{id, index, sql, status, error, error_kind,
    fingerprint, row_count, columns}``, and for a query that ran what the vote's rules read of
    its result (:func:`sqlchorus.core.vote_rules.evidence.describe`)."""
    checked = []
    for i, sql in enumerate(sqls):
        item: dict[str, Any] = {"id": f"c{i}", "index": i, "sql": (sql or "").strip(), "generator": "input"}
        try:
            result = db.execute(item["sql"])
        except SqlError as e:
            item.update(status="error", error=e.message, error_kind=e.kind, fingerprint=None, row_count=None,
                        columns=None)
        else:
            item.update(status="ok" if result.rows else "empty", error=None, error_kind=None,
                        fingerprint=fingerprint(result.rows), row_count=result.row_count,
                        columns=len(result.columns), **result_evidence.describe(result.columns, result.rows))
        checked.append(item)
    return checked


def key_columns(schema: DatabaseSchema | None) -> frozenset[str]:
    """The names (lower case) of the schema's key columns: primary keys, foreign keys and the
    columns foreign keys reference, which the ``key_only`` rule reads."""
    names: set[str] = set()
    for table in schema.tables if schema is not None else []:
        names.update(c.name.lower() for c in table.columns if c.primary_key)
        for fk in table.foreign_keys:
            names.update((fk.column.lower(), fk.ref_column.lower()))
    return frozenset(names)


def decide(
    checked: Sequence[Mapping[str, Any]],
    weights: Sequence[float] | None = None,
    rules: Iterable[str] = RULES,
    *,
    question: str = "",
    key_columns: Iterable[str] = (),
) -> dict[str, Any] | None:
    """The vote without a model over checked candidates (:func:`check`'s records, in order).

    Args:
        checked: the candidates, each with ``status``, ``fingerprint`` and ``columns`` (and
            what :func:`check` adds for the rules that read results).
        weights: one weight per candidate (its system's, :func:`agreement_weights`); None
            weighs every vote 1.
        rules: the rules in force, a subset of :data:`RULES`.
        question: the question, whose words ``key_only`` reads.
        key_columns: the schema's key columns (:func:`key_columns`), for ``key_only``.

    Returns:
        ``{"chosen", "members", "score", "total", "columns", "reason", "rules"}``: the index of
        the chosen candidate, the indices sharing its result, its cluster's weighted votes, all
        votes cast, and what each rule did; None when no candidate can be chosen.
    """
    return _decide(checked, weights, rules, question=question, key_columns=key_columns)


def selector(model: Any = None, settings: Settings | None = None) -> Dependencies:
    """What selection runs with: the selection model (``model``, else the settings' selection
    model) resolved as the graph resolves it (time budget, retries, rate limit), the response
    cache and the price table. Build it once for many questions.

    Raises:
        sqlchorus.core.models.ModelConfigError: the model cannot be used.
    """
    settings = settings or Settings(trace_dir=None)
    spec = model if model is not None else settings.model_for("selection")
    if spec is None:
        return Dependencies(settings=settings, models={})
    return Dependencies.build(settings.replace(models={**settings.models, "selection": spec}), roles=("selection",))


def select(
    db: str | os.PathLike[str] | Database,
    question: str,
    candidates: Sequence[str],
    evidence: str = "",
    model: Any = None,
    settings: Settings | None = None,
    *,
    schema: DatabaseSchema | None = None,
    dependencies: Dependencies | None = None,
    checked: Sequence[dict[str, Any]] | None = None,
    weights: Sequence[float] | None = None,
    rules: Iterable[str] = RULES,
) -> dict[str, Any]:
    """Choose one of ``candidates`` (SQL strings) as the answer to ``question`` over ``db``.

    Args:
        db: a database's name (a SQLite or DuckDB file, a PostgreSQL URL: see
            :mod:`sqlchorus.tools.engines.opening`) or an open :class:`~sqlchorus.tools.engines.sqlite.Database`.
        question, evidence: what the candidates answer.
        candidates: SQL queries, in a meaningful order (ties go to the earlier one).
        model: the selection model (a ``provider:model`` name or a ``BaseChatModel``); None uses
            ``settings``' selection model, and with none there either an unconfident vote
            falls back to the largest cluster and says so.
        settings: voting thresholds, pairwise bounds, schema format; defaults otherwise.
        schema: the database's introspected schema, to reuse across questions.
        dependencies: what :func:`selector` built, to reuse across questions (then ``model``
            and ``settings`` are its own).
        checked: what :func:`check` gave for ``candidates`` on this database, when the caller
            has it already; they are not run again.
        weights: without a selection model, one weight per candidate, its system's
            (:func:`agreement_weights` over a run); None weighs every vote 1.
        rules: without a selection model, the vote's rules in force (:data:`RULES`).

    Returns:
        ``{"question", "sql", "chosen", "cluster", "votes", "confidence", "method", "reason",
        "clusters", "pairwise", "scores", "model_calls", "weights", "vote_rules", "usage",
        "candidates"}``; ``chosen`` is the index of the chosen candidate (None when none ran),
        ``cluster`` the indices that share its result, ``vote_rules`` (without a selection
        model) what each rule of the vote did and why it is a rule.
    """
    deps = dependencies or selector(model, settings)
    settings = deps.settings
    database, owned = _open(db, settings)
    try:
        schema = schema or introspect(database, sample_values=settings.sample_values)
        checked = list(checked) if checked is not None else check(database, list(candidates))
        context = deps.context(DatabaseResources(db=database, schema=schema))
        try:
            outcome = choose(context, question=question, evidence=evidence, candidates=checked, node=SELECT_NODE)
        except ModelAuthError as e:
            raise ModelConfigError(str(e)) from e
    finally:
        if owned:
            database.close()
        if dependencies is None:
            deps.close()
    selection = outcome["selection"]
    if deps.models.get("selection") is None and selection["clusters"]:
        _vote_without_model(selection, checked, weights, rules, question, key_columns(schema))
    index = {c["id"]: c["index"] for c in checked}
    chosen = index.get(selection["chosen"]) if selection["chosen"] else None
    cluster = next((c for c in selection["clusters"] if selection["chosen"] in c["members"]), None)
    return {
        "question": question,
        "sql": checked[chosen]["sql"] if chosen is not None else None,
        "chosen": chosen,
        "cluster": [index[m] for m in cluster["members"]] if cluster else [],
        "votes": selection["votes"],
        "confidence": selection["confidence"],
        "method": selection["method"],
        "reason": selection["reason"],
        "clusters": [[index[m] for m in c["members"]] for c in selection["clusters"]],
        "pairwise": [
            {**v, "a": index[v["a"]], "b": index[v["b"]], "winner": index.get(v["winner"]) if v["winner"] else None}
            for v in selection["pairwise"]
        ],
        "scores": {str(index[k]): v for k, v in selection["scores"].items()},
        "model_calls": selection["model_calls"],
        "weights": selection.get("weights"),
        "vote_rules": selection.get("vote_rules"),
        "usage": outcome["usage"],
        "errors": outcome["errors"],
        "candidates": [
            {k: c[k] for k in ("index", "sql", "status", "error", "row_count")} for c in checked
        ],
    }


def _vote_without_model(selection: dict[str, Any], checked: Sequence[Mapping[str, Any]],
                        weights: Sequence[float] | None, rules: Iterable[str], question: str,
                        keys: frozenset[str]) -> None:
    """Put :func:`decide`'s choice in ``selection`` (the record :func:`choose` made)."""
    decision = decide(checked, weights, rules, question=question, key_columns=keys)
    if decision is None:
        selection.update(chosen=None, confidence=0.0, method="none", reason="no candidate can be chosen")
        return
    ids = [c["id"] for c in checked]
    chosen = ids[decision["chosen"]]
    members = [ids[k] for k in decision["members"]]
    clusters = selection["clusters"]
    position = next((n for n, c in enumerate(clusters) if chosen in c["members"]), None)
    if position is None:  # a cluster the graph's vote leaves out (failed queries, with ``errors`` off)
        clusters.append({"fingerprint": None, "members": members, "size": len(members), "status": "error",
                         "share": round(len(members) / max(len(checked), 1), 4)})
        position = len(clusters) - 1
    same = position == selection.get("chosen_cluster")
    method = selection["method"] if same else "fallback"
    selection.update(chosen=chosen, chosen_cluster=position, confidence=clusters[position]["share"], method=method,
                     reason=f"{selection['reason']}; {decision['reason']}" if same else
                     f"no selection model: {decision['reason']}")
    selection["weights"] = list(weights) if weights is not None else None
    selection["vote_rules"] = decision["rules"]


def line_database(raw: str, base: Path) -> str | Path:
    """The database a line names: a URL as it is, a relative file path looked up from the
    working directory, then beside the file."""
    if "://" in raw:  # postgresql://..., duckdb:///...: a URL is never a path beside the file
        return raw
    path = Path(raw).expanduser()
    if path.is_absolute() or path.exists():
        return path
    return base / path


def select_file(
    path: str | os.PathLike[str], model: Any = None, settings: Settings | None = None
) -> Iterator[dict[str, Any]]:
    """:func:`select` for each line of a JSON Lines file; yields one result per line.

    Without a selection model every line is run first, and each candidate position (one system
    per position, the same on every line) is weighed by :func:`agreement_weights` over all the
    lines with that many candidates; with fewer than :data:`MIN_HISTORY` such lines, votes
    weigh 1. A relative ``db`` is looked up from the working directory, then beside the file (a URL is
    taken as it is). A line that
    cannot be used (bad JSON, missing fields, a database that does not open) yields
    ``{"line": n, "error": ...}`` and the run goes on. The selection model is resolved once,
    before the first line, so an unusable one stops the run at once.

    Raises:
        sqlchorus.core.models.ModelConfigError: the model cannot be used.
    """
    deps = selector(model, settings)
    settings = deps.settings
    base = Path(path).resolve().parent
    opened = OpenDatabases(settings)
    try:
        yield from _select_lines(path, base, deps, opened)
    finally:
        opened.close()
        deps.close()


class OpenDatabases:
    """The databases a file's lines name, each opened (its worker processes started) and
    introspected once for the whole file."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.dbs: dict[str | Path, tuple[Database, DatabaseSchema]] = {}

    def get(self, db_path: str | Path) -> tuple[Database, DatabaseSchema]:
        if db_path not in self.dbs:
            db = _open_path(db_path, self.settings)
            try:
                self.dbs[db_path] = (db, introspect(db, sample_values=self.settings.sample_values))
            except BaseException:
                db.close()
                raise
        return self.dbs[db_path]

    def close(self) -> None:
        for db, _ in self.dbs.values():
            db.close()
        self.dbs.clear()


def read_selection_lines(path: str | os.PathLike[str], base: Path) -> Iterator[tuple[int, dict[str, Any] | None, Any]]:
    """Each usable line of a candidates file as ``(n, item, db_path)``; an unusable one as
    ``(n, None, why)``. Nothing is run."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                if not isinstance(item, dict):
                    raise ValueError("a line must be a JSON object")
                missing = [k for k in ("db", "question", "candidates") if k not in item]
                if missing:
                    raise ValueError(f"missing field(s) {', '.join(missing)}")
                if not isinstance(item["candidates"], list) or not all(isinstance(s, str) for s in item["candidates"]):
                    raise ValueError("candidates must be a list of SQL strings")
                db_path = line_database(str(item["db"]), base)
            except ValueError as e:
                yield n, None, str(e)
                continue
            yield n, item, db_path


def check_line(opened: OpenDatabases, db_path: str | Path, candidates: list[str]) -> Any:
    """Every candidate of a line run on its database (:func:`check`), or why the line cannot be
    used (a string)."""
    try:
        return check(opened.get(db_path)[0], candidates)
    except (ValueError, SqlError) as e:
        return getattr(e, "message", None) or str(e)


def _read_lines(path, base, opened, checks) -> Iterator[tuple[int, dict[str, Any] | None, Any]]:
    """Each usable line as ``(n, item, (db_path, checked))``; an unusable one as ``(n, None, error)``.
    With ``checks``, every candidate is run here and its record kept."""
    for n, item, db_path in read_selection_lines(path, base):
        if item is None:
            yield n, None, db_path
            continue
        checked = check_line(opened, db_path, item["candidates"]) if checks else None
        if isinstance(checked, str):
            yield n, None, checked
            continue
        yield n, item, (db_path, checked)


def _open_path(db_path: str | os.PathLike[str], settings: Settings) -> Database:
    """A database of any engine under its guard, with the settings' limits and statement workers."""
    return open_with(db_path, settings)


def _select_lines(path, base, deps, opened) -> Iterator[dict[str, Any]]:
    # Without a selection model the vote weighs each system (candidate position) by its agreement
    # with the others over the whole file: every line is run first, then chosen.
    no_model = deps.models.get("selection") is None
    lines = list(_read_lines(path, base, opened, checks=True)) if no_model else None
    weights: dict[int, list[float] | None] = {}
    if lines is not None:
        by_size: dict[int, list[list[dict[str, Any]]]] = {}
        for _, item, extra in lines:
            if item is not None:
                by_size.setdefault(len(extra[1]), []).append(extra[1])
        weights = {size: agreement_weights(runs) for size, runs in by_size.items()}
    for n, item, extra in lines if lines is not None else _read_lines(path, base, opened, checks=False):
        if item is None:
            yield {"line": n, "error": extra}
            continue
        db_path, checked = extra
        yield select_line(n, item, db_path, deps, opened, checked, weights.get(len(item["candidates"])))


def select_line(n: int, item: Mapping[str, Any], db_path: str | Path, deps: Dependencies,
                opened: OpenDatabases, checked: Any = None, weights: Sequence[float] | None = None) -> dict[str, Any]:
    """The result of line ``n`` of a candidates file (its choice, or why it has none).

    Raises:
        sqlchorus.core.models.ModelConfigError: the model is unusable (every line would say so).
    """
    try:
        db, schema = opened.get(db_path)
        result = select(db, item["question"], item["candidates"], item.get("evidence") or "",
                        schema=schema, dependencies=deps, checked=checked, weights=weights)
    except ModelConfigError:
        raise
    except (ValueError, SqlError) as e:
        return {"line": n, "error": getattr(e, "message", None) or str(e)}
    result.pop("usage", None)
    return {"line": n, "db": str(item["db"]), **result}


def export_pairs(
    records: Iterable[Mapping[str, Any]],
    path: str | os.PathLike[str],
    *,
    settings: Settings | None = None,
    max_pairs_per_question: int = 10,
    seed: int = 0,
) -> dict[str, int]:
    """Write CHASE-SQL selection training pairs from labelled runs.

    Args:
        records: one per question: ``{"db", "question", "evidence", "candidates": [{"sql",
            "correct"}]}`` (``correct`` a bool; candidates without it are left out).
        path: the JSON Lines file to write (replaced).
        settings: the schema format and executor limits, as the graph would use them.
        max_pairs_per_question: pairs written per question at most (pairs of the largest
            clusters first).
        seed: seed of the order in which each pair's two candidates are shown.

    Returns:
        ``{"questions", "pairs", "skipped"}``: questions read, pairs written, and questions
        without both a correct and an incorrect result (or whose database did not open).
    """
    settings = settings or Settings(trace_dir=None)
    rng = random.Random(seed)
    counts = {"questions": 0, "pairs": 0, "skipped": 0}
    schemas: dict[str, DatabaseSchema] = {}
    with open(path, "w", encoding="utf-8") as out:
        for record in records:
            counts["questions"] += 1
            labelled = [c for c in record.get("candidates") or [] if isinstance(c.get("correct"), bool)]
            try:
                db = _open_path(record["db"], settings)
            except (SqlError, KeyError):
                counts["skipped"] += 1
                continue
            with db:
                written = _write_pairs(db, record, labelled, settings, schemas, rng, out, max_pairs_per_question)
            counts["pairs"] += written
            counts["skipped"] += written == 0
    return counts


def _write_pairs(db, record, labelled, settings, schemas, rng, out, limit) -> int:
    checked = check(db, [c["sql"] for c in labelled])
    # A cluster is one execution result; its label is that of its first candidate (candidates
    # with equal results are equally correct under execution accuracy).
    clusters: dict[str, dict[str, Any]] = {}
    for item, source in zip(checked, labelled):
        if item["status"] == "error":
            key = f"error:{item['index']}"
        else:
            key = item["fingerprint"]
        clusters.setdefault(key, {"rep": item, "correct": bool(source["correct"]), "size": 0})["size"] += 1
    ranked = sorted(clusters.values(), key=lambda c: (-c["size"], c["rep"]["index"]))
    good = [c for c in ranked if c["correct"]]
    bad = [c for c in ranked if not c["correct"]]
    if not good or not bad:
        return 0
    key = str(db.path)
    if key not in schemas:
        schemas[key] = introspect(db, sample_values=settings.sample_values)
    context = Dependencies(settings=settings, models={}).context(DatabaseResources(db=db, schema=schemas[key]))
    written = 0
    for g in good:
        for b in bad:
            if written >= limit:
                return written
            first, second = (g, b) if rng.random() < 0.5 else (b, g)
            sql_a, sql_b = first["rep"]["sql"], second["rep"]["sql"]
            prompt = selection_prompt(
                pair_schema(context, sql_a, sql_b, record["question"], record.get("evidence") or ""),
                record["question"], record.get("evidence") or "",
                (sql_a, _result(db, first["rep"])), (sql_b, _result(db, second["rep"])),
            )
            label = "A" if first is g else "B"
            line = {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": label}]}
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
            written += 1
    return written


def _result(db: Database, item: Mapping[str, Any]) -> str:
    if item["status"] == "error":
        return f"Error: {item['error']}"
    try:
        result = db.execute(item["sql"], max_rows=PREVIEW_ROWS + 1)
    except SqlError as e:
        return f"Error: {e.message}"
    return preview(result.columns, result.rows, limit=PREVIEW_ROWS)
