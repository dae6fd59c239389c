"""The generator branches a graph can run, by name.

A generator registers here with the node name it runs as; ``Settings.generators`` chooses which
branches a graph has and how many samples each draws.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from sqlchorus.nodes.generate_divide_conquer import generate_divide_conquer


class Generator(NamedTuple):
    node: str
    fn: Callable[..., Any]


GENERATORS: dict[str, Generator] = {
    "divide_conquer": Generator("generate_divide_conquer", generate_divide_conquer),
}


def enabled(generators: dict[str, int]) -> list[tuple[str, Generator, int]]:
    """``(name, generator, samples)`` for each generator named in settings, in settings order.

    Raises:
        ValueError: a name that no generator registered.
    """
    unknown = [name for name in generators if name not in GENERATORS]
    if unknown:
        raise ValueError(
            f"Unknown generator(s) {unknown}; available: {', '.join(sorted(GENERATORS))}."
        )
    return [(name, GENERATORS[name], samples) for name, samples in generators.items()]
