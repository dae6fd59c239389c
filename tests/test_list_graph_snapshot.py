"""The LIST subgraph's topology, as a mermaid drawing: a change to it is a visible diff."""

from __future__ import annotations

from sqlchorus.graph.list_graph import NODES, build_list_graph


def test_list_subgraph_mermaid(snapshot):
    graph = build_list_graph().get_graph()
    assert set(graph.nodes) == {"__start__", "__end__", *NODES}
    assert graph.draw_mermaid(with_styles=False) == snapshot
