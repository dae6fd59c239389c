"""``ask``: a question in, a checked answer out; a :class:`Session` for many questions.

``ask`` builds what a run needs (models, response cache, price table; the database with its
schema and value index), runs the graph once and closes them. A :class:`Session` builds the
same once and keeps it for every question it is asked, from one thread or several: the
databases it has opened, each with its schema and value index (fresh when a file changes on
disk), and one compiled graph per choice of generators.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph.config import get_config
from langgraph.errors import GraphBubbleUp, GraphRecursionError

from sqlchorus.config.errors import RunCancelledError
from sqlchorus.config.question import checked_question, is_checked
from sqlchorus.config.settings import Settings
from sqlchorus.core.checkpoints import (
    CallLog,
    CheckpointFileError,
    RunRecords,
    UnknownRunError,
    is_database_url,
)
from sqlchorus.core.checkpoints_postgres import open_checkpoints
from sqlchorus.core.deadline import Cancel, Interrupted, cancellable
from sqlchorus.core.dependencies import DatabaseResources, Dependencies, database_key
from sqlchorus.core.llm import ModelAuthError
from sqlchorus.core.models import ModelConfigError, model_name
from sqlchorus.core.taught import Taught, glossary_for
from sqlchorus.core.trace_file import root_span_of
from sqlchorus.core.tracing import NodeEvent, RunTracer, new_run_id, run_labels
from sqlchorus.graph.build import build_graph
from sqlchorus.runs.demo import demo_db_path
from sqlchorus.runs.result import Result, failure_kind, result_from_state
from sqlchorus.tools.tracing import attributes as attrs
from sqlchorus.tools.engines.sqlite import Database
from sqlchorus.tools.engines.opening import database_name, file_of
from sqlchorus.tools.examples.fewshot import embedder
from sqlchorus.tools.sql.errors import DatabaseOpenError
from sqlchorus.tools.tracing.content import ALL, NONE, rows_preview, set_llm_cost, set_value
from sqlchorus.tools.values import database_fingerprint

_log = logging.getLogger(__name__)


PREPARE = "prepare"
"""The name progress events give to opening the database, reading its schema and loading (or,
the first time, building) its value index, before the graph runs."""


class Session:
    """Answers many questions with what they share built once.

    Args:
        settings: how questions are answered; defaults are sane.
        model: the chat model for every role (overrides ``settings.model``).
        model_limiter: the requests and tokens per minute of each model
            (:class:`~sqlchorus.core.rate_limits.ModelLimiter`), shared with whatever else holds
            it: a Ray cluster hands every worker's session the one limiter of the whole cluster.
            None: a :class:`~sqlchorus.core.rate_limits.LocalModelLimiter` of
            ``settings.model_limits`` when it names any, for this session's questions.

    Raises:
        sqlchorus.core.models.ModelConfigError: no usable model is configured, or the prices
            file or a model limit is unreadable.

    Use it as a context manager, or call :meth:`close`, to close the databases it opened and
    its response cache. It is safe to ask from several threads at once.
    """

    def __init__(self, settings: Settings | None = None, *, model: Any = None, model_limiter: Any = None):
        settings = settings or Settings()
        if model is not None:
            settings = settings.replace(model=model)
        self.settings = settings
        self.dependencies = Dependencies.build(settings, model_limiter=model_limiter)
        self._databases: dict[tuple[Any, ...], DatabaseResources] = {}
        self._graphs: dict[tuple[Any, ...], Any] = {}
        self._checkpoints: dict[str, RunRecords] = {}
        self._lock = threading.Lock()
        self._building: dict[tuple[Any, ...], threading.Lock] = {}
        self._taught: dict[tuple[str, str, Any], tuple[Any, Taught]] = {}

    # -- what runs share ----------------------------------------------------------------------

    @property
    def model_limiter(self) -> Any:
        """The limiter of each model's requests and tokens per minute the questions share
        (its ``waited()`` for a progress line), or None."""
        return self.dependencies.model_limiter

    def database(self, db: str | Path | Database | None, settings: Settings | None = None) -> DatabaseResources:
        """The resources of ``db`` (the demo database when None), opened on first use and again
        when the file has changed on disk. Each is built once, while questions on other
        databases go on.

        Raises:
            sqlchorus.tools.engines.sqlite.DatabaseOpenError: the file is missing or not SQLite.
        """
        settings = settings or self.settings
        if db is not None and not isinstance(db, (str, Path, Database)):
            raise DatabaseOpenError(f"The database must be a path, a URL or an open Database, not {type(db).__name__}.")
        target = db if db is not None else demo_db_path()
        key = (*database_key(target), id(target) if isinstance(target, Database) else None,
               settings.sample_values, settings.value_cache_dir)
        with self._lock:
            if key in self._databases:
                return self._databases[key]
            building = self._building.setdefault(key, threading.Lock())
        with building:
            with self._lock:
                if key in self._databases:
                    return self._databases[key]
            resources = DatabaseResources.open(target, settings)
            with self._lock:
                self._databases[key] = resources
                self._building.pop(key, None)
            return resources

    def graph(self, settings: Settings | None = None, checkpointer: RunRecords | None = None, *,
              steppable: bool = False) -> Any:
        """The compiled graph for ``settings``' generators (with ``checkpointer``; ``steppable``
        for a debugger, see :func:`~sqlchorus.graph.build.build_graph`), compiled once."""
        generators = tuple((settings or self.settings).generators.items())
        key = (generators, id(checkpointer), steppable)
        with self._lock:
            if key not in self._graphs:
                # The graph depends on the generators alone, so these settings serve for all alike.
                self._graphs[key] = build_graph(settings or self.settings, checkpointer=checkpointer,
                                                steppable=steppable)
            return self._graphs[key]

    def keep_run(self, store: RunRecords, run_id: str, question: str, evidence: str,
                 resources: DatabaseResources, settings: Settings) -> bool:
        """Keep in the checkpoint file what run ``run_id`` is asked, over which database, with
        which settings; False when the file refused it (said once, with whatever else it refuses
        in this run)."""
        try:
            store.save_run(
                run_id, question=question, evidence=evidence, db_path=database_name(resources.db),
                db_fingerprint=resources.fingerprint, settings=settings.record(),
            )
        except store.db_errors as e:
            store.lost(e)
            return False
        return True

    def checkpoints(self, settings: Settings | None = None) -> RunRecords | None:
        """The checkpoint store ``settings`` name (a SQLite file or a ``postgresql://`` URL),
        opened once; None when checkpoints are off.

        Raises:
            CheckpointFileError: the file cannot be used (locked, not SQLite, no permission).
        """
        return self._store((settings or self.settings).checkpoint_file)

    def _store(self, path: str | None) -> RunRecords | None:
        """The run store at ``path``, opened once and shared by whatever names it (checkpoints,
        taught examples); None for none."""
        if path is None:
            return None
        with self._lock:
            if path not in self._checkpoints:
                self._checkpoints[path] = open_checkpoints(path)
            return self._checkpoints[path]

    def examples_store(self, settings: Settings | None = None) -> RunRecords | None:
        """The store of taught examples ``settings`` name (``examples_store``), opened once (the
        checkpoint store's object when both are one); None when taught examples are off.

        Raises:
            CheckpointFileError: the store cannot be used.
        """
        return self._store((settings or self.settings).examples_file)

    def taught(self, db: Database, settings: Settings | None = None) -> Taught | None:
        """The taught examples and glossary of ``db`` in the examples store, indexed once per
        version of the store's entries for it; None when the store is off or holds none for it.

        Raises:
            CheckpointFileError: the store cannot be used; or one of its ``db_errors``.
        """
        settings = settings or self.settings
        path = settings.examples_file
        if path is None or not is_database_url(path) and not Path(path).is_file():
            return None  # nothing taught there yet: reading makes no store
        store = self.examples_store(settings)
        if store is None:
            return None
        database = database_name(db)
        version = store.taught_version(database)
        if not version[0]:
            return None
        key = (str(store.path), database, settings.value_embedder)
        with self._lock:
            cached = self._taught.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        taught = Taught.load(store, database, embedder(settings.value_embedder))
        with self._lock:
            self._taught[key] = (version, taught)
        return taught

    def forget_checkpoints(self, path: str) -> None:
        """Close the checkpoint store at ``path`` and drop the graphs compiled with it: for a
        worker that keeps each run's checkpoints in a file of their own and sends the file away
        after the run, so neither the file nor its graph outlives the run."""
        with self._lock:
            store = self._checkpoints.pop(path, None)
            if store is not None:
                for key in [k for k in self._graphs if k[1] == id(store)]:
                    del self._graphs[key]
        if store is not None:
            store.close()

    # -- asking -------------------------------------------------------------------------------

    def open_run(
        self,
        question: str,
        db: str | Path | Database | None = None,
        *,
        evidence: str = "",
        settings: Settings | None = None,
        run_id: str | None = None,
        exporters: Iterable[Any] = (),
        value_index: Any = None,
        progress: Callable[[NodeEvent], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
        replay_of: str | None = None,
        checkpoint_id: str | None = None,
        needs_checkpoints: bool = False,
        hosted: bool = False,
        steppable: bool = False,
        client: str | None = None,
        origin: str = "ask",
        run_metadata: dict[str, Any] | None = None,
        session_id: str | None = None,
        defer_trace: bool = False,
    ) -> OpenRun:
        """Prepare one run: every entry point (``ask``, replay, the debugger, the servers, the
        graph a host embeds) starts its runs here, so none can skip a step.

        The question is checked, once (a question an entry point checked already is taken as it
        is, :func:`~sqlchorus.config.question.is_checked`); the database opened (progress hears
        :data:`PREPARE`); the run traced (its root span open until :meth:`OpenRun.close`); the
        checkpoint store opened and told what the run asks; its model calls logged (and, for a
        replay, served from the log); the context and the graph's config made.

        Args:
            question, db, evidence, settings, run_id, exporters, value_index, progress,
                cancelled: as for :meth:`ask`.
            replay_of: the run whose thread this run goes on with (from ``checkpoint_id``), its
                model calls served from its call log; None for a new run on a thread of its own.
            needs_checkpoints: refuse to run without a checkpoint store (the debugger's runs).
            hosted: the run is a step of a host's graph: its checkpoints are the host's.
            client: who asked (a server passes the request's remote address): the run's
                statements count as that client's, who holds at most its share of the database's
                statement workers.
            origin, run_metadata, session_id: as for :meth:`ask`.
            defer_trace: the run's span starts with its first :meth:`OpenRun.invoke` and ends
                where its last ended (a debugger's, open between its commands); a run never
                invoked leaves no span and no trace file.

        Raises:
            EmptyQuestionError: the question is empty.
            QuestionTooLongError: the question or hint is over ``Settings.max_question_chars``.
            sqlchorus.tools.engines.sqlite.DatabaseOpenError: the database is missing or not SQLite.
            CheckpointFileError: ``needs_checkpoints`` and the store is off or cannot be used.
            ValueError: ``origin`` is not a short lowercase word; TypeError: ``run_metadata`` is
                not a dict.
        """
        settings = settings or self.settings
        if not is_checked(question, evidence, settings.max_question_chars):
            question, evidence = checked_question(question, evidence, settings.max_question_chars)
        # Plain text from here: the run's state, store and spans keep the question, not its check.
        question, evidence = str(question), str(evidence)
        start = time.perf_counter()
        progress = _cancellable(progress, cancelled)
        if progress is not None:
            progress(NodeEvent(PREPARE, "start", 0.0))
        resources = self.database(db, settings)
        if progress is not None:
            progress(NodeEvent(PREPARE, "end", time.perf_counter() - start))
        if value_index is not None:
            resources = DatabaseResources(db=resources.db, schema=resources.schema, value_index=value_index)
        notes: list[dict[str, str]] = []
        warning = getattr(resources.db, "run_warning", None)
        if warning:
            # A role that could write was let open (allow_writable_role): every run says so.
            _log.warning("Warning: %s", warning)
            notes.append({"node": "database", "kind": "writable_role", "message": warning[0].upper() + warning[1:] + "."})
        taught: Taught | None = None
        glossary: list[dict[str, Any]] = []
        try:
            taught = self.taught(resources.db, settings)
        except (CheckpointFileError, *_store_errors(self, settings)) as e:
            # Taught examples steer a run; a store that is away costs them, not the run.
            notes.append({"node": "taught", "kind": "taught",
                          "message": f"The taught examples could not be read ({e}); this run goes on without them."})
        asked_evidence = evidence  # the run's record keeps the hint as asked, without the glossary's
        if replay_of is None:
            evidence, glossary = glossary_for(taught, question, evidence)
        store: RunRecords | None = None
        if not hosted:
            try:
                store = self.checkpoints(settings)
            except CheckpointFileError as e:
                if needs_checkpoints or replay_of is not None:
                    raise
                # A run without a debugger or a replay goes on without them, and says so.
                notes.append({"node": "checkpoints", "kind": "checkpoints",
                              "message": f"{e}; this run keeps no checkpoints."})
            if store is None and (needs_checkpoints or replay_of is not None):
                raise CheckpointFileError(
                    "Checkpoints are off (--no-checkpoints, or no trace folder): this needs them; give --checkpoints PATH.")
        # An unknown generator is refused before the run is kept.
        graph = self.graph(settings, store, steppable=steppable)
        attributes = {attrs.SQLCHORUS_QUESTION: question, attrs.DB_NAMESPACE: resources.db.name,
                      attrs.DB_SYSTEM: resources.db.engine, attrs.SQLCHORUS_DATABASE: resources.db.location}
        if replay_of is not None:
            attributes[attrs.SQLCHORUS_REPLAY_OF] = replay_of
        if glossary:
            attributes[attrs.SQLCHORUS_GLOSSARY] = json.dumps(
                [{"id": e["id"], "term": e["question"], "hint": e["hint"], "sql": e["sql"]} for e in glossary])
        attributes.update(self._labels(origin, run_metadata, settings, resources, replay_of))
        asked = _Attributes()
        _mark_input(asked, settings.trace_content, question, evidence)
        attributes.update(asked)
        run_id = run_id or new_run_id()
        thread = replay_of or run_id
        # A hosted run's spans join the host's conversation: its LangGraph thread is the session.
        session_id = session_id or (_host_thread() if hosted else None) or thread
        tracer = RunTracer(trace_dir=settings.trace_folder, otlp_endpoint=settings.otlp_endpoint, exporters=exporters,
                           run_id=run_id, attributes=attributes, session_id=session_id,
                           content=settings.trace_content,
                           came_from=root_span_of(settings.trace_folder, replay_of) if replay_of else None,
                           name=origin, deferred=defer_trace).__enter__()
        try:
            # A value index built for this run is recorded in its trace now, under its span: a
            # deferred run whose opening built one starts its span with that work.
            with tracer.working() if defer_trace and resources.index_build is not None else tracer.active():
                context, calls = self._context_for(resources, settings, tracer, progress, store, thread, question,
                                                   asked_evidence, replay_of, needs_checkpoints, client)
                context.taught = taught
            config: dict[str, Any] = {"recursion_limit": settings.recursion_limit}
            if store is not None:
                # The run's id is its thread's: its trace and its checkpoints are found by one id.
                config["configurable"] = {"thread_id": thread,
                                          **({"checkpoint_id": checkpoint_id} if checkpoint_id else {})}
        except BaseException as e:
            tracer.__exit__(type(e), e, e.__traceback__)
            raise
        return OpenRun(question=question, evidence=evidence, settings=settings, resources=resources, store=store,
                       graph=graph, tracer=tracer, calls=calls, context=context, config=config, thread=thread,
                       notes=notes, started=start, what="replay" if replay_of else "run")

    def _labels(self, origin: str, run_metadata: dict[str, Any] | None, settings: Settings,
                resources: DatabaseResources, replay_of: str | None) -> dict[str, Any]:
        """The run span's origin, metadata and tags (see :func:`~sqlchorus.core.tracing.run_labels`):
        the preset, the model of each role, the generators, the database and its engine (a
        replay's run too), then the caller's ``run_metadata``, whose keys win."""
        models = {role: model_name(m) for role, m in self.dependencies.models.items()}
        db = resources.db
        metadata: dict[str, Any] = {"preset": settings.preset, "models": models,
                                    "generators": dict(settings.generators), "database": db.name, "engine": db.engine}
        if replay_of is not None:
            metadata["replay_of"] = replay_of
        metadata.update(run_metadata or {})
        tags = [*([f"preset:{settings.preset}"] if settings.preset else []), f"engine:{db.engine}",
                f"database:{db.name}", *(f"model:{m}" for m in dict.fromkeys(models.values()))]
        return run_labels(origin, metadata, tags)

    def _context_for(self, resources: DatabaseResources, settings: Settings, tracer: RunTracer, progress: Any,
                     store: RunRecords | None, thread: str, question: str, evidence: str, replay_of: str | None,
                     needs_checkpoints: bool, client: str | None = None) -> tuple[Any, CallLog | None]:
        """The run's context and call log: a replay's serves the answers its run kept."""
        calls: CallLog | None = None
        if replay_of is not None:
            calls = CallLog(store, replay_of, replay=True)
        elif store is not None and (self.keep_run(store, thread, question, evidence, resources, settings)
                                    or needs_checkpoints):
            # A debugger serves answers through the log even when the store refused the record.
            calls = CallLog(store, thread)
        context = self.dependencies.context(resources, settings=settings, tracer=tracer.tracer, progress=progress,
                                            calls=calls, client=client)
        return context, calls

    def run(self, question: str, db: str | Path | Database | None = None, *,
            updates: Callable[[dict[str, Any]], None] | None = None, **prepare: Any) -> Result:
        """Prepare a run (:meth:`open_run`, which takes ``prepare``), run it to its end, close it.

        A new run starts from the question; a replay (``replay_of``) goes on from its checkpoint.
        """
        run = self.open_run(question, db, **prepare)
        try:
            initial = None if prepare.get("replay_of") else {"question": run.question.strip(), "evidence": run.evidence}
            state, error = run.invoke(initial, updates=updates)
            result = run.result(state, error)
        except BaseException as e:  # the run's span says how it ended, as a raised error does
            run.close(e)
            raise
        run.close()
        return result

    def ask(
        self,
        question: str,
        db: str | Path | Database | None = None,
        *,
        evidence: str = "",
        settings: Settings | None = None,
        exporters: Iterable[Any] = (),
        value_index: Any = None,
        progress: Callable[[NodeEvent], None] | None = None,
        run_id: str | None = None,
        updates: Callable[[dict[str, Any]], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
        origin: str = "ask",
        run_metadata: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Result:
        """Answer ``question`` over the SQLite database ``db`` (the bundled demo database by default).

        Args:
            question: the question in plain language.
            db: a database name (a SQLite path, a ``postgresql://`` URL, a DuckDB file; see
                :mod:`sqlchorus.tools.engines.opening`), or an open :class:`Database`.
            evidence: a hint that defines terms of the question (BIRD's "evidence").
            settings: this run's settings, when not the session's (generators, fixing,
                selection, tracing); the models, cache and prices stay the session's.
            exporters: extra OpenTelemetry span exporters for this run.
            value_index: a prebuilt value index to use instead of the database's own.
            progress: called with a :class:`~sqlchorus.core.tracing.NodeEvent` as each node
                starts and ends (from the graph's threads).
            run_id: the run's id (its trace's and its thread's); a new one by default.
            updates: called with each step's updates, ``{node: update}``, as the run goes.
            cancelled: asked before each node starts; once it says True the run stops there,
                with the error "The run was cancelled." (its checkpoints so far kept).
            origin: what started the run, which names its span (``ask``; ``eval``, ``batch``,
                ``serve``, ``mcp``, ``ui``, ``debug`` from those entry points): a short
                lowercase word.
            run_metadata: labels of the run, any JSON-able dict (an evaluation's name and
                question number, say), put in its span's metadata beside the preset, models,
                database and engine (OpenInference's ``metadata``, Langfuse's
                ``langfuse.trace.metadata.*``); its keys win over those.
            session_id: the session the run's spans belong to in a dashboard (an evaluation's
                name, so that its questions' runs are one session); the run's own thread by
                default, a host's thread for a run inside a host's graph.

        Returns:
            A :class:`Result`; ``result.error`` says why when there is no answer.

        Raises:
            EmptyQuestionError: the question is empty.
            QuestionTooLongError: the question or hint is over ``Settings.max_question_chars``.
            sqlchorus.tools.engines.sqlite.DatabaseOpenError: the database is missing or not SQLite.
            sqlchorus.core.models.ModelConfigError: a provider refused the credentials.
        """
        return self.run(question, db, evidence=evidence, settings=settings, exporters=exporters,
                        value_index=value_index, progress=progress, run_id=run_id, updates=updates,
                        cancelled=cancelled, origin=origin, run_metadata=run_metadata, session_id=session_id)

    def recorded_run(self, run_id: str, settings: Settings | None = None) -> tuple[RunRecords, dict[str, Any], Settings, str | None]:
        """What the checkpoint file kept of ``run_id``: the file, the run's record, the settings
        that shaped it (the session's models and folders), and a note when its database has
        changed since.

        Raises:
            UnknownRunError: no such run in the checkpoint file.
            CheckpointFileError: checkpoints are off or the file cannot be used.
        """
        settings = settings or self.settings
        path = settings.checkpoint_file
        if path is not None and "://" not in str(path) and not Path(path).exists():
            # Opening a run reads a store; it never makes an empty one where none was.
            raise UnknownRunError(f"No run {run_id!r}: there is no checkpoint file at {path} "
                                  "(--checkpoints names another).")
        store = self.checkpoints(settings)
        if store is None:
            raise CheckpointFileError("Checkpoints are off (--no-checkpoints, or no trace folder): there is no run to open.")
        info = store.run(run_id)
        db_path = info["db_path"]
        changed = None
        file = file_of(db_path) if db_path else None
        if file is not None and file.exists() and database_fingerprint(file) != info["db_fingerprint"]:
            changed = (f"{db_path} has changed since run {run_id}: the SQL run again (retrieved values, the "
                       "candidates' rows and the answer) may give other results than the run's.")
        return store, info, _replayable(settings, info["settings"]), changed

    def replay(
        self, run_id: str, checkpoint_id: str | None = None, *, settings: Settings | None = None,
        progress: Callable[[NodeEvent], None] | None = None, new_run_id: str | None = None,
        updates: Callable[[dict[str, Any]], None] | None = None, cancelled: Callable[[], bool] | None = None,
        latest: bool = False, origin: str = "replay", run_metadata: dict[str, Any] | None = None,
    ) -> Result:
        """Run ``run_id`` again from one of its checkpoints (its first by default), on the same
        question and database, serving every model call it made from its call log: nothing is
        sent to a model unless an edit (``update_state`` on the checkpoint) changed a call's input.
        The new steps fork the run's thread; the replay has a trace of its own (``new_run_id``).
        With ``latest``, it goes on from the run's newest checkpoint instead: a run that was
        cancelled or stopped resumes where it was. ``progress``, ``updates``, ``cancelled`` and
        ``run_metadata`` are as for :meth:`ask`; ``origin`` (``replay`` by default) names the
        replay's span.

        Raises:
            UnknownRunError: no such run in the checkpoint file.
            CheckpointFileError: checkpoints are off or the file cannot be used.
        """
        store, info, run_settings, changed = self.recorded_run(run_id, settings)
        run_id = info["run_id"]  # a unique start of the id names the run too
        thread = {"thread_id": run_id}
        if checkpoint_id is None:
            history = list(store.list({"configurable": thread}))
            if not history:
                raise UnknownRunError(f"Run {run_id!r} has no checkpoints in {store.path}.")
            checkpoint_id = history[0 if latest else -1].config["configurable"]["checkpoint_id"]
        elif store.get_tuple({"configurable": {**thread, "checkpoint_id": checkpoint_id}}) is None:
            raise UnknownRunError(f"Run {run_id!r} has no checkpoint {checkpoint_id!r}.")
        result = self.run(info["question"], info["db_path"], evidence=info.get("evidence") or "",
                          settings=run_settings, run_id=new_run_id, progress=progress, updates=updates,
                          cancelled=cancelled, replay_of=run_id, checkpoint_id=checkpoint_id, origin=origin,
                          run_metadata=run_metadata)
        if changed:
            result.errors.append({"node": "replay", "kind": "database_changed", "message": changed})
        return result

    def close(self) -> None:
        """Close the databases this session opened and its response cache."""
        with self._lock:
            databases, self._databases = list(self._databases.values()), {}
            checkpoints, self._checkpoints = list(self._checkpoints.values()), {}
        for resources in databases:
            resources.close()
        for saver in checkpoints:
            saver.close()
        self.dependencies.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def ask(
    question: str,
    db: str | Path | Database | None = None,
    model: Any = None,
    *,
    evidence: str = "",
    settings: Settings | None = None,
    exporters: Iterable[Any] = (),
    value_index: Any = None,
    progress: Callable[[NodeEvent], None] | None = None,
    origin: str = "ask",
    run_metadata: dict[str, Any] | None = None,
) -> Result:
    """Answer ``question`` over the SQLite database ``db`` (the bundled demo database by default).

    Builds what the run needs, runs it, and closes it again; to ask many questions, keep a
    :class:`Session` instead.

    Args:
        question: the question in plain language.
        db: path of a SQLite file, or an open :class:`GuardedDatabase`.
        model: the chat model for every role (overrides ``settings.model``): a
            ``provider:model`` name or a ``BaseChatModel``.
        evidence: a hint that defines terms of the question (BIRD's "evidence").
        settings: everything else; defaults are sane.
        exporters: extra OpenTelemetry span exporters for this run.
        value_index: a prebuilt value index to reuse across questions on the same database.
        progress: called with a :class:`~sqlchorus.core.tracing.NodeEvent` as each node starts
            and ends.
        origin, run_metadata: what started the run and its labels (see :meth:`Session.ask`).

    Returns:
        A :class:`Result`; ``result.error`` says why when there is no answer.

    Raises:
        EmptyQuestionError: the question is empty.
        QuestionTooLongError: the question or hint is over ``Settings.max_question_chars``.
        sqlchorus.tools.engines.sqlite.DatabaseOpenError: the database is missing or not SQLite.
        sqlchorus.core.models.ModelConfigError: no usable model is configured.
    """
    # Checked before a model is set up: a question refused costs nothing. The run takes the
    # checked text as it is.
    limit = (settings or Settings()).max_question_chars
    if not is_checked(question, evidence, limit):
        question, evidence = checked_question(question, evidence, limit)
    with Session(settings, model=model) as session:
        return session.ask(question, db, evidence=evidence, exporters=exporters, value_index=value_index,
                           progress=progress, origin=origin, run_metadata=run_metadata)


STOP_WAIT_S = 15.0
"""How long :meth:`OpenRun.stop` waits for cancelled work to end: a local model's engine stops
within a batch of its prompt, a second or so on a slow machine."""


@dataclass
class OpenRun:
    """One run, prepared by :meth:`Session.open_run` and not yet closed: its settings, database,
    checkpoint store, graph, trace, call log, context and config."""

    question: str
    evidence: str
    settings: Settings
    resources: DatabaseResources
    store: RunRecords | None
    graph: Any
    tracer: RunTracer
    calls: CallLog | None
    context: Any
    config: dict[str, Any]
    thread: str
    notes: list[dict[str, str]]
    started: float
    what: str = "run"
    results: list[Result] = field(default_factory=list)
    closed: bool = False
    cancel: Cancel = field(default_factory=Cancel, repr=False)
    """The cancel of the run's latest :meth:`invoke` (see :meth:`stop`)."""

    @property
    def run_id(self) -> str:
        return self.tracer.run_id

    def stop(self, wait_s: float = STOP_WAIT_S) -> bool:
        """Cancel what the run's latest :meth:`invoke` still has under way: its model calls give
        up at once and a local model's engine stops at its next token or batch. Wait at most
        ``wait_s`` for that work to end, so the next call does not wait behind it; whether it has.
        The run keeps its checkpoints, and a step cut short runs again when the run goes on."""
        self.cancel.set()
        try:
            return self.cancel.settle(wait_s)
        except KeyboardInterrupt:  # Ctrl-C again: stop waiting
            return False

    def invoke(self, value: Any, *, config: dict[str, Any] | None = None, interrupt_before: Any = None,
               updates: Callable[[dict[str, Any]], None] | None = None, catch: bool = True,
               span: str | None = None, span_attributes: dict[str, Any] | None = None) -> tuple[dict, str | None]:
        """Run the graph from ``value`` (None: from the checkpoint the config names) with this
        run's context; its final state and why it has none (see :func:`_invoke`). ``config``
        replaces the run's own (the debugger moves along the thread); with ``catch`` False a
        failure is raised, not reported, and Ctrl-C stops the work under way (see
        :func:`_ctrl_c_cancels`) before it interrupts the caller. With ``span``, the
        invocation is a child span of the run's of that name (with ``span_attributes``), its
        nodes inside it: what a debugger's command did, LangGraph's own work included."""
        config = {**(config or self.config), "recursion_limit": self.settings.recursion_limit}
        # A cancel of its own for each invocation: work an earlier one left winding down stays
        # cancelled while the next goes on.
        self.cancel = Cancel()
        with self.tracer.working(span, span_attributes), cancellable(self.cancel), \
                nullcontext() if catch else _ctrl_c_cancels(self.cancel):
            if not catch:
                return self.graph.invoke(value, config, context=self.context, interrupt_before=interrupt_before), None
            return _invoke(self.graph, value, config, self.context, self.tracer, self.what, updates)

    def result(self, state: dict[str, Any], error: str | None) -> Result:
        """The run's :class:`Result` from its final state, with what the preparation noted; its
        outcome is put on the run's span."""
        result = result_from_state(self.question, state, error)
        result.run_id = self.run_id
        result.database = self.resources.db.name
        result.errors.extend(self.notes)
        if self.store is not None and self.store.failed:
            result.errors.append({"node": "checkpoints", "kind": "checkpoints", "message": self.store.failed + "."})
            self.store.failed = None
        result.checkpoint_path = str(self.store.path) if self.store is not None else None
        narrowed = self.context.memo.get("notes") or []
        if narrowed:
            # The first narrowing is the one every later view builds on; each span has its own.
            more = f" ({len(narrowed) - 1} other views were narrowed too; see the trace.)" if len(narrowed) > 1 else ""
            result.errors.append({"node": "schema", "kind": "narrowed", "message": narrowed[0] + more})
            self.tracer.root.set_attribute(attrs.SQLCHORUS_SCHEMA_NARROWED, narrowed[0])
        _mark_outcome(self.tracer, result)
        self.results.append(result)
        return result

    def mark_outcome(self, result: Result) -> None:
        """Put ``result`` on the run's span (the chosen SQL, its rows, the cost, why there is no
        answer), for a run whose result is made elsewhere (the debugger's)."""
        _mark_outcome(self.tracer, result)

    def close(self, error: BaseException | None = None) -> None:
        """End the run's trace (with ``error`` on its span when the run raised it); the results
        made say where it is and what went wrong with it."""
        if self.closed:
            return
        self.closed = True
        if error is None:
            self.tracer.__exit__(None, None, None)
        else:
            self.tracer.__exit__(type(error), error, error.__traceback__)
        path = str(self.tracer.path) if self.tracer.path and self.tracer.file_written else None
        problems = [{"node": "trace", "kind": "trace", "message": p} for p in self.tracer.problems]
        for result in self.results:
            result.trace_path = path
            result.errors += problems
            result.seconds = time.perf_counter() - self.started


_NOT_REPLAYED = frozenset({
    "model", "models", "trace_dir", "otlp_endpoint", "trace_content", "checkpoints", "cache", "cache_path", "value_cache_dir",
    "prices_file", "rate_limit", "model_limits", "model_timeout_s", "model_retries", "retry_backoff_s",
})
"""Settings a replay takes from the session, not from the run: where things go, and the models
(which a replay does not call unless an edit asks it to)."""


def _store_errors(session: Session, settings: Settings) -> tuple[type[BaseException], ...]:
    """The errors of the examples store's driver (a store that went away), if it is open."""
    path = settings.examples_file
    store = session._checkpoints.get(path) if path else None
    return tuple(getattr(store, "db_errors", ()) or ())


def _replayable(settings: Settings, recorded: dict[str, Any]) -> Settings:
    """``settings`` with the fields that shaped the recorded run put back."""
    changes: dict[str, Any] = {}
    for name, value in recorded.items():
        if name in _NOT_REPLAYED or not hasattr(settings, name):
            continue
        current = getattr(settings, name)
        changes[name] = tuple(value) if isinstance(current, tuple) and isinstance(value, list) else value
    return settings.replace(**changes)


class _CancelledStepWrites(logging.Filter):
    """Drops one record: a worker thread's node that ended by the run's cancel after Ctrl-C had
    already shut the step's executor down, whose writes LangGraph can then no longer schedule
    (``concurrent.futures`` logs "exception calling callback" with a traceback). The run stays at
    its checkpoint either way; the traceback would only be noise where one line was promised."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not (isinstance(error, RuntimeError) and "after shutdown" in str(error)):
            return True
        cause = error.__context__
        while cause is not None:
            if isinstance(cause, Interrupted):
                return False
            cause = cause.__context__
        return True


logging.getLogger("concurrent.futures").addFilter(_CancelledStepWrites())


@contextmanager
def _ctrl_c_cancels(cancel: Cancel) -> Iterator[None]:
    """Ctrl-C sets ``cancel`` before it interrupts the main thread as usual. LangGraph waits
    for a step's nodes in its worker threads (parallel generators) to finish before the
    interrupt reaches the caller; cancelled, their model calls give up at once. Nothing changes
    outside the main thread, or where a program has its own SIGINT handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        yield
        return

    def interrupted(signum: int, frame: Any) -> None:
        cancel.set()
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _host_thread() -> str | None:
    """The thread of the host's LangGraph run this code runs in, or None."""
    try:
        thread = (get_config().get("configurable") or {}).get("thread_id")
    except RuntimeError:  # not inside a graph run
        return None
    return str(thread) if thread else None


def _cancellable(progress: Callable[[NodeEvent], None] | None,
                 cancelled: Callable[[], bool] | None) -> Callable[[NodeEvent], None] | None:
    """``progress``, which also stops the run before a node starts once ``cancelled()`` holds."""
    if cancelled is None:
        return progress

    def told(event: NodeEvent) -> None:
        # Checked before each node: a cancel during the preparation stops the run at its first
        # node, so that the run still ends with its result.
        if event.kind == "start" and event.node != PREPARE and cancelled():
            raise RunCancelledError("The run was cancelled.")
        if progress is not None:
            progress(event)

    return told


def _invoke(graph: Any, value: Any, config: dict[str, Any], context: Any, run: RunTracer, what: str,
            updates: Callable[[dict[str, Any]], None] | None = None) -> tuple[dict, str | None]:
    """Run ``graph`` and return its final state and why it has none: a step limit passed, a
    cancel, or a failure no node handled (kept in the trace). A refused API key is a
    configuration error. With ``updates``, each step's updates are told as the run goes."""
    state: dict[str, Any] = {}
    try:
        if updates is None:
            return graph.invoke(value, config=config, context=context), None
        for mode, chunk in graph.stream(value, config=config, context=context, stream_mode=["updates", "values"]):
            if mode == "values":
                state = chunk
            elif isinstance(chunk, dict):
                updates(chunk)
        return state, None
    except GraphBubbleUp:  # a host's interrupt or command passes through its step untouched
        raise
    except RunCancelledError as e:  # what the run had made so far stays in its result
        run.root.set_attribute(attrs.SQLCHORUS_ERROR, str(e))
        return {k: v for k, v in state.items() if k != "answer"}, str(e)
    except ModelAuthError as e:  # configuration, not an answer that failed: say so
        run.root.record_exception(e)
        raise ModelConfigError(str(e)) from e
    except GraphRecursionError:
        error = f"The {what} exceeded its step limit ({config['recursion_limit']})."
        run.root.set_attribute(attrs.SQLCHORUS_ERROR, error)
        return {}, error
    except Exception as e:  # a failure no node handled: report it, keep it in the trace
        run.root.record_exception(e)
        return {}, f"The {what} failed: {type(e).__name__}: {e}"


def _mark_outcome(run: RunTracer, result: Result) -> None:
    """Put on the run's span what it chose, what it cost, and why it has no answer."""
    if result.sql:
        run.root.set_attribute(attrs.SQLCHORUS_SQL, result.sql)
    if result.error:
        run.root.set_attribute(attrs.SQLCHORUS_ERROR, result.error)
        run.root.set_attribute(attrs.SQLCHORUS_FAILURE, failure_kind(result) or "no_answer")
    run.root.set_attribute(attrs.SQLCHORUS_COST_USD, result.cost["cost_usd"])
    # The run's llm.cost.* add up its calls' (nothing when no call had a price).
    set_llm_cost(run.root, result.usage)
    if run.content == NONE:
        return
    output: dict[str, Any] = {"sql": result.sql, "columns": list(result.columns), "row_count": len(result.rows),
                              "truncated": result.truncated}
    if run.content == ALL:
        output["rows"] = rows_preview(result.columns, result.rows)["rows"]
    if result.error:
        output["error"] = result.error
    set_value(run.root, "output", output)


class _Attributes(dict):
    """The attributes a run span will start with, taking them as a span does."""

    def set_attribute(self, key: str, value: Any) -> None:
        self[key] = value


def _mark_input(span: Any, content: str, question: str, evidence: str) -> None:
    """Put on the run's span what it was asked, the question and its hint (with ``all`` and
    ``metadata`` content, as ``sqlchorus.question`` has always carried the question)."""
    if content != NONE:
        set_value(span, "input", {"question": question, "evidence": evidence} if evidence else question)
