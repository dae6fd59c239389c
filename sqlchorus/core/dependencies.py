"""What runs need besides their state, built once by an entry point and handed to the graph.

:class:`Dependencies` holds what every run of an entry point shares: the chat model of each role
(with one rate limiter), the response cache, the price table and each model's requests and tokens
per minute. :class:`DatabaseResources` holds what every run on one database shares: the guarded
database, its introspected schema and its value index. :meth:`Dependencies.context` puts both
into a run's :class:`~sqlchorus.core.context.Context`, with the run's tracer on a view of the
database, so that concurrent runs on one database each trace their own SQL and nothing per-run
is written onto the shared database.

Nothing here is global: an entry point (``ask``, a session, evaluation, standalone selection)
builds these, keeps them as long as it answers questions, and closes them.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from opentelemetry import trace

from sqlchorus.config.settings import ROLES, Settings
from sqlchorus.core.context import Context
from sqlchorus.core.models import ModelConfigError, rate_limiter, resolve_roles
from sqlchorus.core.rate_limits import LocalModelLimiter, ModelLimiter, model_limits
from sqlchorus.tools.tracing import attributes as attrs
from sqlchorus.tools.models.cache import ResponseCache
from sqlchorus.tools.engines.sqlite import Database, DatabaseOpenError, SqlError
from sqlchorus.tools.engines.opening import database_key as engine_key
from sqlchorus.tools.engines.opening import file_of, open_database
from sqlchorus.tools.models.pricing import PriceFileError, PriceTable
from sqlchorus.tools.engines.catalog import DatabaseSchema
from sqlchorus.tools.schema.introspect import introspect
from sqlchorus.tools.values import ValueIndex, content_fingerprint


@dataclass
class Dependencies:
    """The chat models, response cache and price table that an entry point's runs share.

    Attributes:
        settings: the settings they were built from.
        models: one chat model per role.
        cache: the persistent response cache, or None (turned off, no named model to cache,
            or its file could not be opened: a cache that cannot be used means no cache, not
            no answer).
        prices: the built-in price table with the settings' prices file on top.
        model_limiter: the requests and tokens per minute of each model
            (:class:`~sqlchorus.core.rate_limits.ModelLimiter`), or None for none.
    """

    settings: Settings
    models: dict[str, BaseChatModel]
    cache: ResponseCache | None = None
    prices: PriceTable = field(default_factory=PriceTable)
    model_limiter: ModelLimiter | None = None

    @classmethod
    def build(cls, settings: Settings, *, roles: tuple[str, ...] = ROLES,
              model_limiter: ModelLimiter | None = None) -> Dependencies:
        """Resolve the models of ``roles`` (sharing one rate limiter), read the prices file,
        open the cache, and keep the model limits: ``model_limiter`` when given (a cluster's,
        shared by its workers), else a :class:`~sqlchorus.core.rate_limits.LocalModelLimiter` of
        ``settings.model_limits`` when it names any.

        Raises:
            ModelConfigError: a model cannot be used, or the prices file or a model limit is
                unreadable (checked here, so a bad one stops before any model is paid for).
        """
        try:
            prices = PriceTable(path=settings.prices_file)
        except PriceFileError as e:
            raise ModelConfigError(str(e)) from e
        if model_limiter is None and settings.model_limits:
            try:
                model_limiter = LocalModelLimiter(model_limits(settings.model_limits))
            except ValueError as e:
                raise ModelConfigError(f"--model-limit: {e}") from e
        limiter = rate_limiter(settings.rate_limit) if settings.rate_limit else None
        models = resolve_roles(settings, limiter=limiter, roles=roles)
        cache = None
        if settings.cache and any(isinstance(settings.model_for(role), str) for role in roles):
            try:
                cache = ResponseCache(settings.cache_path)
            except (sqlite3.Error, OSError):
                cache = None
        return cls(settings=settings, models=models, cache=cache, prices=prices, model_limiter=model_limiter)

    def context(
        self, resources: DatabaseResources, *, settings: Settings | None = None, tracer: Any = None,
        progress: Any = None, calls: Any = None, client: Any = None,
    ) -> Context:
        """The context of one run on ``resources``' database, traced with ``tracer``, telling
        ``progress`` as nodes start and end. The run's statements count as ``client``'s (a
        server passes the remote address or the token of the request; see
        :meth:`~sqlchorus.tools.engines.sqlite.GuardedDatabase.for_client`), so one client's runs hold
        at most their share of the database's statement workers; None counts them as nobody's.

        The first traced run after ``resources`` built their value index records that build in
        its trace, as one span.
        """
        if tracer is not None:
            resources.trace_index_build(tracer)
        db = resources.db.with_tracer(tracer) if tracer is not None else resources.db
        if client is not None:
            db = db.for_client(client)
        return Context(
            db=db,
            models=self.models,
            settings=settings or self.settings,
            schema=resources.schema,
            tracer=tracer if tracer is not None else trace.NoOpTracer(),
            value_index=resources.value_index,
            value_index_error=resources.value_index_error,
            cache=self.cache,
            prices=self.prices,
            progress=progress,
            calls=calls,
            model_limiter=self.model_limiter,
        )

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
            self.cache = None


def open_with(db: str | os.PathLike[str], settings: Settings) -> Database:
    """Open ``db`` (any engine's name) under its guard with the settings' limits: time budget,
    row and byte caps, statement workers, and whether a PostgreSQL role that could write is let
    open (``allow_writable_role``; refused even then when ``require_readonly_role`` was given).

    Raises:
        sqlchorus.tools.engines.sqlite.DatabaseOpenError: the database cannot be opened.
    """
    return open_database(db, timeout_s=settings.sql_timeout_s, max_rows=settings.max_rows,
                         max_bytes=settings.max_bytes, workers=settings.statement_workers,
                         require_readonly_role="require_readonly_role" in settings.model_fields_set
                         and settings.require_readonly_role,
                         allow_writable_role=settings.allow_writable_role)


@dataclass
class DatabaseResources:
    """A guarded database with its schema and value index, shared by the runs on it.

    Attributes:
        db: the guarded database.
        schema: its introspected schema.
        value_index: its value index, or None when it could not be built.
        value_index_error: why there is no value index.
        owned: whether :meth:`close` closes ``db`` (it was opened here).
        owns_index: whether :meth:`close` closes ``value_index`` (it was built here).
        index_build: how the value index was built here (times, counts or the error), until
            one run's trace records it; None when it was reused or given.
    """

    db: Database
    schema: DatabaseSchema
    value_index: Any = None
    value_index_error: str | None = None
    owned: bool = False
    owns_index: bool = False
    index_build: dict[str, Any] | None = None
    fingerprint: str = ""
    """The content's key when opened (:func:`~sqlchorus.tools.values.content_fingerprint`),
    kept with each run; worked out once, since on a server it reads the catalogue."""
    _build_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def open(
        cls, db: str | os.PathLike[str] | Database, settings: Settings, *, value_index: Any = None,
    ) -> DatabaseResources:
        """Open ``db`` (unless it is open already), introspect it, load or build its value index.

        Raises:
            sqlchorus.tools.engines.sqlite.DatabaseOpenError: the file is missing or not SQLite.
        """
        owned = not isinstance(db, Database)
        database = db if isinstance(db, Database) else open_with(db, settings)
        try:
            schema = introspect(database, sample_values=settings.sample_values)
            if not schema.tables:
                raise DatabaseOpenError(f"{database.location} has no tables or views to read; there is nothing "
                                        "to ask about.")
        except BaseException:
            if owned:
                database.close()
            raise
        error, build = None, None
        owns_index = value_index is None
        if value_index is None:
            value_index, error, build = _load_or_build_index(database, settings)
        fingerprint = getattr(value_index, "stats", {}).get("fingerprint") if value_index is not None else None
        return cls(db=database, schema=schema, value_index=value_index, value_index_error=error,
                   owned=owned, owns_index=owns_index and value_index is not None, index_build=build,
                   fingerprint=fingerprint or content_fingerprint(database))

    def trace_index_build(self, tracer: Any) -> None:
        """Record the value index build done here as one span of ``tracer``'s current trace,
        once: the statements it read are not traced one by one."""
        with self._build_lock:
            build, self.index_build = self.index_build, None
        if build is None:
            return
        span = tracer.start_span(attrs.VALUE_INDEX_BUILD_SPAN, start_time=build["start_ns"],
                                 attributes={attrs.OPENINFERENCE_KIND: attrs.KIND_CHAIN, **build["attributes"]})
        if build.get("error"):
            span.set_status(trace.Status(trace.StatusCode.ERROR, build["error"][:300]))
            span.set_attribute(attrs.SQLCHORUS_ERROR, build["error"])
        else:
            span.set_status(trace.Status(trace.StatusCode.OK))
        span.end(end_time=build["end_ns"])

    def close(self) -> None:
        if self.owns_index:
            self.value_index.close()
        if self.owned:
            self.db.close()


def _load_or_build_index(database: Database, settings: Settings) -> tuple[Any, str | None, dict | None]:
    """The database's value index (any already built for its content, whatever number of values
    per column built it, else a new one), why there is none, and how it was built when it was
    built now."""
    start_ns = time.time_ns()
    try:
        index = ValueIndex.load_or_build(database, settings.value_cache_dir)
    except (SqlError, OSError, sqlite3.Error, ValueError) as e:
        # Values help but are not essential: without them the question is still answered.
        error = getattr(e, "message", None) or str(e)
        return None, error, {"start_ns": start_ns, "end_ns": time.time_ns(), "error": error,
                             "attributes": {attrs.DB_NAMESPACE: database.name}}
    if index.stats["from_cache"]:
        return index, None, None
    stats = index.stats
    return index, None, {"start_ns": start_ns, "end_ns": time.time_ns(), "attributes": {
        attrs.DB_NAMESPACE: database.name,
        attrs.VALUE_INDEX_COLUMNS: stats["columns"],
        attrs.VALUE_INDEX_VALUES: stats["values"],
        attrs.VALUE_INDEX_TRUNCATED: stats["truncated"],
        attrs.VALUE_INDEX_SKIPPED: stats["skipped"],
        attrs.VALUE_INDEX_MAX_VALUES: stats["max_values_per_column"],
        attrs.VALUE_INDEX_SECONDS: stats["build_seconds"],
    }}


def database_key(path: str | os.PathLike[str] | Database) -> tuple[str, int, int]:
    """A database's identity and version: a file's path, modification time and size, so that a
    file changed on disk gets fresh resources; a database on a server, its URL without secrets
    (its resources are kept while the session lasts)."""
    file = path.path if isinstance(path, Database) else file_of(path)
    if file is None:
        return (path.location if isinstance(path, Database) else engine_key(path), 0, 0)
    file = file.resolve()
    try:
        stat = file.stat()
    except OSError:
        return (str(file), 0, 0)
    return (str(file), stat.st_mtime_ns, stat.st_size)
