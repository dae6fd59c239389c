"""The runtime context: dependencies that travel beside state, never inside it.

The database handle, the chat model per role, the settings, the introspected schema, the value
index, the response cache, the price table and the tracer are not serialisable and must not be
checkpointed; LangGraph hands them to every node as ``runtime.context``. An entry point builds
them once (:mod:`sqlchorus.core.dependencies`) and puts them here for each run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from opentelemetry import trace

from sqlchorus.config.settings import Settings
from sqlchorus.tools.models.cache import ResponseCache
from sqlchorus.tools.engines.sqlite import GuardedDatabase
from sqlchorus.tools.models.pricing import PriceTable
from sqlchorus.tools.engines.catalog import DatabaseSchema


@dataclass
class Context:
    """Everything a node may use besides state.

    Attributes:
        db: the guarded database; the only way a node reaches the data.
        models: one chat model per role (see ``sqlchorus.config.settings.ROLES``).
        settings: the run's settings.
        schema: the database's introspected schema.
        tracer: OpenTelemetry tracer for node, model and SQL spans.
        value_index: a value index with ``search(keywords)``, or None when none could be built
            (``value_index_error`` says why).
        value_index_error: why there is no value index.
        cache: the persistent response cache, or None for none.
        prices: the price table model calls are costed with.
        progress: called with a :class:`~sqlchorus.core.tracing.NodeEvent` as each node starts
            and ends (from the graph's threads), or None.
        calls: the run's call log (:class:`~sqlchorus.core.checkpoints.CallLog`): every model
            call kept with its answer, and on a replay the answers served again; None for none.
        memo: what the run works out once and reuses: the schema's ranking for the question,
            the notes on narrowed schemas (:mod:`sqlchorus.core.budget`).
        pause: a debugger's question, asked before each step of a search subgraph (LIST),
            ``pause(node, state)``: True pauses the run there (a LangGraph ``interrupt``), to
            go on when the debugger resumes it; None never pauses.
        model_limiter: the requests and tokens per minute of each model, shared by the entry
            point's runs (:class:`~sqlchorus.core.rate_limits.ModelLimiter`; on a Ray cluster,
            by every worker), asked before each request to a model; None for none.
        taught: the database's taught examples and glossary (:class:`~sqlchorus.core.taught.Taught`),
            which the few-shot generators show ahead of their shipped examples; None for none.
    """

    db: GuardedDatabase
    models: dict[str, BaseChatModel]
    settings: Settings
    schema: DatabaseSchema
    tracer: Any = field(default_factory=lambda: trace.NoOpTracer())
    value_index: Any = None
    value_index_error: str | None = None
    cache: ResponseCache | None = None
    prices: PriceTable = field(default_factory=PriceTable)
    progress: Callable[[Any], None] | None = None
    memo: dict[str, Any] = field(default_factory=dict, repr=False)
    calls: Any = None
    pause: Callable[[str, Any], bool] | None = None
    model_limiter: Any = None
    taught: Any = None
