"""Answer a file of questions: JSON Lines in, JSON Lines out, one record per question as ``eval`` writes.

Each input line is an object with ``question`` and ``db`` (a SQLite or DuckDB file, or a server's
URL; ``--db`` gives one for lines without), and optionally ``evidence``, ``id`` and ``gold_sql``
(when given, the answer is judged against it as an evaluation would; otherwise its verdict is
``unscored``). The output has one record per line as each question finishes, in the order they
finish, each with the ``index`` (0-based) and ``line`` it answers; running the same command again
keeps the answered ones and asks the rest. A line that cannot be used is said with its number and
why, and recorded with ``status: bad_input``; the others go on.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlchorus.evaluation.datasets import Dataset, Example
from sqlchorus.evaluation.progress import ExProgress
from sqlchorus.evaluation.runs import (
    Runner,
    _RecordWriter,
    _run_all,
    _tally,
    base_record,
    json_objects,
    missing_record,
    read_records,
    run_question,
)
from sqlchorus.runs.session import Session
from sqlchorus.runs.standalone_selection import line_database
from sqlchorus.tools.errors import SqlchorusError

if TYPE_CHECKING:
    from sqlchorus.config.settings import Settings

MAX_QUESTION_CHARS = 20_000
"""A longer question is refused as bad input (the pipeline's own limit refuses it anyway)."""


class BatchError(SqlchorusError, ValueError):
    """The batch cannot start: its input cannot be read, or its output belongs to another input."""


@dataclass
class BatchRun:
    """What a batch did: questions answered now and before, lines refused, where the records are."""

    out: Path
    total: int
    answered: int = 0
    no_answer: int = 0
    resumed: int = 0
    bad_lines: list[dict[str, Any]] = field(default_factory=list)

    @property
    def summary(self) -> dict[str, Any]:
        return {"out": str(self.out), "questions": self.total, "answered": self.answered,
                "no_answer": self.no_answer, "resumed": self.resumed, "bad_lines": len(self.bad_lines)}


def read_batch(path: str | os.PathLike[str], default_db: str | None = None) -> tuple[Dataset, list[int], list[dict[str, Any]]]:
    """The questions of a batch file as a dataset, the line number of each, and the lines refused
    (``{"line": n, "error": why}``).

    Raises:
        BatchError: the file cannot be read as text.
    """
    source = Path(path)
    base = source.resolve().parent
    examples: list[Example] = []
    lines: list[int] = []
    bad: list[dict[str, Any]] = []
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BatchError(f"Cannot read {path} as JSON Lines text: {e}") from e
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            if not isinstance(item, dict):
                raise ValueError("a line must be a JSON object")
            question = item.get("question")
            if not isinstance(question, str) or not question.strip():
                raise ValueError("'question' must be a non-empty string")
            if len(question) > MAX_QUESTION_CHARS:
                raise ValueError(f"the question has {len(question)} characters, more than {MAX_QUESTION_CHARS}")
            db = item.get("db", default_db)
            if not isinstance(db, str) or not db.strip():
                raise ValueError("no 'db' on the line and no --db")
            for key in ("evidence", "gold_sql"):
                if item.get(key) is not None and not isinstance(item[key], str):
                    raise ValueError(f"'{key}' must be a string")
        except json.JSONDecodeError as e:
            bad.append({"line": n, "error": f"not JSON ({e.msg} at column {e.colno})"})
            continue
        except ValueError as e:
            bad.append({"line": n, "error": str(e)})
            continue
        db_path = str(line_database(db.strip(), base))
        exists = "://" in db_path or Path(db_path).is_file()
        examples.append(Example(
            question_id=item.get("id", n), db_id=Path(db_path).stem if "://" not in db_path else db_path.rsplit("/", 1)[-1],
            db_path=db_path if exists else None, question=question, evidence=item.get("evidence") or "",
            gold_sql=item.get("gold_sql") or "", difficulty=str(item.get("difficulty") or ""),
        ))
        lines.append(n)
    dataset = Dataset(name=source.stem, benchmark="batch", examples=examples, source=source, engine="sqlite")
    return dataset, lines, bad


def run_batch(
    path: str | os.PathLike[str],
    settings: Settings,
    *,
    out: str | os.PathLike[str],
    default_db: str | None = None,
    workers: int = 1,
    resume: bool = True,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    runner: Runner | None = None,
) -> BatchRun:
    """Answer every question of the batch file ``path`` into the JSON Lines file ``out``.

    Args:
        workers: questions answered at the same time (threads of this process).
        resume: keep the records already in ``out`` (same line, same question) and ask the rest.
        runner: runs the questions elsewhere (``--ray``: :func:`sqlchorus.cluster.eval.cluster_runner`).

    Raises:
        BatchError: the input cannot be read.
        sqlchorus.core.models.ModelConfigError: no usable model is configured.
    """
    say = log or (lambda message: None)
    dataset, lines, bad = read_batch(path, default_db)
    for b in bad:
        say(f"line {b['line']}: {b['error']}; skipped")
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    if not resume and target.exists():
        target.unlink()
    done: dict[int, dict[str, Any]] = {}
    if resume:
        for index, record in read_records(target).items():
            if (index < len(dataset.examples) and record.get("status") not in ("error", "bad_input")
                    and record.get("question") == dataset.examples[index].question):
                done[index] = record
    if done:
        say(f"resuming: {len(done)} question(s) already answered in {target} are not asked again")
    run = BatchRun(out=target, total=len(dataset.examples), resumed=len(done), bad_lines=bad)
    writer = _RecordWriter(target)
    said = _bad_lines_recorded(target) if resume else set()
    for b in bad:
        if b["line"] not in said:
            writer.write({"index": None, "line": b["line"], "status": "bad_input", "error": b["error"]})
    bar = ExProgress(f"batch {dataset.name}", len(dataset.examples), cost=True,
                     done=[_tally(r) for r in done.values()]) if progress else None
    lock = threading.Lock()

    def finish(record: dict[str, Any]) -> None:
        record = {**record, "line": lines[record["index"]]}
        with lock:
            writer.write(record)
            done[record["index"]] = record
            if record.get("prediction"):
                run.answered += 1
            else:
                run.no_answer += 1
            if bar is not None:
                bar.advance(*_tally(record))

    ask = None
    session = None
    todo = []
    for i, example in enumerate(dataset.examples):
        if i in done:
            continue
        if example.db_path is None:
            finish(missing_record(i, example))
        else:
            todo.append(i)
    try:
        if runner is not None:
            runner(dataset, todo, finish, bar)
        else:
            session = Session(settings)
            ask = partial(session.ask, origin="batch")

            def run_one(i: int) -> None:
                finish(run_question(i, dataset.examples[i], dataset.benchmark, settings, ask,
                                    judge=batch_judges(dataset, i)))

            _run_all(todo, workers, run_one)
    finally:
        writer.close()
        if bar is not None:
            bar.close()
        if session is not None:
            session.close()
    return run


def _bad_lines_recorded(path: Path) -> set[int]:
    """The input lines an earlier run of the batch already recorded as bad."""
    return {r["line"] for r in json_objects(path) if r.get("status") == "bad_input" and isinstance(r.get("line"), int)}


def batch_judges(dataset: Dataset, index: int) -> bool:
    """Whether question ``index`` is judged: every question of an evaluation, and those of a
    batch that came with gold SQL."""
    return dataset.benchmark != "batch" or bool(dataset.examples[index].gold_sql.strip())


__all__ = ["BatchError", "BatchRun", "read_batch", "run_batch", "batch_judges", "base_record"]
