"""The graph as `langgraph dev` (and LangGraph Studio) serve it: ``langgraph.json`` names
``graph`` here.

A LangGraph server passes a run its input only, so this is :func:`sqlchorus.runs.integrations.graph_for`'s
graph: it declares what it takes (the question, the SQLite file, a hint) and what it gives (the
answer), and its one node prepares each run as ``ask`` does over the database in the state, the
pipeline running as its subgraph (the server keeps the checkpoints). A run that cannot be made
(an empty question, a database that is not there) fails with its cause in the message the
server shows, not with the server's "An internal error occurred". Its settings come
from the environment, as ``Settings`` reads it everywhere: ``SQLCHORUS_MODEL``,
``SQLCHORUS_PRESET`` and any other ``SQLCHORUS_<FIELD>`` (set them in ``langgraph.json``'s ``env``
or the shell), since a server has no command line of ours.
"""

from __future__ import annotations

from sqlchorus.config.settings import Settings
from sqlchorus.runs.integrations import graph_for


def studio_settings() -> Settings:
    """Settings from the environment (``SQLCHORUS_MODEL``, ``SQLCHORUS_PRESET``, ...), with no
    trace files or checkpoints of ours (the server keeps its own)."""
    return Settings(trace_dir=None, checkpoints=None)


graph = graph_for(settings=studio_settings(), hosted_errors=True)
"""The compiled graph `langgraph dev` serves."""
