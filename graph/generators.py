"""The generator branches a graph can run, by name, with what each costs in model calls.

A generator registers here with the node name it runs as, its node function, and how many
model calls and candidates one sample makes under given settings (for
:func:`sqlchorus.graph.expected_calls.expected_calls`). ``Settings.generators`` chooses which
branches a graph has and how many samples each draws.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from sqlchorus.config.settings import Settings, linking_formats
from sqlchorus.graph.list_graph import build_list_graph
from sqlchorus.nodes.generate_din import generate_din
from sqlchorus.nodes.generate_direct import generate_direct
from sqlchorus.nodes.generate_divide_conquer import generate_divide_conquer
from sqlchorus.nodes.generate_list import generate_list
from sqlchorus.nodes.generate_nrep import generate_nrep
from sqlchorus.nodes.generate_query_plan import generate_query_plan
from sqlchorus.nodes.generate_synthetic import generate_synthetic

LIST_PAPER_CALLS = 6
"""Model calls per question LIST made with GPT-4o in the paper (5.84 on BIRD dev, its Table 5).
A search makes at most ``list_max_global_attempts`` step queries, plus a plan and one re-plan per
stuck first step; this is the typical count."""


def _one(settings: Settings) -> int:
    return 1


class Generator(NamedTuple):
    """One generator branch.

    Attributes:
        node: the node name it runs as.
        fn: the node function.
        calls: model calls one sample makes, given the settings (the typical count).
        candidates: candidates one sample makes.
        search: for a generator that runs a subgraph of its own, the function that compiles it;
            the node then gets the compiled subgraph as its ``search`` argument.
    """

    node: str
    fn: Callable[..., Any]
    calls: Callable[[Settings], int] = _one
    candidates: Callable[[Settings], int] = _one
    search: Callable[[], Any] | None = None


GENERATORS: dict[str, Generator] = {
    "divide_conquer": Generator("generate_divide_conquer", generate_divide_conquer),
    "query_plan": Generator("generate_query_plan", generate_query_plan),
    # one call per example set asked for, plus the generation
    "synthetic": Generator(
        "generate_synthetic", generate_synthetic,
        calls=lambda s: 1 + (s.synthetic_feature_examples > 0) + (s.synthetic_schema_examples > 0),
    ),
    # classification, generation and (unless "none") self-correction
    "din": Generator("generate_din", generate_din, calls=lambda s: 2 + (s.din_correction != "none")),
    # its own linking calls plus one generation per view; one candidate per view
    "nrep": Generator(
        "generate_nrep", generate_nrep,
        calls=lambda s: len(s.nrep_views) + len(linking_formats(s.nrep_views, s.schema_format)),
        candidates=lambda s: len(s.nrep_views),
    ),
    "list": Generator("generate_list", generate_list, calls=lambda s: LIST_PAPER_CALLS, search=build_list_graph),
    "direct": Generator("generate_direct", generate_direct),
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
