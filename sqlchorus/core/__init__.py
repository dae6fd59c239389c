"""Floor 3, the graph core: state and reducers, the runtime context, model resolution and calls,
tracing, candidates and the selection logic. Nodes (floor 4) are built on it; the graph
assembly (floor 5) wires them.
"""
