"""Score predictions the way the official Spider and BIRD evaluators do.

Prediction files are read and written in each benchmark's own submission format, so a file made
here can be given to the official scripts and a file made for them can be scored here:

Spider (``pred.txt`` of ``evaluation.py``)
    One query per line, in question order. A line is stripped and cut at its first tab, as the
    official reader does. A blank line inside the file is a missing prediction (the official
    reader would take it as a session break and refuse the file); trailing blank lines are
    ignored. The writer puts each query on one line (``--`` comments removed first, since
    joining lines would otherwise comment out the rest) and writes ``SELECT`` - not a valid
    query, so every scorer counts it wrong - for a question without a prediction, which keeps
    the lines aligned.
BIRD (the ``predict_*.json`` of the BIRD dev and mini-dev ``evaluation_ex.py``)
    A JSON object ``{"0": "SQL\\t----- bird -----\\tdb_id", ...}``. A value without exactly one
    separator is taken whole (stripped), as the official reader does; a non-string value is a
    missing prediction. When every key is an integer, entries are matched to questions by key
    (the question's position in the dataset file); otherwise by position, which is what the
    official reader always does. The two agree for files whose keys are in order.

Per question, every statement executed in this process on the guard's read-only connection
(:mod:`sqlchorus.tools.engines.sqlite_guard`, one connection per database reused for the whole file; see
:class:`_Reader`):

Spider test-suite semantics (``evaluation.py`` + ``exec_eval.py``, default flags)
    In the prediction, ``" value "`` becomes ``" 1 "``. Both queries get ``> =`` style operators
    joined and, unless ``keep_distinct``, every DISTINCT keyword removed. Rows are compared in
    order iff the processed gold text contains ``order by``. ``YEAR(CURDATE())`` becomes 2020
    before execution. The gold query runs first, then the prediction, on the question's database
    and on every other ``*.sqlite`` file in its folder (the test-suite layout; with the plain
    Spider databases there is one), and the results must match on each by
    :func:`~sqlchorus.tools.sql.compare.spider_result_eq`. Time limit: 60 s per query (the
    official constant). Value plug-in (``--plug_value``) is not offered.
BIRD semantics (``evaluation_ex.py``)
    The prediction runs, then the gold; the verdict is ``set(pred_rows) == set(gold_rows)``.
    A timeout or an error is wrong. Time limit: 30 s for each query (the official script wraps
    the pair in one 30 s ``func_timeout``; a per-query limit keeps a slow but correct gold query
    from failing its own gold prediction).

Differences that cannot change a verdict on a well-formed benchmark file: statements other than
one read query are refused by the guard (the official scripts would execute them, writes
included); invalid UTF-8 in text is replaced rather than dropped (the same for gold and
prediction); results larger than the scoring caps are reported as errors.

BIRD's other two metrics, on request (``metrics``; by default for a BIRD dataset, see
:func:`default_metrics`), from the same pass, so no query runs once per metric:

Soft-F1 (:mod:`sqlchorus.evaluation.soft_f1`)
    The row-wise F1 of the prediction's rows against the gold's, from the rows the EX comparison
    fetched (for a Spider dataset, the rows of the queries as written, on the question's
    database: its EX compares rewritten queries).
R-VES (:mod:`sqlchorus.evaluation.ves`)
    Each prediction scored correct is timed against its gold right after its verdict, in the
    worker that scored it, on SQLite databases (another engine's questions get no reward:
    ``r_ves`` is None there).

Verdict statuses: ``correct``, ``wrong``, ``pred_error``, ``timeout`` (the prediction ran out of
time), ``gold_error`` (the gold query failed: the official Spider script would stop, BIRD would
count it wrong; we count it wrong and report it), ``missing_prediction``, and ``missing_db``.
Questions whose database is missing are not scored: ``ex`` is the percentage correct among
``n_scored = n_total - n_missing_db``, and ``n_missing_db`` is reported.

Scoring runs in ``workers`` processes (or threads); processes are the default. Fetching rows,
the guard's progress handler and the comparison are Python code that holds the GIL, so threads
add contention without parallelism. ``benchmarks/scoring.py`` measures the settings, and
``benchmarks/scoring_vs_official.py`` the whole ``sqlchorus eval --predictions`` process against
the official evaluator's. This module imports no SQL parser, no graph and no tracing library.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from itertools import chain
from pathlib import Path
from typing import Any

from sqlchorus.evaluation import soft_f1 as f1_metric
from sqlchorus.evaluation import ves
from sqlchorus.evaluation.datasets import Dataset, Example
from sqlchorus.evaluation.progress import ExProgress
from sqlchorus.tools.sql.compare import (
    bird_result_eq,
    normalise_rows,
    spider_order_matters,
    spider_postprocess,
    spider_remove_distinct,
    spider_replace_cur_year,
    spider_result_eq,
)
from sqlchorus.tools.errors import SqlchorusError
from sqlchorus.tools.sql.hardness_rules import HARDNESS_LEVELS
from sqlchorus.tools.sql.errors import (
    NotAQueryError,
    QueryTimeoutError,
    ResourceError,
    SqlError,
    sqlite_error,
)
from sqlchorus.tools.engines.sqlite_guard import MAX_SQL_CHARS, GuardState
from sqlchorus.tools.engines.sqlite_guard import run as guarded_run
from sqlchorus.tools.engines.sqlite_open import open_checked

__all__ = [
    "Verdict",
    "ScoreReport",
    "SPIDER_TIMEOUT_S",
    "BIRD_TIMEOUT_S",
    "BIRD_SEPARATOR",
    "read_predictions",
    "read_spider_predictions",
    "read_bird_predictions",
    "write_spider_predictions",
    "write_bird_predictions",
    "write_predictions",
    "score_predictions",
    "score_one",
    "score_file",
    "summarize",
    "METRICS",
    "default_metrics",
    "parse_metrics",
]

SPIDER_TIMEOUT_S = 60.0
BIRD_TIMEOUT_S = 30.0
BIRD_SEPARATOR = "\t----- bird -----\t"
EMPTY_PREDICTION = "SELECT"
# Large enough that no benchmark query is cut short; a capped result cannot be compared.
SCORING_MAX_ROWS = 5_000_000
SCORING_MAX_BYTES = 2 * 1024**3

BIRD_LEVELS = ("simple", "moderate", "challenging")
STATUSES = (
    "correct", "wrong", "pred_error", "timeout", "gold_error", "missing_prediction", "missing_db"
)
METRICS = ("ex", "soft_f1", "r_ves")
"""What scoring can report: EX always; BIRD's Soft-F1 and R-VES on request."""


def default_metrics(benchmark: str) -> tuple[str, ...]:
    """The metrics a dataset is scored with unless told: BIRD's three for a BIRD dataset (its
    leaderboard's columns), EX alone for a Spider one."""
    return METRICS if benchmark == "bird" else ("ex",)


def parse_metrics(text: str | Sequence[str] | None, benchmark: str) -> tuple[str, ...]:
    """``"ex,soft_f1,r_ves"`` (or a list of names) as the metrics to report, in :data:`METRICS`
    order, EX always among them; None gives :func:`default_metrics`.

    Raises:
        ValueError: a name that is not a metric.
    """
    if text is None:
        return default_metrics(benchmark)
    names = [n.strip().lower().replace("-", "_") for n in (text.split(",") if isinstance(text, str) else text)]
    unknown = [n for n in names if n and n not in METRICS]
    if unknown:
        raise ValueError(f"Unknown metric {', '.join(map(repr, unknown))}: the metrics are {', '.join(METRICS)}.")
    return tuple(m for m in METRICS if m == "ex" or m in names)


@dataclass
class Verdict:
    """The outcome for one question.

    Attributes:
        index: position in the dataset.
        question_id, db_id, difficulty: copied from the example.
        status: one of ``correct``, ``wrong``, ``pred_error``, ``timeout``, ``gold_error``,
            ``missing_prediction``, ``missing_db``.
        error: the error message, for the error statuses.
        elapsed_ms: wall time spent scoring the question.
        soft_f1: the question's Soft-F1 (0 to 1), when asked for.
        ves_reward: the question's R-VES reward (0 to 1.25), when asked for.
        ves_iterations: the timings its reward took (0 when it was not timed).
    """

    index: int
    question_id: int | str
    db_id: str
    difficulty: str
    status: str
    error: str | None = None
    elapsed_ms: float = 0.0
    soft_f1: float | None = None
    ves_reward: float | None = None
    ves_iterations: int = 0

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    @property
    def scored(self) -> bool:
        return self.status != "missing_db"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ScoreReport:
    """Per-question verdicts (in dataset order) and the summary of :func:`summarize`."""

    verdicts: list[Verdict]
    summary: dict[str, Any]


# -- prediction files ------------------------------------------------------------------------


def read_spider_predictions(path: str | os.PathLike[str]) -> list[str | None]:
    """Read a Spider ``pred.txt``: one query per line, cut at the first tab."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    return [ln.strip().split("\t")[0] if ln.strip() else None for ln in lines]


def read_bird_predictions(path: str | os.PathLike[str]) -> list[str | None]:
    """Read a BIRD prediction JSON object into a list indexed by question position."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a BIRD prediction file is a JSON object.")
    values = [_bird_sql(v) for v in data.values()]
    keys = list(data.keys())
    if keys and all(_is_int(k) for k in keys):
        indices = [int(k) for k in keys]
        if min(indices) < 0:
            raise ValueError(f"{path}: negative question index.")
        if max(indices) >= 10 * len(indices) + 1000:
            # Far more positions than entries: a wrong file, not a sparse prediction list.
            raise ValueError(f"{path}: question index {max(indices)} is out of range for {len(indices)} predictions.")
        out: list[str | None] = [None] * (max(indices) + 1)
        for i, v in zip(indices, values):
            out[i] = v
        return out
    return values


def _is_int(text: str) -> bool:
    return text.strip().lstrip("-").isdigit()


def _bird_sql(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    parts = value.split(BIRD_SEPARATOR)
    return parts[0] if len(parts) == 2 else value.strip()


def read_predictions(path: str | os.PathLike[str]) -> list[str | None]:
    """Read a prediction file in either format: a JSON object is BIRD's, anything else Spider's."""
    text = Path(path).read_text(encoding="utf-8")
    if text.lstrip().startswith("{"):
        try:
            if isinstance(json.loads(text), dict):
                return read_bird_predictions(path)
        except json.JSONDecodeError:
            pass
    return read_spider_predictions(path)


def one_line(sql: str | None) -> str:
    """A query on one line, with ``--`` comments removed (quotes respected)."""
    if not sql or not sql.strip():
        return EMPTY_PREDICTION
    out, i, n, quote = [], 0, len(sql), None
    closing = {"'": "'", '"': '"', "`": "`", "[": "]"}
    while i < n:
        ch = sql[i]
        if quote:
            out.append(ch)
            if ch == quote:
                quote = None
        elif ch in closing:
            quote = closing[ch]
            out.append(ch)
        elif sql.startswith("--", i):
            while i < n and sql[i] != "\n":
                i += 1
            continue
        else:
            out.append(ch)
        i += 1
    line = " ".join("".join(out).split())
    return line or EMPTY_PREDICTION


def write_spider_predictions(path: str | os.PathLike[str], sqls: Iterable[str | None]) -> None:
    """Write a Spider ``pred.txt`` (one query per line, question order)."""
    Path(path).write_text("".join(one_line(s) + "\n" for s in sqls), encoding="utf-8")


def write_bird_predictions(
    path: str | os.PathLike[str], sqls: Sequence[str | None], db_ids: Sequence[str]
) -> None:
    """Write a BIRD prediction JSON object keyed by question position."""
    if len(sqls) != len(db_ids):
        raise ValueError("sqls and db_ids must have the same length.")
    data = {
        str(i): f"{one_line(sql)}{BIRD_SEPARATOR}{db}"
        for i, (sql, db) in enumerate(zip(sqls, db_ids))
    }
    Path(path).write_text(json.dumps(data, indent=4, ensure_ascii=False) + "\n", encoding="utf-8")


def write_predictions(
    path: str | os.PathLike[str], dataset: Dataset, sqls: Sequence[str | None]
) -> None:
    """Write predictions in the submission format of ``dataset``'s benchmark."""
    if dataset.benchmark == "bird":
        write_bird_predictions(path, sqls, [e.db_id for e in dataset.examples])
    else:
        write_spider_predictions(path, sqls)


# -- executing -------------------------------------------------------------------------------

_local = threading.local()


class _Reader:
    """One database's guarded connection in this process (:mod:`sqlchorus.tools.engines.sqlite_guard`):
    opened read-only, under the guard's authorizer and limits (no value over 8 MB), each
    statement stopped at its time limit by the progress handler, results capped in rows and
    bytes. Scoring runs the benchmark's statements and a prediction file's in-process, one
    connection per database for the whole file, rather than through
    :class:`~sqlchorus.tools.engines.sqlite.GuardedDatabase`'s worker process; what that adds, a kill
    from outside for one SQLite call that outruns the limit, matters little with every value
    capped at 8 MB. The statement check needs no SQL parser: SQLite refuses several statements
    in one text, and the text must begin with SELECT or WITH (after comments and parentheses).
    """

    def __init__(self, path: str):
        self.state = GuardState()
        self.conn = open_checked(path, self.state, max_value_bytes=SCORING_MAX_BYTES)

    def rows(self, sql: str, timeout_s: float) -> list[tuple[Any, ...]]:
        _check_query(sql)
        try:
            rows = self._rows_within_bound(sql, timeout_s)
            truncated = False
            if rows is None:  # near the caps: the guard's own count, row by row, decides
                _, rows, truncated, _ = guarded_run(
                    self.conn, self.state, sql, (), timeout_s, SCORING_MAX_ROWS, SCORING_MAX_BYTES
                )
        except sqlite3.Error as e:
            raise sqlite_error(str(e), self.state.refused, sql, timeout_s) from e
        except MemoryError as e:
            raise ResourceError("The query needs more memory than there is.", sql=sql) from e
        if truncated:
            raise _TooLarge("the result is larger than the scoring caps")
        return rows

    def _rows_within_bound(self, sql: str, timeout_s: float) -> list[tuple[Any, ...]] | None:
        """The statement's rows, as the guard's ``run`` reads them (same deadline, same caps),
        counted by the batch instead of by the value; None when the result may be over a cap.

        The bytes of a batch are bounded from above by twice the objects' sizes (``sys.getsizeof``
        of a value is at least the bytes ``run`` counts for it: 8 for a number, 1 for NULL, the
        length of a blob, at most four bytes a character of text in UTF-8, against one to four
        bytes a character in memory plus the object's header), which C code sums without a call
        per value. While that bound stays under the caps, the result is the guard's; past it the
        statement runs again through the guard, which counts exactly."""
        state = self.state
        state.deadline = time.monotonic() + timeout_s
        state.refused = None
        rows: list[tuple[Any, ...]] = []
        bound = 0
        try:
            cur = self.conn.execute(sql)
            while True:
                batch = cur.fetchmany(1024)
                if not batch:
                    break
                rows += batch
                bound += 2 * sum(map(sys.getsizeof, chain.from_iterable(batch)))
                if len(rows) > SCORING_MAX_ROWS or bound > SCORING_MAX_BYTES:
                    cur.close()
                    return None
            cur.close()
        finally:
            state.deadline = float("inf")
        return rows

    def close(self) -> None:
        self.conn.close()


_LEADING = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/|\()*", re.DOTALL)
_QUERY_START = re.compile(r"(?:select|with)\b", re.IGNORECASE)


def _check_query(sql: str) -> None:
    if not sql or not sql.strip():
        raise NotAQueryError("The SQL text is empty.", sql=sql)
    if len(sql) > MAX_SQL_CHARS:
        raise NotAQueryError(f"The SQL text is longer than {MAX_SQL_CHARS} characters.", sql=sql)
    start = _LEADING.match(sql).end()
    if not _QUERY_START.match(sql, start):
        raise NotAQueryError("Only read queries (SELECT or WITH) may run.", sql=sql)


class _EngineReader:
    """A PostgreSQL or DuckDB database under its engine's guard
    (:func:`~sqlchorus.tools.engines.opening.open_database`: read-only, time-bounded, capped), one
    connection or worker for the whole file; rows normalised as SQLite would hold them, so that
    results compare as the official scorers compare SQLite's."""

    def __init__(self, name: str):
        # Imported here: the engines' guards parse SQL, and scoring SQLite files needs no parser.
        from sqlchorus.tools.engines.opening import open_database

        self.db = open_database(name, workers=1, max_rows=SCORING_MAX_ROWS, max_bytes=SCORING_MAX_BYTES)

    def rows(self, sql: str, timeout_s: float) -> list[tuple[Any, ...]]:
        result = self.db.execute(sql, timeout_s=timeout_s)
        if result.truncated:
            raise _TooLarge("the result is larger than the scoring caps")
        return normalise_rows(result.rows)

    def close(self) -> None:
        self.db.close()


def _database(path: str, engine: str = "sqlite") -> _Reader | _EngineReader:
    cache = getattr(_local, "dbs", None)
    if cache is None:
        cache = _local.dbs = {}
    db = cache.get(path)
    if db is None:
        db = cache[path] = _Reader(path) if engine == "sqlite" else _EngineReader(path)
    return db


def _close_databases() -> None:
    for db in getattr(_local, "dbs", {}).values():
        db.close()
    _local.dbs = {}
    _local.suites = {}


class _TooLarge(SqlchorusError):
    """A result larger than the scoring caps: it cannot be compared."""

    kind = "result_too_large"


def _rows(path: str, sql: str, timeout_s: float, engine: str) -> list[tuple[Any, ...]]:
    return _database(path, engine).rows(sql, timeout_s)


def _suite(db_path: str, engine: str) -> list[str]:
    """The question's database first, then any other ``*.sqlite`` beside it (test suites); the
    folder is listed once per scoring run (and thread), not once per question. A database on
    another engine is one database."""
    if engine != "sqlite":
        return [db_path]
    suites = getattr(_local, "suites", None)
    if suites is None:
        suites = _local.suites = {}
    found = suites.get(db_path)
    if found is None:
        folder = os.path.dirname(db_path)
        others = sorted(
            os.path.join(folder, f)
            for f in os.listdir(folder)
            if f.endswith(".sqlite") and os.path.join(folder, f) != db_path
        )
        found = suites[db_path] = [db_path, *others]
    return found


# A task is plain data so it pickles cheaply: (index, benchmark, db_path, engine, gold, pred,
# timeout, keep_distinct, soft_f1 wanted, R-VES iterations or 0). A result is (index, status,
# error, elapsed_ms, soft_f1, ves_reward, ves_iterations).
_Task = tuple[int, str, str, str, str, str, float, bool, bool, int]
_Result = tuple[int, str, str | None, float, float | None, float | None, int]


def _spider_texts(gold: str, pred: str, keep: bool) -> tuple[str, str, bool]:
    """The gold and the prediction as the Spider scorer runs them, and whether order matters."""
    pred = pred.replace(" value ", " 1 ")
    pred, gold = spider_postprocess(pred), spider_postprocess(gold)
    if not keep:
        pred, gold = spider_remove_distinct(pred), spider_remove_distinct(gold)
    order_matters = spider_order_matters(gold)
    return spider_replace_cur_year(gold), spider_replace_cur_year(pred), order_matters


def _score_spider(
    db_path: str, engine: str, gold: str, pred: str, timeout_s: float, keep: bool, f1: bool
) -> tuple[str, str | None, float | None]:
    gold_run, pred_run, order_matters = _spider_texts(gold, pred, keep)
    status, error, first = "correct", None, None
    try:
        for path in _suite(db_path, engine):
            gold_rows = _gold_rows(path, gold_run, timeout_s, engine)
            pred_rows = _pred_rows(path, pred_run, timeout_s, engine)
            if first is None:
                first = (pred_rows, gold_rows)
            if not _same_rows(gold_rows, pred_rows) and not spider_result_eq(gold_rows, pred_rows, order_matters):
                status = "wrong"
                break
    except _QueryFailed as e:
        status, error = e.status, e.error
    if not f1:
        return status, error, None
    # Soft-F1 is BIRD's: the queries as written, on the question's database. The rows above are
    # theirs when the Spider rewrites changed neither text.
    if first is not None and (gold_run, pred_run) == (gold, pred):
        return status, error, _soft_f1(*first)
    try:
        pred_rows = _pred_rows(db_path, pred, timeout_s, engine)
        gold_rows = _gold_rows(db_path, gold, timeout_s, engine)
    except _QueryFailed:
        return status, error, 0.0
    return status, error, _soft_f1(pred_rows, gold_rows)


def _soft_f1(pred_rows: list[tuple[Any, ...]], gold_rows: list[tuple[Any, ...]]) -> float:
    try:
        return f1_metric.soft_f1(pred_rows, gold_rows)
    except Exception:  # the official script's ``except``: a result it cannot score scores 0
        return 0.0


def _same_rows(gold: list[tuple[Any, ...]], pred: list[tuple[Any, ...]]) -> bool:
    """Whether the two results are the same values of the same types in the same order (1 and
    1.0, 0.0 and -0.0 differ, as they do in spider_result_eq's row keys; NaN never equals), which
    spider_result_eq accepts under any rule; checked in C, without its per-row sorting."""
    return gold == pred and repr(gold) == repr(pred)


def _score_bird(
    db_path: str, engine: str, gold: str, pred: str, timeout_s: float, f1: bool
) -> tuple[str, str | None, float | None]:
    failed = 0.0 if f1 else None
    try:
        _database(db_path, engine)  # an unreadable database is not the prediction's fault
    except SqlError as e:
        return "gold_error", _message(e), failed
    try:
        pred_rows = _pred_rows(db_path, pred, timeout_s, engine)
        gold_rows = _gold_rows(db_path, gold, timeout_s, engine)
    except _QueryFailed as e:
        return e.status, e.error, failed
    status = "correct" if bird_result_eq(gold_rows, pred_rows) else "wrong"
    return status, None, (_soft_f1(pred_rows, gold_rows) if f1 else None)


class _QueryFailed(SqlchorusError):
    """The gold or the predicted query did not run, which decides the verdict on its own:
    ``status`` is that verdict."""

    kind = "query_failed"

    def __init__(self, status: str, error: str):
        super().__init__(error)
        self.status, self.error = status, error


def _gold_rows(path: str, sql: str, timeout_s: float, engine: str) -> list[tuple[Any, ...]]:
    try:
        return _rows(path, sql, timeout_s, engine)
    except (SqlError, _TooLarge) as e:
        raise _QueryFailed("gold_error", _message(e)) from e


def _pred_rows(path: str, sql: str, timeout_s: float, engine: str) -> list[tuple[Any, ...]]:
    try:
        return _rows(path, sql, timeout_s, engine)
    except QueryTimeoutError as e:
        raise _QueryFailed("timeout", e.message) from e
    except (SqlError, _TooLarge) as e:
        raise _QueryFailed("pred_error", _message(e)) from e


def _message(error: Exception) -> str:
    return getattr(error, "message", None) or str(error)


def _score_task(task: _Task) -> _Result:
    index, benchmark, db_path, engine, gold, pred, timeout_s, keep, f1, ves_iterations = task
    start = time.perf_counter()
    f1_value: float | None = 0.0 if f1 else None
    try:
        if benchmark == "bird":
            status, error, f1_value = _score_bird(db_path, engine, gold, pred, timeout_s, f1)
        else:
            status, error, f1_value = _score_spider(db_path, engine, gold, pred, timeout_s, keep, f1)
    except Exception as e:  # a broken file must cost one verdict, not the whole run
        status, error = "gold_error", f"{type(e).__name__}: {e}"
    elapsed = (time.perf_counter() - start) * 1000.0
    reward, iterations = _ves(benchmark, db_path, engine, gold, pred, timeout_s, keep, ves_iterations, status)
    return index, status, error, elapsed, f1_value, reward, iterations


def _ves(
    benchmark: str, db_path: str, engine: str, gold: str, pred: str, timeout_s: float, keep: bool,
    iterations: int, status: str,
) -> tuple[float | None, int]:
    """The R-VES reward of one question: 0 unless correct; a correct one timed against its gold,
    the texts as its verdict ran them, within the official budget of ``timeout_s`` an iteration."""
    if not iterations or engine != "sqlite":
        return None, 0
    if status != "correct":
        return 0.0, 0
    if benchmark != "bird":
        gold, pred, _ = _spider_texts(gold, pred, keep)
    deadline = time.monotonic() + timeout_s * iterations
    stopwatch = ves.fresh_connection_stopwatch(db_path, deadline)
    timing = ves.in_own_thread(
        lambda: ves.time_reward(pred, gold, stopwatch, iterations=iterations, warm_up=True))
    return timing.reward, timing.iterations


def _score_chunk(tasks: list[_Task]) -> list[_Result]:
    return [_score_task(t) for t in tasks]


# -- scoring ---------------------------------------------------------------------------------


def _aligned(
    dataset: Dataset, predictions: Sequence[str | None] | Mapping[int, str | None]
) -> list[str | None]:
    n = len(dataset.examples)
    if isinstance(predictions, Mapping):
        return [predictions.get(i) for i in range(n)]
    preds = list(predictions)
    if len(preds) > n:
        raise ValueError(
            f"{len(preds)} predictions for {n} questions of {dataset.name}: too many."
        )
    return preds + [None] * (n - len(preds))


def score_predictions(
    dataset: Dataset,
    predictions: Sequence[str | None] | Mapping[int, str | None],
    *,
    workers: int = 1,
    executor: str = "process",
    timeout_s: float | None = None,
    keep_distinct: bool = False,
    progress: bool = False,
    on_verdict: Callable[[Verdict], None] | None = None,
    metrics: Sequence[str] = ("ex",),
    ves_iterations: int = ves.ITERATIONS,
) -> ScoreReport:
    """Score predictions against ``dataset`` with its benchmark's official semantics.

    Args:
        dataset: the questions (see :func:`sqlchorus.evaluation.datasets.load_dataset`).
        predictions: one SQL (or None) per question in dataset order, or a mapping from
            question position to SQL. A shorter list leaves the rest missing.
        workers: how many processes (or threads) execute queries; 1 runs in this thread.
        executor: ``"process"`` or ``"thread"``, used when ``workers > 1``.
        timeout_s: time limit per query; default 60 s for Spider, 30 s for BIRD.
        keep_distinct: Spider only: keep DISTINCT (the official ``--keep_distinct``).
        progress: show a progress bar with the running accuracy.
        on_verdict: called with each verdict as it is decided (in completion order).
        metrics: what to report besides EX: ``soft_f1`` and ``r_ves`` (:data:`METRICS`).
        ves_iterations: timings of each correct prediction for R-VES (the official 100).

    Returns:
        A :class:`ScoreReport` whose verdicts are in dataset order.

    Raises:
        ValueError: more predictions than questions, or an unknown executor.
    """
    if executor not in ("process", "thread"):
        raise ValueError(f"executor must be 'process' or 'thread', not {executor!r}.")
    metrics = parse_metrics(list(metrics), dataset.benchmark)
    if ves_iterations < 1:
        raise ValueError(f"ves_iterations must be 1 or more, not {ves_iterations}.")
    f1 = "soft_f1" in metrics
    timed = ves_iterations if "r_ves" in metrics else 0
    preds = _aligned(dataset, predictions)
    limit = timeout_s or (BIRD_TIMEOUT_S if dataset.benchmark == "bird" else SPIDER_TIMEOUT_S)
    verdicts: list[Verdict | None] = [None] * len(preds)
    tasks: list[_Task] = []
    pre_decided: list[Verdict] = []
    for i, (example, pred) in enumerate(zip(dataset.examples, preds)):
        if example.db_path is None:
            pre_decided.append(_verdict(dataset, i, "missing_db", "the database file is missing"))
        elif pred is None:
            missing = _verdict(dataset, i, "missing_prediction", None)
            missing.soft_f1 = 0.0 if f1 else None
            missing.ves_reward = 0.0 if timed and dataset.engine == "sqlite" else None
            pre_decided.append(missing)
        else:
            tasks.append(
                (i, dataset.benchmark, str(example.db_path), dataset.engine, example.gold_sql, pred,
                 limit, keep_distinct, f1, timed)
            )

    bar = ExProgress(f"scoring {dataset.name}", len(preds)) if progress else None
    started = time.perf_counter()
    try:
        for v in pre_decided:
            verdicts[v.index] = v
            _notify(v, bar, on_verdict)
        for index, status, error, elapsed, f1_value, reward, iterations in _run(tasks, workers, executor):
            v = _verdict(dataset, index, status, error, elapsed)
            v.soft_f1, v.ves_reward, v.ves_iterations = f1_value, reward, iterations
            verdicts[index] = v
            _notify(v, bar, on_verdict)
    finally:
        if bar is not None:
            bar.close()
    done = [v for v in verdicts if v is not None]
    summary = summarize(done, dataset.benchmark, metrics)
    summary.update(
        dataset=dataset.name,
        benchmark=dataset.benchmark,
        workers=workers,
        executor=executor if workers > 1 else "inline",
        elapsed_s=round(time.perf_counter() - started, 3),
    )
    return ScoreReport(verdicts=done, summary=summary)


def score_one(example: Example, sql: str | None, *, benchmark: str, engine: str = "sqlite") -> Verdict:
    """One prediction for one question, scored with ``benchmark``'s semantics as it would be in a
    prediction file: on one line (:func:`one_line`), which is what a file holds and the official
    scorers read, so the verdict is the one the whole file would give it. An empty or missing
    query is a missing prediction."""
    one = Dataset(name="question", benchmark=benchmark, examples=[example], source=Path("."), engine=engine)
    prediction = None if sql is None or not sql.strip() else one_line(sql)
    return score_predictions(one, [prediction], workers=1).verdicts[0]


def score_file(dataset: Dataset, path: str | os.PathLike[str], **options: Any) -> ScoreReport:
    """Score a prediction file (either format) against ``dataset``; options as
    :func:`score_predictions`."""
    return score_predictions(dataset, read_predictions(path), **options)


def _verdict(
    dataset: Dataset, index: int, status: str, error: str | None, elapsed: float = 0.0
) -> Verdict:
    e = dataset.examples[index]
    return Verdict(
        index=index, question_id=e.question_id, db_id=e.db_id, difficulty=e.difficulty,
        status=status, error=error, elapsed_ms=round(elapsed, 3),
    )


def _notify(v: Verdict, bar: ExProgress | None, hook: Callable[[Verdict], None] | None) -> None:
    if bar is not None:
        bar.advance(v.scored, v.correct)
    if hook is not None:
        hook(v)


def _chunks(tasks: list[_Task], workers: int) -> list[list[_Task]]:
    # Small chunks keep the progress bar moving and balance slow queries across workers.
    size = max(1, min(16, len(tasks) // (workers * 8) or 1))
    return [tasks[i : i + size] for i in range(0, len(tasks), size)]


def _run(tasks: list[_Task], workers: int, executor: str) -> Iterable[_Result]:
    if workers <= 1 or len(tasks) <= 1:
        try:
            for t in tasks:
                yield _score_task(t)
        finally:
            _close_databases()
        return
    pool: Executor
    if executor == "process":
        pool = ProcessPoolExecutor(max_workers=workers)
    else:
        pool = ThreadPoolExecutor(max_workers=workers)
    with pool:
        futures = [pool.submit(_score_chunk, chunk) for chunk in _chunks(tasks, workers)]
        for future in as_completed(futures):
            yield from future.result()


def summarize(verdicts: Sequence[Verdict], benchmark: str, metrics: Sequence[str] = ("ex",)) -> dict[str, Any]:
    """Summary figures: ``ex`` (percent of scored questions correct, None when none scored),
    counts per status, and ``by_difficulty`` {level: {n, ex, n_missing_db}}; with ``metrics``
    naming them, ``soft_f1`` and ``r_ves`` beside ``ex`` (in percent, over the questions scored,
    in total and by difficulty), ``metrics`` (the list reported) and ``ves_iterations`` (the
    timings R-VES took: total and per prediction timed)."""
    scored = [v for v in verdicts if v.scored]
    counts = {s: sum(1 for v in verdicts if v.status == s) for s in STATUSES}
    levels = list(BIRD_LEVELS if benchmark == "bird" else HARDNESS_LEVELS)
    levels += sorted({v.difficulty for v in verdicts} - set(levels))
    by_difficulty = {}
    for level in levels:
        group = [v for v in verdicts if v.difficulty == level]
        if not group:
            continue
        level_scored = [v for v in group if v.scored]
        by_difficulty[level] = {
            "n": len(level_scored),
            "ex": _percent(level_scored),
            "n_missing_db": len(group) - len(level_scored),
            **_bird_figures(level_scored, metrics),
        }
    timed = [v.ves_iterations for v in scored if v.ves_iterations]
    # EX alone keeps the summary as it always was; the key says when there is more.
    extra: dict[str, Any] = {"metrics": list(metrics), **_bird_figures(scored, metrics)} if len(metrics) > 1 else {}
    if "r_ves" in metrics:
        extra["ves_iterations"] = {"total": sum(timed), "timed": len(timed),
                                   "mean": round(sum(timed) / len(timed), 2) if timed else None}
    return {
        "ex": _percent(scored),
        **extra,
        "n_total": len(verdicts),
        "n_scored": len(scored),
        "n_correct": counts["correct"],
        "n_missing_db": counts["missing_db"],
        "n_missing_prediction": counts["missing_prediction"],
        "n_pred_errors": counts["pred_error"],
        "n_timeouts": counts["timeout"],
        "n_gold_errors": counts["gold_error"],
        "by_difficulty": by_difficulty,
    }


def _bird_figures(verdicts: Sequence[Verdict], metrics: Sequence[str]) -> dict[str, float | None]:
    """Soft-F1 and R-VES of ``verdicts`` in percent, for the metrics asked for; R-VES is None where
    a question has no reward (a database on another engine, which is not timed)."""
    out: dict[str, float | None] = {}
    if "soft_f1" in metrics:
        out["soft_f1"] = f1_metric.mean_percent([v.soft_f1 or 0.0 for v in verdicts])
    if "r_ves" in metrics:
        rewards = [v.ves_reward for v in verdicts]
        out["r_ves"] = None if any(r is None for r in rewards) else ves.r_ves([r or 0.0 for r in rewards])
    return out


def _percent(verdicts: Sequence[Verdict]) -> float | None:
    if not verdicts:
        return None
    return round(100.0 * sum(v.correct for v in verdicts) / len(verdicts), 2)
