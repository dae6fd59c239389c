"""Settings: every knob of a run, as explicit arguments with sane defaults.

:class:`Settings` is a pydantic-settings model, so a value is checked the same way, with the same
message, wherever it comes from: a Python argument, a command-line option, or an environment
variable ``SQLCHORUS_<FIELD>``. Each field carries its own help text, its constraints (a range,
a set of choices, a validator) and, where the command line offers it, the shape of its option
(flag name, metavar, a ``--no-...`` flag). The CLI builds its options from these
(:mod:`sqlchorus.interfaces.cli`), so a name, a default, a limit or a help text is written once,
here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal, NamedTuple, get_args, get_origin

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from sqlchorus.config.presets import PRESET_NAMES, preset
from sqlchorus.tools.errors import SqlchorusError
from sqlchorus.tools.json_values import json_value
from sqlchorus.tools.tracing.content import DEFAULT_CONTENT_LIMIT, TRACE_CONTENTS, TRACE_CONVENTIONS

MAX_SAMPLES = 64
"""Samples one generator may draw in a run: CHASE-SQL's pool draws 7 from each of three; a
bound keeps a typing slip (``din=100000``) from fanning out without end."""

ROLES: tuple[str, ...] = ("keywords", "linking", "generation", "fixing", "selection")
"""The model roles. Each can use its own chat model; unset roles use ``Settings.model``."""

SCHEMA_FORMATS: tuple[str, ...] = ("ddl", "m-schema", "mac-schema", "json", "markdown")
SCHEMA_LEVELS: tuple[str, ...] = ("full", "tables", "columns")
PAIRWISE_MODES: tuple[str, ...] = ("never", "low-confidence", "always")
DIN_CORRECTIONS: tuple[str, ...] = ("gentle", "generic", "none")
NREP_CONDITIONS: tuple[str, ...] = ("paper", "question")
LIST_VERIFIERS: tuple[str, ...] = ("strong", "weak")
KEYWORD_SOURCES: tuple[str, ...] = ("model", "question")
LINKERS: tuple[str, ...] = ("model", "lexical")
GRAMMAR_SCOPES: tuple[str, ...] = ("schema", "from")
NREP_VIEWS: tuple[str, ...] = (
    "mac-schema:full",
    "mac-schema:columns",
    "m-schema:tables",
    "m-schema:columns",
    "ddl:columns",
)
"""N-rep's final five-candidate configuration (its Table 4): representation and filter level."""


# -- N-rep views -----------------------------------------------------------------------------


class View(NamedTuple):
    """One N-rep schema view: a representation at a filter level, filtered with ``link_format``'s links."""

    format: str
    level: str
    link_format: str

    @property
    def spec(self) -> str:
        base = f"{self.format}:{self.level}"
        return base if self.link_format == self.format or self.level == "full" else f"{base}@{self.link_format}"


def parse_view(spec: str) -> View:
    """Parse ``format:level[@link_format]``.

    Raises:
        ValueError: an unknown format or level, or a link format on an unfiltered view.
    """
    text = str(spec).strip()
    body, at, link = text.partition("@")
    fmt, colon, level = body.partition(":")
    fmt, level, link = fmt.strip(), level.strip(), link.strip()
    if not colon:
        raise ValueError(f"N-rep view {spec!r} is not of the form format:level.")
    if fmt not in SCHEMA_FORMATS:
        raise ValueError(f"Unknown format in N-rep view {spec!r}; formats are {', '.join(SCHEMA_FORMATS)}.")
    if level not in SCHEMA_LEVELS:
        raise ValueError(f"Unknown level in N-rep view {spec!r}; levels are {', '.join(SCHEMA_LEVELS)}.")
    if at:
        if link not in SCHEMA_FORMATS:
            raise ValueError(f"Unknown link format in N-rep view {spec!r}; formats are {', '.join(SCHEMA_FORMATS)}.")
        if level == "full":
            raise ValueError(f"N-rep view {spec!r} shows the full schema, so it uses no links.")
    return View(fmt, level, link if at else fmt)


def linking_formats(views: tuple[str, ...] | list[str], schema_format: str) -> list[str]:
    """The formats N-rep must link with itself: those its filtered views need, except the one
    ``link_schema`` already linked with (``schema_format``), in first-use order."""
    out: list[str] = []
    for spec in views:
        view = parse_view(spec)
        if view.level != "full" and view.link_format != schema_format and view.link_format not in out:
            out.append(view.link_format)
    return out


# -- fields ------------------------------------------------------------------------------------

# The choices of each field, as types: pydantic refuses any other value, and the CLI lists them.
PresetName = Literal[PRESET_NAMES]
SchemaFormat = Literal[SCHEMA_FORMATS]
SchemaLevel = Literal[SCHEMA_LEVELS]
PairwiseMode = Literal[PAIRWISE_MODES]
DinCorrection = Literal[DIN_CORRECTIONS]
NrepCondition = Literal[NREP_CONDITIONS]
ListVerifier = Literal[LIST_VERIFIERS]
KeywordSource = Literal[KEYWORD_SOURCES]
Linker = Literal[LINKERS]
GrammarScope = Literal[GRAMMAR_SCOPES]
TraceContent = Literal[TRACE_CONTENTS]
TraceConventions = Literal[TRACE_CONVENTIONS]

_UNSET: Any = object()


def _field(default: Any, help: str, *, flag: str | None = None, metavar: str | None = None,
           path: str | None = None, pairs: bool = False, negate: tuple[str, Any, str] | None = None,
           env: str | None = _UNSET, **constraints: Any) -> Any:
    """A settings field: its default (a callable is a factory), its help text, its constraints
    (pydantic's ``ge``, ``le``, ``gt``, ``title`` and so on) and, in its JSON schema extra, the
    shape of its command-line option: ``flag``, ``metavar``, ``path`` (``file`` or ``dir``),
    ``pairs`` (a repeated NAME=VALUE option), ``negate`` (a ``--no-...`` flag, the value it sets,
    its help). ``env`` names its environment variable when that is not ``SQLCHORUS_<FIELD>``
    (None: it has none)."""
    option = {"flag": flag, "metavar": metavar, "path": path, "pairs": pairs or None,
              "negate": list(negate) if negate else None}
    extra: dict[str, Any] = {"option": {k: v for k, v in option.items() if v is not None}}
    if env is not _UNSET:
        extra["env"] = env
    if callable(default):
        return Field(default_factory=default, description=help, json_schema_extra=extra, **constraints)
    return Field(default, description=help, json_schema_extra=extra, **constraints)


class SettingsError(SqlchorusError, ValueError):
    """Settings refused a value: each problem names the field, option or environment variable it
    came from and says what is wrong, in words that are the same wherever the value came from.

    Attributes:
        problems: ``(field, where, message)`` for each refused value; ``field`` is None for a
            problem of no one field.
    """

    kind = "invalid_settings"

    def __init__(self, problems: list[tuple[str | None, str, str]]):
        self.problems = problems
        super().__init__("\n".join(f"{where}: {message}" if where else message for _, where, message in problems))

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.problems,)

    @classmethod
    def of(cls, error: ValidationError, *, given: dict[str, Any] | None = None) -> SettingsError:
        """The problems of pydantic's ``error``; a field's value that was not among ``given``
        (None: no environment was read) came from its environment variable, which is named."""
        problems = []
        for e in error.errors(include_url=False):
            loc = e.get("loc") or ()
            field = loc[0] if loc and loc[0] in Settings.model_fields else None
            where = ".".join(str(p) for p in loc)
            if field is not None and given is not None and field not in given and env_name(field) in os.environ:
                where = env_name(field) + "".join(f".{p}" for p in loc[1:])
            problems.append((field, where, _message(e, field if len(loc) == 1 else None)))
        return cls(problems)

    def naming(self, labels: dict[str, str]) -> SettingsError:
        """The same problems, with the fields in ``labels`` called by those names (an option's
        flag, say)."""
        return SettingsError([
            (field, labels[field] if field in labels else where, message)
            for field, where, message in self.problems
        ])


_RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})


def _message(error: dict[str, Any], field: str | None) -> str:
    """What is wrong, in words: the same for a value typed in Python, on the command line or in
    the environment (``field``: the field whose own value it is, for its range and title)."""
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    if kind in _RANGE_ERRORS:
        bounds = range_of(field) if field else _Range(ctx.get("ge", ctx.get("gt")), ctx.get("le", ctx.get("lt")),
                                                       "gt" in ctx, "lt" in ctx)
        return f"{value} is not in the range {bounds.describe()}."
    if kind == "literal_error" and field:
        title = Settings.model_fields[field].title or field.replace("_", " ")
        return f"Unknown {title}: {value!r} is not one of {', '.join(map(repr, choices_of(field)))}."
    if kind == "value_error":
        return str(ctx.get("error") or error["msg"])
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"{value!r} is not a whole number."
    if kind in ("float_parsing", "float_type"):
        return f"{value!r} is not a number."
    if kind in ("bool_parsing", "bool_type"):
        return f"{value!r} is not true or false."
    if kind == "extra_forbidden":
        return "there is no such setting."
    return f"{error['msg']} (got {value!r})."


def _pairs(value: Any, *, bare: Any = None) -> Any:
    """A mapping given as NAME=VALUE items: a sequence of them (a repeated option), or text of
    them separated by commas, or a JSON object (the environment); anything else is left to
    pydantic. A NAME alone takes ``bare`` when there is one."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            try:
                return json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{text!r} is not a JSON object ({e}).") from None
        value = [item for item in text.split(",") if item.strip()]
    if not isinstance(value, (list, tuple)):
        return value
    pairs: dict[str, Any] = {}
    for item in value:
        key, sep, text = str(item).partition("=")
        key, text = key.strip(), text.strip()
        if not key or (sep and not text) or (not sep and bare is None):
            raise ValueError(f"{item!r} is not of the form NAME=VALUE.")
        pairs[key] = text if sep else bare
    return pairs


def user_traces() -> Path:
    """The per-user folder of traces (and, beside them, checkpoints) of a program that names none:
    ``traces`` in the platform's user data folder (``$XDG_DATA_HOME/sqlchorus`` or
    ``~/.local/share/sqlchorus`` on Linux)."""
    from platformdirs import user_data_path

    return user_data_path("sqlchorus", appauthor=False) / "traces"


class Settings(BaseSettings):
    """How one question is answered.

    Every field documents itself: ``Settings.help(name)`` gives its text, the same one the CLI
    shows for its option. A value is checked on the way in, from Python, the command line or the
    environment alike; a bad one raises :class:`SettingsError` (a ``ValueError``). Building
    ``Settings()`` also reads the environment variable ``SQLCHORUS_<FIELD>`` of each field not
    given as an argument (see :func:`env_name`); unrelated variables are ignored.

    ``preset`` names a preset: every field it covers that was not given (as an argument or in the
    environment) takes the preset's value; a value given always wins, even one equal to the
    default. :meth:`replace` keeps that: ``settings.replace(preset="fast")`` is the settings built
    with the same given values and preset ``fast``.
    """

    model_config = SettingsConfigDict(
        env_prefix="SQLCHORUS_",
        # A misspelt argument is an error, not silently ignored; the environment is read field
        # by field (see _Environment), so unrelated SQLCHORUS_* variables never get here.
        extra="forbid",
        # A model object (a langchain-core BaseChatModel) is kept as it is.
        arbitrary_types_allowed=True,
        # Settings are a value: change one with replace(), which checks the change.
        frozen=True,
        # model_timeout_s and model_retries are settings, not pydantic's model_* API (older pydantic
        # versions warn about the prefix).
        protected_namespaces=(),
    )

    model: Any = _field(
        None,
        "Chat model for every role without its own: a provider:model name (openai:gpt-4o-mini, "
        "openai-compatible:<model>@<base_url>, local:smollm2) or a langchain-core BaseChatModel.",
        flag="--model",
    )
    models: dict[str, Any] = _field(
        dict, f"A model for one role ({', '.join(ROLES)}), overriding --model for it.",
        flag="--role-model", metavar="ROLE=MODEL", pairs=True,
    )
    generators: dict[str, int] = _field(
        lambda: {"divide_conquer": 1},
        f"Generator branches to run and the samples each draws, 1 to {MAX_SAMPLES} (default: divide_conquer once).",
        flag="--generator", metavar="NAME[=SAMPLES]", pairs=True,
    )
    preset: PresetName | None = _field(
        None,
        "Generators, selection and fixing chosen by cost: fast, balanced, full, paper (CHASE-SQL's pool of 21 "
        "candidates), or tiny for small local models (options you give win over it).",
        flag="--preset", title="preset",
    )
    keywords: KeywordSource = _field(
        "model",
        "Where value retrieval's keywords come from: the model (CHESS's prompt), or the question's "
        "own words with no model call (for small local models).",
        flag="--keywords", title="keyword source",
    )
    linking: Linker = _field(
        "model",
        "How link_schema links: the model (DIN-SQL's prompt), or lexically, ranking tables and "
        "columns by the question's words and retrieved values, with no model call.",
        flag="--linking", title="linker",
    )
    din_correction: DinCorrection = _field(
        "gentle",
        "DIN-SQL's self-correction prompt: gentle (checks, assumes nothing is wrong), generic "
        "(told the query is buggy) or none (no correction call).",
        flag="--din-correction", title="DIN-SQL correction",
    )
    nrep_views: tuple[str, ...] = _field(
        NREP_VIEWS,
        "N-rep's schema views, one candidate each, as format:level, optionally @format to filter "
        "with another format's links; the paper's five by default.",
    )
    nrep_conditions: NrepCondition = _field(
        "paper",
        "N-rep's system-prompt rule on conditions: paper (always add default conditions that filter "
        "invalid data, such as deleted_at IS NULL, when relevant) or question (only the conditions "
        "the question or hint asks for, as benchmark gold queries are written).",
        flag="--nrep-conditions", title="N-rep conditions rule",
    )
    examples_dir: str | None = _field(
        None,
        "A folder of <prompt>_examples.json files that replace the shipped few-shot examples of "
        "the prompts they name.",
        flag="--examples-dir", path="dir",
    )
    examples_store: str | None = _field(
        "auto",
        "SQLite file, or PostgreSQL database (postgresql://...), where taught examples and glossary "
        "entries are kept per database and read by every run (auto: the checkpoint store; an "
        "evaluation or batch uses the command line's, ./traces/checkpoints.sqlite).",
        flag="--examples-store", path="file", negate=("--no-taught", None, "Use no taught examples or glossary."),
    )
    fix_rounds: int = _field(
        3, "Fixer rounds per broken candidate at most (CHASE-SQL's beta).",
        flag="--fix-rounds", ge=0, le=10,
    )
    retry_temperature: float = _field(
        0.8,
        "Sampling temperature of every retry after a first attempt failed: fixer rounds after the "
        "first, LIST's reprompts, rewrites and re-plans (LIST's self-correction setting).",
        flag="--retry-temperature", ge=0.0, le=2.0,
    )
    retry_top_p: float = _field(
        0.95,
        "Top-p of those retries (LIST's setting), sent to models whose API takes it per call "
        "(OpenAI and OpenAI-compatible; OpenAI reasoning models keep their own sampling).",
        flag="--retry-top-p", gt=0.0, le=1.0,
    )
    schema_format: SchemaFormat = _field(
        "m-schema", "Schema view shown to linking and generation.",
        flag="--schema-format", title="schema format",
    )
    schema_level: SchemaLevel = _field(
        "full",
        "How much of the schema generation sees: full, the linked tables with all their columns, "
        "or the linked columns only.",
        flag="--schema-level", title="schema level",
    )
    max_prompt_tokens: int = _field(
        32_000,
        "Prompt tokens per model call at most; a model's own context window, when known, lowers it. "
        "A call that would not fit is not sent.",
        flag="--max-prompt-tokens", ge=512, le=10_000_000,
    )
    max_schema_tokens: int = _field(
        10_000_000,
        "Tokens one schema view may take in a prompt at most; by default only the prompt budget bounds "
        "it, less the question, the hint and 4,000 tokens for the rest of the prompt. A larger schema "
        "is narrowed to what the question most likely needs.",
        flag="--max-schema-tokens", ge=256, le=10_000_000,
    )
    max_question_tokens: int = _field(
        0,
        "Prompt tokens all of a question's calls may take together, planned ahead; 0 sets no bound "
        "(preset balanced: 32,000, N-rep's budget). The schema is shown whole when every call that "
        "shows it can carry it within this budget; otherwise those calls show their share: the "
        "details of the columns the question most likely needs and the names of the rest.",
        flag="--max-question-tokens", ge=0, le=100_000_000,
    )
    max_question_chars: int = _field(
        8_000, "Characters a question, or its hint, may have at most.",
        flag="--max-question-chars", ge=1, le=10_000_000,
    )
    sql_timeout_s: float = _field(
        10.0, "Time budget per SQL statement, in seconds.", flag="--timeout", ge=0.1, le=3600,
    )
    statement_workers: int = _field(
        4,
        "Worker processes per database, so SQL statements running on it at once at most; more wait "
        "their turn within their time budget, and one client's statements hold at most half of the "
        "workers (rounded up).",
        flag="--statement-workers", ge=1, le=64,
    )
    require_readonly_role: bool = _field(
        True,
        "Refuse to open a PostgreSQL database when the connecting role could write to it or reach "
        "past it (a superuser, write grants, CREATE or TEMP, membership of pg_read_server_files, "
        "pg_write_server_files, pg_execute_server_program or pg_signal_backend), or a MySQL database "
        "when the user could (a privilege past SELECT and SHOW VIEW, FILE, SUPER, PROCESS, any on "
        "another database): the default. Set, it refuses such a role even with allow_writable_role.",
        negate=("--require-readonly-role", True,
                "Refuse a PostgreSQL role or MySQL user that could write to the database or reach past it "
                "(the default)."),
    )
    allow_writable_role: bool = _field(
        False,
        "Open a PostgreSQL or MySQL database even when the connecting role or user could write to "
        "it or reach past it; every run is then warned of what no guard can stop under such a role.",
        negate=("--allow-writable-role", True,
                "Open a PostgreSQL or MySQL database as a role or user that could write to it or reach "
                "past it, with a warning on every run."),
    )
    max_rows: int = _field(10_000, "Rows fetched per statement at most; more are cut and flagged.", ge=1)
    max_bytes: int = _field(16 * 1024 * 1024, "Approximate bytes fetched per statement at most.", ge=1)
    answer_rows: int = _field(
        1_000, "Rows kept in the final answer.", flag="--answer-rows", ge=1, le=1_000_000,
    )
    sample_values: int = _field(3, "Distinct example values per column in schema views.", ge=0)
    values_per_keyword: int = _field(5, "Values kept per keyword by retrieve_values.", ge=0)
    value_threshold: float = _field(80.0, "Lowest fuzzy score (0-100) for a retrieved value.", ge=0.0, le=100.0)
    value_cache_dir: str | None = _field(
        None,
        "Folder of value index files, built once per database content (default: values/ in the "
        "sqlchorus cache folder).",
        flag="--values-dir", path="dir",
    )
    value_embedder: str | None = _field(
        None,
        "Folder of a sentence-transformers model already on disk (never downloaded; needs the "
        "embeddings extra) whose similarity re-ranks retrieved values beside edit distance, as "
        "CHASE-SQL does, and that retrieves the few-shot examples of N-rep and schema linking by "
        "similarity; unset, values are ranked by edit distance alone and examples lexically.",
        flag="--value-embedder", path="dir",
    )
    temperature: float = _field(
        0.0, "Sampling temperature of generation (0 is greedy).", flag="--temperature", ge=0.0, le=2.0,
    )
    max_tokens: int | None = _field(
        2048, "Tokens a model may generate per call at most (local models: 512 at most).",
        flag="--max-tokens", ge=1, le=1_000_000,
    )
    trace_dir: str | None = _field(
        "auto", "Folder for the run's <run-id>.jsonl trace file (auto: traces in the per-user data "
        "folder, e.g. ~/.local/share/sqlchorus/traces, so that a program using sqlchorus writes nothing "
        "into its current folder; the command line's default is ./traces).",
        flag="--trace-dir", path="dir", negate=("--no-trace", None, "Write no trace file."),
    )
    checkpoints: str | None = _field(
        "auto",
        "SQLite file, or PostgreSQL database (postgresql://...), that keeps every run's checkpoints, to "
        "resume, inspect or replay it (auto: checkpoints.sqlite in the trace folder; none when no trace is written).",
        flag="--checkpoints", path="file", negate=("--no-checkpoints", None, "Keep no checkpoints."),
    )
    run_heartbeat_s: float = _field(
        5.0, "Servers: how often a server renews, in the checkpoint store, the lease of each run it runs; a run "
        "whose lease three heartbeats old has run out lost its server, and any server may cancel or resume it.",
        flag="--run-heartbeat", metavar="SECONDS", gt=0.0, le=3600.0,
    )
    max_pending_runs: int = _field(
        0, "Servers: runs one server takes at most, running and queued (0: eight per worker); more get 429.",
        flag="--max-pending-runs", ge=0, le=1_000_000,
    )
    keep_runs: int = _field(
        0, "Servers and sqlchorus prune: keep the newest N runs' traces and checkpoints, removing older ones "
        "(0: keep all; with --keep-days, a run goes only when past both). Queued or running runs, and the runs "
        "kept runs resume from, are never removed.",
        flag="--keep-runs", metavar="N", ge=0, le=100_000_000,
    )
    keep_days: float = _field(
        0.0, "Servers and sqlchorus prune: keep the runs younger than D days, removing older ones "
        "(0: no age limit; with --keep-runs, a run goes only when past both).",
        flag="--keep-days", metavar="D", ge=0.0, le=36_500.0,
    )
    otlp_endpoint: str | None = _field(
        None,
        "Also send spans to this OTLP/HTTP traces endpoint (default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, "
        "or $OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces).",
        flag="--otlp-endpoint",
    )
    trace_content: TraceContent = _field(
        "all",
        "What text spans carry for dashboards: all (question, answer, node inputs and updates, model "
        "messages, rows previews, retrieved values), metadata (names, counts, SQL text, tokens; no rows, "
        "values, question or prompt text), or none (no content attributes).",
        flag="--trace-content", title="trace content",
    )
    trace_content_limit: int = _field(
        DEFAULT_CONTENT_LIMIT,
        "Characters of one model message (a prompt's message, or an answer) a model call's span keeps; a "
        "longer one is cut there, and the span says so with its whole length.",
        flag="--trace-content-limit", metavar="CHARS", ge=256, le=100_000_000,
    )
    trace_conventions: TraceConventions = _field(
        "openinference",
        "Which conventions a model call's messages are written in, once each: openinference (llm.input_messages, "
        "what Arize Phoenix reads), genai (OpenTelemetry's gen_ai.input.messages), both (each message twice), or "
        "langfuse (langfuse.observation.input/output, what Langfuse reads first).",
        flag="--trace-conventions", title="trace conventions",
    )
    cache: bool = _field(
        True,
        "Keep model responses in a persistent SQLite cache, so that the same request to the same "
        "named model is paid for once (a model object passed in is the caller's to cache).",
        negate=("--no-cache", False, "Neither read nor write the persistent model response cache."),
        env=None,  # SQLCHORUS_CACHE names the cache folder (sqlchorus.tools.models.cache)
    )
    cache_path: str | None = _field(
        None,
        "Response cache file (default: responses.sqlite in $SQLCHORUS_CACHE or ~/.cache/sqlchorus).",
        flag="--cache-path", path="file",
    )
    model_timeout_s: float = _field(
        120.0, "Time limit of a model call (of each try), in seconds.", flag="--model-timeout", gt=0.0, le=3600,
    )
    model_retries: int = _field(
        2,
        "Retries of a model call after a transient error (rate limit, timeout, connection, server "
        "error), with exponential backoff.",
        flag="--retries", ge=0, le=10,
    )
    retry_backoff_s: float = _field(0.5, "The first backoff wait; each retry doubles it (with jitter).", ge=0.0)
    rate_limit: float | None = _field(
        None, "Most model requests per second, shared by all roles of named models.",
        flag="--rate-limit", ge=0.001, le=1000,
    )
    model_limits: dict[str, str] = _field(
        dict,
        "Requests and tokens per minute one model may use, by its provider:model name, shared by every "
        "question a command or session answers (on a Ray cluster, by all its workers), as MODEL=Nrpm,Mtpm "
        "(either or both; in the environment, separated by semicolons).",
        flag="--model-limit", metavar="MODEL=Nrpm,Mtpm", pairs=True,
    )
    prices_file: str | None = _field(
        None, "JSON or TOML file of model prices, USD per million tokens, read on top of the built-in table.",
        flag="--prices", path="file", env="SQLCHORUS_PRICES",
    )
    grammar: bool = _field(
        True,
        "Constrain local models that support it with a grammar built from the schema, so generation "
        "and fixing can only write one SELECT over real tables and columns.",
        negate=("--no-grammar", False, "Do not constrain local models with the schema grammar."),
    )
    grammar_scope: GrammarScope = _field(
        "schema",
        "What the schema grammar lets a local model write: any query over the schema's names "
        "(schema), or simpler queries whose columns belong to the tables in FROM (from).",
        flag="--grammar-scope", title="grammar scope",
    )
    generator_temperatures: dict[str, float] = _field(
        dict,
        "Sampling temperature of each generator's samples after its first, by generator name; "
        "unnamed generators use sample_temperature.",
    )
    sample_temperature: float = _field(
        0.5, "Temperature of the second and later samples of a generator (CHASE-SQL's diversity).",
        ge=0.0, le=2.0,
    )
    shuffle_schema: bool = _field(
        True, "Show later samples of a generator the schema in a shuffled order, as CHASE-SQL does.",
    )
    pairwise: PairwiseMode = _field(
        "low-confidence",
        "When the selection model compares candidates pairwise: never (the largest result cluster "
        "wins), low-confidence (N-rep: only when the vote is not confident) or always (CHASE-SQL).",
        flag="--pairwise", title="pairwise mode",
    )
    vote_confident_share: float = _field(
        0.4, "Share of all votes the largest cluster needs for a confident vote.", ge=0.0, le=1.0,
    )
    vote_contender_share: float = _field(
        0.4, "Share of all votes at which the runner-up makes a vote unconfident.", ge=0.0, le=1.0,
    )
    pairwise_max_clusters: int = _field(
        4,
        "Result clusters compared pairwise at most (the largest ones); the balanced, full and paper "
        "presets compare every cluster, bounded by max_pairwise_calls instead.",
        flag="--max-clusters", ge=0, le=50,
    )
    max_pairwise_calls: int = _field(
        0,
        "Selection model calls per question at most, two per pair of clusters (one per order); 0 sets "
        "no bound, so every pair of the compared clusters meets. When every pair would exceed it, the "
        "largest clusters meet in a round robin and the smaller ones climb a ladder, one match each, "
        "for its last place: every cluster is compared while the budget allows two calls per cluster.",
        flag="--max-pairwise-calls", ge=0, le=100_000,
    )
    selection_reasoning: bool = _field(
        True,
        "Let the selection model reason briefly before its verdict (a final line 'Answer: A' or "
        "'Answer: B'), for a selection model used as is; off, it gets CHASE-SQL's terse prompt, which "
        "asks for the letter alone, the prompt a selection model fine-tuned on exported pairs learnt.",
        negate=("--no-selection-reasoning", False,
                "Ask the selection model for the letter alone (CHASE-SQL's prompt), for one fine-tuned on it."),
    )
    synthetic_feature_examples: int = _field(
        12, "CHASE-SQL's n_f: synthetic examples generated over the whole schema, by SQL feature.", ge=0,
    )
    synthetic_schema_examples: int = _field(
        12, "CHASE-SQL's n_t: synthetic examples generated over the linked columns.", ge=0,
    )
    list_max_local_attempts: int = _field(
        3, "LIST's max_local_attempts: reprompts of one step before the search traces back.", ge=0,
    )
    list_max_global_attempts: int = _field(
        15, "LIST's max_global_attempts: step queries written per LIST search.", ge=1,
    )
    list_verifier: ListVerifier = _field(
        "strong",
        "LIST's verifier: strong runs every sub-query of a step (errors, empty results, join "
        "growth); weak runs only the step's whole query.",
        flag="--list-verifier", title="LIST verifier",
    )
    list_join_growth: float = _field(
        100.0, "A join returning more than this many times the rows of its larger input is implausible.",
        gt=1.0,
    )

    # -- checks of more than a range or a choice ----------------------------------------------

    @field_validator("models", mode="before")
    @classmethod
    def _models_as_pairs(cls, value: Any) -> Any:
        return _pairs(value)

    @field_validator("generators", mode="before")
    @classmethod
    def _generators_as_pairs(cls, value: Any) -> Any:
        return _pairs(value, bare=1)

    @field_validator("generator_temperatures", mode="before")
    @classmethod
    def _temperatures_as_pairs(cls, value: Any) -> Any:
        return _pairs(value)

    @field_validator("model_limits", mode="before")
    @classmethod
    def _limits_as_pairs(cls, value: Any) -> Any:
        # Not _pairs: the rates have commas of their own, and a model's name may hold an "=" (the
        # last one ends it). The rates are read by sqlchorus.core.rate_limits (a floor above this
        # one) when the limiter is built, before any model is called.
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("{"):
                try:
                    return json.loads(text)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{text!r} is not a JSON object ({e}).") from None
            value = [item for item in text.replace("\n", ";").split(";") if item.strip()]
        if not isinstance(value, (list, tuple)):
            return value
        limits: dict[str, str] = {}
        for item in value:
            model, sep, rates = str(item).rpartition("=")
            if not sep or not model.strip() or not rates.strip():
                raise ValueError(f"{str(item).strip()!r} is not of the form MODEL=Nrpm,Mtpm.")
            limits[model.strip()] = rates.strip()
        return limits

    @field_validator("nrep_views", mode="before")
    @classmethod
    def _views_as_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    return json.loads(text)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{text!r} is not a JSON list ({e}).") from None
            return [view.strip() for view in text.split(",") if view.strip()]
        return value

    @field_validator("models")
    @classmethod
    def _known_roles(cls, models: dict[str, Any]) -> dict[str, Any]:
        unknown = set(models) - set(ROLES)
        if unknown:
            raise ValueError(f"Unknown model role(s) {sorted(unknown)}; roles are {', '.join(ROLES)}.")
        return models

    @field_validator("generators")
    @classmethod
    def _some_samples(cls, generators: dict[str, int]) -> dict[str, int]:
        if not generators:
            raise ValueError("At least one generator must be enabled.")
        for name, n in generators.items():
            if n < 1:
                raise ValueError(f"Generator {name!r} needs at least one sample, got {n}.")
            if n > MAX_SAMPLES:
                raise ValueError(f"Generator {name!r} draws at most {MAX_SAMPLES} samples, got {n}.")
        return generators

    @field_validator("nrep_views")
    @classmethod
    def _parsed_views(cls, views: tuple[str, ...]) -> tuple[str, ...]:
        for view in views:
            parse_view(view)  # raises ValueError naming the bad part
        return views

    @field_validator("generator_temperatures")
    @classmethod
    def _temperatures_in_range(cls, temperatures: dict[str, float]) -> dict[str, float]:
        for name, t in temperatures.items():
            if not 0.0 <= t <= 2.0:
                raise ValueError(f"Generator {name!r}: temperature {t} is not in the range 0.0<=x<=2.0.")
        return temperatures

    # -- the preset ---------------------------------------------------------------------------

    @model_validator(mode="wrap")
    @classmethod
    def _preset_under_given_values(cls, data: Any, handler: Any) -> Any:
        """Fill each field the preset covers and ``data`` does not give with the preset's value,
        then validate all; ``model_fields_set`` stays the fields given, so that :meth:`replace`
        (and a preset chosen again) knows what was chosen and what came with the preset."""
        if not isinstance(data, dict):
            return handler(data)
        given = {name for name in data if name in cls.model_fields}
        name = data.get("preset")
        if isinstance(name, str) and name in PRESET_NAMES:
            data = {**preset(name).fields, **data}
        settings = handler(data)
        object.__setattr__(settings, "__pydantic_fields_set__", given)
        return settings

    # -- where values come from ---------------------------------------------------------------

    def __init__(self, **values: Any) -> None:
        """Settings from ``values``, then the environment for the fields they do not give.

        Raises:
            SettingsError: a value refused (which field, from where, and why).
        """
        try:
            super().__init__(**values)
        except ValidationError as e:
            raise SettingsError.of(e, given=values) from None

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        # Arguments first, then the process environment; no .env file or secrets folder (API
        # keys stay in the providers' own variables, which the model clients read).
        return init_settings, _Environment(settings_cls)

    def replace(self, **changes: Any) -> Settings:
        """These settings with ``changes``, built as ``Settings(...)`` builds them: the values given
        to these settings (their environment's among them) and the changes count as given, the
        environment fills what neither gives, and a preset the rest.

        Raises:
            SettingsError: a change refused (which field, from where, and why).
        """
        given = {name: getattr(self, name) for name in self.model_fields_set}
        return type(self)(**{**given, **changes})

    # -- reading ------------------------------------------------------------------------------

    def model_for(self, role: str) -> Any:
        """The model spec for ``role``: its own, else the default."""
        return self.models.get(role, self.model)

    def record(self) -> dict[str, Any]:
        """The settings as plain JSON data; a model object is kept by its name."""

        def model_text(value: Any) -> str:
            return f"<{getattr(value, 'model_name', None) or type(value).__name__}>"

        return {name: json_value(getattr(self, name), model_text) for name in type(self).model_fields}

    @property
    def trace_folder(self) -> str | None:
        """Where trace files go: ``trace_dir`` resolved (``auto``: :func:`user_traces`), or None."""
        if self.trace_dir == "auto":
            return str(user_traces())
        return self.trace_dir or None

    @property
    def checkpoint_file(self) -> str | None:
        """Where this run's checkpoints go: ``checkpoints`` resolved (see its help), or None."""
        if self.checkpoints == "auto":
            folder = self.trace_folder
            return str(Path(folder) / "checkpoints.sqlite") if folder else None
        return self.checkpoints or None

    @property
    def examples_file(self) -> str | None:
        """Where taught examples are kept: ``examples_store`` resolved (see its help), or None."""
        if self.examples_store == "auto":
            return self.checkpoint_file
        return self.examples_store or None

    @property
    def recursion_limit(self) -> int:
        """A bound on graph steps: the straight path plus two steps per fixer round, doubled."""
        straight = 6  # keywords, values, linking, generators, check, select
        return 2 * (straight + 2 * self.fix_rounds) + 10

    @staticmethod
    def help(name: str) -> str:
        """The help text of field ``name``."""
        return SETTINGS_FIELDS[name].description or ""


class _Environment(PydanticBaseSettingsSource):
    """The process environment, one variable per field (:func:`env_name`). An empty variable
    counts as unset, as the command line has always taken it; every value is a string that the
    field's own validation parses (the NAME=VALUE fields also take text such as ``din=2,nrep``)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        name = env_name(field_name)
        value = os.environ.get(name) if name else None
        return value or None, field_name, False

    def __call__(self) -> dict[str, Any]:
        values = {}
        for field_name, field in self.settings_cls.model_fields.items():
            value, key, _ = self.get_field_value(field, field_name)
            if value is not None:
                values[key] = value
        return values


SETTINGS_FIELDS: dict[str, FieldInfo] = dict(Settings.model_fields)
"""Every field of :class:`Settings`, by name (pydantic's ``FieldInfo``: its ``description`` is
the help, its ``metadata`` the constraints); :func:`option_of`, :func:`choices_of`,
:func:`range_of` and :func:`env_name` read the rest."""


def default_of(name: str) -> Any:
    """The default value of field ``name``."""
    return SETTINGS_FIELDS[name].get_default(call_default_factory=True)


def option_of(name: str) -> dict[str, Any]:
    """The shape of field ``name``'s command-line option (``flag``, ``metavar``, ``path``,
    ``pairs``, ``negate``); empty for a field the command line does not offer."""
    extra = SETTINGS_FIELDS[name].json_schema_extra
    return dict(extra.get("option") or {}) if isinstance(extra, dict) else {}


def env_name(name: str) -> str | None:
    """The environment variable of field ``name``: ``SQLCHORUS_<NAME>`` unless the field names
    another, or none."""
    extra = SETTINGS_FIELDS[name].json_schema_extra
    if isinstance(extra, dict) and "env" in extra:
        return extra["env"]  # type: ignore[return-value]
    return Settings.model_config["env_prefix"] + name.upper()


def choices_of(name: str) -> tuple[Any, ...] | None:
    """The values field ``name`` takes when they are a fixed set (its ``Literal`` type), else
    None."""
    annotation = SETTINGS_FIELDS[name].annotation
    for kind in (annotation, *get_args(annotation)):
        if get_origin(kind) is Literal:
            return get_args(kind)
    return None


def is_whole(name: str) -> bool:
    """Whether field ``name`` holds whole numbers."""
    annotation = SETTINGS_FIELDS[name].annotation
    return annotation is int or int in get_args(annotation)


class _Range(NamedTuple):
    low: float | None
    high: float | None
    low_open: bool = False
    high_open: bool = False

    def describe(self) -> str:
        """As click shows a range: ``0<=x<=10``, ``x>1``."""
        low_op, high_op = ("<" if self.low_open else "<="), ("<" if self.high_open else "<=")
        if self.low is None:
            return f"x{high_op}{self.high}"
        if self.high is None:
            return f"x{'>' if self.low_open else '>='}{self.low}"
        return f"{self.low}{low_op}x{high_op}{self.high}"


def range_of(name: str) -> _Range | None:
    """The bounds field ``name`` declares (its ``ge``/``gt``, ``le``/``lt``), or None."""
    low = high = None
    low_open = high_open = False
    for constraint in SETTINGS_FIELDS[name].metadata:
        if getattr(constraint, "ge", None) is not None:
            low = constraint.ge
        elif getattr(constraint, "gt", None) is not None:
            low, low_open = constraint.gt, True
        elif getattr(constraint, "le", None) is not None:
            high = constraint.le
        elif getattr(constraint, "lt", None) is not None:
            high, high_open = constraint.lt, True
    return None if low is None and high is None else _Range(low, high, low_open, high_open)
