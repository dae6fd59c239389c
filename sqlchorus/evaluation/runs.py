"""Evaluation runs: the graph on every question of a dataset, recorded, resumable, scored.

A run lives in one folder::

    run.json          what was evaluated (dataset, benchmark, models, generators)
    records.jsonl     one JSON object per question, appended and flushed as each finishes
    pred.txt          Spider's submission format, or predict_<dataset>.json for BIRD
    gold.sql          the gold queries of the evaluated questions (``SQL<TAB>db_id``), so the
                      official scripts can score a ``--limit`` run as well
    summary.json      the figures (:func:`sqlchorus.evaluation.report.build_summary`)
    report.html       the same with plots (:func:`sqlchorus.evaluation.report.write_html`)

Design choices:

* **Threads**, not processes, run questions: the time goes to model calls, which wait on the
  network and release the GIL, and a model object (a user's, or a scripted one in tests)
  cannot be sent to another process.
* **Records are the run's memory.** Each finished question is appended to ``records.jsonl``
  and flushed by the thread that ran it, the moment it finishes, so an interruption loses only
  the questions still running. Ctrl-C stops the run at once: questions in flight are abandoned
  to their threads, nothing they finish later is recorded, and :class:`EvalInterrupted` says
  how many records were kept. Resuming reads the file, keeps the last record of every question
  and runs the rest.
  A question whose run raised (status ``error``) is run again on resume: the exception is
  usually a transient problem, not an answer. A torn last line (the process died while
  writing it) is ignored.
* **Correctness comes from the scorer**, twice. As a question finishes, its prediction and
  each distinct candidate SQL are scored against the gold with the benchmark's own semantics
  (:func:`sqlchorus.evaluation.scoring.score_predictions` on a one-question dataset): that gives the
  running accuracy and whether selection could have done better (a candidate was right).
  At the end the prediction file is written in the benchmark's format, read back and scored
  as a whole; those verdicts are the ones recorded and summarised, so the summary is exactly
  what the file scores.
* Questions whose database is missing are recorded with status ``missing_db`` and are neither
  run nor scored; the summary counts them (``n_missing_db``).
* **Every question's run can be opened again.** A record keeps its run's ``run_id`` and the
  checkpoint file that holds the run (by default ``traces/checkpoints.sqlite`` in the run folder,
  beside the traces); :func:`question_run` finds them from a run folder and a question number,
  the ``question_id`` that ``report.html`` and ``sqlchorus eval`` show, for
  ``sqlchorus debug --eval FOLDER --question N``.
* **What was scored stays what was scored.** Debugging a question's run adds checkpoints to its
  thread, never a line to ``records.jsonl``: its prediction and verdict stay the run's. Each
  debugging branch that ends is scored against the question's gold like a prediction
  (:func:`score_branches`) and kept in ``branches.jsonl`` beside the records, one line per branch,
  with its outcome: ``now_correct`` or ``still_wrong`` for a question scored wrong,
  ``still_correct`` or ``now_wrong`` for one scored correct (said with a space: "now correct").
"""

from __future__ import annotations

import json
import os
import shlex
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from functools import partial
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlchorus.evaluation import report
from sqlchorus.evaluation.datasets import BUILTIN_DATASETS, Dataset, Example, data_dir, load_dataset
from sqlchorus.evaluation.progress import ExProgress, Tally
from sqlchorus.evaluation.scoring import (
    ScoreReport,
    Verdict,
    one_line,
    parse_metrics,
    read_predictions,
    score_one,
    score_predictions,
    write_predictions,
)
from sqlchorus.evaluation.ves import ITERATIONS
from sqlchorus.tools.engines.names import is_server_url, redact_url
from sqlchorus.tools.errors import SqlchorusError

if TYPE_CHECKING:
    from sqlchorus.config.settings import Settings

# The graph, the models and the settings are imported by the functions that run questions, so
# scoring a prediction file (:func:`score_prediction_file`) loads none of them.

__all__ = [
    "EvalError",
    "EvalInterrupted",
    "EvalRun",
    "QuestionRun",
    "BRANCHES_FILE",
    "RECORDS_FILE",
    "branch_outcome",
    "debug_command",
    "eval_folder",
    "no_run_reason",
    "outcome_label",
    "question_of_run",
    "question_run",
    "read_branches",
    "score_branches",
    "wrong_answers",
    "wrong_questions",
    "open_dataset",
    "subset",
    "prediction_filename",
    "read_records",
    "run_eval",
    "run_question",
    "base_record",
    "kept_where",
    "Runner",
    "UNSCORED",
    "score_prediction_file",
]

RECORDS_FILE = "records.jsonl"
BRANCHES_FILE = "branches.jsonl"
"""Where a run folder keeps the verdicts of its questions' debugging branches (:func:`score_branches`)."""
RUN_FILE = "run.json"
GOLD_FILE = "gold.sql"
SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
EVALS_DIR = "evals"
"""Where ``sqlchorus eval`` puts its run folders by default, under the working directory."""
CHECKPOINTS_FILE = Path("traces") / "checkpoints.sqlite"
"""Where a run folder keeps its questions' checkpoints by default (beside their traces)."""


Runner = Callable[..., None]
"""Runs questions elsewhere: ``runner(dataset, indices, finish, progress_bar, session=None)`` calls
``finish(record)`` in the calling thread for each question as it is answered; ``session`` is the
evaluation's name, which groups its runs in a dashboard (see :func:`run_question`)."""


class EvalError(SqlchorusError, ValueError):
    """A dataset, run folder or prediction file that cannot be used, with what to do about it."""

    kind = "eval_input"


class EvalInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C while it ran its questions.

    Attributes:
        kept: questions recorded in ``records_path`` that resuming does not run again.
        total: questions of the run.
        records_path: the run's records file.
        abandoned: questions still running in worker threads. They were left to finish on their
            own and nothing they finish is recorded; Python waits for such threads when the
            process exits, so a program that must end now ends with ``os._exit``.
    """

    def __init__(self, *, kept: int, total: int, records_path: Path, abandoned: int):
        super().__init__(f"{kept} of {total} questions kept in {records_path}")
        self.kept, self.total, self.records_path, self.abandoned = kept, total, records_path, abandoned


@dataclass
class EvalRun:
    """The outcome of :func:`run_eval` or :func:`score_prediction_file`.

    Attributes:
        dataset: the questions evaluated (after ``limit``).
        records: one record per question, in dataset order.
        score: the scorer's verdicts and summary for the prediction file.
        summary: the figures written to ``summary.json``.
        out_dir: the run folder (None for a score-only run without one).
        n_run: questions run by this call.
        n_resumed: questions taken from an earlier run's records.
        paths: the files written, by kind (``records``, ``predictions``, ``gold``, ``summary``,
            ``report``).
    """

    dataset: Dataset
    records: list[dict[str, Any]]
    score: ScoreReport
    summary: dict[str, Any]
    out_dir: Path | None = None
    n_run: int = 0
    n_resumed: int = 0
    paths: dict[str, Path] = field(default_factory=dict)


# -- datasets ----------------------------------------------------------------------------------


def open_dataset(name_or_path: str | os.PathLike[str], *, root: Path | None = None) -> Dataset:
    """:func:`sqlchorus.evaluation.datasets.load_dataset` with messages that say what to do.

    Raises:
        EvalError: an unknown name, a missing data folder, or an unreadable dataset file.
    """
    name = str(name_or_path)
    if name in BUILTIN_DATASETS:
        base = root or data_dir()
        try:
            return load_dataset(name, root=base)
        except FileNotFoundError as e:
            where = "SQLCHORUS_DATA" if os.environ.get("SQLCHORUS_DATA") else "the default ../shared/data"
            raise EvalError(
                f"The data of {name} is not there: {e} Looked in {base} ({where}); set "
                f"SQLCHORUS_DATA to the folder that holds spider/ and bird/."
            ) from None
        except (ValueError, KeyError, OSError) as e:
            raise EvalError(f"Cannot read {name} under {base}: {e}") from None
    path = Path(name)
    if not path.is_file():
        raise EvalError(
            f"Unknown dataset {name!r}: name one of {', '.join(BUILTIN_DATASETS)}, "
            "or the path of a dataset JSON file."
        )
    try:
        return load_dataset(path)
    except (ValueError, KeyError, OSError) as e:  # json.JSONDecodeError is a ValueError
        raise EvalError(f"Cannot read dataset {path}: {e}") from None


def subset(dataset: Dataset, limit: int | None) -> Dataset:
    """The first ``limit`` questions of ``dataset`` (all of them for None)."""
    if limit is None or limit >= len(dataset.examples):
        return dataset
    if limit < 0:
        raise EvalError(f"limit must be 0 or more, not {limit}.")
    return replace(dataset, examples=list(dataset.examples[:limit]))


def prediction_filename(dataset: Dataset) -> str:
    """``pred.txt`` for Spider semantics, ``predict_<name>.json`` for BIRD."""
    if dataset.benchmark == "bird":
        return f"predict_{dataset.name.replace('-', '_')}.json"
    return "pred.txt"


# -- records -----------------------------------------------------------------------------------


def read_records(path: str | os.PathLike[str]) -> dict[int, dict[str, Any]]:
    """The last record of every question in a records file, by question position.

    Lines that are not JSON objects (a line torn by an interruption) are skipped.
    """
    return {record["index"]: record for record in json_objects(path) if isinstance(record.get("index"), int)}


def json_objects(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Every line of a JSON Lines file that is a JSON object (none when there is no file); a line
    that is not (torn by an interruption) is skipped."""
    p = Path(path)
    if not p.is_file():
        return
    with open(p, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                yield record


class _RecordWriter:
    """Appends records, one flushed line each, from any thread, until closed."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        # A torn last line must not swallow the next record.
        if path.is_file() and path.stat().st_size:
            with open(path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                torn = f.read(1) != b"\n"
            if torn:
                with open(path, "a", encoding="utf-8") as f:
                    f.write("\n")
        self._closed = False

    def write(self, record: dict[str, Any]) -> bool:
        """Append ``record``; False, writing nothing, once the writer is closed."""
        line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
        with self._lock:
            if self._closed:
                return False
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
            return True

    def close(self) -> None:
        """Write nothing more: what an abandoned question finishes later is not recorded."""
        with self._lock:
            self._closed = True


# -- one question ----------------------------------------------------------------------------


def base_record(index: int, example: Example) -> dict[str, Any]:
    return {
        "index": index,
        "question_id": example.question_id,
        "db_id": example.db_id,
        # A server's URL without its password, as checkpoints and traces name it: reopening it
        # takes the password from the environment or the password/option file, as the run did.
        "db_path": (redact_url(str(example.db_path)) if is_server_url(example.db_path) else str(example.db_path))
        if example.db_path else None,
        "difficulty": example.difficulty,
        "question": example.question,
        "evidence": example.evidence,
        "gold_sql": example.gold_sql,
    }


def missing_record(index: int, example: Example) -> dict[str, Any]:
    return {
        **base_record(index, example),
        "status": "missing_db",
        "ran": False,
        "prediction": None,
        "correct": False,
        "verdict": "missing_db",
        "verdict_error": "the database file is missing",
        "candidates": [],
        "chosen": None,
        "chosen_generator": None,
        "any_candidate_correct": False,
        "model_calls": 0,
        "cached_calls": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cached_input_tokens": 0,
        "cached_output_tokens": 0,
        "cost_usd": 0.0,
        "unpriced_calls": 0,
        "unpriced_models": [],
        "model_seconds": 0.0,
        "seconds": 0.0,
        "error": None,
        "run_id": None,
        "trace_path": None,
        "checkpoint_path": None,
    }


def _judge(benchmark: str, example: Example, sqls: Sequence[str], engine: str) -> dict[str, Any]:
    """Scorer verdicts for each SQL against ``example``'s gold, by SQL."""
    if not sqls:
        return {}
    one = Dataset(name="question", benchmark=benchmark, examples=[example] * len(sqls),
                  source=Path("."), engine=engine)
    report = score_predictions(one, list(sqls), workers=1)
    return {sql: v for sql, v in zip(sqls, report.verdicts)}


def run_question(
    index: int, example: Example, benchmark: str, settings: Settings, ask: Callable[..., Any],
    engine: str = "sqlite", *, judge: bool = True, session: str | None = None,
) -> dict[str, Any]:
    """The record of question ``index``: ``ask`` it (a :class:`sqlchorus.Session`'s ``ask``), then
    judge the prediction and every candidate against the gold SQL (``judge=False``: no gold, as in
    a batch; the verdicts say ``unscored``). Where a local run and a cluster's workers agree.

    ``session``: the evaluation's name. Where ``ask`` takes them, the run is asked with it as its
    traces' session (``session_id``) and with the question's number, database and gold SQL as its
    metadata (``run_metadata``), so that a dashboard groups an evaluation's runs and shows what
    each was judged against; the verdict, known only afterwards, is recorded by
    :mod:`sqlchorus.evaluation.experiments`."""
    from sqlchorus.core.candidates import fix_record
    from sqlchorus.core.models import ModelConfigError

    start = time.perf_counter()
    try:
        result = ask(example.question, db=example.db_path, evidence=example.evidence,
                     settings=settings, **_eval_tags(ask, session, example, benchmark))
    except ModelConfigError:  # refused credentials: every question would meet them; stop here
        raise
    except Exception as e:  # one broken question must not stop the run; it is retried on resume
        record = missing_record(index, example)
        record.update(status="error", ran=True, verdict="missing_prediction", verdict_error=None,
                      error=f"{type(e).__name__}: {e}",
                      seconds=round(time.perf_counter() - start, 4))
        return record

    prediction = result.sql if result.sql and result.sql.strip() else None
    candidates = [c for c in result.candidates if isinstance(c, dict)]
    distinct = list(dict.fromkeys(
        [s for s in [prediction, *(c.get("sql") for c in candidates)] if s and str(s).strip()]
    ))
    verdicts = _judge(benchmark, example, distinct, engine) if judge else {}
    chosen = result.selection.get("chosen")
    by_id = {c.get("id"): c for c in candidates}
    chosen_generator = (by_id.get(chosen) or {}).get("generator") or (
        (result.state.get("answer") or {}).get("generator") if prediction else None
    )
    verdict = verdicts.get(prediction) if prediction else None
    cost = result.cost
    cand_records = []
    for c in candidates:
        v = verdicts.get(c.get("sql")) if c.get("sql") else None
        cand_records.append({
            "id": c.get("id"),
            "generator": c.get("generator"),
            "status": c.get("status"),
            "sql": c.get("sql"),
            "fix_attempts": c.get("fix_attempts", 0),
            "fixer_rounds": fix_record({"fix_attempts": 0, **c})["rounds"],
            "correct": bool(v and v.correct) if judge else None,
            "verdict": (v.status if v else "missing_prediction") if judge else UNSCORED,
        })
    return {
        **base_record(index, example),
        "status": "answered" if prediction else "no_answer",
        "ran": True,
        "prediction": prediction,
        "correct": bool(verdict and verdict.correct) if judge else None,
        "verdict": (verdict.status if verdict else "missing_prediction") if judge else UNSCORED,
        "verdict_error": verdict.error if verdict else None,
        "candidates": cand_records,
        "chosen": chosen,
        "chosen_generator": chosen_generator,
        "any_candidate_correct": any(v.correct for v in verdicts.values()) if judge else None,
        "model_calls": cost["calls"],
        "cached_calls": cost.get("cached_calls", 0),
        "input_tokens": cost["input_tokens"],
        "output_tokens": cost["output_tokens"],
        "cached_input_tokens": cost.get("cached_input_tokens", 0),
        "cached_output_tokens": cost.get("cached_output_tokens", 0),
        "cost_usd": cost.get("cost_usd", 0.0),
        "unpriced_calls": cost.get("unpriced_calls", 0),
        "unpriced_models": cost.get("unpriced_models", []),
        "model_seconds": cost.get("model_seconds", 0.0),
        "seconds": round(result.seconds, 4),
        "error": result.error,
        "run_id": result.run_id or None,
        "trace_path": result.trace_path,
        "checkpoint_path": kept_where(result.checkpoint_path),
    }


UNSCORED = "unscored"
"""The verdict of a question asked without gold SQL (a batch)."""


def _eval_tags(ask: Callable[..., Any], session: str | None, example: Example, benchmark: str) -> dict[str, Any]:
    """The keywords that tag an evaluation's run, those of them ``ask`` names among its parameters
    (a caller's own ``ask`` that takes ``**kw`` to pass on is given none)."""
    if session is None:
        return {}
    import inspect

    try:
        names = inspect.signature(ask).parameters
    except (TypeError, ValueError):
        return {}
    tags: dict[str, Any] = {}
    if "session_id" in names:
        tags["session_id"] = session
    if "run_metadata" in names:
        tags["run_metadata"] = {"eval": session, "question_id": example.question_id,
                                "db_id": example.db_id, "difficulty": example.difficulty,
                                "benchmark": benchmark, "gold_sql": example.gold_sql}
    return tags


def kept_where(checkpoint_path: str | None) -> str | None:
    """The checkpoint file to record: absolute, so it is found from any working directory. A
    database URL is not recorded: it may carry a password, and records are shared."""
    from sqlchorus.core.checkpoints import is_database_url

    if not checkpoint_path or is_database_url(checkpoint_path):
        return None
    return os.path.abspath(checkpoint_path)


# -- the run ---------------------------------------------------------------------------------


def _describe(settings: Settings) -> dict[str, Any]:
    from sqlchorus.core.models import model_name

    described = {
        "model": model_name(settings.model),
        "models": {role: model_name(m) for role, m in settings.models.items()},
        "generators": dict(settings.generators),
    }
    for name in ("preset", "fix_rounds", "pairwise", "schema_format", "temperature"):
        described[name] = getattr(settings, name)
    return described


def _check_run_folder(out_dir: Path, dataset: Dataset, resume: bool) -> None:
    meta_path = out_dir / RUN_FILE
    if not resume or not meta_path.is_file():
        return
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return
    if meta.get("dataset") != dataset.name or meta.get("source") != str(dataset.source):
        raise EvalError(
            f"{out_dir} holds a run of {meta.get('dataset')!r} ({meta.get('source')}), not of "
            f"{dataset.name!r}: choose another output folder, or pass resume=False "
            "(--no-resume) to start over there."
        )
    if meta.get("engine", "sqlite") != dataset.engine:
        raise EvalError(
            f"{out_dir} holds a run on {meta.get('engine', 'sqlite')}, not on {dataset.engine}: "
            "choose another output folder, or pass resume=False (--no-resume) to start over there."
        )


def run_eval(
    dataset: Dataset,
    settings: Settings,
    *,
    out_dir: str | os.PathLike[str],
    limit: int | None = None,
    workers: int = 1,
    resume: bool = True,
    progress: bool = True,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    log: Callable[[str], None] | None = None,
    ask: Callable[..., Any] | None = None,
    metrics: Sequence[str] | None = None,
    ves_iterations: int = ITERATIONS,
    runner: Runner | None = None,
) -> EvalRun:
    """Run the graph on every question of ``dataset``, record, score and report.

    Args:
        dataset: the questions (:func:`open_dataset`).
        settings: how each question is answered (model, generators, trace folder, ...).
        out_dir: the run folder; created if needed.
        limit: evaluate only the first ``limit`` questions.
        workers: questions run at the same time (threads), and scoring processes at the end.
        resume: keep the finished questions of an earlier run in ``out_dir`` and run the rest;
            False starts the records over.
        progress: a progress bar with the running accuracy on stderr.
        on_record: called with each new record as it is written, from the thread that ran
            the question.
        log: called with one-line notes (questions resumed, files written); default: none.
        ask: the function that answers a question (default: a :class:`sqlchorus.Session`'s).
        metrics: what the prediction file is scored with besides EX (``soft_f1``, ``r_ves``);
            None: :func:`sqlchorus.evaluation.scoring.default_metrics` of the dataset.
        ves_iterations: timings of each correct prediction for R-VES (the official 100).
        runner: runs the questions elsewhere instead of in this process's threads (``--ray``:
            :func:`sqlchorus.cluster.eval.cluster_runner`); it is given the questions to run and
            the function that records each answer.

    Returns:
        An :class:`EvalRun`.

    Raises:
        EvalError: ``out_dir`` holds a run of another dataset.
        EvalInterrupted: Ctrl-C while questions ran; the records kept say where to resume.
        sqlchorus.core.models.ModelConfigError: no usable model is configured.
    """
    if workers < 1:
        raise EvalError(f"workers must be 1 or more, not {workers}.")
    scoring = {"metrics": parse_metrics(metrics, dataset.benchmark), "ves_iterations": ves_iterations}
    if runner is not None:  # the questions run on the runner's own sessions
        return _run(dataset, settings, Path(out_dir), limit, workers, resume, progress, on_record, log,
                    ask, scoring=scoring, runner=runner)
    # One session for every question: a bad model name fails here, not once per question, and
    # the questions share the models, rate limiter, cache and each database's schema and index.
    from sqlchorus.runs.session import Session

    with Session(settings) as session:
        return _run(dataset, settings, Path(out_dir), limit, workers, resume, progress, on_record, log,
                    ask or partial(session.ask, origin="eval"), scoring=scoring)


def _run(
    dataset: Dataset, settings: Settings, folder: Path, limit: int | None, workers: int, resume: bool,
    progress: bool, on_record: Callable[[dict[str, Any]], None] | None, log: Callable[[str], None] | None,
    ask: Callable[..., Any] | None, scoring: dict[str, Any] | None = None, runner: Runner | None = None,
) -> EvalRun:
    data = subset(dataset, limit)
    _check_run_folder(folder, data, resume)
    folder.mkdir(parents=True, exist_ok=True)
    say = log or (lambda message: None)

    records_path = folder / RECORDS_FILE
    if not resume:
        # The branches were of the runs these records named; starting over leaves neither.
        for stale in (records_path, folder / BRANCHES_FILE):
            if stale.exists():
                stale.unlink()
    meta = {
        "dataset": data.name,
        "benchmark": data.benchmark,
        "source": str(data.source),
        "engine": data.engine,
        "n_questions": len(data.examples),
        "limit": limit,
        "workers": workers,
        "settings": _describe(settings),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    (folder / RUN_FILE).write_text(json.dumps(meta, indent=2, default=str) + "\n", encoding="utf-8")

    done: dict[int, dict[str, Any]] = {}
    beyond: list[dict[str, Any]] = []  # questions past this run's limit, kept for a later run
    if resume:
        for index, record in sorted(read_records(records_path).items()):
            if index >= len(data.examples):
                beyond.append(record)
            elif (record.get("status") != "error"
                    and record.get("question") == data.examples[index].question):
                done[index] = record
    if done:
        say(f"resuming: {len(done)} question(s) already recorded in {records_path} are not run again")
    writer = _RecordWriter(records_path)
    bar = ExProgress(f"eval {data.name}", len(data.examples), cost=True,
                     done=[_tally(r) for r in done.values()]) if progress else None
    lock = threading.Lock()
    running: set[int] = set()

    def finish(record: dict[str, Any]) -> None:
        with lock:  # recorded and counted together, so the count at an interruption is exact
            if not writer.write(record):
                return
            done[record["index"]] = record
            if bar is not None:
                bar.advance(*_tally(record))
        show_rate_waits(bar, ask)
        if on_record is not None:
            on_record(record)

    def run_one(i: int) -> None:
        running.add(i)
        try:
            finish(run_question(i, data.examples[i], data.benchmark, settings, ask, data.engine,
                                session=folder.resolve().name))
        finally:
            running.discard(i)

    todo = [i for i in range(len(data.examples)) if i not in done]
    n_resumed = len(done)
    started = time.perf_counter()
    try:
        to_run = []
        for i in todo:
            if data.examples[i].db_path is None:
                finish(missing_record(i, data.examples[i]))
            else:
                to_run.append(i)
        if runner is not None:
            runner(data, to_run, finish, bar, session=folder.resolve().name)
        else:
            _run_all(to_run, workers, run_one)
    except KeyboardInterrupt:
        with lock:
            writer.close()
            kept = sum(1 for r in done.values() if r.get("status") != "error")
        raise EvalInterrupted(kept=kept, total=len(data.examples), records_path=records_path,
                              abandoned=len(running)) from None
    finally:
        if bar is not None:
            bar.close()
    run_seconds = time.perf_counter() - started
    n_run = len(todo)
    records = [done[i] for i in range(len(data.examples))]
    result = _score_and_report(data, records, beyond, folder, workers, meta, say,
                               extra={"n_run": n_run, "n_resumed": n_resumed,
                                      "run_wall_s": round(run_seconds, 3)}, scoring=scoring)
    result.n_run, result.n_resumed = n_run, n_resumed
    return result


def _run_all(indices: list[int], workers: int, run_one: Callable[[int], None]) -> None:
    """``run_one`` on every index, ``workers`` at a time; each records its own question.

    An exception of one (Ctrl-C in this thread, or refused credentials) stops the others at
    once: nothing more is started, and the questions in flight are not waited for.
    """
    if workers == 1 or len(indices) <= 1:
        for i in indices:
            run_one(i)
        return
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sqlchorus-eval")
    pending: set[Future] = set()
    queue = iter(indices)
    try:
        # Submit only as many as there are workers, so an interruption leaves nothing queued.
        for i in queue:
            pending.add(pool.submit(run_one, i))
            if len(pending) >= workers:
                break
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                future.result()
                nxt = next(queue, None)
                if nxt is not None:
                    pending.add(pool.submit(run_one, nxt))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _score_and_report(
    data: Dataset,
    records: list[dict[str, Any]],
    beyond: list[dict[str, Any]],
    folder: Path,
    workers: int,
    meta: dict[str, Any],
    say: Callable[[str], None],
    extra: dict[str, Any],
    scoring: dict[str, Any] | None = None,
) -> EvalRun:

    pred_path = folder / prediction_filename(data)
    write_predictions(pred_path, data, [r["prediction"] for r in records])
    gold_path = folder / GOLD_FILE
    gold_path.write_text(
        "".join(f"{one_line(e.gold_sql)}\t{e.db_id}\n" for e in data.examples), encoding="utf-8"
    )
    # Scored as read back from the file; the writer's placeholder for a question without an
    # answer is wrong either way, and is reported as a missing prediction, not a SQL error.
    in_file = read_predictions(pred_path)
    preds = [None if r["prediction"] is None else p for r, p in zip(records, in_file)]
    score = score_predictions(data, preds, workers=workers, **(scoring or {}))
    for record, verdict in zip(records, score.verdicts):
        record["verdict"] = verdict.status
        record["verdict_error"] = verdict.error
        record["correct"] = verdict.correct
        _bird_metrics(record, verdict)
    # Rewritten whole, in question order, one record per question: the run is complete.
    records_path = folder / RECORDS_FILE
    tmp = records_path.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for record in [*records, *beyond]:
            f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
    os.replace(tmp, records_path)
    summary = report.build_summary(records, score.summary, meta={**meta, **extra})
    paths = {"records": records_path, "predictions": pred_path, "gold": gold_path}
    paths.update(report.write_report(folder, records, summary))
    say(f"wrote {', '.join(str(p) for p in paths.values())}")
    return EvalRun(dataset=data, records=records, score=score, summary=summary, out_dir=folder,
                   paths=paths)


def _bird_metrics(record: dict[str, Any], verdict: Verdict) -> None:
    """A question's Soft-F1 and R-VES reward in its record, where they were scored."""
    if verdict.soft_f1 is not None:
        record["soft_f1"] = verdict.soft_f1
    if verdict.ves_reward is not None:
        record["ves_reward"] = verdict.ves_reward
        record["ves_iterations"] = verdict.ves_iterations


def score_prediction_file(
    dataset: Dataset,
    predictions: str | os.PathLike[str],
    *,
    limit: int | None = None,
    workers: int = 1,
    out_dir: str | os.PathLike[str] | None = None,
    progress: bool = False,
    transpile: bool = False,
    metrics: Sequence[str] | None = None,
    ves_iterations: int = ITERATIONS,
) -> EvalRun:
    """Score an existing prediction file (either benchmark's format) without running the graph.

    Args:
        dataset: the questions the file answers, in order.
        predictions: a Spider ``pred.txt`` or a BIRD prediction JSON object.
        limit: score the first ``limit`` questions (the file may hold only those).
        workers: scoring processes.
        out_dir: when given, write ``records.jsonl``, ``summary.json`` and ``report.html`` there.
        progress: a progress bar on stderr.
        transpile: the predictions are SQLite's: write them in the dialect of ``dataset``'s
            engine first (:func:`sqlchorus.evaluation.engines.transpile_predictions`).
        metrics, ves_iterations: as for :func:`run_eval`.

    Raises:
        EvalError: the file cannot be read, or holds more predictions than there are questions,
            or ``metrics`` names no metric.
    """

    path = Path(predictions)
    try:
        preds = read_predictions(path)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise EvalError(f"Cannot read the prediction file {path}: {e}") from None
    data = subset(dataset, limit)
    if limit is not None:
        preds = preds[: len(data.examples)]
    if len(preds) > len(data.examples):
        raise EvalError(
            f"{path} holds {len(preds)} predictions but {data.name} has {len(data.examples)} "
            "questions: is it the right dataset?"
        )
    if transpile and data.engine != "sqlite":
        from sqlchorus.evaluation.engines import transpile_predictions

        preds = transpile_predictions(data, preds)
    try:
        score = score_predictions(data, preds, workers=workers, progress=progress,
                                  metrics=parse_metrics(metrics, data.benchmark), ves_iterations=ves_iterations)
    except ValueError as e:
        raise EvalError(str(e)) from None
    preds = preds + [None] * (len(data.examples) - len(preds))
    records = []
    for i, (example, pred, verdict) in enumerate(zip(data.examples, preds, score.verdicts)):
        record = missing_record(i, example)
        record.update(
            status="missing_db" if example.db_path is None else ("answered" if pred else "no_answer"),
            prediction=pred, verdict=verdict.status, verdict_error=verdict.error,
            correct=verdict.correct, any_candidate_correct=verdict.correct,
        )
        _bird_metrics(record, verdict)
        records.append(record)
    meta = {"dataset": data.name, "benchmark": data.benchmark, "source": str(data.source),
            "engine": data.engine, "n_questions": len(data.examples), "predictions": str(path)}
    summary = report.build_summary(records, score.summary, meta=meta)
    run = EvalRun(dataset=data, records=records, score=score, summary=summary)
    if out_dir is not None:
        folder = Path(out_dir)
        folder.mkdir(parents=True, exist_ok=True)
        records_path = folder / RECORDS_FILE
        with open(records_path, "w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        run.out_dir = folder
        run.paths = {"records": records_path, **report.write_report(folder, records, summary)}
    return run


# -- a question's run -----------------------------------------------------------------------


class QuestionRun(NamedTuple):
    """Where the run of one question of an evaluation is kept (:func:`question_run`).

    Attributes:
        run_id: the run's id (its checkpoints' thread).
        checkpoints: the checkpoint store that holds it (a SQLite file, or what the caller gave).
        record: the question's record in ``records.jsonl``.
        folder: the evaluation's run folder.
    """

    run_id: str
    checkpoints: str
    record: dict[str, Any]
    folder: Path


def eval_folder(folder_or_name: str | os.PathLike[str], *, evals_dir: str | os.PathLike[str] = EVALS_DIR) -> Path:
    """The run folder ``folder_or_name`` names: a folder's path, or the name of one under
    ``evals_dir`` (where ``sqlchorus eval --run-name`` puts it).

    Raises:
        EvalError: no such folder, or one without ``records.jsonl``.
    """
    given = str(folder_or_name)
    tried = list(dict.fromkeys([Path(given), Path(evals_dir) / given]))
    found = [p for p in tried if p.is_dir()]
    for folder in found:
        if (folder / RECORDS_FILE).is_file():
            return folder
    if found:
        raise EvalError(f"{found[0]} is not an eval run folder: it holds no {RECORDS_FILE} (sqlchorus eval "
                        "writes one as its first question finishes).")
    looked = " and ".join(str(p.absolute()) for p in tried)
    raise EvalError(f"No eval run folder {given!r}: looked for {looked}. Give the folder sqlchorus eval "
                    f"wrote (its --out), or the name of one under {evals_dir}/.")


def wrong_questions(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the questions scored and not answered correctly, in question order."""
    return [r for r in records if r.get("status") != "missing_db" and not r.get("correct")]


def debug_command(folder: str | os.PathLike[str], record: dict[str, Any]) -> str:
    """The command that opens ``record``'s run in the debugger, ready for a shell."""
    return (f"sqlchorus debug --eval {shlex.quote(str(folder))} "
            f"--question {shlex.quote(str(record.get('question_id')))}")


def _checkpoints_of(folder: Path, record: dict[str, Any]) -> str | None:
    """The checkpoint file that holds ``record``'s run: the one recorded, else the run folder's
    own (a folder moved or copied elsewhere still opens); None when neither exists."""
    recorded = record.get("checkpoint_path")
    if recorded and Path(recorded).is_file():
        return str(recorded)
    default = folder / CHECKPOINTS_FILE
    return str(default.absolute()) if default.is_file() else None


def _rerun_command(folder: Path) -> str:
    """The ``sqlchorus eval`` command that runs ``folder``'s questions again from the start."""
    try:
        meta = json.loads((folder / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = {}
    dataset = meta.get("dataset") if meta.get("dataset") in BUILTIN_DATASETS else meta.get("source")
    limit = meta.get("limit")
    return " ".join([
        "sqlchorus eval", f"--dataset {shlex.quote(str(dataset or 'DATASET'))}",
        *([f"--limit {limit}"] if isinstance(limit, int) else []),
        f"--out {shlex.quote(str(folder))}", "--no-resume",
    ])


def _no_run(folder: Path, record: dict[str, Any], checkpoints: str | None = None) -> tuple[str, str] | None:
    """Why ``record``'s question has no run to open, and what to do about it; None when it has one."""
    status = record.get("status")
    if status == "missing_db":
        return "was not run: its database was missing when the eval ran, so there is no run to open", ""
    if status == "error":
        return (f"has no run to open: it failed before its run was kept ({record.get('error')})",
                f"The same sqlchorus eval command with --out {folder} runs it again.")
    if not record.get("ran"):
        return "was scored from a prediction file, not run: there is no run to open", ""
    if record.get("run_id") and (checkpoints or _checkpoints_of(folder, record)):
        return None
    return ("kept no checkpoints to open: the eval ran with --no-trace or --no-checkpoints",
            f"Looked for {(folder / CHECKPOINTS_FILE).absolute()} (give a store kept elsewhere with --checkpoints). "
            f"To debug its questions, run the eval again with them: {_rerun_command(folder)} (with its model "
            "options, without --no-trace and --no-checkpoints).")


def no_run_reason(folder: Path, record: dict[str, Any], *, checkpoints: str | None = None) -> str | None:
    """Why ``record``'s question has no run to open and what to do, as one message; None when
    it has one.

    ``checkpoints``: the checkpoint store to look in instead of the recorded one.
    """
    found = _no_run(folder, record, checkpoints)
    if found is None:
        return None
    what, advice = found
    return f"Question {record.get('question_id')} ({record.get('db_id')}) {what}." + (f" {advice}" if advice else "")


def wrong_answers(folder: str | os.PathLike[str], records: Sequence[dict[str, Any]], *,
                  limit: int = 10) -> dict[str, Any]:
    """The questions answered wrongly, the first ``limit`` of them with the command that opens
    each one's run in the debugger.

    Returns:
        ``{"n_wrong": count, "wrong": [entry, ...]}``; an entry holds ``question`` (its number),
        ``db``, ``verdict``, ``run_id`` and ``debug`` (the command), or, for a question without a
        run to open, ``debug`` None, ``no_run`` (why) and ``advice`` (what to do, may be empty).
    """
    folder = Path(folder)
    wrong = wrong_questions(records)
    entries = []
    for record in wrong[:limit]:
        entry = {"question": record.get("question_id"), "db": record.get("db_id"),
                 "verdict": record.get("verdict"), "run_id": record.get("run_id")}
        missing = _no_run(folder, record)
        if missing is None:
            entry["debug"] = debug_command(folder, record)
        else:
            entry.update(debug=None, no_run=missing[0], advice=missing[1])
        entries.append(entry)
    return {"n_wrong": len(wrong), "wrong": entries}


def question_run(
    folder_or_name: str | os.PathLike[str],
    question: int | str,
    *,
    evals_dir: str | os.PathLike[str] = EVALS_DIR,
    checkpoints: str | None = None,
) -> QuestionRun:
    """The run of question ``question`` of an evaluation, to open with
    :meth:`sqlchorus.runs.debugger.Debugger.open` over ``checkpoints``.

    Args:
        folder_or_name: the run folder, or its name under ``evals_dir``.
        question: the question's number as the evaluation shows it: its ``question_id`` (the
            ``#`` column of ``report.html``; for Spider its position in the dataset).
        evals_dir: where names are looked up.
        checkpoints: the checkpoint store that holds the runs, instead of the one recorded (or
            the run folder's ``traces/checkpoints.sqlite``).

    Raises:
        EvalError: no such folder, no records, no such question (the message gives the range),
            or a question without a run to open (its database was missing, it failed, or the
            eval kept no checkpoints), each saying what to do.
    """
    folder = eval_folder(folder_or_name, evals_dir=evals_dir)
    records = [r for _, r in sorted(read_records(folder / RECORDS_FILE).items())]
    if not records:
        raise EvalError(f"{folder / RECORDS_FILE} holds no records: no question of that eval has finished.")
    wanted = str(question).strip()
    matches = [r for r in records if str(r.get("question_id")) == wanted]
    if not matches:
        raise EvalError(f"No question {wanted} in {folder}: {_numbering(records)}.")
    if len(matches) > 1:
        runs = ", ".join(str(r.get("run_id")) for r in matches)
        raise EvalError(f"Question {wanted} names {len(matches)} questions of {folder} (runs {runs}): open one "
                        "with sqlchorus debug --run ID --checkpoints FILE.")
    record = matches[0]
    reason = no_run_reason(folder, record, checkpoints=checkpoints)
    if reason:
        raise EvalError(reason)
    store = checkpoints or _checkpoints_of(folder, record)
    assert store is not None  # no_run_reason said there is one
    return QuestionRun(run_id=str(record["run_id"]), checkpoints=store, record=record, folder=folder)


def _numbering(records: Sequence[dict[str, Any]]) -> str:
    """How the questions of ``records`` are numbered, for a message."""
    ids = [r.get("question_id") for r in records]
    where = "(the # column of report.html)"
    if all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        low, high = min(ids), max(ids)
        gaps = "" if sorted(ids) == list(range(low, high + 1)) else ", not every number in between"
        return f"its {len(ids)} question(s) are numbered {low} to {high}{gaps} {where}"
    shown = ", ".join(str(i) for i in ids[:10]) + (", ..." if len(ids) > 10 else "")
    return f"its {len(ids)} question(s) are numbered {shown} {where}"


def question_of_run(run_id: str, checkpoints: str | os.PathLike[str] | None) -> QuestionRun | None:
    """The evaluation question whose run ``run_id`` is, when the checkpoint store ``checkpoints``
    is an evaluation's own (``FOLDER/traces/checkpoints.sqlite``, where ``sqlchorus eval`` keeps
    them); None for any other run or store. A run opened by its id is then judged as one opened
    with ``--eval FOLDER --question N``."""
    from sqlchorus.core.checkpoints import is_database_url

    if not checkpoints or is_database_url(str(checkpoints)):
        return None
    path = Path(checkpoints)
    if path.name != CHECKPOINTS_FILE.name or path.parent.name != CHECKPOINTS_FILE.parent.name:
        return None
    folder = path.parent.parent
    record = next((r for r in read_records(folder / RECORDS_FILE).values() if r.get("run_id") == run_id), None)
    return None if record is None else QuestionRun(run_id=run_id, checkpoints=str(path), record=record, folder=folder)


# -- debugging branches ------------------------------------------------------------------------

_OUTCOMES = {(False, True): "now_correct", (False, False): "still_wrong",
             (True, True): "still_correct", (True, False): "now_wrong"}
_branches_lock = threading.Lock()


def branch_outcome(was_correct: bool, is_correct: bool) -> str:
    """What a branch did to its question, by the verdict the evaluation recorded and the branch's
    own: ``now_correct``, ``still_wrong``, ``still_correct`` or ``now_wrong``."""
    return _OUTCOMES[(bool(was_correct), bool(is_correct))]


def outcome_label(outcome: str) -> str:
    """An outcome as the command line and the pages say it: ``now_correct`` is "now correct"."""
    return outcome.replace("_", " ")


def read_branches(folder: str | os.PathLike[str]) -> dict[str, list[dict[str, Any]]]:
    """The debugging branches scored in run folder ``folder``, by run id, oldest first. A branch
    scored twice (two viewers at once) counts once, with its first verdict; a torn line is skipped."""
    path = Path(folder) / BRANCHES_FILE
    found: dict[str, dict[str, dict[str, Any]]] = {}
    if not path.is_file():
        return {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and entry.get("run_id") and entry.get("checkpoint"):
                found.setdefault(str(entry["run_id"]), {}).setdefault(str(entry["checkpoint"]), entry)
    # Checkpoint ids are ordered by time: sorted, the branches are in the order they ended.
    return {run: [entries[k] for k in sorted(entries)] for run, entries in found.items()}


def score_branches(folder: str | os.PathLike[str], record: dict[str, Any],
                   ends: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each ended debugging branch of ``record``'s run, scored against the question's gold as the
    evaluation scored its prediction (:func:`sqlchorus.evaluation.scoring.score_one`, on the
    question's database, with the run folder's benchmark semantics and engine).

    ``record`` itself is not changed, nor is ``records.jsonl``: the branch verdicts go to
    ``branches.jsonl`` beside it. A branch scored before keeps its verdict (a checkpoint's answer
    never changes); the others are scored now and appended there.

    Args:
        folder: the evaluation's run folder.
        record: the question's record.
        ends: the branches that ended (:func:`sqlchorus.runs.debugger.branch_ends`'s
            ``branches``: ``checkpoint``, ``forked_from``, ``edits``, ``sql``).

    Returns:
        One entry per branch of ``ends``, in their order: ``run_id``, ``index``, ``question_id``,
        ``checkpoint``, ``forked_from``, ``edits``, ``sql``, ``verdict`` (the scorer's status),
        ``verdict_error``, ``correct``, ``outcome`` (:func:`branch_outcome`) and ``label``
        (:func:`outcome_label`). A branch whose database is not on this machine is not scored:
        its ``verdict`` is ``missing_db``, ``outcome`` None, ``label`` "not scored", and it is
        scored when it is looked at where the database is.
    """
    folder = Path(folder)
    run_id = str(record.get("run_id") or "")
    known = {e["checkpoint"]: e for e in read_branches(folder).get(run_id, [])}
    meta = _read_run_meta(folder)
    out, new = [], []
    for end in ends:
        entry = known.get(end["checkpoint"])
        if entry is None:
            entry = _score_branch(record, end, meta)
            if entry["outcome"] is not None:
                new.append(entry)
        out.append(entry)
    if new:
        try:
            with _branches_lock:
                writer = _RecordWriter(folder / BRANCHES_FILE)
                for entry in new:
                    writer.write(entry)
        except OSError:  # a folder that cannot be written: the verdicts are shown, and scored again next time
            pass
    return out


def _read_run_meta(folder: Path) -> dict[str, Any]:
    try:
        meta = json.loads((folder / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _score_branch(record: dict[str, Any], end: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    engine = str(meta.get("engine") or "sqlite")
    db_path = record.get("db_path")
    entry = {"run_id": record.get("run_id"), "index": record.get("index"), "question_id": record.get("question_id"),
             "checkpoint": end["checkpoint"], "forked_from": end.get("forked_from"), "edits": list(end.get("edits") or []),
             "sql": end.get("sql")}
    if not db_path or (engine == "sqlite" and not Path(db_path).is_file()):
        return {**entry, "verdict": "missing_db", "verdict_error": "the database file is not on this machine",
                "correct": False, "outcome": None, "label": "not scored"}
    example = Example(question_id=record.get("question_id"), db_id=str(record.get("db_id") or ""), db_path=db_path,
                      question=str(record.get("question") or ""), evidence=str(record.get("evidence") or ""),
                      gold_sql=str(record.get("gold_sql") or ""), difficulty=str(record.get("difficulty") or ""))
    verdict = score_one(example, end.get("sql"), benchmark=str(meta.get("benchmark") or "spider"), engine=engine)
    outcome = branch_outcome(bool(record.get("correct")), verdict.correct)
    return {**entry, "verdict": verdict.status, "verdict_error": verdict.error, "correct": verdict.correct,
            "outcome": outcome, "label": outcome_label(outcome),
            "scored": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def _tally(record: dict[str, Any]) -> Tally:
    """What a question's record adds to the progress bar."""
    return record.get("status") != "missing_db", bool(record.get("correct")), float(record.get("cost_usd") or 0.0)


def show_rate_waits(bar: ExProgress | None, limits: Any) -> None:
    """Show on ``bar`` the seconds model calls have waited for their limits so far
    (``--model-limit``): ``limits`` is a :class:`~sqlchorus.core.rate_limits.ModelLimiter`, or the
    ``ask`` of a :class:`~sqlchorus.Session` (run_eval's default), whose limiter is asked. Nothing
    happens without a bar or a limiter (a custom ``ask``, no limits set)."""
    limiter = limits if hasattr(limits, "waited") else getattr(getattr(limits, "__self__", None), "model_limiter", None)
    if bar is not None and limiter is not None:
        bar.rate_waits(float(limiter.waited().get("seconds", 0.0)))
