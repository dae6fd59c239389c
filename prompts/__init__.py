"""Prompt templates, one file per prompt, and few-shot examples as data files.

A template names its inputs as ``{name}``; :func:`render` fills exactly those, so literal braces
in examples (JSON, SQL) need no escaping. Few-shot examples live in ``<prompt>_examples.json``
and are replaceable without touching code.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

_VARIABLE = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


class Prompt(str):
    """A rendered prompt: its text, and in ``name`` the template it was rendered from, which a
    model call records in its run metadata so that the call can be told apart without reading
    its wording."""

    name: str

    def __new__(cls, text: str, name: str) -> Prompt:
        prompt = super().__new__(cls, text)
        prompt.name = name
        return prompt


@cache
def load(name: str) -> str:
    """The text of template ``name`` (without ``.txt``)."""
    return resources.files(__package__).joinpath(f"{name}.txt").read_text(encoding="utf-8")


@cache
def examples(name: str) -> list[dict[str, Any]]:
    """The few-shot examples shipped for prompt ``name``."""
    path = resources.files(__package__).joinpath(f"{name}_examples.json")
    return json.loads(path.read_text(encoding="utf-8"))


def variables(name: str) -> set[str]:
    """The input names template ``name`` expects."""
    return set(_VARIABLE.findall(load(name)))


def render(name: str, **values: Any) -> Prompt:
    """Fill template ``name``; the result is a :class:`Prompt` that knows its template's name.

    Raises:
        KeyError: a variable of the template was not given, or a given value is not used.
    """
    expected = variables(name)
    missing = expected - set(values)
    extra = set(values) - expected
    if missing or extra:
        raise KeyError(
            f"Prompt {name!r} expects {sorted(expected)}; missing {sorted(missing)}, "
            f"unexpected {sorted(extra)}."
        )
    return Prompt(_VARIABLE.sub(lambda m: str(values[m.group(1)]), load(name)), name)


def names() -> list[str]:
    """All shipped template names."""
    return sorted(
        p.name[: -len(".txt")]
        for p in resources.files(__package__).iterdir()
        if p.name.endswith(".txt")
    )
