"""Settings: every knob of a run, as explicit arguments with sane defaults."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

ROLES: tuple[str, ...] = ("keywords", "linking", "generation", "fixing", "selection")
"""The model roles. Each can use its own chat model; unset roles use ``Settings.model``."""

SCHEMA_FORMATS: tuple[str, ...] = ("ddl", "m-schema", "mac-schema", "json", "markdown")
SCHEMA_LEVELS: tuple[str, ...] = ("full", "tables", "columns")
PAIRWISE_MODES: tuple[str, ...] = ("never", "low-confidence", "always")
DIN_CORRECTIONS: tuple[str, ...] = ("gentle", "generic", "none")
LIST_VERIFIERS: tuple[str, ...] = ("strong", "weak")
NREP_VIEWS: tuple[str, ...] = (
    "mac-schema:full",
    "mac-schema:columns",
    "m-schema:tables",
    "m-schema:columns",
    "ddl:columns",
)
"""N-rep's final five-candidate configuration (its Table 4): representation and filter level."""


@dataclass
class Settings:
    """How one question is answered.

    Attributes:
        model: the chat model for every role without its own: a ``provider:model`` name
            (``openai:gpt-4o-mini``, ``openai-compatible:<model>@<base_url>``) or any
            langchain-core ``BaseChatModel``.
        models: per-role overrides, keyed by a name from :data:`ROLES`.
        generators: which generator branches run, and how many samples each draws.
        preset: ``fast``, ``balanced`` or ``full`` (see :mod:`sqlchorus.presets`): fills every
            field it covers that is still at its default, so explicit choices win; None for none.
        din_correction: DIN-SQL's self-correction prompt: ``gentle`` (checks, assumes nothing
            is wrong), ``generic`` (told the query is buggy) or ``none`` (no correction call).
        nrep_views: N-rep's schema views, one candidate each, as ``format:level`` (a format of
            ``SCHEMA_FORMATS``, a level of ``SCHEMA_LEVELS``), optionally ``@format`` to filter
            with the links of another format's linking call; the paper's five by default.
        examples_dir: a folder of ``<prompt>_examples.json`` files that replace the shipped
            few-shot examples of the prompts they name (see :mod:`sqlchorus.fewshot`).
        fix_rounds: CHASE-SQL's beta: fixer rounds per candidate at most.
        schema_format: the schema view shown to linking and generation.
        schema_level: how much of the schema generation sees: ``full``, the linked ``tables``
            with all their columns, or the linked ``columns`` only.
        sql_timeout_s: time budget of one SQL statement.
        max_rows: rows fetched per statement at most; more are cut and flagged.
        max_bytes: approximate bytes fetched per statement at most.
        answer_rows: rows kept in the final answer.
        sample_values: distinct example values per column in schema views.
        values_per_keyword: values kept per keyword by ``retrieve_values``.
        value_threshold: lowest fuzzy score (0-100) for a retrieved value.
        value_cache_dir: folder of value index files (built once per database content);
            None uses the user cache folder (``~/.cache/sqlchorus/values``).
        temperature: sampling temperature for generation (0 is greedy).
        trace_dir: folder for ``<run-id>.jsonl`` trace files; None writes no file.
        otlp_endpoint: an OTLP/HTTP traces endpoint to export to as well.
        max_tokens: cap on tokens a model may generate per call (local models: 512 at most).
        cache: keep model responses in a persistent SQLite cache, so that the same request to
            the same model is paid for once. Applies to models named by ``provider:model``; a
            model object passed in is the caller's to cache (langchain-core's ``cache=``).
        cache_path: the cache file; None uses ``responses.sqlite`` in ``$SQLCHORUS_CACHE``, else
            in the user cache folder (``~/.cache/sqlchorus``).
        model_timeout_s: time budget of one model call, in seconds.
        model_retries: retries of a model call after a transient error (rate limit, timeout,
            connection, server error), with exponential backoff.
        retry_backoff_s: the first backoff wait; each retry doubles it (with jitter).
        rate_limit: most model requests per second for models named by ``provider:model``,
            shared by all roles; None for no limit.
        prices_file: a JSON or TOML file of prices per model (USD per million tokens) read on
            top of the built-in table (see :mod:`sqlchorus.pricing`).
        grammar: constrain local models that support it (``local:...``) with a grammar built
            from the schema, so generation and fixing can only write one SELECT statement over
            real tables and columns.
        generator_temperatures: sampling temperature of each generator's samples after its
            first, by generator name; unnamed generators use ``sample_temperature``. The first
            sample of every generator uses ``temperature``, so one sample stays reproducible.
        sample_temperature: temperature of the second and later samples of a generator
            (CHASE-SQL raises the temperature for diversity).
        shuffle_schema: show the second and later samples of a generator the schema with its
            tables and columns in a shuffled order (seeded by the sample), as CHASE-SQL does.
        pairwise: when the selection model compares candidates pairwise: ``never`` (the
            largest result cluster wins), ``low-confidence`` (N-rep: only when the vote is not
            confident) or ``always`` (CHASE-SQL: whenever results disagree).
        vote_confident_share: share of all votes the largest cluster needs for a confident vote.
        vote_contender_share: share of all votes at which the runner-up makes a vote
            unconfident (see :mod:`sqlchorus.nodes.select_candidate` for both defaults).
        pairwise_max_clusters: clusters compared pairwise at most (the largest ones); the
            selection model is called at most ``k * (k - 1)`` times.
        synthetic_feature_examples: CHASE-SQL's n_f: examples generated over the whole schema,
            by common SQL features.
        synthetic_schema_examples: CHASE-SQL's n_t: examples generated over the linked columns.
        list_max_local_attempts: LIST's max_local_attempts: reprompts of one step before the
            search traces back (to the last verified step, or to a new plan when none is).
        list_max_global_attempts: LIST's max_global_attempts: step queries written (first
            writes and reprompts together) per LIST run; when spent, the best verified state
            is the candidate.
        list_verifier: ``strong`` decomposes each step's query into LIST sub-queries and runs
            every one (errors, empty results, implausible join growth); ``weak`` runs only the
            step's whole query (errors and empty results), as the paper's ablation.
        list_join_growth: a join whose result has more than this many times the rows of its
            larger input fails LIST's strong verification as implausible growth.
    """

    model: Any = None
    models: dict[str, Any] = field(default_factory=dict)
    generators: dict[str, int] = field(default_factory=lambda: {"divide_conquer": 1})
    preset: str | None = None
    din_correction: str = "gentle"
    nrep_views: tuple[str, ...] = NREP_VIEWS
    examples_dir: str | None = None
    fix_rounds: int = 3
    schema_format: str = "m-schema"
    schema_level: str = "full"
    sql_timeout_s: float = 10.0
    max_rows: int = 10_000
    max_bytes: int = 16 * 1024 * 1024
    answer_rows: int = 1_000
    sample_values: int = 3
    values_per_keyword: int = 5
    value_threshold: float = 80.0
    value_cache_dir: str | None = None
    temperature: float = 0.0
    max_tokens: int | None = 2048
    trace_dir: str | None = "traces"
    otlp_endpoint: str | None = None
    cache: bool = True
    cache_path: str | None = None
    model_timeout_s: float = 120.0
    model_retries: int = 2
    retry_backoff_s: float = 0.5
    rate_limit: float | None = None
    prices_file: str | None = None
    grammar: bool = True
    generator_temperatures: dict[str, float] = field(default_factory=dict)
    sample_temperature: float = 0.5
    shuffle_schema: bool = True
    pairwise: str = "low-confidence"
    vote_confident_share: float = 0.4
    vote_contender_share: float = 0.4
    pairwise_max_clusters: int = 4
    synthetic_feature_examples: int = 12
    synthetic_schema_examples: int = 12
    list_max_local_attempts: int = 3
    list_max_global_attempts: int = 15
    list_verifier: str = "strong"
    list_join_growth: float = 100.0

    def __post_init__(self) -> None:
        unknown = set(self.models) - set(ROLES)
        if unknown:
            raise ValueError(
                f"Unknown model role(s) {sorted(unknown)}; roles are {', '.join(ROLES)}."
            )
        if self.schema_format not in SCHEMA_FORMATS:
            raise ValueError(
                f"Unknown schema format {self.schema_format!r}; "
                f"choose one of {', '.join(SCHEMA_FORMATS)}."
            )
        if self.schema_level not in SCHEMA_LEVELS:
            raise ValueError(
                f"Unknown schema level {self.schema_level!r}; choose one of {', '.join(SCHEMA_LEVELS)}."
            )
        if self.model_timeout_s <= 0:
            raise ValueError("model_timeout_s must be more than 0.")
        if self.model_retries < 0:
            raise ValueError("model_retries must be 0 or more.")
        if self.rate_limit is not None and self.rate_limit <= 0:
            raise ValueError("rate_limit must be more than 0 requests per second, or None.")
        if self.din_correction not in DIN_CORRECTIONS:
            raise ValueError(
                f"Unknown DIN-SQL correction {self.din_correction!r}; choose one of {', '.join(DIN_CORRECTIONS)}."
            )
        from sqlchorus import presets  # presets read Settings; imported late to avoid a cycle

        if self.preset is not None:
            presets.fill_defaults(self)
        self.nrep_views = tuple(self.nrep_views)
        for view in self.nrep_views:
            presets.parse_view(view)  # raises ValueError naming the bad part
        if self.fix_rounds < 0:
            raise ValueError("fix_rounds must be 0 or more.")
        if self.pairwise not in PAIRWISE_MODES:
            raise ValueError(f"Unknown pairwise mode {self.pairwise!r}; choose one of {', '.join(PAIRWISE_MODES)}.")
        if self.pairwise_max_clusters < 0 or self.synthetic_feature_examples < 0 or self.synthetic_schema_examples < 0:
            raise ValueError("pairwise_max_clusters and the synthetic example counts must be 0 or more.")
        if self.list_max_local_attempts < 0 or self.list_max_global_attempts < 1:
            raise ValueError("list_max_local_attempts must be 0 or more, list_max_global_attempts 1 or more.")
        if self.list_verifier not in LIST_VERIFIERS:
            raise ValueError(f"Unknown LIST verifier {self.list_verifier!r}; choose one of {', '.join(LIST_VERIFIERS)}.")
        if self.list_join_growth <= 1:
            raise ValueError("list_join_growth must be more than 1.")
        if not self.generators:
            raise ValueError("At least one generator must be enabled.")
        for name, n in self.generators.items():
            if n < 1:
                raise ValueError(f"Generator {name!r} needs at least one sample, got {n}.")

    def model_for(self, role: str) -> Any:
        """The model spec for ``role``: its own, else the default."""
        return self.models.get(role, self.model)

    @property
    def recursion_limit(self) -> int:
        """A bound on graph steps: the straight path plus two steps per fixer round, doubled."""
        straight = 6  # keywords, values, linking, generators, check, select
        return 2 * (straight + 2 * self.fix_rounds) + 10

    def replace(self, **changes: Any) -> Settings:
        return replace(self, **changes)
