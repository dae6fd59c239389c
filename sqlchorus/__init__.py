"""sqlchorus: a text-to-SQL agent that writes SQL, checks it against the database, and answers.

    >>> import sqlchorus
    >>> result = sqlchorus.ask("How many customers do we have?", model="openai:gpt-4o-mini")  # doctest: +SKIP
    >>> result.sql, result.rows  # doctest: +SKIP
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

# Public names and the module each lives in. Imported on first use, so that `import
# sqlchorus.tools.engines.sqlite` (or the CLI's --help) does not pay for LangGraph's import.
_EXPORTS = {
    "ask": "sqlchorus.runs.session",
    "aask": "sqlchorus.runs.integrations",
    "as_tool": "sqlchorus.runs.integrations",
    "as_tools": "sqlchorus.runs.toolkit",
    "graph_for": "sqlchorus.runs.integrations",
    "Session": "sqlchorus.runs.session",
    "Result": "sqlchorus.runs.result",
    "build_graph": "sqlchorus.graph.build",
    "Settings": "sqlchorus.config.settings",
    "SqlchorusError": "sqlchorus.config.errors",
    "EmptyQuestionError": "sqlchorus.config.errors",
    "QuestionTooLongError": "sqlchorus.config.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sqlchorus' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
