"""Evaluations, batches and standalone selection run by a :class:`~sqlchorus.cluster.workers.Pool`.

:func:`cluster_runner` is what ``eval --ray`` and ``batch --ray`` give
:func:`sqlchorus.evaluation.runs.run_eval` and :func:`sqlchorus.evaluation.batch.run_batch`: the
same records, written by the same code on the command's machine, the questions answered by the
cluster's workers. :func:`select_on_cluster` is ``select --ray``: the same results in the same
order as :func:`sqlchorus.runs.standalone_selection.select_file`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlchorus.cluster.workers import Pool, Task, land, wait_s_of
from sqlchorus.evaluation.batch import batch_judges
from sqlchorus.evaluation.datasets import Dataset
from sqlchorus.evaluation.runs import Runner, base_record
from sqlchorus.runs.standalone_selection import agreement_weights, read_selection_lines


def cluster_runner(pool: Pool, settings: Any, limiter: Any = None) -> Runner:
    """A runner that answers each question on one of ``pool``'s workers and lands its record here."""

    def run(dataset: Dataset, indices: list[int], finish: Callable[[dict[str, Any]], None], bar: Any,
            session: str | None = None) -> None:
        origin = "batch" if dataset.benchmark == "batch" else "eval"
        tasks = [Task(i, "answer", (i, dataset.examples[i], dataset.benchmark, dataset.engine,
                                    batch_judges(dataset, i), origin, session)) for i in indices]

        def done(task: Task, answer: dict[str, Any]) -> None:
            finish(land(answer, settings, base_record(task.key, dataset.examples[task.key])))

        def tick() -> None:
            if bar is not None and limiter is not None and hasattr(bar, "rate_waits"):
                bar.rate_waits(wait_s_of(limiter))

        pool.run(tasks, done, tick)

    return run


def select_on_cluster(pool: Pool, path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """:func:`~sqlchorus.runs.standalone_selection.select_file` with each line's work on a worker.

    Without a selection model, every line's candidates are run first (on the workers) and each
    candidate position weighed over the whole file, as locally; then each line is chosen on a
    worker. Results come in line order.
    """
    base = Path(path).resolve().parent
    lines = list(read_selection_lines(path, base))
    usable = [(n, item, db) for n, item, db in lines if item is not None]
    checked: dict[int, Any] = {}
    weights: dict[int, Any] = {}
    if pool.select_model is None:
        pool.run([Task(n, "check_line", (str(db), item["candidates"])) for n, item, db in usable],
                 lambda task, value: checked.__setitem__(task.key, value))
        refused = {n: why for n, why in checked.items() if isinstance(why, str)}
        lines = [(n, None, refused[n]) if n in refused else (n, item, extra) for n, item, extra in lines]
        usable = [(n, item, db) for n, item, db in usable if n not in refused]
        by_size: dict[int, list[Any]] = {}
        for n, item, _ in usable:
            by_size.setdefault(len(item["candidates"]), []).append(checked[n])
        weights = {size: agreement_weights(runs) for size, runs in by_size.items()}
    results: dict[int, dict[str, Any]] = {}
    pool.run([Task(n, "select_line", (n, item, str(db), checked.get(n), weights.get(len(item["candidates"]))))
              for n, item, db in usable], lambda task, value: results.__setitem__(task.key, value))
    for n, item, extra in lines:
        yield results[n] if item is not None else {"line": n, "error": extra}


def databases_of(dataset: Dataset, indices: list[int]) -> list[str]:
    """The databases the questions ``indices`` are asked of, each once."""
    return list(dict.fromkeys(str(dataset.examples[i].db_path) for i in indices
                              if dataset.examples[i].db_path is not None))
