"""``sqlchorus check``: every taught question asked again, its answer compared with the taught SQL's.

A database's taught examples are its users' regression suite. :func:`check_taught` turns them
into an evaluation (each taught SQL the gold, each hint the evidence) and runs it as ``sqlchorus
eval`` runs a benchmark: with the current models and settings, into a run folder under
``./evals`` that the viewer lists and ``sqlchorus debug --eval`` opens, each answer compared with
the taught SQL's result by the evaluation's comparison (BIRD's: the same rows, in any order).

A taught example is never shown in the prompts of its own question (retrieval leaves out an
example of the same wording), so a check measures what the pipeline answers from everything else
it was taught, not a copy of the answer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlchorus.config.settings import Settings
from sqlchorus.evaluation.datasets import Dataset, Example
from sqlchorus.evaluation.runs import EvalRun, debug_command, run_eval, wrong_questions
from sqlchorus.runs.teach import Teacher, UnknownTaughtError
from sqlchorus.tools.engines.opening import engine_of, is_server_url
from sqlchorus.tools.examples.taught import EXAMPLE

CHECK_BENCHMARK = "bird"
"""Whose comparison a check uses: BIRD's, the same rows in any order, which asks nothing of the
SQL's wording (Spider's reads the gold's ORDER BY and drops DISTINCT)."""


@dataclass
class CheckReport:
    """What a check found.

    Attributes:
        database: the database's name in the examples store.
        folder: the run folder (records, report, traces) of the check.
        n_checked: taught questions asked.
        regressions: one per taught question answered otherwise than its taught SQL: its id,
            question, taught SQL, the answer's SQL, the verdict (``wrong``, ``pred_error``,
            ``missing_prediction``, ...) and its error, and the command that opens its run in the
            debugger.
    """

    database: str
    folder: Path
    n_checked: int = 0
    regressions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def n_regressions(self) -> int:
        return len(self.regressions)

    def to_dict(self) -> dict[str, Any]:
        return {"database": self.database, "folder": str(self.folder), "n_checked": self.n_checked,
                "n_regressions": self.n_regressions, "regressions": self.regressions}


def taught_dataset(teacher: Teacher, db: str | os.PathLike[str], name: str) -> tuple[str, Dataset]:
    """The taught examples of ``db`` as a dataset: each taught SQL the gold, its hint the evidence.

    Raises:
        UnknownTaughtError: the store keeps no examples for ``db``.
    """
    database = teacher.database_of(str(db))
    entries = teacher.store().taught(database, EXAMPLE)
    if not entries:
        raise UnknownTaughtError(f"No examples are taught for {database} (only glossary terms): "
                                 "teach one with sqlchorus teach --db ... --question ... --sql ...")
    engine = engine_of(database)
    target: str | Path = Path(database) if engine == "sqlite" else database
    examples = [
        Example(question_id=entry["id"], db_id=_stem(database), db_path=target, question=entry["question"],
                evidence=entry["hint"] or "", gold_sql=entry["sql"], difficulty="taught")
        for entry in entries
    ]
    return database, Dataset(name=name, benchmark=CHECK_BENCHMARK, examples=examples, source=Path(name),
                             engine=engine)


def _stem(database: str) -> str:
    if is_server_url(database):
        return database.rstrip("/").rsplit("/", 1)[-1] or database
    return Path(database).stem


def check_taught(db: str | os.PathLike[str], settings: Settings, *, out_dir: str | os.PathLike[str] | None = None,
                 workers: int = 1, progress: bool = False, log: Callable[[str], None] | None = None,
                 ask: Callable[..., Any] | None = None) -> CheckReport:
    """Ask every taught question of ``db`` again and compare each answer with its taught SQL's.

    Args:
        db: the database (as ``--db`` names it).
        settings: the models and settings to answer with; their ``examples_store`` holds the
            taught examples.
        out_dir: the check's run folder (default ``evals/check-<database>-<time>``).
        workers, progress, log, ask: as for :func:`~sqlchorus.evaluation.runs.run_eval`.

    Raises:
        UnknownTaughtError: nothing is taught for ``db``; NoExamplesStoreError: taught examples
            are off.
    """
    with Teacher(settings=settings) as teacher:
        database, dataset = taught_dataset(teacher, db, f"check-{_stem(str(db))}")
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    folder = Path(out_dir or Path("evals") / f"{dataset.name}-{stamp}")
    # The check's runs are kept in its folder, as an evaluation's are; the taught examples stay
    # where they were read.
    settings = settings.replace(examples_store=settings.examples_file,
                                trace_dir=str(folder / "traces") if settings.trace_folder else None)
    run: EvalRun = run_eval(dataset, settings, out_dir=folder, workers=workers, progress=progress, log=log,
                            ask=ask, resume=out_dir is not None, metrics=())
    report = CheckReport(database=database, folder=folder, n_checked=len(run.records))
    for record in wrong_questions(run.records):
        report.regressions.append({
            "id": record["question_id"], "question": record["question"], "taught_sql": record["gold_sql"],
            "sql": record.get("prediction"), "verdict": record.get("verdict") or record.get("status"),
            "error": record.get("verdict_error") or record.get("error"), "debug": debug_command(folder, record),
        })
    return report
