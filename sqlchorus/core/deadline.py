"""Waiting for work in a thread of its own no longer than a time limit, or until its run is
cancelled."""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlchorus.tools.errors import SqlchorusError

T = TypeVar("T")


class Overran(SqlchorusError):
    """The work did not end within its time; its thread goes on."""

    kind = "overran"
    http_status = 504


class Interrupted(KeyboardInterrupt):
    """Work given up because its run was cancelled (see :class:`Cancel`).

    A KeyboardInterrupt, as Ctrl-C is what cancels a run in the debugger: no handler of errors
    takes it for a failed model call, so the node that meets it fails instead of going on
    without an answer, and its step runs again when the run goes on.
    """


class Cancel:
    """The cancellation of one run's work: once set, every :func:`run_within` waiting under it
    (see :func:`cancellable`) gives up at once with :class:`Interrupted`, and work that asks
    (:func:`cancel_requested`, a local model's engine between batches) stops."""

    def __init__(self) -> None:
        self._set = threading.Event()
        self._lock = threading.Lock()
        self._waiting: dict[threading.Thread, threading.Event] = {}

    def set(self) -> None:
        with self._lock:
            self._set.set()
            waiting = list(self._waiting.values())
        for wake in waiting:
            wake.set()

    def is_set(self) -> bool:
        return self._set.is_set()

    def settle(self, timeout_s: float) -> bool:
        """Wait at most ``timeout_s`` for the threads :func:`run_within` started under this
        cancel to end; whether they all have. A stopped engine holds its model until it ends."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = list(self._waiting)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in threads)

    def _watch(self, thread: threading.Thread, wake: threading.Event) -> None:
        with self._lock:
            self._waiting[thread] = wake
            if self._set.is_set():
                wake.set()

    def _forget(self, thread: threading.Thread) -> None:
        # A thread that ends before it is watched leaves an entry for an ended thread: harmless.
        with self._lock:
            self._waiting.pop(thread, None)


_CURRENT: contextvars.ContextVar[Cancel | None] = contextvars.ContextVar("sqlchorus_cancel", default=None)


@contextmanager
def cancellable(cancel: Cancel) -> Iterator[Cancel]:
    """Run the block's work under ``cancel``. Context variables follow the work into the
    threads LangGraph and :func:`run_within` start, so a step's parallel nodes see it too."""
    token = _CURRENT.set(cancel)
    try:
        yield cancel
    finally:
        _CURRENT.reset(token)


def current_cancel() -> Cancel | None:
    """The cancel the current work runs under, or None."""
    return _CURRENT.get()


def cancel_requested() -> bool:
    """Whether the run the current work belongs to has been cancelled."""
    cancel = _CURRENT.get()
    return cancel is not None and cancel.is_set()


def run_within(work: Callable[[], T], timeout_s: float, *, name: str, daemon: bool = True) -> T:
    """``work()`` in a thread of its own: its result, or its exception, or :class:`Overran` once
    ``timeout_s`` has passed without either, or :class:`Interrupted` once the run it belongs to
    is cancelled (see :func:`cancellable`).

    A thread cannot be stopped from outside: work that overruns goes on, and what it gives is
    dropped. A daemon thread never holds up the process's exit; work that must wind down before
    the process goes (a native engine mid-batch) runs in one that is not. The work runs in a copy
    of the caller's context, so it sees the caller's current span and run metadata.
    """
    outcome: dict[str, object] = {}
    ended = threading.Event()  # set when the work ends, and as well when its run is cancelled
    context = contextvars.copy_context()
    cancel = _CURRENT.get()

    def target() -> None:
        try:
            outcome["value"] = context.run(work)
        except BaseException as e:  # handed to the caller's thread below
            outcome["error"] = e
        finally:
            ended.set()
            if cancel is not None:
                cancel._forget(thread)

    thread = threading.Thread(target=target, name=name, daemon=daemon)
    thread.start()
    if cancel is not None:
        cancel._watch(thread, ended)
    ended.wait(timeout_s)
    if not outcome:
        if cancel is not None and cancel.is_set():
            raise Interrupted("the run was cancelled")
        raise Overran(f"no answer within {timeout_s:g} s")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
