"""Large schemas within the prompt budget: prompt tokens per call and per question, and the recall
of the schema narrowing.

Two schemas:

* ``bird_union``: the eleven BIRD dev schemas merged into one SQLite database (75 tables, 798
  columns), with their real description files, empty (the BIRD databases are not shipped here).
* ``synthetic_1000``: 1,000 tables of 10 columns in 25 subject areas, each table joined by a
  foreign key to another of its area, with questions generated from its names.

Each preset answers questions of each schema with a scripted model that answers every role
instantly with the gold SQL (so every node runs as it would with a good model), and every prompt
actually sent is counted with the budget's own counter (the stated approximation, as for any
model without a known tokenizer) and with tiktoken's ``o200k_base`` (GPT-4o's).

On the BIRD union, the same presets also run with the budget off (``unbudgeted``), as the
baseline of what the calls sent before narrowing.

The narrowing's recall: for every BIRD dev question whose gold SQL resolves against the union
schema (and every synthetic question), the share of the gold SQL's columns (join keys included)
that the narrowed full schema view keeps, under the ``balanced`` preset's settings (its
per-question budget, ``max_question_tokens``, is what narrows a schema that fits one prompt), as
``link_schema`` shows it to the linking model: in its details or in its names-only tier
(``gold_column_recall``; ``gold_column_recall_detailed`` counts the details alone). The union
database has no rows, so no value is retrieved there: the values' share is measured by the tests
(``tests/test_narrowing_evidence.py``), not here.

The ablation (``ablation``): the same recall with each source of evidence left out in turn (the
question's words, the hint's, retrieved values, readable names and descriptions, foreign keys,
linked columns, the names-only tier), with the view's mean tokens, so each source's recall per
token shows. The questions that still lose a gold column are counted in ``lost``, and listed with
the column and the evidence it lacked in ``--details FILE`` (JSON).

Prints ONE JSON line; its keys include ``budget``, ``question_budget``, ``max_call_tokens`` (over
every preset and schema, by the budget's counter), ``balanced_tokens_per_question`` (BIRD union,
the largest question, in ``o200k_base`` tokens when tiktoken is installed; ``_approx`` by the
budget's counter), ``gold_column_recall``, ``questions_with_every_gold_column`` and
``over_budget_calls``. Progress goes to stderr.

    python benchmarks/large_schema.py [--questions 20] [--recall-limit N] [--preset P ...]
        [--no-ablation] [--details FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlchorus
from sqlchorus.config.presets import BALANCED_QUESTION_TOKENS
from sqlchorus.config.settings import Settings
from sqlchorus.core.budget import NAMES, PROMPT_RESERVE, schema_budget, schema_view
from sqlchorus.core.dependencies import DatabaseResources, Dependencies
from sqlchorus.testing import ScriptedChatModel, oracle_model
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.examples.fewshot import sql_links
from sqlchorus.tools.schema.introspect import introspect, schema_only_ddl
from sqlchorus.tools.schema.narrow import EVIDENCE, named_in, spelled_out
from sqlchorus.tools.schema.rank import words_of
from sqlchorus.tools.models.tokens import APPROXIMATE, tiktoken_counter

PRESETS = ("fast", "balanced", "full", "tiny")


def data_dir() -> Path:
    default = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    return Path(os.environ.get("SQLCHORUS_DATA", default))


# -- the schemas -------------------------------------------------------------------------------


def bird_union(folder: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The merged BIRD dev database (with a ``database_description`` folder) and its questions."""
    bird = data_dir() / "bird"
    target = folder / "bird_union"
    descriptions = target / "database_description"
    descriptions.mkdir(parents=True, exist_ok=True)
    path = target / "bird_union.sqlite"
    conn = sqlite3.connect(path)
    with conn:
        for entry in json.loads((bird / "dev_tables.json").read_text(encoding="utf-8")):
            for statement in schema_only_ddl(entry):
                conn.execute(statement)
            for csv in (bird / "dev_databases" / entry["db_id"] / "database_description").glob("*.csv"):
                shutil.copy(csv, descriptions / csv.name)
    conn.close()
    questions = [
        {"question": ex["question"], "evidence": ex.get("evidence") or "", "sql": ex["SQL"]}
        for ex in json.loads((bird / "dev.json").read_text(encoding="utf-8"))
    ]
    return path, questions


AREAS = (
    "sales", "hr", "finance", "logistics", "marketing", "support", "billing", "inventory", "legal",
    "research", "clinic", "school", "library", "fleet", "energy", "retail", "travel", "media",
    "sports", "farm", "bank", "insurance", "housing", "museum", "transit",
)
NOUNS = (
    "customer", "order", "invoice", "product", "supplier", "employee", "contract", "shipment",
    "payment", "account", "campaign", "ticket", "asset", "vehicle", "project", "meeting", "visit",
    "member", "event", "device", "report", "review", "claim", "policy", "route", "station",
    "booking", "license", "course", "sample", "batch", "warehouse", "region", "branch", "team",
    "budget", "vendor", "lease", "permit", "audit",
)
ATTRIBUTES = (
    "amount", "status", "created_date", "city", "rating", "quantity", "weight", "priority",
    "category", "score", "duration", "price", "discount", "level", "capacity", "balance", "age",
    "distance", "color", "language",
)


def synthetic(folder: Path, questions: int, seed: int = 7) -> tuple[Path, list[dict[str, Any]]]:
    """A 1,000-table database (25 areas x 40 tables, 10 columns each) and generated questions."""
    rng = random.Random(seed)
    path = folder / "synthetic_1000.sqlite"
    tables: list[tuple[str, str, str, list[str], str | None]] = []
    attributes_of: dict[str, list[str]] = {}
    conn = sqlite3.connect(path)
    with conn:
        for area in AREAS:
            names = [f"{area}_{noun}" for noun in NOUNS]
            for i, (noun, name) in enumerate(zip(NOUNS, names)):
                attributes = rng.sample(ATTRIBUTES, 8)
                parent = names[rng.randrange(i)] if i else None
                columns = ["id INTEGER PRIMARY KEY", *(f"{a} {'TEXT' if a in ('status', 'city', 'category', 'color', 'language') else 'REAL'}" for a in attributes)]
                if parent:
                    columns.append(f"{parent}_id INTEGER REFERENCES {parent}(id)")
                conn.execute(f"CREATE TABLE {name} ({', '.join(columns)})")
                tables.append((area, noun, name, attributes, parent))
                attributes_of[name] = attributes
    conn.close()
    asked = []
    for area, noun, name, attributes, parent in rng.sample(tables, questions):
        a = attributes[0]
        if parent and rng.random() < 0.5:
            b = attributes_of[parent][0]
            pnoun = parent.split("_", 1)[1]
            asked.append({
                "question": f"For each {area} {noun}, what is its {a.replace('_', ' ')} and the {pnoun}'s {b.replace('_', ' ')}?",
                "evidence": "",
                "sql": f"SELECT T1.{a}, T2.{b} FROM {name} AS T1 JOIN {parent} AS T2 ON T1.{parent}_id = T2.id",
            })
        else:
            asked.append({
                "question": f"How many {area} {noun} records have a {a.replace('_', ' ')} above 10?",
                "evidence": "",
                "sql": f"SELECT COUNT(*) FROM {name} WHERE {a} > 10",
            })
    return path, asked


# -- prompt tokens per preset --------------------------------------------------------------------


class CountingModel(ScriptedChatModel):
    """A scripted model that records every prompt's size, by both counters."""

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        texts = [str(m.content) for m in messages]
        CALLS.append({
            "approx": APPROXIMATE.count_messages(texts),
            "o200k": O200K.count_messages(texts) if O200K else None,
        })
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


CALLS: list[dict[str, Any]] = []
O200K = tiktoken_counter("gpt-4o")


UNBUDGETED = {"max_prompt_tokens": 10_000_000, "max_schema_tokens": 10_000_000}
"""Settings that turn the budget off, for the baseline measured in the same run."""


def measure(preset: str, db: Path, asked: list[dict[str, Any]], model: ScriptedChatModel, values_dir: Path,
            **overrides: Any) -> dict[str, Any]:
    settings = Settings(model=model, trace_dir=None, cache=False, value_cache_dir=str(values_dir),
                        preset=preset, **overrides)
    per_question, per_question_o200k, per_call, per_call_o200k, calls, refused = [], [], [], [], [], 0
    answered = narrowed = 0
    started = time.perf_counter()
    with sqlchorus.Session(settings) as session:
        for ex in asked:
            CALLS.clear()
            result = session.ask(ex["question"], db=db, evidence=ex["evidence"])
            answered += result.ok
            narrowed += any(e.get("kind") == "narrowed" for e in result.errors)
            refused += sum("over its budget" in e.get("message", "") for e in result.errors)
            calls.append(len(CALLS))
            per_question.append(sum(c["approx"] for c in CALLS))
            per_call.extend(c["approx"] for c in CALLS)
            if O200K:
                per_question_o200k.append(sum(c["o200k"] for c in CALLS))
                per_call_o200k.extend(c["o200k"] for c in CALLS)
    out = {
        "questions": len(asked),
        "answered": answered,
        "narrowed": narrowed,
        "refused_calls": refused,
        "calls_mean": round(statistics.fmean(calls), 2),
        "max_call_tokens": max(per_call, default=0),
        "tokens_per_question_median": statistics.median(per_question),
        "tokens_per_question_mean": round(statistics.fmean(per_question), 1),
        "tokens_per_question_max": max(per_question),
        "seconds_per_question": round((time.perf_counter() - started) / len(asked), 3),
    }
    if O200K:
        out["max_call_tokens_o200k"] = max(per_call_o200k, default=0)
        out["tokens_per_question_max_o200k"] = max(per_question_o200k)
    return out


# -- narrowing recall --------------------------------------------------------------------------


RECALL_PRESET = "balanced"
"""The preset whose settings the recall is measured at: the one with a per-question budget."""


def recall(db: Path, asked: list[dict[str, Any]], evidence: tuple[str, ...] | None = None,
           losses: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Gold columns and tables kept by the narrowed full view, at the recall preset's settings,
    with ``evidence`` only (all of it by default); each question that loses a column is added to
    ``losses``."""
    guarded = GuardedDatabase(db)
    schema = introspect(guarded)
    model = ScriptedChatModel(["-"], name="scripted")
    settings = Settings(model=model, trace_dir=None, preset=RECALL_PRESET)
    context = Dependencies(settings=settings, models={"generation": model}).context(
        DatabaseResources(db=guarded, schema=schema))
    whole = sum(len(t.columns) for t in schema.tables)
    kept = kept_detailed = total = tables_kept = tables_total = complete = measured = 0
    shown_columns: list[int] = []
    view_tokens: list[int] = []
    for ex in asked:
        gold = sql_links(ex["sql"], schema)
        if not gold:
            continue
        measured += 1
        context.memo.clear()
        state = {"question": ex["question"], "evidence": ex["evidence"]}
        view = schema_view(context, state, evidence=evidence)  # narrows, and records what it kept
        view_tokens.append(APPROXIMATE.count(view))
        narrowing = context.memo.get("last_narrowing")
        detailed = ({(t.name, c.name) for t in narrowing.schema.tables for c in t.columns} if narrowing
                    else {(t.name, c.name) for t in schema.tables for c in t.columns})
        shown = detailed | (narrowing.listed if narrowing else set())
        shown_columns.append(len(shown))
        pairs = [(t, c) for t, cs in gold.items() for c in cs]
        hit = sum(p in shown for p in pairs)
        kept, total = kept + hit, total + len(pairs)
        kept_detailed += sum(p in detailed for p in pairs)
        tables_kept += sum(any(t == s for s, _ in shown) for t in gold)
        tables_total += len(gold)
        complete += hit == len(pairs)
        if losses is not None and hit < len(pairs):
            losses.append({"question": ex["question"], "evidence": ex["evidence"], "sql": ex["sql"],
                           "lost": [_why(schema, ex, t, c) for t, c in pairs if (t, c) not in shown]})
    budget = schema_budget(context, None)
    guarded.close()
    return {
        "questions": measured,
        "view_budget": budget,
        "gold_column_recall": round(kept / total, 4) if total else None,
        "gold_column_recall_detailed": round(kept_detailed / total, 4) if total else None,
        "gold_table_recall": round(tables_kept / tables_total, 4) if tables_total else None,
        "questions_with_every_gold_column": round(complete / measured, 4) if measured else None,
        "columns_shown_median": statistics.median(shown_columns) if shown_columns else whole,
        "columns_total": whole,
        "view_tokens_mean": round(statistics.fmean(view_tokens)) if view_tokens else 0,
    }


def _why(schema, ex: dict[str, Any], table: str, column: str) -> dict[str, Any]:
    """A lost gold column and the evidence it had: its whole name or a word of it, or a word of
    its description, in the question or hint; a word of its table's name; a foreign key."""
    said = f"{ex['question']} {ex['evidence']}"
    words = words_of(said)
    t = schema.table(table)
    c = t.column(column) if t else None
    if c is None:
        return {"column": f"{table}.{column}"}
    about = words_of(f"{c.full_name or ''} {c.description or ''} {c.value_description or ''}")
    return {
        "column": f"{table}.{column}",
        "named_whole": named_in(spelled_out(said), c, True),
        "name_words": sorted(words & words_of(c.name)),
        "description_words": sorted(words & about),
        "table_words": sorted(words & words_of(table)),
        "joins": any(fk.column == column for fk in t.foreign_keys),
        "missing": "nothing in the question or hint names the column or its table"
        if not (words & (words_of(c.name) | about | words_of(table))) else "ranked below the view's room",
    }


def ablation(db: Path, asked: list[dict[str, Any]]) -> dict[str, Any]:
    """The recall with each source of evidence left out in turn."""
    every = (*EVIDENCE, NAMES)
    out = {}
    for source in every:
        result = recall(db, asked, evidence=tuple(e for e in every if e != source))
        out[f"without_{source}"] = {k: result[k] for k in (
            "gold_column_recall", "gold_column_recall_detailed", "questions_with_every_gold_column",
            "view_tokens_mean")}
        print(f"ablation without {source}: {json.dumps(out[f'without_{source}'])}", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=20, help="questions per schema and preset")
    parser.add_argument("--recall-limit", type=int, default=None, help="BIRD dev questions for the recall (default all)")
    parser.add_argument("--preset", action="append", choices=PRESETS)
    parser.add_argument("--no-ablation", action="store_true", help="skip the recall with each evidence left out")
    parser.add_argument("--details", type=Path, default=None,
                        help="write the questions that lose a gold column, and why, to this JSON file")
    args = parser.parse_args(argv)
    presets = args.preset or list(PRESETS)
    folder = Path(tempfile.mkdtemp(prefix="sqlchorus-large-"))
    try:
        bird_db, bird_questions = bird_union(folder)
        synth_db, synth_questions = synthetic(folder, args.questions)
        rng = random.Random(11)
        schemas = {
            "bird_union": (bird_db, rng.sample(bird_questions, args.questions)),
            "synthetic_1000": (synth_db, synth_questions),
        }
        defaults = Settings(model="scripted")
        report: dict[str, Any] = {
            "budget": defaults.max_prompt_tokens,
            "schema_budget": min(defaults.max_schema_tokens,
                                 max(defaults.max_prompt_tokens - PROMPT_RESERVE, defaults.max_prompt_tokens // 4)),
            "question_budget": Settings(model="scripted", preset="balanced").max_question_tokens,
            "tokenizer": APPROXIMATE.name,
            "schemas": {},
        }
        for name, (db, asked) in schemas.items():
            schema = introspect(GuardedDatabase(db))
            entry: dict[str, Any] = {
                "tables": len(schema.tables),
                "columns": sum(len(t.columns) for t in schema.tables),
                "presets": {},
            }
            gold = {ex["question"]: ex["sql"] for ex in asked}
            model = CountingModel(oracle_model(gold.get).responses, name="scripted-oracle")
            for preset in presets:
                entry["presets"][preset] = measure(preset, db, asked, model, folder / "values")
                print(f"{name} {preset}: {json.dumps(entry['presets'][preset])}", file=sys.stderr, flush=True)
            if name == "bird_union":
                # The same questions with the budget off: what every call sent before narrowing.
                entry["unbudgeted"] = {
                    preset: measure(preset, db, asked, model, folder / "values", **UNBUDGETED)
                    for preset in presets if preset != "tiny"
                }
            report["schemas"][name] = entry
        every = [p for s in report["schemas"].values() for p in s["presets"].values()]
        report["max_call_tokens"] = max(p["max_call_tokens"] for p in every)
        if O200K:
            report["max_call_tokens_o200k"] = max(p["max_call_tokens_o200k"] for p in every)
        report["over_budget_calls"] = sum(p["refused_calls"] for p in every)
        balanced = report["schemas"]["bird_union"]["presets"].get("balanced")
        # Per question, in the tokens a provider bills (GPT-4o's tokenizer); the budget's own
        # approximation over-counts on purpose, and is reported beside it.
        key = "tokens_per_question_max_o200k" if O200K else "tokens_per_question_max"
        report["balanced_tokens_per_question"] = balanced[key] if balanced else None
        report["balanced_tokens_per_question_approx"] = balanced["tokens_per_question_max"] if balanced else None
        report["balanced_tokens_per_question_counter"] = "tiktoken o200k_base" if O200K else APPROXIMATE.name
        limit = args.recall_limit
        recalled = {"bird_union": (bird_db, bird_questions[:limit] if limit else bird_questions),
                    "synthetic_1000": (synth_db, synth_questions)}
        losses: dict[str, list[dict[str, Any]]] = {name: [] for name in recalled}
        report["recall"] = {name: recall(db, asked, losses=losses[name]) for name, (db, asked) in recalled.items()}
        for name in recalled:
            report["recall"][name]["lost"] = len(losses[name])
        if not args.no_ablation:
            report["ablation"] = {name: ablation(db, asked) for name, (db, asked) in recalled.items()}
        if args.details:
            args.details.write_text(json.dumps(losses, indent=1), encoding="utf-8")
        report["gold_column_recall"] = report["recall"]["bird_union"]["gold_column_recall"]
        report["questions_with_every_gold_column"] = report["recall"]["bird_union"]["questions_with_every_gold_column"]
        both = report["recall"].values()
        report["goals"] = {
            "no_call_over_budget": report["max_call_tokens"] <= report["budget"] and report["over_budget_calls"] == 0,
            "balanced_under_32000": balanced is not None and report["balanced_tokens_per_question"] < BALANCED_QUESTION_TOKENS,
            "recall_at_least_0.99": all((r["gold_column_recall"] or 0) >= 0.99 for r in both),
            "every_gold_column_at_least_0.97": all((r["questions_with_every_gold_column"] or 0) >= 0.97 for r in both),
        }
        print(json.dumps(report), flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
