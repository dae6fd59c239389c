"""retrieve_values: database values that the question's keywords refer to.

Looks each keyword up in the database's value index (MinHash LSH, exact and word lookups,
re-ranked by edit distance; see :mod:`sqlchorus.tools.value_index`) and keeps the best values per
column with their scores. The index is built on first use of a database and reused from the
cache folder afterwards.
"""

from __future__ import annotations

import json
import sqlite3

from langgraph.runtime import Runtime
from opentelemetry import trace

from sqlchorus.graph.context import Context
from sqlchorus.graph.state import SqlchorusState
from sqlchorus.tools.database import SqlError
from sqlchorus.tools.value_index import ValueIndex

NODE = "retrieve_values"


def retrieve_values(state: SqlchorusState, runtime: Runtime[Context]) -> dict:
    context = runtime.context
    settings = context.settings
    keywords = list(state.get("keywords") or [])
    try:
        if context.value_index is None:
            context.value_index = ValueIndex.load_or_build(context.db, settings.value_cache_dir)
        values = context.value_index.search(
            keywords, top_k=settings.values_per_keyword, threshold=settings.value_threshold
        )
    except (SqlError, OSError, sqlite3.Error, ValueError) as e:
        # Values help but are not essential: without them the question is still answered.
        message = getattr(e, "message", None) or str(e)
        return {
            "values": {},
            "errors": [{"node": NODE, "kind": "values", "message": f"No value lookup: {message}"}],
        }
    span = trace.get_current_span()
    span.set_attribute("sqlchorus.keywords", keywords)
    span.set_attribute("sqlchorus.values", json.dumps(values, ensure_ascii=False)[:8000])
    return {"values": values}
