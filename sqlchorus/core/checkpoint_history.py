"""A run's checkpoints as a history: each with the step, the nodes that made it, its source and
parent, and the nodes due next; a search subgraph's own checkpoints (LIST, in a debugger) under
the run's checkpoint they started from.

The debugger, the run service (the viewer's and REST's time travel) and exported regression
tests read it.
"""

from __future__ import annotations

from typing import Any


def _inner_history(graph: Any, run_id: str) -> list[dict[str, Any]]:
    """The checkpoints a search subgraph (LIST, in a debugger) kept under the run's thread, oldest
    first per search; the first of each has the run's checkpoint it started from as parent."""
    items = [t for t in graph.checkpointer.list({"configurable": {"thread_id": run_id}})
             if t.config["configurable"].get("checkpoint_ns")]
    rows: list[dict[str, Any]] = []
    by_ns: dict[str, list[Any]] = {}
    for item in items:
        by_ns.setdefault(item.config["configurable"]["checkpoint_ns"], []).append(item)
    for ns, chain in by_ns.items():
        chain.sort(key=lambda t: t.config["configurable"]["checkpoint_id"])
        due: list[str] = []
        for item in chain:
            # The nodes due next are the channels LangGraph marks "branch:to:<node>".
            upcoming = [c.split(":", 2)[2] for c in item.checkpoint.get("channel_values", {}) if c.startswith("branch:to:")]
            parent = (item.parent_config["configurable"]["checkpoint_id"] if item.parent_config
                      else (item.metadata.get("parents") or {}).get(""))
            source = item.metadata.get("source")
            rows.append({
                "step": item.metadata.get("step"), "node": ", ".join(due) or "(search input)", "source": source,
                "id": item.config["configurable"]["checkpoint_id"], "parent": parent, "next": upcoming,
                "search": ns.split(":", 1)[0], "ns": ns,
            })
            due = upcoming
    return rows


def checkpoint_history(graph: Any, run_id: str, *, inner: bool = False) -> list[dict[str, Any]]:
    """Every checkpoint of run ``run_id`` in ``graph``'s checkpointer, oldest first: step, the
    nodes that ran to make it, source (input, loop, update, fork), id, parent id and the nodes
    due next; with ``inner``, then the checkpoints of searches run inside its steps."""
    rows = []
    items = list(graph.get_state_history({"configurable": {"thread_id": run_id}}))
    by_id = {h.config["configurable"]["checkpoint_id"]: h for h in items}
    for h in reversed(items):
        parent = h.parent_config["configurable"]["checkpoint_id"] if h.parent_config else None
        made_by = [n for n in by_id[parent].next] if parent in by_id else []
        source = h.metadata.get("source")
        node = "(edit)" if source == "update" else ", ".join(dict.fromkeys(made_by)) or "(input)"
        rows.append({
            "step": h.metadata.get("step"), "node": node,
            "source": h.metadata.get("source"), "id": h.config["configurable"]["checkpoint_id"],
            "parent": parent, "next": list(h.next),
        })
    if inner:
        rows.extend(_inner_history(graph, run_id))
    return rows
