"""A persistent response cache: the same request to the same model is paid for once.

The cache is opened once by an entry point and handed to the graph in its runtime context, and
used in :func:`sqlchorus.core.llm.call_model`, the one path every node takes to a model, rather
than in langchain-core's ``BaseCache`` hook on the model. At that level a hit is
known for certain, so the usage record and the model span can say ``cached``, cost nothing and
keep the tokens the provider reported for the call they replay (stored beside the answer), and
the key holds exactly what decides the answer: the model's identity
(class, name, endpoint or file, sampling parameters), the messages, and the call's own
parameters (temperature, output cap, grammar, sample number). ``BaseCache`` would also bypass
call-level parameters such as a grammar, and would make hits indistinguishable in traces.

Design choices:

* The store is one SQLite file of our own (not a user's database), written with plain
  ``sqlite3``: one table, key to response text and the token counts the provider reported.
* Its default place is the user cache folder shared with the value index: ``$SQLCHORUS_CACHE``,
  else ``$XDG_CACHE_HOME/sqlchorus``, else ``~/.cache/sqlchorus``; the file is
  ``responses.sqlite``.
* Identity uses a whitelist of model attributes, so that keys never contain secrets.
* Several processes may share the file: writes are single statements with a busy timeout, and
  a lost race only means a response is stored twice with the same content.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

from sqlchorus.tools.folders import default_cache_dir

CACHE_FILE = "responses.sqlite"
_KEY_VERSION = 1

# Model attributes that change what a model answers; none of them holds a secret.
_IDENTITY_ATTRS = (
    "model_name", "model", "model_path", "openai_api_base", "base_url", "temperature",
    "max_tokens", "top_p", "top_k", "seed", "n_ctx", "num_ctx", "stop", "repeat_penalty", "script",
)


_MADE_FROM: dict[int, tuple[weakref.ref, str]] = {}
"""The spec each live model was made from (``python:package.module:factory``), by its id."""


def made_from(model: Any, spec: str) -> None:
    """Record that ``model`` was made from ``spec``, so that its cache identity names it: two
    factories whose models share a class and a name do not answer for each other."""
    key = id(model)

    def forget(_gone: Any) -> None:  # the model is gone: its id may be another's next
        _MADE_FROM.pop(key, None)

    _MADE_FROM[key] = (weakref.ref(model, forget), spec)


def model_identity(model: Any) -> dict[str, Any]:
    """What identifies ``model`` for caching: its class, its answer-changing attributes and,
    where known, the spec it was made from (:func:`made_from`)."""
    cls = type(model)
    identity: dict[str, Any] = {"class": f"{cls.__module__}.{cls.__qualname__}"}
    made = _MADE_FROM.get(id(model))
    if made is not None and made[0]() is model:
        identity["made_from"] = made[1]
    for attr in _IDENTITY_ATTRS:
        value = getattr(model, attr, None)
        if isinstance(value, (str, int, float, bool)) or (
            isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        ):
            identity[attr] = list(value) if isinstance(value, tuple) else value
    return identity


def request_key(model: Any, messages: list[BaseMessage], params: dict[str, Any]) -> str:
    """A stable hash of one request: model identity, messages and call parameters."""
    payload = {
        "v": _KEY_VERSION,
        "model": model_identity(model),
        "messages": [[m.type, m.content] for m in messages],
        "params": params,
    }
    text = json.dumps(payload, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedResponse:
    text: str
    input_tokens: int
    output_tokens: int


class ResponseCache:
    """Responses by request key, in a SQLite file.

    Args:
        path: the file; None puts ``responses.sqlite`` in :func:`default_cache_dir`.
    """

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else default_cache_dir() / CACHE_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), timeout=30.0, check_same_thread=False)
        with self._lock, self._conn:
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS responses ("
                " key TEXT PRIMARY KEY, model TEXT NOT NULL, text TEXT NOT NULL,"
                " input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,"
                " created REAL NOT NULL)"
            )

    def get(self, key: str) -> CachedResponse | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT text, input_tokens, output_tokens FROM responses WHERE key = ?", (key,)
            ).fetchone()
        return CachedResponse(*row) if row else None

    def put(self, key: str, model: str, text: str, input_tokens: int, output_tokens: int) -> None:
        with self._lock, self._conn:
            self._conn.execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)",
                (key, model, text, int(input_tokens), int(output_tokens), time.time()),
            )

    def clear(self) -> int:
        """Forget every response; returns how many there were."""
        with self._lock, self._conn:
            return self._conn.execute("DELETE FROM responses").rowcount

    def __len__(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT count(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
