"""Runs of the graph for the product: a session and its results, runs for servers, the
debugger, the index of kept runs, standalone selection, integrations with agent frameworks,
and the demo database."""
