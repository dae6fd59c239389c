"""BIRD's R-VES (reward-based valid efficiency score), as bird-bench/mini_dev's
``evaluation/evaluation_ves.py`` defines it.

Only a correct prediction earns a reward (``set(pred_rows) == set(gold_rows)``, BIRD's EX); any
other scores 0. A correct one is timed against its gold ``iterations`` times (the official
``iterate_num``, 100): each iteration runs the prediction, then the gold, each on a connection of
its own opened for that run, the clock started before the cursor is made and stopped after the
rows are fetched and the connection closed, and records ``gold_time / pred_time``. The ratios more
than three standard deviations (numpy's, over all of them) from their mean are dropped, the rest
averaged, and the average's tier is the reward:

=================  ======
time ratio         reward
=================  ======
``>= 2``           1.25
``[1, 2)``         1
``[0.5, 1)``       0.75
``[0.25, 0.5)``    0.5
``(0, 0.25)``      0.25
=================  ======

R-VES is ``sum(sqrt(reward) * 100) / n`` over the questions scored. A question whose timing fails
or runs past ``timeout_s * iterations`` (the official ``meta_time_out * iterate_num``) earns 0.

Where it differs, and why:

* **The correctness check is EX's.** The official script runs both queries once more before the
  timings to compare their results; here the verdict of the EX pass (the same comparison on the
  same database) decides which predictions are timed. Both queries still run once, untimed, on
  connections of their own in the timing's thread before the first iteration (``warm_up``), as
  the official check leaves them run: without it the first iterations found the gold a little
  slower than the prediction more often than the official script does, and R-VES on a file of
  gold predictions came out about a point lower than the official script's.
* **A thread of its own.** Each question is timed in a thread started for it
  (:func:`in_own_thread`), as the official script times it in ``func_timeout``'s; timed in the
  worker's main thread, R-VES came out about half a point lower again.
* **Early exit, off by default.** With ``early_exit``, after :data:`MIN_ITERATIONS` iterations,
  and every :data:`CHECK_EVERY` after, the timing stops when the tier is settled: the mean of the
  ratios so far lies inside its tier by more than :data:`SETTLE_Z` standard errors of where the
  mean of all ``iterations`` could end (the iterations left drawn from the same spread, around a
  mean itself that uncertain), and by more than :data:`NEAR_BOUND` of itself. The reward is then
  the tier of the cleaned mean of the ratios measured, as for a full run. A prediction plainly
  faster or slower than its gold stops after a few iterations; one about as fast (a time ratio
  near a tier's bound, as for a prediction that is the gold) runs them all. Scoring leaves it
  off: the reward of a prediction as fast as its gold is decided by timing noise, and that noise
  depends on what the machine's other cores are doing meanwhile. With the early exit, the other
  workers' questions end sooner and leave the machine quieter, and R-VES on the benchmark's file
  came out 0.4 points under the official script's (eight runs of each); timing every correct
  prediction ``iterations`` times, as the official script does, matched it.
* **Every ratio equal.** Where the clock cannot tell the runs apart and every ratio is the same,
  the official script keeps none of them (none lies strictly within zero deviations of the mean)
  and divides by zero, scoring 0; here the ratio stands.
* **The connection.** Each timed run opens the database read-only, with the deadline checked
  every :data:`DEADLINE_STEPS` virtual-machine steps; the statement is one the guard already ran
  and accepted on the EX pass, and the guard's authorizer is left off the timed connection so
  that it adds nothing to the times compared.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlchorus.tools.errors import EXIT_NO_ANSWER, SqlchorusError

__all__ = [
    "ITERATIONS",
    "Timing",
    "cleaned",
    "fresh_connection_stopwatch",
    "in_own_thread",
    "r_ves",
    "reward",
    "settled",
    "time_ratio",
    "time_reward",
]

ITERATIONS = 100
"""The official ``iterate_num``: timings of each correct prediction and its gold."""
MIN_ITERATIONS = 10
"""Iterations before the first early-exit check: fewer say too little about the spread."""
CHECK_EVERY = 10
SETTLE_Z = 4.0
"""Standard errors between the running mean and its tier's bounds for the tier to count as
settled. A normal tail that far out holds 3 in 100,000; timings have heavier tails and the check
repeats, so that is the order of how often a settled tier differs from the full run's, not a
promise."""
NEAR_BOUND = 0.2
"""A mean within this share of itself of a tier's bound is never settled early. The reward of a
prediction about as fast as its gold (the gold itself: a mean ratio of 0.9 to 1) is decided by
the occasional slow run among the official 100, which the first few iterations rarely show;
stopping those early lowered R-VES on a file of gold predictions by about 2 points."""
DEADLINE_STEPS = 100_000
"""Virtual-machine steps between two checks of the deadline on a timed connection: rare enough
that the check adds nothing measurable to a run's time."""

_TIERS = ((2.0, 1.25), (1.0, 1.0), (0.5, 0.75), (0.25, 0.5))
_FLOOR = 0.25
_BOUNDS = (0.0, 0.25, 0.5, 1.0, 2.0, math.inf)

Stopwatch = Callable[[str], float]
"""Runs one statement and returns the seconds it took."""


def reward(ratio: float) -> float:
    """The reward of a time ratio (gold time over prediction time); 0 for a ratio of 0."""
    if ratio == 0:
        return 0.0
    for bound, value in _TIERS:
        if ratio >= bound:
            return value
    return _FLOOR


def _numpy() -> Any:
    # Loaded when a ratio is first cleaned, not with scoring: scoring EX alone starts as quickly
    # as it did.
    import numpy

    return numpy


def cleaned(ratios: Sequence[float]) -> list[float]:
    """The ratios strictly within three standard deviations of their mean (numpy's mean and
    population standard deviation, as the official ``clean_abnormal``); all of them when none is
    (every ratio the same)."""
    np = _numpy()
    values = np.asarray(ratios, dtype=float)
    mean, std = np.mean(values), np.std(values)
    kept = [float(x) for x in values if mean - 3 * std < x < mean + 3 * std]
    return kept or [float(x) for x in values]


def time_ratio(ratios: Sequence[float]) -> float:
    """The mean of the cleaned ratios, summed in order as the official script sums them."""
    kept = cleaned(ratios)
    return sum(kept) / len(kept)


def _tier_bounds(ratio: float) -> tuple[float, float]:
    for lo, hi in zip(_BOUNDS, _BOUNDS[1:]):
        if lo <= ratio < hi:
            return lo, hi
    return _BOUNDS[-2], _BOUNDS[-1]


def settled(n: int, total: float, squares: float, iterations: int = ITERATIONS) -> bool:
    """Whether the reward of all ``iterations`` timings is already known, with the confidence
    :data:`SETTLE_Z` gives, from the ``n`` ratios measured so far, given by their sum and their
    sum of squares (see the module docstring). The spread is taken before cleaning, which only
    widens it; kept as two running sums, the check costs a few float operations between a gold's
    run and the next prediction's, where any longer pause slows the prediction's run and lowers
    the ratios measured."""
    if n >= iterations:
        return True
    if n < MIN_ITERATIONS:
        return False
    mean = total / n
    sd = math.sqrt(max(squares / n - mean * mean, 0.0))
    left = iterations - n
    where = sd * math.sqrt(1 / n + 1 / left) * left / iterations
    lo, hi = _tier_bounds(mean)
    margin = max(SETTLE_Z * where, NEAR_BOUND * mean)
    return mean - margin >= lo and mean + margin < hi


def r_ves(rewards: Sequence[float]) -> float | None:
    """The official aggregate, ``sum(sqrt(reward) * 100) / n``, rounded to 2 places; None for no
    questions."""
    if not rewards:
        return None
    return round(sum(math.sqrt(r) * 100 for r in rewards) / len(rewards), 2)


@dataclass
class Timing:
    """One correct prediction timed against its gold.

    Attributes:
        reward: the tier's reward, 0 when the timing failed.
        ratio: the mean of the cleaned ratios (None when the timing failed).
        iterations: the iterations run (fewer than asked when the tier settled early).
        error: why the timing failed, or None.
    """

    reward: float
    ratio: float | None
    iterations: int
    error: str | None = None


def time_reward(
    pred: str,
    gold: str,
    stopwatch: Stopwatch,
    *,
    iterations: int = ITERATIONS,
    early_exit: bool = False,
    warm_up: bool = False,
) -> Timing:
    """Time ``pred`` against ``gold`` (prediction first in each iteration) with ``stopwatch`` and
    return the reward; with ``warm_up``, both run once first, their times not kept; with
    ``early_exit``, the timings stop once the tier is settled (see the module docstring). A
    failure of either (an error, the deadline) earns 0, as in the official script, where any
    exception does."""
    ratios: list[float] = []
    total = squares = 0.0
    try:
        if warm_up:
            stopwatch(pred)
            stopwatch(gold)
        while len(ratios) < iterations:
            pred_s = stopwatch(pred)
            gold_s = stopwatch(gold)
            ratio = gold_s / pred_s
            ratios.append(ratio)
            total += ratio
            squares += ratio * ratio
            if early_exit and len(ratios) % CHECK_EVERY == 0 and settled(len(ratios), total, squares, iterations):
                break
        ratio = time_ratio(ratios)
    except Exception as e:  # the official script's ``except Exception``: no reward, the reason kept
        return Timing(reward=0.0, ratio=None, iterations=len(ratios), error=f"{type(e).__name__}: {e}")
    return Timing(reward=reward(ratio), ratio=ratio, iterations=len(ratios))


def in_own_thread(run: Callable[[], Timing]) -> Timing:
    """``run()`` in a thread started for it, waited for here (its exception raised here): the
    official script times each question in a thread of its own (``func_timeout``'s), and where the
    timings run changes them (see the module docstring).

    >>> in_own_thread(lambda: Timing(reward=1.0, ratio=1.5, iterations=100))
    Timing(reward=1.0, ratio=1.5, iterations=100, error=None)
    """
    outcome: list[Timing] = []
    failure: list[BaseException] = []

    def body() -> None:
        try:
            outcome.append(run())
        except BaseException as e:  # carried to the caller, raised there
            failure.append(e)

    thread = threading.Thread(target=body, name="sqlchorus-ves", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


class _Deadline(SqlchorusError):
    """The question's timing budget ran out (caught here: the timings taken so far stand)."""

    kind = "timing_budget"
    exit_code = EXIT_NO_ANSWER
    http_status = 504


def fresh_connection_stopwatch(db_path: str | Path, deadline: float) -> Stopwatch:
    """A stopwatch that runs each statement on a read-only connection opened for it, the way the
    official script times (the connection opened before the clock starts; cursor, execution,
    fetching every row and closing timed), and raises once ``deadline`` (``time.monotonic()``)
    has passed."""
    uri = Path(db_path).resolve().as_uri() + "?mode=ro"

    def past_deadline() -> int:
        return 1 if time.monotonic() > deadline else 0

    def run(sql: str) -> float:
        if time.monotonic() > deadline:
            raise _Deadline("the question's timing budget ran out")
        conn = sqlite3.connect(uri, uri=True)
        try:
            conn.set_progress_handler(past_deadline, DEADLINE_STEPS)
            start = time.perf_counter()
            cursor = conn.cursor()
            cursor.execute(sql)
            rows = cursor.fetchall()
            conn.close()
            elapsed = time.perf_counter() - start
            # The rows are freed after the clock stops, as the official script's are (at its
            # function's return): freeing a large result is not the query's time.
            del rows
            return elapsed
        finally:
            conn.close()

    return run
