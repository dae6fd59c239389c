"""retrieve_values: database values that the question's keywords refer to.

Looks each keyword up in the context's value index and keeps the best values per column.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from sqlchorus.graph.context import Context
from sqlchorus.graph.state import SqlchorusState
from sqlchorus.tools.values import ValueMatcher

NODE = "retrieve_values"


def retrieve_values(state: SqlchorusState, runtime: Runtime[Context]) -> dict:
    context = runtime.context
    settings = context.settings
    if context.value_index is None:
        context.value_index = ValueMatcher.build(context.db, context.schema)
    keywords = list(state.get("keywords") or [])
    values = context.value_index.search(
        keywords, top_k=settings.values_per_keyword, threshold=settings.value_threshold
    )
    return {"values": values}
