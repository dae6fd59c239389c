"""Prompt templates, one file per prompt, and few-shot examples as data files.

A template names its inputs as ``{name}``; :func:`render` fills exactly those, so literal braces
in examples (JSON, SQL) need no escaping. Few-shot examples live in ``<prompt>_examples.json``
and are replaceable without touching code.

The templates and examples are written in SQLite's SQL. Every other engine's examples are the
same ones carried into its SQL (``examples_<dialect>.json``, built by
``scripts/build_dialect_examples.py``: transpiled, and run on a copy of each example's database
on that engine), each file holding, per prompt, what differs from SQLite's example, and ``null``
for an example that could not be carried, which that engine's prompts leave out (the file's
``not_carried`` says why).
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

_VARIABLE = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


class Prompt(str):
    """A rendered prompt: its text, and in ``name`` the template it was rendered from, which a
    model call records in its run metadata so that the call can be told apart without reading
    its wording."""

    name: str

    def __new__(cls, text: str, name: str) -> Prompt:
        prompt = super().__new__(cls, text)
        prompt.name = name
        return prompt


@cache
def load(name: str) -> str:
    """The text of template ``name`` (without ``.txt``)."""
    return resources.files(__package__).joinpath(f"{name}.txt").read_text(encoding="utf-8")


@cache
def examples(name: str, dialect: str = "sqlite") -> list[dict[str, Any]]:
    """The few-shot examples shipped for prompt ``name``, in ``dialect``'s SQL (sqlglot's name of
    an engine's dialect): SQLite's as written, another engine's as carried into its SQL (those that
    could not be carried left out). A prompt whose examples hold no SQL has the same everywhere."""
    path = resources.files(__package__).joinpath(f"{name}_examples.json")
    shipped = json.loads(path.read_text(encoding="utf-8"))
    if dialect == "sqlite" or dialect not in DIALECT_NAMES:
        return shipped
    return carried(name, shipped, dialect)


@cache
def dialect_examples(dialect: str) -> dict[str, Any]:
    """The file of examples carried into ``dialect``'s SQL: ``examples`` (per prompt, each shipped
    example's fields that differ there, or None where it could not be carried; the pool as
    ``fewshot_pool``), ``not_carried`` (each with its prompt, question and why) and ``counts``."""
    path = resources.files(__package__).joinpath(f"examples_{dialect}.json")
    return json.loads(path.read_text(encoding="utf-8"))


def carried(name: str, shipped: list[dict[str, Any]], dialect: str) -> list[dict[str, Any]]:
    """``shipped``, the examples of prompt ``name`` (or the pool's), in ``dialect``'s SQL: each
    with what :func:`dialect_examples` changes in it, those it could not carry left out; as they are
    when it holds nothing for ``name`` (examples without SQL).

    Raises:
        ValueError: the carried file does not match the shipped one (it was built from other
            examples: ``scripts/build_dialect_examples.py`` makes it again).
    """
    changes_of = dialect_examples(dialect)["examples"].get(name)
    if changes_of is None:
        return shipped
    if len(changes_of) != len(shipped):
        raise ValueError(f"examples_{dialect}.json has {len(changes_of)} examples of {name}, the shipped file "
                         f"{len(shipped)}: rebuild it with scripts/build_dialect_examples.py.")
    out = []
    for example, changes in zip(shipped, changes_of):
        if changes is None:
            continue
        if changes.get("question", example.get("question")) != example.get("question"):
            raise ValueError(f"examples_{dialect}.json does not match {name}_examples.json "
                             f"({changes.get('question')!r}): rebuild it with scripts/build_dialect_examples.py.")
        out.append({**example, **changes})
    return out


def variables(name: str) -> set[str]:
    """The input names template ``name`` expects."""
    return set(_VARIABLE.findall(load(name)))


def render(name: str, **values: Any) -> Prompt:
    """Fill template ``name``; the result is a :class:`Prompt` that knows its template's name.

    Raises:
        KeyError: a variable of the template was not given, or a given value is not used.
    """
    expected = variables(name)
    missing = expected - set(values)
    extra = set(values) - expected
    if missing or extra:
        raise KeyError(
            f"Prompt {name!r} expects {sorted(expected)}; missing {sorted(missing)}, "
            f"unexpected {sorted(extra)}."
        )
    return Prompt(_VARIABLE.sub(lambda m: str(values[m.group(1)]), load(name)), name)


DIALECT_NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL", "duckdb": "DuckDB", "mysql": "MySQL"}
"""How a prompt names each engine's SQL, by sqlglot's dialect name."""

DUCKDB_LAMBDAS = (
    "write lambdas with the lambda keyword, as in list_filter(l, lambda x: x > 30), never with an arrow "
    "(x -> x > 30), which DuckDB refuses"
)
"""How DuckDB's prompts ask for lambdas: DuckDB 1.3 brought ``lambda x: ...`` and deprecated the
arrow form, and DuckDB 2.0 refuses the arrow form (a binder error), though sqlglot reads both."""

MYSQL_QUOTES = (
    "quote a name that needs it (a keyword, a space) with backticks, as in `order`, never with double "
    "quotes, which MySQL reads as a string"
)
"""How MySQL's prompts ask for quoted names: without ``ANSI_QUOTES`` (the guard takes it out of the
session's SQL mode) ``"order"`` is a string, so a name quoted the standard way compares a constant."""

_DIALECT_ADVICE = {
    "postgres": [
        ("use only SQLite functions; use STRFTIME() for dates (for example STRFTIME('%Y', date) for the year)",
         "use only PostgreSQL functions; use EXTRACT() for parts of dates (for example EXTRACT(YEAR FROM date) "
         "for the year); compare text case-sensitively, or with ILIKE"),
        (" Be aware that SQLite has limited built-in date/time functions compared to other sql dialects.", ""),
    ],
    "duckdb": [
        ("use only SQLite functions; use STRFTIME() for dates (for example STRFTIME('%Y', date) for the year)",
         f"use only DuckDB functions; use EXTRACT() or strftime(date, '%Y') for parts of dates; {DUCKDB_LAMBDAS}"),
        (" Be aware that SQLite has limited built-in date/time functions compared to other sql dialects.",
         f" For lists, {DUCKDB_LAMBDAS}."),
    ],
    "mysql": [
        ("use only SQLite functions; use STRFTIME() for dates (for example STRFTIME('%Y', date) for the year)",
         f"use only MySQL functions; use YEAR(), MONTH() or DATE_FORMAT(date, '%Y') for parts of dates; {MYSQL_QUOTES}"),
        (" Be aware that SQLite has limited built-in date/time functions compared to other sql dialects.",
         f" Names: {MYSQL_QUOTES}."),
        ("CAST to REAL before dividing", "CAST to DOUBLE before dividing"),
    ],
}
"""Advice the templates give for SQLite's SQL, and what each other engine's prompts say instead
(DuckDB's add how to write a lambda, MySQL's how to quote a name)."""


def for_dialect(text: str, dialect: str) -> str:
    """A prompt's text for a database of ``dialect`` (sqlglot's name): the templates are written
    for SQLite; another engine's prompts name it instead, with its own advice on dates (and, for
    DuckDB, on lambdas; for MySQL, on quoting names)."""
    if dialect == "sqlite" or dialect not in DIALECT_NAMES:
        return text
    for old, new in _DIALECT_ADVICE.get(dialect, []):
        text = text.replace(old, new)
    return text.replace("SQLite", DIALECT_NAMES[dialect])


def names() -> list[str]:
    """All shipped template names."""
    return sorted(
        p.name[: -len(".txt")]
        for p in resources.files(__package__).iterdir()
        if p.name.endswith(".txt")
    )
