"""The progress bar of an evaluation and of scoring: questions done, and the accuracy so far."""

from __future__ import annotations

from collections.abc import Iterable

Tally = tuple[bool, bool, float]
"""What one question adds to the bar: whether it was scored, whether it was right, its cost."""


class ExProgress:
    """A rich progress bar on stderr whose columns carry the running accuracy (EX), and when
    ``cost`` the dollars spent and the time left; once model calls have waited for their
    limits (``--model-limit``), the seconds waited (:meth:`rate_waits`).

    Args:
        description: what the bar says it does.
        total: the questions to go through.
        cost: show the cost so far and an estimate of the time left.
        done: the tallies of questions done before (a resumed run), counted from the start.
    """

    def __init__(self, description: str, total: int, *, cost: bool = False, done: Iterable[Tally] = ()):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            ProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        columns: list[ProgressColumn] = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                         TextColumn("EX {task.fields[ex]}")]
        if cost:
            columns.append(TextColumn("{task.fields[cost]}"))
        columns.append(TextColumn("{task.fields[waits]}"))
        columns.append(TimeElapsedColumn())
        if cost:
            columns.append(TimeRemainingColumn())
        # stdout stays free for results (--json)
        self._progress = Progress(*columns, console=Console(stderr=True))
        self._scored = self._correct = 0
        self._cost = 0.0
        self._waited_s = 0.0
        self._task = self._progress.add_task(description, total=total, ex="-", cost="", waits="")
        already = 0
        for tally in done:
            self._count(*tally)
            already += 1
        self._progress.update(self._task, completed=already, **self._fields())
        self._progress.start()

    def advance(self, scored: bool, correct: bool, cost_usd: float = 0.0) -> None:
        """One more question done."""
        self._count(scored, correct, cost_usd)
        self._progress.update(self._task, advance=1, **self._fields())

    def rate_waits(self, seconds: float) -> None:
        """Show that model calls have waited ``seconds`` in all so far for their rate limits (a
        limiter's ``waited()["seconds"]``): why a run goes slower than its models answer. Shown
        only once above zero. Safe from any thread."""
        self._waited_s = max(0.0, float(seconds))
        self._progress.update(self._task, **self._fields())

    def _count(self, scored: bool, correct: bool, cost_usd: float) -> None:
        if scored:
            self._scored += 1
            self._correct += bool(correct)
        self._cost += cost_usd

    def _fields(self) -> dict[str, str]:
        ex = f"{100.0 * self._correct / self._scored:.1f}%" if self._scored else "-"
        waits = f"waited {self._waited_s:.1f}s for limits" if self._waited_s > 0 else ""
        return {"ex": ex, "cost": f"${self._cost:.4f}" if self._cost else "", "waits": waits}

    def close(self) -> None:
        self._progress.stop()
