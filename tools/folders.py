"""Where sqlchorus keeps files of its own, apart from a user's databases and runs."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """The sqlchorus cache folder: ``$SQLCHORUS_CACHE``, else ``$XDG_CACHE_HOME/sqlchorus``, else
    ``~/.cache/sqlchorus``. The response cache and the value indexes (``values/``) live here."""
    if os.environ.get("SQLCHORUS_CACHE"):
        return Path(os.environ["SQLCHORUS_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "sqlchorus"
