"""The graph as `langgraph dev` (and LangGraph Studio) serve it: ``langgraph.json`` names
``graph`` here.

A LangGraph server passes a run its input only, so this graph declares what it takes
(:class:`StudioInput`: the question, the SQLite file, a hint) and what it gives
(:class:`StudioOutput`: the answer), and builds each node's context itself from the database in
the state: one :class:`~sqlchorus.api.Session` per server process, each database opened once.
The model and preset come from ``SQLCHORUS_MODEL`` and ``SQLCHORUS_PRESET`` (set them in
``langgraph.json``'s ``env`` or the shell), since a server has no command line of ours.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from typing_extensions import NotRequired, TypedDict

from sqlchorus.api import Session
from sqlchorus.config.settings import Settings
from sqlchorus.core.context import Context
from sqlchorus.core.state import Answer, ErrorRecord, Selection
from sqlchorus.graph.build import build_graph


class StudioInput(TypedDict):
    """What a run takes."""

    question: str
    database: NotRequired[str]  # a SQLite file; the bundled demo database when left out
    evidence: NotRequired[str]


class StudioOutput(TypedDict, total=False):
    """What a run gives."""

    answer: Answer
    selection: Selection
    errors: list[ErrorRecord]


def studio_settings() -> Settings:
    """Settings from the environment: ``SQLCHORUS_MODEL`` and ``SQLCHORUS_PRESET``; no trace files
    or checkpoints of ours (the server keeps its own)."""
    settings = Settings(model=os.environ.get("SQLCHORUS_MODEL") or None, trace_dir=None, checkpoints=None)
    preset = os.environ.get("SQLCHORUS_PRESET")
    return settings.with_preset(preset) if preset else settings


_lock = threading.Lock()
_session: list[Session] = []


def _session_once() -> Session:
    with _lock:
        if not _session:
            _session.append(Session(studio_settings()))
        return _session[0]


def context_for(state: dict[str, Any], runtime: Any) -> Context:
    """The context of a node of a run over ``state['database']``."""
    session = _session_once()
    return session.dependencies.context(session.database(state.get("database") or None))


graph = build_graph(studio_settings(), input_schema=StudioInput, output_schema=StudioOutput, context_for=context_for)
"""The compiled graph `langgraph dev` serves."""
