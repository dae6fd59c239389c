"""What the vote's rules read of one result: computed once, when the candidate runs.

* ``answer_key``: a digest of the rows as a bag with the columns in a canonical order (each
  column placed by its own values), so results that differ only in column order share it.
* ``degenerate``: one row whose every value is 0 or NULL (an aggregate over nothing).
* ``column_names`` and ``integer_columns``: each column's name, and whether all its values are
  whole numbers (booleans excluded).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from sqlchorus.tools.candidates.results import normalise_value


def describe(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> dict[str, Any]:
    values = [[normalise_value(v) for v in row] for row in rows]
    width = len(columns)
    by_column = [sorted(repr(row[j]) for row in values) for j in range(width)]
    order = sorted(range(width), key=lambda j: (by_column[j], j))
    digest = hashlib.sha1(str(width).encode())
    for key in sorted(repr(tuple(row[j] for j in order)) for row in values):
        digest.update(b"\x00" + key.encode("utf-8", "replace"))
    integral = [bool(values) and all(isinstance(row[j], int) and not isinstance(row[j], bool) for row in values)
                for j in range(width)]
    return {
        "answer_key": digest.hexdigest()[:16],
        "degenerate": len(values) == 1 and width > 0 and all(v is None or v == 0 for v in values[0]),
        "column_names": list(columns),
        "integer_columns": integral,
    }
