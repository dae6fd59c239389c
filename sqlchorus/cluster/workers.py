"""One actor per Ray worker, each holding one :class:`sqlchorus.Session`; questions go to them as tasks.

The command's process (the driver) starts ``workers`` actors (:class:`Pool`), checks each before any
question is spent (sqlchorus is importable there and of the same version, the models resolve, every
database opens), then hands out one question per idle actor and takes each record as it comes back,
so records are written as questions finish and an interrupted run resumes as a local one does. An
actor that dies mid-question (its process killed, its node lost) is replaced, and its question is
given to another actor: the record is written once, when an answer arrives.

An actor answers with the record :func:`sqlchorus.evaluation.runs.run_question` makes, plus what the
run left on the worker's node (its trace file, its checkpoints), which :func:`land` puts where a
local run would have written them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import socket
import tempfile
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from sqlchorus import __version__
from sqlchorus.cluster import staging
from sqlchorus.cluster.connect import ClusterError, ray_module, remote_class
from sqlchorus.evaluation.runs import kept_where, run_question
from sqlchorus.runs.session import Session
from sqlchorus.runs.standalone_selection import OpenDatabases, check_line, select_line, selector
from sqlchorus.tools.engines.opening import open_database
from sqlchorus.tools.errors import SqlchorusError

WORKER_CPUS = 1.0
"""Logical CPUs each actor takes: one question at a time per worker."""
READY_TIMEOUT_S = 300.0
"""How long a new actor is given to start (import sqlchorus, build its Session) before the command
says the cluster cannot place it."""
MAX_ATTEMPTS = 3
"""A question whose worker died this many times is not given to another: the command stops and says
so (something in the question kills workers)."""
POLL_S = 0.5
"""How often the driver looks up from waiting, to refresh the progress line."""


class QuestionWorker:
    """The actor: one Session, built once in the worker's process, used for every question sent.

    A failure to build it is kept and said by :meth:`ready`, so the command reports it in one line
    before any question is spent.
    """

    def __init__(self, settings: Any, limiter: Any = None, select_model: Any = None, selects: bool = False):
        self.error: str | None = None
        self.session: Any = None
        self.select_model = select_model
        self._selector: Any = None
        self._opened: Any = None
        self.local_dbs: dict[str, str] = {}
        self.stage = Path(tempfile.mkdtemp(prefix="sqlchorus-worker-"))
        self.settings = settings
        try:
            if selects:  # standalone selection: the selection model alone, checked here
                self._selection()
            else:
                self.session = Session(settings, model_limiter=limiter) if limiter is not None else Session(settings)
        except Exception as e:  # said once by ready(), as one line
            self.error = _line(e)

    def ready(self) -> dict[str, Any]:
        ray = ray_module()
        return {"node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(),
                "pid": os.getpid(), "version": __version__, "error": self.error}

    def locate(self, path: str, digest: str, size: int) -> str | None:
        """Where this node has database ``path`` (None: it must be shipped)."""
        found = staging.find_local(path, digest, size)
        if found:
            self.local_dbs[path] = found
        return found

    def receive(self, path: str, digest: str, data: bytes) -> str:
        local = staging.keep_shipped(path, digest, data)
        self.local_dbs[path] = local
        return local

    def open_check(self, name: str) -> str | None:
        """None when the database opens here under its guard, else why not, in one line."""
        try:
            open_database(self.local_dbs.get(name, name), prestart=False, workers=1).close()
        except Exception as e:
            return _line(e)
        return None

    def answer(self, index: int, example: Any, benchmark: str, engine: str, judge: bool = True,
               origin: str = "eval", session: str | None = None) -> dict[str, Any]:
        """Answer one question as a local evaluation does (``origin`` names the run's span,
        ``session`` is the evaluation's), and send back what the run left here."""
        local = self.local_dbs.get(str(example.db_path))
        asked = dataclasses.replace(example, db_path=local) if local else example
        folder = self.stage / f"q{index}-{uuid.uuid4().hex[:8]}"
        settings = self.settings
        own_store = None
        if settings.trace_folder:
            settings = settings.replace(trace_dir=str(folder))
            if settings.checkpoints and settings.checkpoints != "auto" and "://" not in settings.checkpoints:
                settings = settings.replace(checkpoints=str(folder / "checkpoints.sqlite"))
            own_store = settings.checkpoint_file if settings.checkpoint_file and "://" not in settings.checkpoint_file else None
        try:
            record = run_question(index, asked, benchmark, settings, functools.partial(self.session.ask, origin=origin),
                                  engine, judge=judge, session=session)
            checkpoints = None
            if own_store:
                self.session.forget_checkpoints(own_store)
                if os.path.isfile(own_store):
                    checkpoints = Path(own_store).read_bytes()
            files = {}
            if folder.is_dir():
                files = {p.name: p.read_bytes() for p in sorted(folder.iterdir())
                         if p.is_file() and not p.name.startswith("checkpoints.sqlite")}
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return {"record": record, "files": files, "checkpoints": checkpoints,
                "db_paths": {local: str(example.db_path)} if local else {},
                "node": ray_module().get_runtime_context().get_node_id()}

    # -- standalone selection -------------------------------------------------------------------

    def _selection(self) -> tuple[Any, Any]:
        if self._selector is None:
            self._selector = selector(self.select_model, self.settings)
            self._opened = OpenDatabases(self._selector.settings)
        return self._selector, self._opened

    def check_line(self, db_path: str, candidates: list[str]) -> Any:
        """Run a line's candidates (the first pass of selection without a model); a string says
        why the line cannot be used."""
        _, opened = self._selection()
        return check_line(opened, self.local_dbs.get(str(db_path), db_path), candidates)

    def select_line(self, n: int, item: dict[str, Any], db_path: str, checked: Any, weights: Any) -> dict[str, Any]:
        deps, opened = self._selection()
        return select_line(n, item, self.local_dbs.get(str(db_path), db_path), deps, opened, checked, weights)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
        if self._opened is not None:
            self._opened.close()
            self._selector.close()
        shutil.rmtree(self.stage, ignore_errors=True)


def _line(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text if isinstance(error, SqlchorusError) else f"{type(error).__name__}: {text}"


@dataclasses.dataclass
class _Worker:
    handle: Any
    info: dict[str, Any]


@dataclasses.dataclass
class Task:
    """One call to send to some worker: ``method(*args)``; ``key`` names it to the caller."""

    key: Any
    method: str
    args: tuple[Any, ...]
    attempts: int = 0


class Pool:
    """``workers`` actors on the cluster this process is connected to (see
    :func:`sqlchorus.cluster.connect.cluster`).

    Args:
        settings: how each question is answered, sent to every worker once (roles whose model
            runs on a node of its own already hold a
            :class:`~sqlchorus.cluster.remote_model.RemoteChatModel`).
        workers: actors to start (one logical CPU each).
        limiter: a rate limiter every worker shares (:mod:`sqlchorus.cluster.limiter`).
        select_model: the selection model, for :meth:`run` of standalone selection.
        selects: the workers select among candidates (``select --ray``) rather than answer
            questions: they build no Session, and a database that does not open is said by the
            line that names it, as locally.
        log: one-line notes (a worker replaced, a database shipped).
    """

    def __init__(self, settings: Any, workers: int, *, limiter: Any = None, select_model: Any = None, selects: bool = False,
                 log: Callable[[str], None] | None = None):
        if workers < 1:
            raise ClusterError(f"--workers must be 1 or more, not {workers}.")
        self.settings = settings
        self.size = workers
        self.limiter = limiter
        self.select_model = select_model
        self.selects = selects
        self.say = log or (lambda message: None)
        self.workers: list[_Worker] = []
        self.databases: list[str] = []
        self._shipped: dict[str, Any] = {}
        self._digests: dict[str, tuple[str, int]] = {}
        self.retried = 0
        self.replaced = 0

    # -- starting ---------------------------------------------------------------------------------

    def _actor_class(self) -> Any:
        return remote_class(QuestionWorker).options(num_cpus=WORKER_CPUS, max_restarts=0, max_task_retries=0)

    def start(self, databases: Iterable[Any] = ()) -> None:
        """Start the actors and check each can do the work, before any question is spent.

        Raises:
            ClusterError: too few CPUs, a worker without sqlchorus or of another version, models
                that do not resolve there, a database a worker cannot open.
        """
        ray = ray_module()
        cpus = float(ray.cluster_resources().get("CPU", 0.0))
        if cpus < self.size * WORKER_CPUS:
            raise ClusterError(f"The cluster has {cpus:g} CPU(s); --workers {self.size} needs one each: "
                               "add nodes, or ask for fewer workers.")
        self.databases = list(dict.fromkeys(str(d) for d in databases if d is not None))
        cls = self._actor_class()
        handles = [cls.remote(self.settings, self.limiter, self.select_model, self.selects)
                   for _ in range(self.size)]
        for handle in handles:
            self.workers.append(self._prepare(handle))

    def _prepare(self, handle: Any) -> _Worker:
        ray = ray_module()
        try:
            info = ray.get(handle.ready.remote(), timeout=READY_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            ray.kill(handle)
            raise ClusterError(f"A worker did not start within {READY_TIMEOUT_S:.0f} s: the cluster "
                               "cannot place it (too few free CPUs?).") from None
        except ray.exceptions.RayError as e:
            raise ClusterError(_worker_cannot_start(e)) from None
        where = f"the worker on {info['host']} (node {info['node'][:8]})"
        if info["version"] != __version__:
            raise ClusterError(f"{where} has sqlchorus {info['version']}, this command {__version__}: "
                               "install the same version on every node.")
        if info["error"]:
            raise ClusterError(f"{where} cannot answer questions: {info['error']}")
        for name in self.databases:
            if staging.is_file_database(name):
                self._place(handle, name, where)
            problem = None if self.selects else ray.get(handle.open_check.remote(name))
            if problem:
                raise ClusterError(f"{where} cannot open {staging.display(name)}: {problem}")
        return _Worker(handle, info)

    def _place(self, handle: Any, name: str, where: str) -> None:
        """Make database file ``name`` readable on the actor's node, shipping it once."""
        ray = ray_module()
        path = Path(name)
        if not path.is_file():
            return  # the guard's own message says so when it is opened
        digest, size = self._digest(path)
        if ray.get(handle.locate.remote(name, digest, size)):
            return
        if name not in self._shipped:
            self._shipped[name] = ray.put(path.read_bytes())
            self.say(f"shipping {path.name} ({size / 1e6:.1f} MB) to the nodes that lack it")
        try:
            ray.get(handle.receive.remote(name, digest, self._shipped[name]))
        except ray.exceptions.RayError as e:
            raise ClusterError(f"{where} cannot keep a copy of {path.name}: {_cause(e)}") from None

    def _digest(self, path: Path) -> tuple[str, int]:
        key = str(path)
        if key not in self._digests:
            self._digests[key] = (staging.content_digest(path), path.stat().st_size)
        return self._digests[key]

    # -- running ----------------------------------------------------------------------------------

    def run(self, tasks: Sequence[Task], on_done: Callable[[Task, Any], None],
            tick: Callable[[], None] | None = None) -> None:
        """Every task on some worker, one at a time per worker; ``on_done(task, value)`` in this
        thread as each finishes. A task whose worker died goes to another worker.

        Raises:
            ClusterError: no worker is left, or a task killed its worker :data:`MAX_ATTEMPTS` times.
            the task's own error: raised by the worker (e.g. a model that refused the credentials).
        """
        ray = ray_module()
        queue: deque[Task] = deque(tasks)
        idle = list(self.workers)
        flight: dict[Any, tuple[Task, _Worker]] = {}
        try:
            while queue or flight:
                while queue and idle:
                    task, worker = queue.popleft(), idle.pop(0)
                    task.attempts += 1
                    flight[getattr(worker.handle, task.method).remote(*task.args)] = (task, worker)
                ready, _ = ray.wait(list(flight), num_returns=1, timeout=POLL_S)
                if tick is not None:
                    tick()
                for ref in ready:
                    task, worker = flight.pop(ref)
                    try:
                        value = ray.get(ref)
                    except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                            ray.exceptions.NodeDiedError) as e:
                        self._lost(worker, task, queue, idle, e)
                        continue
                    except ray.exceptions.RayTaskError as e:
                        raise _unwrap(e) from None
                    idle.append(worker)
                    on_done(task, value)
        except BaseException:
            # Questions in flight are abandoned (an interrupted run asks them again when resumed).
            for ref in flight:
                with contextlib.suppress(Exception):
                    ray.cancel(ref)
            raise

    def _lost(self, worker: _Worker, task: Task, queue: deque[Task], idle: list[_Worker], error: BaseException) -> None:
        if worker in self.workers:
            self.workers.remove(worker)
        if not self._head_answers():
            # Every worker goes with the head; Ray would end this process a minute later.
            raise ClusterError("Lost the Ray cluster's head: the records written so far are kept, and the "
                               "same command resumes once the cluster is back.")
        self.say(f"a worker on {worker.info['host']} was lost ({type(error).__name__}); "
                 f"its question goes to another worker")
        if task.attempts >= MAX_ATTEMPTS:
            raise ClusterError(f"Task {task.key} lost its worker {task.attempts} times; stopping "
                               "(the records written so far are kept).")
        self.retried += 1
        queue.appendleft(task)  # next, on the first idle worker: another one
        try:
            replacement = self._prepare(self._actor_class().remote(
                self.settings, self.limiter, self.select_model, self.selects))
        except ClusterError as e:
            self.say(f"no replacement worker: {e}")
        else:
            self.workers.append(replacement)
            idle.append(replacement)
            self.replaced += 1
        if not self.workers:
            raise ClusterError("Every worker was lost; the records written so far are kept.")

    def _head_answers(self) -> bool:
        """Whether the cluster's head (its GCS) still accepts connections."""
        try:
            host, port = ray_module().get_runtime_context().gcs_address.rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=5):
                return True
        except (OSError, ValueError, AttributeError):
            return False

    def close(self) -> None:
        ray = ray_module()
        if not self._head_answers():  # nothing to close: the workers went with the head
            self.workers.clear()
            return
        for worker in self.workers:
            try:
                ray.get(worker.handle.close.remote(), timeout=30)
            except Exception:  # a worker gone already has nothing to close
                pass
            ray.kill(worker.handle)
        self.workers.clear()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cause(error: BaseException) -> str:
    return _line(getattr(error, "cause", None) or error)


def _unwrap(error: Any) -> BaseException:
    """The exception a worker raised, as its own type where Ray can rebuild it."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException):
        return cause
    try:
        return error.as_instanceof_cause()
    except Exception:
        return error


def _worker_cannot_start(error: BaseException) -> str:
    text = str(error)
    if "No module named 'sqlchorus'" in text or "ModuleNotFoundError" in text and "sqlchorus" in text:
        return ("A worker of the cluster cannot import sqlchorus: install sqlchorus[ray] (the same version) "
                "on every node.")
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
    return f"A worker of the cluster cannot start: {first}"


# -- landing a remote run -------------------------------------------------------------------------


def land(answer: dict[str, Any], settings: Any, base_record: dict[str, Any]) -> dict[str, Any]:
    """The record of a question answered remotely, as the local run would have written it: the
    trace file in ``settings``' trace folder, the checkpoints merged into its checkpoint store, the
    database named as this command named it."""
    record = {**answer["record"], **{k: base_record[k] for k in ("db_path",) if k in base_record}}
    folder = settings.trace_folder
    if folder and answer["files"]:
        Path(folder).mkdir(parents=True, exist_ok=True)
        for name, data in answer["files"].items():
            (Path(folder) / name).write_bytes(data)
        trace = record.get("trace_path")
        if trace:
            record["trace_path"] = str(Path(folder) / Path(trace).name)
    store = settings.checkpoint_file
    if answer.get("checkpoints") and store and "://" not in store:
        staging.merge_checkpoints(answer["checkpoints"], store, db_paths=answer.get("db_paths") or {})
        record["checkpoint_path"] = kept_where(store)
    return record


def wait_s_of(limiter: Any) -> float:
    """Seconds the cluster's calls have waited for the rate limit so far (0 without a limiter)."""
    if limiter is None:
        return 0.0
    try:
        return float(limiter.waited().get("seconds", 0.0))
    except Exception:  # the progress line must not stop the run
        return 0.0
