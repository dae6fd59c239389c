"""Waiting for work in a thread of its own no longer than a time limit."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import TypeVar

from sqlchorus.tools.errors import SqlchorusError

T = TypeVar("T")


class Overran(SqlchorusError):
    """The work did not end within its time; its thread goes on."""

    kind = "overran"
    http_status = 504


def run_within(work: Callable[[], T], timeout_s: float, *, name: str, daemon: bool = True) -> T:
    """``work()`` in a thread of its own: its result, or its exception, or :class:`Overran` once
    ``timeout_s`` has passed without either.

    A thread cannot be stopped from outside: work that overruns goes on, and what it gives is
    dropped. A daemon thread never holds up the process's exit; work that must wind down before
    the process goes (a native engine mid-batch) runs in one that is not. The work runs in a copy
    of the caller's context, so it sees the caller's current span and run metadata.
    """
    outcome: dict[str, object] = {}
    finished = threading.Event()
    context = contextvars.copy_context()

    def target() -> None:
        try:
            outcome["value"] = context.run(work)
        except BaseException as e:  # handed to the caller's thread below
            outcome["error"] = e
        finally:
            finished.set()

    threading.Thread(target=target, name=name, daemon=daemon).start()
    if not finished.wait(timeout_s):
        raise Overran(f"no answer within {timeout_s:g} s")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
