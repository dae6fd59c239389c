"""build_graph: the nodes of ``nodes/`` wired into one compiled LangGraph graph.

```
START -> extract_keywords -> retrieve_values -> link_schema
      -> (Send: one branch per enabled generator sample)
      -> check_candidates --(broken and attempts left)--> fix_candidates -> check_candidates
                         \\--(otherwise)--> select_candidate -> END
```
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

from langgraph.graph import END, START, StateGraph

from sqlchorus.graph import routing
from sqlchorus.graph.context import Context
from sqlchorus.graph.generators import enabled
from sqlchorus.graph.state import SqlchorusState
from sqlchorus.graph.tracing import traced_node
from sqlchorus.nodes.check_candidates import check_candidates
from sqlchorus.nodes.extract_keywords import extract_keywords
from sqlchorus.nodes.fix_candidates import fix_candidates
from sqlchorus.nodes.link_schema import link_schema
from sqlchorus.nodes.retrieve_values import retrieve_values
from sqlchorus.nodes.select_candidate import select_candidate
from sqlchorus.settings import Settings


def state_reducers() -> dict[str, Callable[[Any, Any], Any]]:
    """The reducer of each state key that has one, read from the state's annotations."""
    hints = typing.get_type_hints(SqlchorusState, include_extras=True)
    reducers = {}
    for key, hint in hints.items():
        for meta in getattr(hint, "__metadata__", ()):
            if callable(meta):
                reducers[key] = meta
    return reducers


def build_graph(settings: Settings | None = None, *, checkpointer: Any = None, **compile_kwargs: Any):
    """Compile the graph for ``settings``.

    The graph expects a :class:`~sqlchorus.graph.context.Context` as ``context=`` and must be
    invoked with ``config={"recursion_limit": settings.recursion_limit}``; ``sqlchorus.ask`` does
    both. Pass a ``checkpointer`` to pause, inspect and resume runs.
    """
    settings = settings or Settings()
    generators = enabled(settings.generators)
    reducers = state_reducers()
    builder = StateGraph(SqlchorusState, context_schema=Context)

    def add(name: str, fn: Callable[..., Any], *, successors: tuple[str, ...] = (), router=None, destinations=()):
        builder.add_node(
            name,
            traced_node(name, fn, successors=successors, router=router, reducers=reducers),
            destinations=destinations or None,
        )

    generator_nodes = tuple(g.node for _, g, _ in generators)
    add("extract_keywords", extract_keywords, successors=("retrieve_values",))
    add("retrieve_values", retrieve_values, successors=("link_schema",))
    add("link_schema", link_schema, router=routing.fan_out_generators, destinations=generator_nodes)
    for _, generator, _ in generators:
        add(generator.node, generator.fn, successors=("check_candidates",))
    add(
        "check_candidates",
        check_candidates,
        router=routing.after_check,
        destinations=("fix_candidates", "select_candidate"),
    )
    add("fix_candidates", fix_candidates, successors=("check_candidates",))
    add("select_candidate", select_candidate, successors=(END,))

    builder.add_edge(START, "extract_keywords")
    builder.add_edge("extract_keywords", "retrieve_values")
    builder.add_edge("retrieve_values", "link_schema")
    for node in generator_nodes:
        builder.add_edge(node, "check_candidates")
    builder.add_edge("fix_candidates", "check_candidates")
    builder.add_edge("select_candidate", END)
    return builder.compile(checkpointer=checkpointer, name="sqlchorus", **compile_kwargs)
