"""Regression tests from debugged runs: ``export-test`` in ``sqlchorus debug``.

:func:`export_test` writes a pytest module and, beside it, a small checkpoint file
(``<stem>.sqlchorus.sqlite``) holding what the test replays: the run's record (question, hint,
database path, settings), the one checkpoint the replay starts from, and the model answers the
replay is served, in order. The test calls :func:`replay_exported`, which works on a copy of that
file in pytest's ``tmp_path`` with a model that fails if asked, so the test needs nothing from
the folder the run was made in, and running it writes nothing beside it.

The test checks the branch the debugger stands on. Its checkpoints run from the run's first to
the current one (parent links); the replay starts at the newest edit on them (a checkpoint whose
source is ``update``: a ``set``, or a fork's edit), since an edit cannot be replayed from before
it, or at the first checkpoint when there is none. The answers it is served are the calls this
branch made after that point, found through the ``call`` id each usage record in the state
shares with its entry in the call log (typed answers are calls there too). Before anything is
written the export replays the data once, on a scratch copy, exactly as the test will: the
answers it was actually served are what is kept, and an export whose replay does not give the
branch's SQL and rows is refused rather than written as a test that fails.
"""

from __future__ import annotations

import math
import os
import pprint
import shutil
import sqlite3
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlchorus.config.errors import DebugError, SqlchorusError
from sqlchorus.config.settings import Settings
from sqlchorus.core.checkpoint_history import checkpoint_history
from sqlchorus.core.checkpoints import RunCheckpoints
from sqlchorus.core.replay_model import ReplayChatModel, current_call
from sqlchorus.runs.result import Result
from sqlchorus.runs.session import Session

DATA_SUFFIX = ".sqlchorus.sqlite"
"""What the exported data file's name adds to the test's stem."""
FORMAT = 1
_META = "sqlchorus_export"
_NO_MODEL = "exported-answers-only"


class ModelAskedError(SqlchorusError, AssertionError):
    """The replay of an exported run asked a model: a node made a request the run never made
    (its prompt, or what it was built from, has changed since the export). An AssertionError
    too, so that pytest reports it as the test's failure."""

    kind = "regression"


def data_path(test_path: str | Path) -> Path:
    """The data file that goes with the test module ``test_path``."""
    path = Path(test_path)
    return path.with_name(path.stem + DATA_SUFFIX)


def plain_rows(rows: Iterable[Iterable[Any]]) -> list[list[Any]]:
    """``rows`` as lists of values a test module can spell as literals: numbers, text, booleans
    and None as they are; anything else (bytes, dates, NaN) as its text."""
    def plain(value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float) and math.isfinite(value):
            return value
        return str(value)

    return [[plain(v) for v in row] for row in rows]


# -- replaying ------------------------------------------------------------------------------------


def replay_exported(data: str | Path, tmp_dir: str | Path) -> Result:
    """Replay the run exported in ``data`` on a copy of it in ``tmp_dir``, serving its kept
    answers; the exported file itself is only read.

    Raises:
        FileNotFoundError: ``data`` is missing.
        ModelAskedError: the replay asked a model (a request changed since the export).
        sqlchorus.tools.engines.sqlite.DatabaseOpenError: the run's database is missing.
    """
    data = Path(data)
    if not data.is_file():
        raise FileNotFoundError(f"{data} is missing: export-test writes it beside the test; keep the two together.")
    work = Path(tmp_dir) / data.name
    work.parent.mkdir(parents=True, exist_ok=True)
    for stale in (work.with_name(work.name + "-wal"), work.with_name(work.name + "-shm")):
        stale.unlink(missing_ok=True)  # a log left by an earlier copy must not be read into this one
    shutil.copyfile(data, work)
    meta = _read_meta(work)
    asked: list[str] = []

    def refuse(messages: Any) -> str:
        asked.append(current_call().get("node") or "?")
        raise ModelAskedError("not among the exported answers")

    # Only a model object (never cached), no trace, no retries: the replay touches nothing but the copy.
    settings = Settings(model=ReplayChatModel(refuse, name=_NO_MODEL), models={}, checkpoints=str(work),
                        trace_dir=None, cache=False, model_retries=0)
    with Session(settings) as session:
        result = session.replay(meta["run_id"], meta["checkpoint_id"])
    if asked:
        nodes = ", ".join(dict.fromkeys(asked))
        raise ModelAskedError(
            f"The replay asked a model ({len(asked)} call(s), from {nodes}): those requests are not among "
            "the run's exported answers, so a prompt or what it is built from has changed since the export.")
    return result


def _read_meta(path: Path) -> dict[str, Any]:
    conn = sqlite3.connect(str(path))
    try:
        rows = dict(conn.execute(f"SELECT name, value FROM {_META}").fetchall())  # noqa: S608 - a constant
    except sqlite3.Error as e:
        raise ValueError(f"{path} is not a file written by export-test: {e}") from None
    finally:
        conn.close()
    if int(rows.get("format", 0)) > FORMAT:
        raise ValueError(f"{path} was written by a newer sqlchorus (format {rows['format']}); upgrade to replay it.")
    return {"run_id": rows["run_id"], "checkpoint_id": rows["checkpoint_id"]}


# -- exporting ------------------------------------------------------------------------------------


def export_test(debugger: Any, path: str | Path) -> Path:
    """Write a pytest module at ``path``, and its data file beside it (:func:`data_path`), that
    replays the branch ``debugger`` stands on and checks its SQL and rows (see the module
    docstring).

    Returns:
        The test module's path.

    Raises:
        DebugError: a path that cannot be written, a run without an answer yet, or a branch its
            kept answers do not reproduce.
    """
    target = _checked_target(path)
    result = debugger.result()
    if not debugger.finished or result.sql is None:
        raise DebugError("The run has no answer yet: continue it to the end first.")
    run_id = debugger.run_id
    store = debugger.store
    chain = _branch(debugger)
    start = next((h for h in reversed(chain) if h["source"] == "update"), chain[0])
    start_config = {"configurable": {"thread_id": run_id, "checkpoint_ns": "", "checkpoint_id": start["id"]}}
    saved = store.get_tuple(start_config)
    # Outputs of the tasks that ran from the start are dropped: the replay runs those tasks again.
    ran = {task.id for task in debugger.graph.get_state(start_config).tasks}
    writes = [w for w in saved.pending_writes or [] if w[0] not in ran]
    info = dict(store.run(run_id))
    info["db_path"] = str(Path(info["db_path"]).resolve()) if info.get("db_path") else info.get("db_path")
    calls = store.calls(run_id)
    expected = (result.sql, plain_rows(result.rows))

    with tempfile.TemporaryDirectory(prefix="sqlchorus-export-") as scratch_dir:
        scratch = Path(scratch_dir)
        # This branch's own answers first; the whole call log in its order (as `replay` serves it)
        # when the branch's calls cannot all be named.
        tries = [_branch_calls(saved, debugger.state("usage") or [], calls), calls]
        served: list[dict[str, Any]] | None = None
        answers: list[dict[str, Any]] = []
        why = "no kept answers"
        for n, answers in enumerate(tries):
            candidate = scratch / f"try{n}{DATA_SUFFIX}"
            _write_data(candidate, run_id, info, saved, writes, answers, start["id"])
            try:
                replayed = replay_exported(candidate, scratch / f"try{n}")
            except ModelAskedError as e:
                why = str(e)
                continue
            if (replayed.sql, plain_rows(replayed.rows)) != expected:
                why = f"it gives {replayed.sql!r} ({len(replayed.rows)} row(s)){_error_note(replayed)}"
                continue
            served = _calls_after(scratch / f"try{n}" / candidate.name, run_id, len(answers))
            final = candidate
            break
        if served is None:
            raise DebugError(f"The branch cannot be reproduced from its kept answers (replayed from checkpoint "
                             f"{start['id']}, {why}); no test was written.")
        if _asked(served) != _asked(answers):
            # Only what the replay used is kept; the trimmed data is checked as the test will run it.
            final = scratch / ("final" + DATA_SUFFIX)
            _write_data(final, run_id, info, saved, writes, served, start["id"])
            try:
                replayed = replay_exported(final, scratch / "check")
            except ModelAskedError as e:
                replayed, why = None, str(e)
            else:
                why = f"it gives {replayed.sql!r}{_error_note(replayed)}"
            if replayed is None or (replayed.sql, plain_rows(replayed.rows)) != expected:
                raise DebugError("The branch cannot be reproduced from its kept answers (the exported data, "
                                 f"replayed, {why}); no test was written.")
        text = _test_module(run_id, info, start, chain[-1]["id"], target, result.sql, plain_rows(result.rows),
                            len(served))
        _write_beside(target, final, text)
    return target


def _checked_target(path: str | Path) -> Path:
    """``path`` as the test module to write, absolute.

    Raises:
        DebugError: not a .py name, a folder, a folder that is missing, or one that cannot be written.
    """
    text = str(path).strip()
    if not text:
        raise DebugError("Usage: export-test PATH (a .py file to write).")
    target = Path(text).expanduser().absolute()
    if target.is_dir():
        raise DebugError(f"{target} is a folder: give the test file's name, ending in .py.")
    if target.suffix != ".py":
        raise DebugError(f"{target} does not end in .py: export-test writes a Python test module.")
    folder = target.parent
    if not folder.exists():
        raise DebugError(f"The folder {folder} does not exist: create it first, or give another PATH.")
    if not folder.is_dir():
        raise DebugError(f"{folder} is not a folder: give a PATH inside one.")
    for existing in (target, data_path(target)):
        if existing.is_dir():
            raise DebugError(f"{existing} is a folder: give another PATH.")
    try:  # asked of the folder itself: permission bits do not tell for every user or file system
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".sqlchorus-export-")
        os.close(handle)
        os.unlink(probe)
    except OSError as e:
        raise DebugError(f"Cannot write in {folder}: {e.strerror or e}.") from None
    return target


def _branch(debugger: Any) -> list[dict[str, Any]]:
    """The checkpoints from the run's first to the current one, oldest first."""
    rows = {h["id"]: h for h in checkpoint_history(debugger.graph, debugger.run_id)}
    chain: list[dict[str, Any]] = []
    at = debugger.checkpoint_id
    while at in rows and len(chain) <= len(rows):  # parent links never loop; the bound says so
        chain.append(rows[at])
        at = rows[at]["parent"]
    if not chain:
        raise DebugError("The run has no checkpoints to export.")
    return chain[::-1]


def _usage_key(usage: dict[str, Any]) -> Any:
    """What names one model call in both the state's usage and the call log: its ``call`` id,
    else (records older than that id) its node, role, tokens and timing."""
    if usage.get("call"):
        return usage["call"]
    return (usage.get("node"), usage.get("role"), usage.get("model"), usage.get("input_tokens"),
            usage.get("output_tokens"), usage.get("latency_ms"))


def _branch_calls(start: Any, usage: list[dict[str, Any]], calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The kept calls this branch made after its starting checkpoint, in the order its state
    lists them."""
    before = {_usage_key(u) for u in start.checkpoint["channel_values"].get("usage") or []}
    by_key = {_usage_key(c["usage"]): c for c in calls if isinstance(c.get("usage"), dict)}
    return [by_key[k] for k in (_usage_key(u) for u in usage) if k not in before and k in by_key]


def _asked(calls: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(c["key"], c["answer"]) for c in calls]


def _calls_after(path: Path, run_id: str, first: int) -> list[dict[str, Any]]:
    """The calls a replay recorded in ``path`` after the ``first`` it was given: the answers it
    was served, in the order it was served them."""
    store = RunCheckpoints(path)
    try:
        return store.calls(run_id)[first:]
    finally:
        store.close()


def _write_data(path: Path, run_id: str, info: dict[str, Any], start: Any, writes: list[tuple[str, str, Any]],
                answers: list[dict[str, Any]], checkpoint_id: str) -> None:
    """A checkpoint file holding what the replay needs and nothing else: the run's record, its
    starting checkpoint (as the thread's only one), the update's pending sends, and ``answers``."""
    store = RunCheckpoints(path)
    try:
        store.save_run(run_id, question=info["question"], evidence=info.get("evidence") or "",
                       db_path=info.get("db_path"), db_fingerprint=info.get("db_fingerprint"),
                       settings=info.get("settings") or {})
        saved = store.put({"configurable": {"thread_id": run_id, "checkpoint_ns": ""}}, start.checkpoint,
                          start.metadata, start.checkpoint.get("channel_versions") or {})
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in writes:
            by_task.setdefault(task_id, []).append((channel, value))
        for task_id, task_writes in by_task.items():
            store.put_writes(saved, task_writes, task_id)
        for call in answers:
            store.record_call(run_id, call)
        if store.failed:
            raise DebugError(f"Cannot write the exported data: {store.failed}.")
    finally:
        store.close()
    conn = sqlite3.connect(str(path))
    try:
        with conn:
            conn.execute(f"CREATE TABLE {_META} (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.executemany(f"INSERT INTO {_META} VALUES (?, ?)",  # noqa: S608 - a constant
                             [("format", str(FORMAT)), ("run_id", run_id), ("checkpoint_id", checkpoint_id)])
        # One self-contained file: no write-ahead log beside it, no free pages.
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("VACUUM")
    finally:
        conn.close()


def _write_beside(target: Path, data: Path, text: str) -> None:
    """Put the data file and the test module in place, each whole or not at all."""
    placed: list[Path] = []
    try:
        for destination, write in ((data_path(target), lambda p: shutil.copyfile(data, p)),
                                   (target, lambda p: p.write_text(text, encoding="utf-8"))):
            handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".sqlchorus-export-")
            os.close(handle)
            placed.append(Path(temporary))
            write(Path(temporary))
            os.chmod(temporary, 0o644)
            os.replace(temporary, destination)
            placed.pop()
    except OSError as e:
        for leftover in placed:
            leftover.unlink(missing_ok=True)
        raise DebugError(f"Cannot write {target}: {e.strerror or e}.") from None


def _error_note(result: Result) -> str:
    """Why a replay may differ: its error, and a database changed since the run."""
    notes = [result.error] if result.error else []
    notes += [e["message"] for e in result.errors if e.get("kind") == "database_changed"]
    return "".join(f"; {note}" for note in notes)


def _doc(text: Any) -> str:
    """``text`` on one line, safe inside a triple-quoted docstring."""
    return " ".join(str(text).split()).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


_TEST_TEMPLATE = '''"""Regression test written by `sqlchorus debug` (export-test).

Question: {question}{hint}
Run {run_id}: the branch ending at checkpoint {end},
replayed from checkpoint {start} ({start_what}).
Database: {db_path} (needed, as it was when the test was written).

The replay is served the {answers} model answer(s) kept in {data_name} (keep it beside this
file), with a model that fails if asked, on a copy in tmp_path; the test checks the SQL and rows.
"""

from pathlib import Path

from sqlchorus.runs.regression_test import plain_rows, replay_exported

DATA = Path(__file__).with_name({data_file!r})
SQL = {sql!r}
ROWS = {rows}


def test_the_run_gives_the_same_answer(tmp_path):
    result = replay_exported(DATA, tmp_path)
    assert result.ok, (result.error, result.errors)
    assert result.sql == SQL, result.errors
    assert plain_rows(result.rows) == ROWS, result.errors
'''


def _test_module(run_id: str, info: dict[str, Any], start: dict[str, Any], end: str, target: Path, sql: str,
                 rows: list[list[Any]], answers: int) -> str:
    start_what = "the newest edit on it" if start["source"] == "update" else "the run's first"
    hint = f"\nHint: {_doc(info['evidence'])}" if info.get("evidence") else ""
    name = data_path(target).name
    return _TEST_TEMPLATE.format(
        question=_doc(info["question"]), hint=hint, run_id=_doc(run_id), end=_doc(end), start=_doc(start["id"]),
        start_what=start_what, db_path=_doc(info.get("db_path")), answers=answers, data_name=_doc(name),
        data_file=name, sql=sql, rows=pprint.pformat(rows, width=100, compact=True),
    )
