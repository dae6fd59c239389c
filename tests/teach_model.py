"""A scripted model that reads the taught examples its prompts show, as a model would: for the
teach tests, in process and as ``python:teach_model:model`` in a server under test (this file is
copied beside the server's ``server_factories.py``, with the gold SQL in ``gold.json``)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from pathlib import Path

from sqlchorus.testing import ScriptedChatModel, oracle_model, prompt_text

HEADER = "Examples verified by the user on this database"
"""How a prompt starts its taught examples (:func:`sqlchorus.core.taught.taught_block`)."""
PAIR = re.compile(r"^Question: (.+)\n(?:Hint: .*\n)?SQL: (.+)$", re.M)
UNSURE = "[unsure] "
"""Marks a question the model answers with prose: a run with no SQL."""
GATE = re.compile(r"\[gate (\w+)\] ")
"""Marks a question whose calls wait at a gate of the test's (:class:`servers.Gate`)."""


def taught_sql(prompt: str) -> list[str]:
    """The SQL of the taught examples ``prompt`` shows, the most like its question first."""
    if HEADER not in prompt:
        return []
    return [sql.strip() for _, sql in PAIR.findall(prompt.split(HEADER, 1)[1])]


def reading_model(gold: dict[str, str], *, hold: Callable[[str], None] | None = None,
                  prompts: list[str] | None = None) -> ScriptedChatModel:
    """The oracle over ``gold`` (question to SQL). A question it has no gold for it answers with
    the SQL of the taught example its prompt shows first, as a model that reads its examples
    would; one that starts with :data:`UNSURE`, with prose. ``hold``: called with the gate's name
    of a question marked :data:`GATE`, before each of its calls is answered. ``prompts``: every
    prompt is added to it."""
    seen = threading.local()

    def answer(question: str) -> str | None:
        question = GATE.sub("", question)
        if question.startswith(UNSURE):
            return None
        return gold.get(question) or next(iter(getattr(seen, "taught", [])), None)

    inner = oracle_model(answer, name="teach").responses

    def respond(messages) -> str:
        text = prompt_text(messages)
        if prompts is not None:
            prompts.append(text)
        gate = GATE.search(text)
        if gate and hold is not None:
            hold(gate.group(1))
        seen.taught = taught_sql(text)
        return inner(messages)

    return ScriptedChatModel(respond, name="teach")


def model() -> ScriptedChatModel:
    """``python:teach_model:model``: the reading model over ``gold.json`` beside this file; a
    question marked ``[gate NAME]`` holds every call until the test opens that gate."""
    from server_factories import _held  # written beside it by servers.server_env

    gold = json.loads((Path(__file__).parent / "gold.json").read_text(encoding="utf-8"))
    return reading_model(gold, hold=_held)
