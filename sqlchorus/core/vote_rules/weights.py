"""``weights``: each vote weighs its system's record of agreement with the other systems.

N-rep reads the vote count as confidence; this also weighs each vote by its generator's record,
estimated from the candidates alone (:func:`estimate`), never from a gold answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

NAME = "weights"
WHY = "a system that agrees with the others more often over the run is right more often"
MIN_HISTORY = 10
"""Questions a run needs before per-system weights are estimated; with fewer, votes weigh 1."""


def apply(ballot) -> None:
    if ballot.system_weights is None:
        ballot.notes.append("no record of the systems: every vote weighs 1 (weights)")
        return
    ballot.weights = [float(w) for w in ballot.system_weights]
    ballot.applied.append(NAME)


def estimate(runs: Sequence[Sequence[Mapping[str, Any]]], *, min_questions: int = MIN_HISTORY) -> list[float] | None:
    """Each system's weight: how often its result agrees with the other systems'.

    ``runs`` holds one list of checked candidates per question, candidate ``k`` of every list
    coming from system ``k``. On each question a system scores the share of the other systems
    whose result equals its own (a failed query agrees with nothing); its weight is its mean
    score, smoothed as ``(sum + 1) / (questions + 2)`` so a system never seen weighs 1/2.

    Returns:
        one weight per system, or None with fewer than ``min_questions`` questions, fewer than
        two systems, or lists of different lengths (then votes weigh 1).
    """
    if len(runs) < max(min_questions, 1) or len({len(r) for r in runs}) != 1 or len(runs[0]) < 2:
        return None
    n = len(runs[0])
    agree = [0.0] * n
    for checked in runs:
        for s in range(n):
            mine = checked[s]
            if mine["status"] == "error":
                continue
            same = sum(1 for k, c in enumerate(checked)
                       if k != s and c["status"] != "error" and c["fingerprint"] == mine["fingerprint"])
            agree[s] += same / (n - 1)
    return [round((a + 1) / (len(runs) + 2), 4) for a in agree]
