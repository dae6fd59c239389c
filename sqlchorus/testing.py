"""Scripted chat models for tests: the public names of :mod:`sqlchorus.runs.scripted_models`.

    from sqlchorus.testing import ScriptedChatModel, oracle_model
"""

from __future__ import annotations

from sqlchorus.runs.scripted_models import (
    ScriptedChatModel,
    count_tokens,
    current_call,
    oracle_model,
    prompt_text,
    question_of,
    role_of_call,
    sql_of,
)

__all__ = [
    "ScriptedChatModel", "count_tokens", "current_call", "oracle_model", "prompt_text", "question_of",
    "role_of_call", "sql_of",
]
