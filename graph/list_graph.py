"""The LIST subgraph: step-wise generation that the database verifies, with reprompt and traceback.

```
START -> list_plan -> list_write_step -> list_verify_step
list_verify_step --(verified, more steps)--> list_write_step
                 --(verified, last step)--> END
                 --(failed, local attempts left)--> list_reprompt -> list_verify_step
                 --(failed, local attempts spent)--> list_traceback
                 --(global attempts spent)--> END, with the best verified state
list_traceback --(a step is verified)--> list_write_step (rewrite the last verified step)
               --(nothing verified)--> list_plan (re-plan)
```

A model call that fails ends the search at once (``halt``): retrying a provider is the model
layer's job, and LIST's attempts are for repairing SQL. Every node is wrapped by
:func:`~sqlchorus.core.tracing.traced_node`, so every transition is a ``route`` event with its
reason, on the span of the node that decided it; the routers are in :mod:`sqlchorus.graph.routing`.

The loop is bounded twice: by ``Settings.list_max_global_attempts`` (queries written, counted in
state) and by the explicit ``recursion_limit`` from
:func:`~sqlchorus.core.list_search.recursion_limit`, a little above the most steps the attempts
allow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.graph import END, START, StateGraph

from sqlchorus.config.settings import Settings
from sqlchorus.core.context import Context
from sqlchorus.core.list_search import ListState
from sqlchorus.core.tracing import state_reducers, traced_node
from sqlchorus.graph import routing
from sqlchorus.nodes.list_plan import list_plan
from sqlchorus.nodes.list_reprompt import list_reprompt
from sqlchorus.nodes.list_traceback import list_traceback
from sqlchorus.nodes.list_verify_step import list_verify_step
from sqlchorus.nodes.list_write_step import list_write_step

NODES: tuple[str, ...] = ("list_plan", "list_write_step", "list_verify_step", "list_reprompt", "list_traceback")

# Each node, its function, its router and where the router may send it: the one place the
# subgraph's edges are declared.
WIRING: tuple[tuple[str, Callable[..., Any], Callable[..., Any], tuple[str, ...]], ...] = (
    ("list_plan", list_plan, routing.after_plan, ("list_write_step", END)),
    ("list_write_step", list_write_step, routing.after_write, ("list_verify_step", END)),
    ("list_verify_step", list_verify_step, routing.after_verify,
     ("list_write_step", "list_reprompt", "list_traceback", END)),
    ("list_reprompt", list_reprompt, routing.after_reprompt, ("list_verify_step", END)),
    ("list_traceback", list_traceback, routing.after_traceback, ("list_write_step", "list_plan")),
)


def build_list_graph():
    """Compile the LIST subgraph. Its input is a ``GeneratorInput``; run it with a
    :class:`~sqlchorus.core.context.Context` and ``recursion_limit(settings)``.

    It is compiled without a checkpointer of its own (``checkpointer=False``): the parent graph
    checkpoints ``generate_list`` as one step, and a resumed run re-runs the whole search.
    """
    reducers = state_reducers(ListState)
    builder = StateGraph(ListState, context_schema=Context)
    for name, fn, router, _ in WIRING:
        builder.add_node(name, traced_node(name, fn, router=router, reducers=reducers))
    builder.add_edge(START, "list_plan")
    for name, _, router, destinations in WIRING:
        builder.add_conditional_edges(name, routing.by_router(router, Settings()), list(destinations))
    return builder.compile(checkpointer=False, name="generate_list")
