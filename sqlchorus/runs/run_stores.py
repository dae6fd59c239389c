"""Where runs are kept, and a run found by its id wherever it is.

Three kinds of writer keep runs, each in a store of its own (a folder of trace files and the
checkpoint store beside it, or the one its settings name):

1. the command line (``ask``, ``debug``, ``serve``, ...): ``./traces`` (``--trace-dir``,
   ``SQLCHORUS_TRACE_DIR``), its checkpoints in ``traces/checkpoints.sqlite`` (``--checkpoints``);
2. a program, through the Python API (``sqlchorus.ask``, ``Session``, the tools): the per-user
   data folder (:func:`sqlchorus.config.settings.user_traces`), so that a notebook writes nothing
   into its working folder;
3. each evaluation ``sqlchorus eval`` wrote under ``./evals``: ``evals/<name>/traces``, its
   checkpoints there, or in the file its records name.

A command that reads runs (``ui``, ``trace show``, ``debug --run``, ``prune``) searches them in
that order (:func:`default_stores`); a user who names a store (``--trace-dir``, ``--checkpoints``)
gets that one alone. A run is found by its id, or a unique start (or, in a checkpoint store, a
unique part) of it; a message that finds none names every store searched.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlchorus.config.settings import user_traces
from sqlchorus.core.checkpoints import UnknownRunError
from sqlchorus.core.checkpoints_postgres import open_checkpoints, redacted
from sqlchorus.core.trace_file import TraceNotFoundError
from sqlchorus.tools.errors import SqlchorusError

__all__ = ["CHECKPOINTS_FILE", "EVAL_CHECKPOINTS", "EVALS_DIR", "RECORDS_FILE", "RunStore", "command_line_store",
           "default_stores", "evaluation_stores", "find_run", "find_trace", "listed", "python_api_store"]

CHECKPOINTS_FILE = "checkpoints.sqlite"
"""A trace folder's checkpoint store, unless settings name another."""
EVALS_DIR = "evals"
"""Where ``sqlchorus eval`` puts its run folders by default, under the working folder."""
RECORDS_FILE = "records.jsonl"
"""An evaluation's records (see :mod:`sqlchorus.evaluation.runs`)."""
EVAL_CHECKPOINTS = Path("traces") / CHECKPOINTS_FILE
"""Where an evaluation keeps its questions' checkpoints by default, in its run folder."""


@dataclass(frozen=True)
class RunStore:
    """One place runs are kept.

    Attributes:
        name: whose it is, for messages: ``the command line's``, ``the Python API's``,
            ``evaluation NAME``.
        traces: its folder of ``<run id>.jsonl`` trace files, or None.
        checkpoints: its checkpoint store, a SQLite file's path or a ``postgresql://`` URL, or None.
        group: the evaluation's name for an evaluation's store, else "" (the viewer lists the
            runs of each evaluation under its name).
    """

    name: str
    traces: Path | None
    checkpoints: str | None
    group: str = ""

    def where(self, part: str) -> str:
        """Its trace folder (``part`` "traces") or checkpoint store, as a message names it."""
        target = self.traces if part == "traces" else self.checkpoints
        if target is None:
            return f"none ({self.name})"
        if _is_url(target):
            return f"{redacted(str(target))} ({self.name})"  # never its password
        shown = f"{target}/" if part == "traces" else str(target)
        there = Path(target).exists()
        return f"{shown} ({self.name}{'' if there else ', none there'})"


def _is_url(target: str | Path) -> bool:
    return isinstance(target, str) and "://" in target


def command_line_store(trace_folder: str | Path | None, checkpoint_file: str | None) -> RunStore:
    """The store of the command line's settings (``Settings.trace_folder`` and ``checkpoint_file``)."""
    return RunStore("the command line's", Path(trace_folder) if trace_folder else None, checkpoint_file)


def python_api_store() -> RunStore:
    """Where a program's runs go when its settings name no folder: the per-user data folder."""
    folder = user_traces()
    return RunStore("the Python API's", folder, str(folder / CHECKPOINTS_FILE))


def evaluation_stores(evals_dir: str | Path | None = EVALS_DIR) -> list[RunStore]:
    """The store of every evaluation under ``evals_dir``, by name: its ``traces`` folder with the
    checkpoint file beside them, and any other checkpoint file its records name (an evaluation
    run with ``--checkpoints``)."""
    folder = Path(evals_dir) if evals_dir else None
    if folder is None or not folder.is_dir():
        return []
    stores = []
    for run in sorted(folder.iterdir(), key=lambda p: p.name):
        if run.name.startswith(".") or not run.is_dir():
            continue
        if not (run / RECORDS_FILE).is_file() and not (run / "traces").is_dir():
            continue
        name = f"evaluation {run.name}"
        stores.append(RunStore(name, run / "traces", str(run / EVAL_CHECKPOINTS), group=run.name))
        for recorded in _recorded_checkpoints(run):
            stores.append(RunStore(name, run / "traces", recorded, group=run.name))
    return stores


def _recorded_checkpoints(run: Path) -> list[str]:
    """The checkpoint files an evaluation's records name other than its own, that exist."""
    own = (run / EVAL_CHECKPOINTS).resolve()
    found: dict[str, None] = {}
    try:
        with open(run / RECORDS_FILE, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    path = json.loads(line).get("checkpoint_path")
                except (ValueError, AttributeError):
                    continue  # a line torn by an interruption
                if isinstance(path, str) and path and not _is_url(path) and path not in found:
                    found[path] = None
    except OSError:
        return []
    return [p for p in found if Path(p).resolve() != own and Path(p).is_file()]


def default_stores(trace_folder: str | Path | None, checkpoint_file: str | None, *,
                   evals_dir: str | Path | None = EVALS_DIR) -> list[RunStore]:
    """The stores a reading command searches when none is named, in order: the command line's
    (its settings' folder and checkpoints), the Python API's, then each evaluation's under
    ``evals_dir``. A store that is another's too (the command line's folder set to the per-user
    one) is searched once."""
    stores = [command_line_store(trace_folder, checkpoint_file), python_api_store(), *evaluation_stores(evals_dir)]
    return _distinct(stores)


def _distinct(stores: Iterable[RunStore]) -> list[RunStore]:
    seen: set[tuple[str, str]] = set()
    out = []
    for store in stores:
        key = (_key(store.traces), _key(store.checkpoints))
        if key not in seen:
            seen.add(key)
            out.append(store)
    return out


def _key(target: str | Path | None) -> str:
    if target is None:
        return ""
    return str(target) if _is_url(target) else str(Path(target).absolute())


def listed(stores: Sequence[RunStore], part: str) -> str:
    """The stores' folders or checkpoint stores, in the order searched, for a message."""
    places = list(dict.fromkeys(store.where(part) for store in stores))
    if len(places) < 2:
        return places[0] if places else "no store"
    return ", ".join(places[:-1]) + " and " + places[-1]


# -- a run's trace ------------------------------------------------------------------------------


def find_trace(stores: Sequence[RunStore], run: str) -> tuple[RunStore, Path]:
    """The trace file of ``run`` (a run's id, or a unique start of it) in the first store that
    has it.

    Raises:
        TraceNotFoundError: no store has it (the message names them all), or the start given
            is the start of several runs' ids.
    """
    if not run or "/" in run or "\\" in run or any(ch in run for ch in "*?["):
        raise TraceNotFoundError(f"No trace file at {run}.")
    for store in stores:
        if store.traces is not None and (store.traces / f"{run}.jsonl").is_file():
            return store, store.traces / f"{run}.jsonl"
    matches: dict[str, tuple[RunStore, Path]] = {}
    for store in stores:
        if store.traces is not None and store.traces.is_dir():
            for path in sorted(store.traces.glob(f"{run}*.jsonl")):
                matches.setdefault(_key(path), (store, path))
    if len(matches) == 1:
        return next(iter(matches.values()))
    if not matches:
        raise TraceNotFoundError(f"No trace for run {run!r} in {listed(stores, 'traces')}. "
                                 "--trace-dir names another folder.")
    shown = ", ".join(f"{path.stem} ({store.name})" for store, path in list(matches.values())[:5])
    raise TraceNotFoundError(f"Run id {run!r} matches {len(matches)} traces ({shown}"
                             f"{', ...' if len(matches) > 5 else ''}); give more of it.")


# -- a run's checkpoints ------------------------------------------------------------------------


def find_run(stores: Sequence[RunStore], run: str) -> tuple[RunStore, str]:
    """The checkpoint store that holds ``run`` and the run's whole id. ``run`` is a run's id, a
    unique start of it, or a unique part of it, matched as one store matches it
    (:meth:`sqlchorus.core.checkpoints.RunRecords.resolve_run`) over every store: the id itself
    first (in the first store that has it), then a start, then a part. No store is made: a
    checkpoint file that is not there is passed over.

    Raises:
        UnknownRunError: no store has it (the message names them all), or what is given names
            several runs.
    """
    found: list[tuple[int, RunStore, str]] = []
    unreadable: list[str] = []
    for store in stores:
        try:
            ids = _run_ids(store)
        except (SqlchorusError, OSError) as e:  # a store that cannot be read is named, not fatal
            unreadable.append(f"{store.where('checkpoints')}: {e}")
            continue
        for run_id in ids:
            level = 0 if run_id == run else 1 if run_id.startswith(run) else 2 if run in run_id else None
            if level is not None:
                found.append((level, store, run_id))
    if found and run:
        best = min(level for level, _, _ in found)
        named = [(store, run_id) for level, store, run_id in found if level == best]
        ids = list(dict.fromkeys(run_id for _, run_id in named))
        if len(ids) == 1:
            return named[0]
        shown = ", ".join(f"{run_id} ({store.name})" for store, run_id in named[:5])
        raise UnknownRunError(f"{run!r} names several runs ({shown}{', ...' if len(named) > 5 else ''}): "
                              "give more of the id.")
    message = f"No run {run!r} in {listed(stores, 'checkpoints')}."
    if unreadable:
        message += f" Could not read {'; '.join(unreadable)}."
    raise UnknownRunError(message + " --checkpoints names another store.")


def _run_ids(store: RunStore) -> list[str]:
    """The ids of the runs ``store`` keeps; none when it has no checkpoint store, or its file is
    not there (reading never makes one)."""
    if store.checkpoints is None or (not _is_url(store.checkpoints) and not Path(store.checkpoints).is_file()):
        return []
    opened = open_checkpoints(store.checkpoints)
    try:
        return [run_id for run_id, _ in opened.run_ids_by_age()]
    finally:
        opened.close()
