"""Scripted chat models for tests, ours and our users' (:mod:`sqlchorus.testing.scripted_models`).

    from sqlchorus.testing import ScriptedChatModel, oracle_model

The floors below the interfaces never import this package: the product's own model that answers
only from answers it is given is :class:`sqlchorus.core.replay_model.ReplayChatModel`.
"""

from __future__ import annotations

from sqlchorus.testing.scripted_models import (
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
