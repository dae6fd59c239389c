"""Settings: every knob of a run, as explicit arguments with sane defaults.

Each field carries its own help text and, where the command line offers it, the shape of its
option (flag name, range, choices) in its metadata. The CLI builds its options from these
(:func:`sqlchorus.interfaces.cli`), so a name, a default or a help text is written once, here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from sqlchorus.config.presets import PRESET_NAMES, preset

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


def _field(default: Any, help: str, **option: Any) -> Any:
    """A settings field with its help text and, when ``option`` names a ``flag``, the shape of
    its command-line option: ``flag``, ``range`` (low, high),
    ``choices``, ``env``, ``metavar``, ``path`` (``file`` or ``dir``), ``pairs`` (repeated
    NAME=VALUE, values of that type), ``negate`` (a ``--no-...`` flag, the value it sets, its help)."""
    metadata = {"help": help, "option": option or None}
    if callable(default) and not isinstance(default, (str, int, float, bool, type(None))):
        return dataclasses.field(default_factory=default, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass
class Settings:
    """How one question is answered.

    Every field documents itself: ``Settings.help(name)`` gives its text, the same one the CLI
    shows for its option. ``Settings(preset=...)`` fills every field the preset covers that is
    still at its default; :meth:`for_preset` applies a preset under explicit values, which always
    win; :meth:`with_preset` overrides everything the preset covers.
    """

    model: Any = _field(
        None,
        "Chat model for every role without its own: a provider:model name (openai:gpt-4o-mini, "
        "openai-compatible:<model>@<base_url>, local:smollm2) or a langchain-core BaseChatModel.",
        flag="--model", env="SQLCHORUS_MODEL",
    )
    models: dict[str, Any] = _field(
        dict, f"A model for one role ({', '.join(ROLES)}), overriding --model for it.",
        flag="--role-model", metavar="ROLE=MODEL", pairs=str,
    )
    generators: dict[str, int] = _field(
        lambda: {"divide_conquer": 1},
        "Generator branches to run and the samples each draws (default: divide_conquer once).",
        flag="--generator", metavar="NAME[=SAMPLES]", pairs=int,
    )
    preset: str | None = _field(
        None,
        "Generators, selection and fixing chosen by cost: fast, balanced, full, paper (CHASE-SQL's pool of 21 "
        "candidates), or tiny for small local models (options you give win over it).",
        flag="--preset", choices=PRESET_NAMES,
    )
    keywords: str = _field(
        "model",
        "Where value retrieval's keywords come from: the model (CHESS's prompt), or the question's "
        "own words with no model call (for small local models).",
        flag="--keywords", choices=KEYWORD_SOURCES,
    )
    linking: str = _field(
        "model",
        "How link_schema links: the model (DIN-SQL's prompt), or lexically, ranking tables and "
        "columns by the question's words and retrieved values, with no model call.",
        flag="--linking", choices=LINKERS,
    )
    din_correction: str = _field(
        "gentle",
        "DIN-SQL's self-correction prompt: gentle (checks, assumes nothing is wrong), generic "
        "(told the query is buggy) or none (no correction call).",
        flag="--din-correction", choices=DIN_CORRECTIONS,
    )
    nrep_views: tuple[str, ...] = _field(
        NREP_VIEWS,
        "N-rep's schema views, one candidate each, as format:level, optionally @format to filter "
        "with another format's links; the paper's five by default.",
    )
    nrep_conditions: str = _field(
        "paper",
        "N-rep's system-prompt rule on conditions: paper (always add default conditions that filter "
        "invalid data, such as deleted_at IS NULL, when relevant) or question (only the conditions "
        "the question or hint asks for, as benchmark gold queries are written).",
        flag="--nrep-conditions", choices=NREP_CONDITIONS,
    )
    examples_dir: str | None = _field(
        None,
        "A folder of <prompt>_examples.json files that replace the shipped few-shot examples of "
        "the prompts they name.",
        flag="--examples-dir", path="dir",
    )
    fix_rounds: int = _field(
        3, "Fixer rounds per broken candidate at most (CHASE-SQL's beta).",
        flag="--fix-rounds", range=(0, 10),
    )
    retry_temperature: float = _field(
        0.8,
        "Sampling temperature of every retry after a first attempt failed: fixer rounds after the "
        "first, LIST's reprompts, rewrites and re-plans (LIST's self-correction setting).",
        flag="--retry-temperature", range=(0.0, 2.0),
    )
    retry_top_p: float = _field(
        0.95,
        "Top-p of those retries (LIST's setting), sent to models whose API takes it per call "
        "(OpenAI and OpenAI-compatible; OpenAI reasoning models keep their own sampling).",
        flag="--retry-top-p", range=(0.01, 1.0),
    )
    schema_format: str = _field(
        "m-schema", "Schema view shown to linking and generation.",
        flag="--schema-format", choices=SCHEMA_FORMATS,
    )
    schema_level: str = _field(
        "full",
        "How much of the schema generation sees: full, the linked tables with all their columns, "
        "or the linked columns only.",
        flag="--schema-level", choices=SCHEMA_LEVELS,
    )
    max_prompt_tokens: int = _field(
        32_000,
        "Prompt tokens per model call at most; a model's own context window, when known, lowers it. "
        "A call that would not fit is not sent.",
        flag="--max-prompt-tokens", range=(512, 10_000_000),
    )
    max_schema_tokens: int = _field(
        5_000,
        "Tokens one schema view may take in a prompt at most (and 4,000 less than the prompt budget); "
        "a larger schema is narrowed to what the question most likely needs.",
        flag="--max-schema-tokens", range=(256, 10_000_000),
    )
    max_question_chars: int = _field(
        8_000, "Characters a question, or its hint, may have at most.",
        flag="--max-question-chars", range=(1, 10_000_000),
    )
    sql_timeout_s: float = _field(
        10.0, "Time budget per SQL statement, in seconds.", flag="--timeout", range=(0.1, 3600),
    )
    max_rows: int = _field(10_000, "Rows fetched per statement at most; more are cut and flagged.")
    max_bytes: int = _field(16 * 1024 * 1024, "Approximate bytes fetched per statement at most.")
    answer_rows: int = _field(
        1_000, "Rows kept in the final answer.", flag="--answer-rows", range=(1, 1_000_000),
    )
    sample_values: int = _field(3, "Distinct example values per column in schema views.")
    values_per_keyword: int = _field(5, "Values kept per keyword by retrieve_values.")
    value_threshold: float = _field(80.0, "Lowest fuzzy score (0-100) for a retrieved value.")
    value_cache_dir: str | None = _field(
        None,
        "Folder of value index files, built once per database content (default: values/ in the "
        "sqlchorus cache folder).",
        flag="--values-dir", path="dir",
    )
    temperature: float = _field(
        0.0, "Sampling temperature of generation (0 is greedy).", flag="--temperature", range=(0.0, 2.0),
    )
    max_tokens: int | None = _field(
        2048, "Tokens a model may generate per call at most (local models: 512 at most).",
        flag="--max-tokens", range=(1, 1_000_000),
    )
    trace_dir: str | None = _field(
        "traces", "Folder for the run's <run-id>.jsonl trace file.",
        flag="--trace-dir", path="dir", negate=("--no-trace", None, "Write no trace file."),
    )
    checkpoints: str | None = _field(
        "auto",
        "SQLite file, or PostgreSQL database (postgresql://...), that keeps every run's checkpoints, to "
        "resume, inspect or replay it (auto: checkpoints.sqlite in the trace folder; none when no trace is written).",
        flag="--checkpoints", path="file", negate=("--no-checkpoints", None, "Keep no checkpoints."),
    )
    otlp_endpoint: str | None = _field(
        None, "Also send spans to this OTLP/HTTP traces endpoint.", flag="--otlp-endpoint",
    )
    cache: bool = _field(
        True,
        "Keep model responses in a persistent SQLite cache, so that the same request to the same "
        "named model is paid for once (a model object passed in is the caller's to cache).",
        negate=("--no-cache", False, "Neither read nor write the persistent model response cache."),
    )
    cache_path: str | None = _field(
        None,
        "Response cache file (default: responses.sqlite in $SQLCHORUS_CACHE or ~/.cache/sqlchorus).",
        flag="--cache-path", path="file",
    )
    model_timeout_s: float = _field(
        120.0, "Time limit of a model call (of each try), in seconds.", flag="--model-timeout", range=(1, 3600),
    )
    model_retries: int = _field(
        2,
        "Retries of a model call after a transient error (rate limit, timeout, connection, server "
        "error), with exponential backoff.",
        flag="--retries", range=(0, 10),
    )
    retry_backoff_s: float = _field(0.5, "The first backoff wait; each retry doubles it (with jitter).")
    rate_limit: float | None = _field(
        None, "Most model requests per second, shared by all roles of named models.",
        flag="--rate-limit", range=(0.001, 1000),
    )
    prices_file: str | None = _field(
        None, "JSON or TOML file of model prices, USD per million tokens, read on top of the built-in table.",
        flag="--prices", env="SQLCHORUS_PRICES", path="file",
    )
    grammar: bool = _field(
        True,
        "Constrain local models that support it with a grammar built from the schema, so generation "
        "and fixing can only write one SELECT over real tables and columns.",
        negate=("--no-grammar", False, "Do not constrain local models with the schema grammar."),
    )
    grammar_scope: str = _field(
        "schema",
        "What the schema grammar lets a local model write: any query over the schema's names "
        "(schema), or simpler queries whose columns belong to the tables in FROM (from).",
        flag="--grammar-scope", choices=GRAMMAR_SCOPES,
    )
    generator_temperatures: dict[str, float] = _field(
        dict,
        "Sampling temperature of each generator's samples after its first, by generator name; "
        "unnamed generators use sample_temperature.",
    )
    sample_temperature: float = _field(
        0.5, "Temperature of the second and later samples of a generator (CHASE-SQL's diversity).",
    )
    shuffle_schema: bool = _field(
        True, "Show later samples of a generator the schema in a shuffled order, as CHASE-SQL does.",
    )
    pairwise: str = _field(
        "low-confidence",
        "When the selection model compares candidates pairwise: never (the largest result cluster "
        "wins), low-confidence (N-rep: only when the vote is not confident) or always (CHASE-SQL).",
        flag="--pairwise", choices=PAIRWISE_MODES,
    )
    vote_confident_share: float = _field(
        0.4, "Share of all votes the largest cluster needs for a confident vote.",
    )
    vote_contender_share: float = _field(
        0.4, "Share of all votes at which the runner-up makes a vote unconfident.",
    )
    pairwise_max_clusters: int = _field(
        4, "Result clusters compared pairwise at most (the largest ones).",
        flag="--max-clusters", range=(0, 50),
    )
    max_pairwise_calls: int = _field(
        0,
        "Selection model calls per question at most, two per pair of clusters (one per order); 0 sets "
        "no bound, so every pair of the compared clusters meets. When every pair would exceed it, the "
        "largest clusters meet in a round robin and the smaller ones climb a ladder, one match each, "
        "for its last place: every cluster is compared while the budget allows two calls per cluster.",
        flag="--max-pairwise-calls", range=(0, 100_000),
    )
    synthetic_feature_examples: int = _field(
        12, "CHASE-SQL's n_f: synthetic examples generated over the whole schema, by SQL feature.",
    )
    synthetic_schema_examples: int = _field(
        12, "CHASE-SQL's n_t: synthetic examples generated over the linked columns.",
    )
    list_max_local_attempts: int = _field(
        3, "LIST's max_local_attempts: reprompts of one step before the search traces back.",
    )
    list_max_global_attempts: int = _field(
        15, "LIST's max_global_attempts: step queries written per LIST search.",
    )
    list_verifier: str = _field(
        "strong",
        "LIST's verifier: strong runs every sub-query of a step (errors, empty results, join "
        "growth); weak runs only the step's whole query.",
        flag="--list-verifier", choices=LIST_VERIFIERS,
    )
    list_join_growth: float = _field(
        100.0, "A join returning more than this many times the rows of its larger input is implausible.",
    )

    def __post_init__(self) -> None:
        unknown = set(self.models) - set(ROLES)
        if unknown:
            raise ValueError(
                f"Unknown model role(s) {sorted(unknown)}; roles are {', '.join(ROLES)}."
            )
        _choose("schema format", self.schema_format, SCHEMA_FORMATS)
        _choose("schema level", self.schema_level, SCHEMA_LEVELS)
        _choose("DIN-SQL correction", self.din_correction, DIN_CORRECTIONS)
        _choose("N-rep conditions rule", self.nrep_conditions, NREP_CONDITIONS)
        _choose("pairwise mode", self.pairwise, PAIRWISE_MODES)
        _choose("LIST verifier", self.list_verifier, LIST_VERIFIERS)
        _choose("keyword source", self.keywords, KEYWORD_SOURCES)
        _choose("linker", self.linking, LINKERS)
        _choose("grammar scope", self.grammar_scope, GRAMMAR_SCOPES)
        if self.model_timeout_s <= 0:
            raise ValueError("model_timeout_s must be more than 0.")
        if self.model_retries < 0:
            raise ValueError("model_retries must be 0 or more.")
        if self.rate_limit is not None and self.rate_limit <= 0:
            raise ValueError("rate_limit must be more than 0 requests per second, or None.")
        if self.preset is not None:
            defaults = {f.name: _default(f) for f in dataclasses.fields(self)}
            for key, value in preset(self.preset).fields.items():
                if getattr(self, key) == defaults[key]:
                    setattr(self, key, value)
        self.nrep_views = tuple(self.nrep_views)
        for view in self.nrep_views:
            parse_view(view)  # raises ValueError naming the bad part
        if self.fix_rounds < 0:
            raise ValueError("fix_rounds must be 0 or more.")
        if not 0.0 <= self.retry_temperature <= 2.0 or not 0.0 < self.retry_top_p <= 1.0:
            raise ValueError("retry_temperature must be within 0 to 2, retry_top_p more than 0 and at most 1.")
        if (self.pairwise_max_clusters < 0 or self.max_pairwise_calls < 0 or self.synthetic_feature_examples < 0
                or self.synthetic_schema_examples < 0):
            raise ValueError(
                "pairwise_max_clusters, max_pairwise_calls and the synthetic example counts must be 0 or more."
            )
        if self.list_max_local_attempts < 0 or self.list_max_global_attempts < 1:
            raise ValueError("list_max_local_attempts must be 0 or more, list_max_global_attempts 1 or more.")
        if self.list_join_growth <= 1:
            raise ValueError("list_join_growth must be more than 1.")
        if not self.generators:
            raise ValueError("At least one generator must be enabled.")
        for name, n in self.generators.items():
            if n < 1:
                raise ValueError(f"Generator {name!r} needs at least one sample, got {n}.")

    @classmethod
    def for_preset(cls, name: str | None, **explicit: Any) -> Settings:
        """Settings with preset ``name`` applied under ``explicit`` values, which always win,
        even when they equal a field's default (so an option a user typed is never overridden).

        Raises:
            ValueError: an unknown preset or a bad value.
        """
        explicit.pop("preset", None)
        if name is None:
            return cls(**explicit)
        settings = cls(**{**preset(name).fields, **explicit})
        settings.preset = name  # set after: building with it would refill fields at their default
        return settings

    def with_preset(self, name: str) -> Settings:
        """A copy with every choice of preset ``name``, whatever was set before.

        Raises:
            ValueError: an unknown preset.
        """
        return replace(self, preset=name, **preset(name).fields)

    def model_for(self, role: str) -> Any:
        """The model spec for ``role``: its own, else the default."""
        return self.models.get(role, self.model)

    def record(self) -> dict[str, Any]:
        """The settings as plain JSON data; a model object is kept by its name."""

        def plain(value: Any) -> Any:
            if value is None or isinstance(value, (str, int, float, bool)):
                return value
            if isinstance(value, (list, tuple)):
                return [plain(v) for v in value]
            if isinstance(value, dict):
                return {str(k): plain(v) for k, v in value.items()}
            return f"<{getattr(value, 'model_name', None) or type(value).__name__}>"

        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @property
    def checkpoint_file(self) -> str | None:
        """Where this run's checkpoints go: ``checkpoints`` resolved (see its help), or None."""
        if self.checkpoints == "auto":
            return str(Path(self.trace_dir) / "checkpoints.sqlite") if self.trace_dir else None
        return self.checkpoints or None

    @property
    def recursion_limit(self) -> int:
        """A bound on graph steps: the straight path plus two steps per fixer round, doubled."""
        straight = 6  # keywords, values, linking, generators, check, select
        return 2 * (straight + 2 * self.fix_rounds) + 10

    def replace(self, **changes: Any) -> Settings:
        return replace(self, **changes)

    @staticmethod
    def help(name: str) -> str:
        """The help text of field ``name``."""
        return SETTINGS_FIELDS[name].metadata["help"]


def _choose(what: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"Unknown {what} {value!r}; choose one of {', '.join(choices)}.")


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


SETTINGS_FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(Settings)}
"""Every field of :class:`Settings`, by name, with its help and option metadata."""


def default_of(name: str) -> Any:
    """The default value of field ``name``."""
    return _default(SETTINGS_FIELDS[name])
