"""build_graph: the nodes of ``nodes/`` wired into one compiled LangGraph graph.

```
START -> extract_keywords -> retrieve_values -> link_schema
      -> (Send: one branch per enabled generator sample)
      -> check_candidates --(broken and attempts left)--> fix_candidates -> check_candidates
                         \\--(otherwise)--> select_candidate -> END
```

The wiring is data: :data:`EDGES` holds the fixed edges and :data:`ROUTED` the nodes that decide
where to go; both the graph's edges and the routes each node's span records come from them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from functools import partial
from typing import Any

from langgraph.graph import END, START, StateGraph

from sqlchorus.config.settings import Settings
from sqlchorus.core.context import Context
from sqlchorus.core.state import SqlchorusState
from sqlchorus.core.tracing import state_reducers, traced_node
from sqlchorus.graph import routing
from sqlchorus.graph.generators import enabled
from sqlchorus.nodes.check_candidates import check_candidates
from sqlchorus.nodes.extract_keywords import extract_keywords
from sqlchorus.nodes.fix_candidates import fix_candidates
from sqlchorus.nodes.link_schema import link_schema
from sqlchorus.nodes.retrieve_values import retrieve_values
from sqlchorus.nodes.select_candidate import select_candidate

NODES: dict[str, Callable[..., Any]] = {
    "extract_keywords": extract_keywords,
    "retrieve_values": retrieve_values,
    "link_schema": link_schema,
    "check_candidates": check_candidates,
    "fix_candidates": fix_candidates,
    "select_candidate": select_candidate,
}
"""The fixed nodes; the generator nodes come from the settings (:mod:`sqlchorus.graph.generators`)."""

EDGES: tuple[tuple[str, str], ...] = (
    (START, "extract_keywords"),
    ("extract_keywords", "retrieve_values"),
    ("retrieve_values", "link_schema"),
    ("fix_candidates", "check_candidates"),
    ("select_candidate", END),
)
"""The fixed edges. Every generator node also has an edge to ``check_candidates``."""

GENERATORS_JOIN = "check_candidates"

ROUTED: dict[str, Callable[..., Any]] = {
    "link_schema": routing.fan_out_generators,
    "check_candidates": routing.after_check,
}
"""Nodes whose router decides where to go, and the router (``fan_out_generators`` is bound to
the graph's generator nodes when the graph is built)."""

CHECK_DESTINATIONS = ("fix_candidates", "select_candidate")


def build_graph(
    settings: Settings | None = None, *, checkpointer: Any = None, steppable: bool = False, **compile_kwargs: Any,
):
    """Compile the graph for ``settings``.

    ``steppable`` is for a debugger: a generator's search subgraph (LIST) then keeps its own
    checkpoints in the graph's checkpointer, so that a run can pause between its steps and go
    on from there. Otherwise a search runs as one step of its node and keeps none.

    The graph expects a :class:`~sqlchorus.core.context.Context` as ``context=`` and must be
    invoked with ``config={"recursion_limit": settings.recursion_limit}``; ``sqlchorus.ask`` does
    both. Pass a ``checkpointer`` to pause, inspect and resume runs. A host that passes input
    only runs :func:`sqlchorus.graph_for`'s graph, which prepares each run as ``ask`` does.
    """
    settings = settings or Settings()
    reducers = state_reducers(SqlchorusState)
    builder = StateGraph(SqlchorusState, context_schema=Context)

    nodes = dict(NODES)
    generator_nodes: list[str] = []
    by_name: dict[str, str] = {}
    for name, generator, _ in enabled(settings.generators):
        by_name[name] = generator.node
        # A generator with a search of its own (LIST) gets its subgraph, compiled here (the
        # registry has resolved a search given by import path to its function).
        search = generator.search() if callable(generator.search) else None
        if search is not None and steppable:
            search = search.copy(update={"checkpointer": None})  # None: the parent's checkpointer
        nodes[generator.node] = partial(generator.fn, search=search) if search is not None else generator.fn
        generator_nodes.append(generator.node)
    edges = [*EDGES, *((node, GENERATORS_JOIN) for node in generator_nodes)]
    destinations = {"link_schema": tuple(generator_nodes), "check_candidates": CHECK_DESTINATIONS}
    routers: dict[str, Callable[..., Any]] = {
        **ROUTED, "link_schema": partial(routing.fan_out_generators, nodes=by_name),
    }

    successors: dict[str, list[str]] = defaultdict(list)
    for source, target in edges:
        successors[source].append(target)
    order = ["extract_keywords", "retrieve_values", "link_schema", *generator_nodes,
             "check_candidates", "fix_candidates", "select_candidate"]
    for name in order:
        builder.add_node(
            name,
            traced_node(name, nodes[name], successors=tuple(successors[name]), router=routers.get(name),
                        reducers=reducers),
        )
    for source, target in edges:
        builder.add_edge(source, target)
    # Routing is on edges, not in the nodes' return values: a checkpoint after a routed node, or
    # a state edited through LangGraph's API (update_state, with or without as_node), goes on
    # where the router sends the state as it now is.
    for name, router in routers.items():
        builder.add_conditional_edges(name, routing.by_router(router, settings), list(destinations[name]))
    return builder.compile(checkpointer=checkpointer, name="sqlchorus", **compile_kwargs)
