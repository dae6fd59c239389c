"""The runtime context: dependencies that travel beside state, never inside it.

The database handle, the chat model per role, the settings, the introspected schema and the
tracer are not serialisable and must not be checkpointed; LangGraph hands them to every node as
``runtime.context``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from opentelemetry import trace

from sqlchorus.settings import Settings
from sqlchorus.tools.database import GuardedDatabase
from sqlchorus.tools.schema import DatabaseSchema


@dataclass
class Context:
    """Everything a node may use besides state.

    Attributes:
        db: the guarded database; the only way a node reaches the data.
        models: one chat model per role (see ``sqlchorus.settings.ROLES``).
        settings: the run's settings.
        schema: the database's introspected schema.
        tracer: OpenTelemetry tracer for node, model and SQL spans.
        value_index: a value index with ``search(keywords)``; built on first use when None.
    """

    db: GuardedDatabase
    models: dict[str, BaseChatModel]
    settings: Settings
    schema: DatabaseSchema
    tracer: Any = field(default_factory=lambda: trace.NoOpTracer())
    value_index: Any = None
