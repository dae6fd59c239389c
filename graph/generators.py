"""The generator branches a graph can run, by name.

A generator registers here with the node name it runs as; ``Settings.generators`` chooses which
branches a graph has and how many samples each draws.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from sqlchorus.nodes.generate_divide_conquer import generate_divide_conquer
from sqlchorus.nodes.generate_query_plan import generate_query_plan
from sqlchorus.nodes.generate_synthetic import generate_synthetic
from sqlchorus.nodes.generate_din import generate_din
from sqlchorus.nodes.generate_nrep import generate_nrep
from sqlchorus.nodes.generate_list import generate_list


class Generator(NamedTuple):
    node: str
    fn: Callable[..., Any]


GENERATORS: dict[str, Generator] = {
    "divide_conquer": Generator("generate_divide_conquer", generate_divide_conquer),
    "query_plan": Generator("generate_query_plan", generate_query_plan),
    "synthetic": Generator("generate_synthetic", generate_synthetic),
    "din": Generator("generate_din", generate_din),
    "nrep": Generator("generate_nrep", generate_nrep),
    "list": Generator("generate_list", generate_list),
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
