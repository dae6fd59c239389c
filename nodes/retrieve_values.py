"""retrieve_values: database values that the question's keywords refer to.

Looks each keyword up in the database's value index (exact, word, one-edit, MinHash LSH and
column-name lookups, re-ranked by edit distance; see :mod:`sqlchorus.tools.values`) and keeps the best
values per column with their scores. The entry point builds the index (once per database
content, reused from the cache folder afterwards) and hands it in through the context; when it
could not be built, the question is still answered, without values, and the run says why.

With ``Settings.value_embedder`` (the folder of a sentence-transformers model already on disk),
fuzzy candidates are also re-ranked by embedding similarity to the keyword, as CHASE-SQL (after
CHESS) re-ranks its LSH candidates. The model is loaded once per folder and process and never
downloaded; when it cannot be loaded (the ``embeddings`` extra not installed, no model in the
folder), values are still retrieved, ranked by edit distance alone, and the error says why.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from functools import lru_cache

from langgraph.runtime import Runtime
from opentelemetry import trace

from sqlchorus.core.context import Context
from sqlchorus.core.state import ErrorRecord, SqlchorusState
from sqlchorus.core.updates import ValuesUpdate
from sqlchorus.tools.engines.sqlite import SqlError
from sqlchorus.tools.tracing.content import ALL, content_mode, set_documents
from sqlchorus.tools.values import Embedder, EmbedderError, load_local_embedder

NODE = "retrieve_values"


_LOADING = threading.Lock()  # parallel runs of one process load a model once


@lru_cache(maxsize=4)
def _cached_embedder(path: str) -> Embedder:
    # A failure raises, and lru_cache keeps no entry for it: a fixed folder is retried next run.
    return load_local_embedder(path)


def embedder_for(path: str | None) -> Embedder | None:
    """The value embedder of the folder ``path`` (None: no re-ranking), loaded once per process.

    Raises:
        EmbedderError: see :func:`~sqlchorus.tools.values.load_local_embedder`.
    """
    if not path:
        return None
    with _LOADING:
        return _cached_embedder(path)


def _no_values(message: str) -> ValuesUpdate:
    return {"values": {}, "errors": [{"node": NODE, "kind": "values", "message": f"No value lookup: {message}"}]}


def retrieve_values(state: SqlchorusState, runtime: Runtime[Context]) -> ValuesUpdate:
    context = runtime.context
    settings = context.settings
    keywords = list(state.get("keywords") or [])
    if context.value_index is None:
        return _no_values(context.value_index_error or "no value index was given")
    errors: list[ErrorRecord] = []
    try:
        embedder = embedder_for(settings.value_embedder)
    except EmbedderError as e:
        embedder = None
        errors.append({"node": NODE, "kind": "values", "message": f"No embedding re-rank: {e}"})
    try:
        values = context.value_index.search(
            keywords, top_k=settings.values_per_keyword, threshold=settings.value_threshold, embedder=embedder,
        )
    except (SqlError, OSError, sqlite3.Error, ValueError) as e:
        # Values help but are not essential: without them the question is still answered.
        return _no_values(getattr(e, "message", None) or str(e))
    span = trace.get_current_span()
    span.set_attribute("sqlchorus.keywords", keywords)
    content = content_mode(context.tracer)
    if content == ALL:  # retrieved values are the database's data: only with all content
        span.set_attribute("sqlchorus.values", json.dumps(values, ensure_ascii=False)[:8000])
    # The hits as a retriever's documents, best column first, each column's values best first.
    set_documents(span, content, [
        (hit.get("value"), hit.get("score"),
         {"column": column, **({"keyword": hit.get("keyword")} if content == ALL else {})})
        for column, hits in values.items() for hit in hits
    ])
    span.set_attribute("sqlchorus.values.embedding_rerank", embedder is not None)
    return {"values": values, **({"errors": errors} if errors else {})}
