"""The bundled demo database and its sample questions.

The database is a small, deliberately messy retail shop (``sqlchorus/data/demo.sqlite``), built
by ``scripts/build_demo_db.py`` in a checkout; the package ships the file only.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path


def demo_db_path() -> Path:
    """The demo database shipped inside the package.

    Raises:
        FileNotFoundError: the packaged file is missing (rebuild it from a checkout with
            ``python scripts/build_demo_db.py``).
    """
    path = Path(str(resources.files("sqlchorus").joinpath("data", "demo.sqlite")))
    if not path.is_file():
        raise FileNotFoundError(
            f"The demo database is missing at {path}; rebuild it from a checkout with "
            "`python scripts/build_demo_db.py`."
        )
    return path


def demo_questions_path() -> Path:
    """The demo questions file shipped inside the package."""
    return Path(str(resources.files("sqlchorus").joinpath("data", "demo_questions.json")))


def load_demo_questions() -> list[dict[str, str]]:
    """The demo questions, each ``{"question", "sql", "evidence"}``; the first is the sample."""
    return json.loads(demo_questions_path().read_text(encoding="utf-8"))
