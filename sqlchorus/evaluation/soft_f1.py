"""BIRD's Soft-F1: a row-wise F1 between a prediction's result and the gold's, as bird-bench/mini_dev's
``evaluation/evaluation_f1.py`` defines it.

For one question, with ``pred`` and ``gold`` the rows each query returned (prediction first, then
gold, on one connection to the question's database):

* both empty: 1.0;
* each result loses its repeated rows, the first of each kept in order (``(1,)``, ``(1.0,)`` and
  ``(True,)`` are one row, as Python's equality makes them);
* row ``i`` of the gold is compared with row ``i`` of the prediction, by position, never matched
  to its best partner: of ``k = len(gold row)`` cells, a prediction value found anywhere in the gold
  row counts ``1/k`` true positive, one not found ``1/k`` false positive, and a gold value not found
  in the prediction row ``1/k`` false negative. Column order within a row does not matter, and
  NULL matches NULL;
* a gold row past the prediction's end is one false negative; a prediction row past the gold's
  end one false positive;
* precision, recall and their harmonic mean from the sums, 0 wherever a denominator is 0.

A question whose prediction or gold fails to run, runs out of time, or has no prediction scores
0, as the official script's ``except`` makes it. The sums are taken in the official order, so
every figure is the same float the official script computes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["soft_f1", "mean_percent"]


def soft_f1(pred: Sequence[tuple[Any, ...]], gold: Sequence[tuple[Any, ...]]) -> float:
    """The Soft-F1 of one question's result against the gold's (0 to 1)."""
    if not pred and not gold:
        return 1.0
    pred_rows = list(dict.fromkeys(pred))
    gold_rows = list(dict.fromkeys(gold))
    # Each sum is accumulated in the official order (gold rows by position, then the prediction's
    # extra rows), so the float result is bit for bit the official one.
    tp: float = 0
    fp: float = 0
    fn: float = 0
    for i, gold_row in enumerate(gold_rows):
        if i >= len(pred_rows):
            fn += 1
            continue
        pred_row = pred_rows[i]
        width = len(gold_row)
        found = sum(1 for value in pred_row if value in gold_row)
        tp += found / width
        fp += (len(pred_row) - found) / width
        fn += sum(1 for value in gold_row if value not in pred_row) / width
    for _ in range(len(pred_rows) - len(gold_rows)):
        fp += 1
    precision = tp / (tp + fp) if tp + fp > 0 else 0
    recall = tp / (tp + fn) if tp + fn > 0 else 0
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def mean_percent(values: Sequence[float]) -> float | None:
    """The official aggregate, ``sum(values) / n * 100``, rounded to 2 places as ``ex`` is; None
    for no values."""
    if not values:
        return None
    return round(sum(values) / len(values) * 100, 2)
