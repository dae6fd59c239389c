"""A pytest plugin for mutation runs (loaded by ``run.py``): a mutant's tests run fastest first,
by the durations mutmut recorded in ``mutmut-stats.json``, so that a mutant a quick test kills is
not kept waiting on a slow one. Without that file the order stays as it is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    stats = Path("mutmut-stats.json")  # mutmut runs the tests from inside mutants/
    if not stats.exists():
        return
    durations = json.loads(stats.read_text(encoding="utf-8")).get("duration_by_test", {})
    items.sort(key=lambda item: durations.get(item.nodeid, float("inf")))
