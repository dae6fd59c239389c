"""Settings: every knob of a run, as explicit arguments with sane defaults."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

ROLES: tuple[str, ...] = ("keywords", "linking", "generation", "fixing", "selection")
"""The model roles. Each can use its own chat model; unset roles use ``Settings.model``."""

SCHEMA_FORMATS: tuple[str, ...] = ("ddl", "m-schema", "mac-schema", "json", "markdown")
SCHEMA_LEVELS: tuple[str, ...] = ("full", "tables", "columns")


@dataclass
class Settings:
    """How one question is answered.

    Attributes:
        model: the chat model for every role without its own: a ``provider:model`` name
            (``openai:gpt-4o-mini``, ``openai-compatible:<model>@<base_url>``) or any
            langchain-core ``BaseChatModel``.
        models: per-role overrides, keyed by a name from :data:`ROLES`.
        generators: which generator branches run, and how many samples each draws.
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
        temperature: sampling temperature for generation (0 is greedy).
        trace_dir: folder for ``<run-id>.jsonl`` trace files; None writes no file.
        otlp_endpoint: an OTLP/HTTP traces endpoint to export to as well.
        max_tokens: cap on tokens a model may generate per call.
    """

    model: Any = None
    models: dict[str, Any] = field(default_factory=dict)
    generators: dict[str, int] = field(default_factory=lambda: {"divide_conquer": 1})
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
    temperature: float = 0.0
    max_tokens: int | None = 2048
    trace_dir: str | None = "traces"
    otlp_endpoint: str | None = None

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
        if self.fix_rounds < 0:
            raise ValueError("fix_rounds must be 0 or more.")
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
