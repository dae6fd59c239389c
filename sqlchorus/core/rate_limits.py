"""Rate limits per provider and model: requests and tokens per minute, kept before each call.

A provider limits each model of an account by requests per minute (RPM) and tokens per minute
(TPM); ``Settings.rate_limit`` (requests per second for every named model, in one process) cannot
say either. A :class:`ModelLimit` names one model, as ``provider:model`` (the name the settings
give it: ``openai:gpt-4o``, ``python:package.module:factory``), and bounds its requests, its
tokens or both. The command line takes one as ``--model-limit openai:gpt-4o=500rpm,30000tpm``.

What a limit means:

- requests: at most ``rpm`` in any minute, and spread out, ``60/rpm`` seconds apart at least.
  Providers enforce a minute's limit over shorter periods too (OpenAI's 600 RPM may refuse the
  eleventh request of one second), and a cluster of workers starting together would otherwise
  send a whole minute's requests at once;
- tokens: the prompt tokens of the requests started in any 60 seconds add up to ``tpm`` at most.
  Tokens are counted over the whole window rather than spread, since requests differ in size: a
  long prompt must not hold up the short ones after it while the minute has room.

Keeping a limit is in two parts, so that it can be kept by a process that must never block (a
Ray actor answering every worker of a cluster, :mod:`sqlchorus.cluster.limiter`): the pure
:func:`earliest_start` says when a request fits among the reservations already made, and a
:class:`ModelLimiter` makes the reservation and waits until then. :class:`LocalModelLimiter` is
the one of a single process, shared by its threads. Each model's reservations are its own: a
limit on one model never delays another, and a model with no limit is never delayed.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from sqlchorus.core.deadline import Interrupted, cancel_requested
from sqlchorus.tools.errors import SqlchorusError

WINDOW_S = 60.0
"""The window a per-minute limit counts over, in seconds."""

CANCEL_CHECK_S = 0.1
"""How often a wait for a limit looks whether its run was cancelled."""

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(rpm|tpm)\s*$", re.IGNORECASE)


class TooManyTokensError(SqlchorusError, ValueError):
    """A request whose prompt alone is over its model's tokens per minute: it could never be
    sent, so it is refused at once instead of waiting for a minute that never has room."""

    kind = "model_limit"


@dataclass(frozen=True)
class ModelLimit:
    """The requests and tokens per minute one model may use; None leaves either unbounded.

    Attributes:
        model: the model's name, ``provider:model``.
        rpm: requests per minute at most (a fraction is allowed: 0.5 is one every two minutes).
        tpm: prompt tokens per minute at most.
    """

    model: str
    rpm: float | None = None
    tpm: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip():
            raise ValueError("A model limit needs the model's name, as provider:model.")
        if self.rpm is None and self.tpm is None:
            raise ValueError(f"The limit of {self.model} bounds nothing: give requests (rpm), tokens (tpm) or both.")
        if self.rpm is not None and not (math.isfinite(self.rpm) and self.rpm > 0):
            raise ValueError(f"The limit of {self.model}: requests per minute must be above 0, not {self.rpm}.")
        if self.tpm is not None and (isinstance(self.tpm, bool) or not isinstance(self.tpm, int) or self.tpm < 1):
            raise ValueError(f"The limit of {self.model}: tokens per minute must be a whole number above 0, "
                             f"not {self.tpm!r}.")

    @property
    def spacing_s(self) -> float:
        """The seconds between two requests at least (0 with no bound on requests)."""
        return WINDOW_S / self.rpm if self.rpm else 0.0

    def check(self, tokens: int) -> None:
        """Refuse a request of ``tokens`` that no minute could hold.

        Raises:
            TooManyTokensError: ``tokens`` is over the tokens per minute.
        """
        if self.tpm is not None and tokens > self.tpm:
            raise TooManyTokensError(
                f"A prompt of {tokens} tokens is over the {self.tpm} tokens per minute of {self.model}: "
                f"it could never be sent (raise --model-limit {self.model}=...tpm, or shorten the prompt)."
            )

    @property
    def text(self) -> str:
        """The limit as the command line takes it.

        >>> ModelLimit("openai:gpt-4o", rpm=500, tpm=30000).text
        'openai:gpt-4o=500rpm,30000tpm'
        """
        parts = [] if self.rpm is None else [f"{self.rpm:g}rpm"]
        if self.tpm is not None:
            parts.append(f"{self.tpm}tpm")
        return f"{self.model}={','.join(parts)}"


def parse_rates(model: str, rates: str) -> ModelLimit:
    """The limit of ``model`` from ``rates``: ``Nrpm``, ``Mtpm`` or both, comma-separated.

    >>> parse_rates("anthropic:claude-sonnet-4-5", "50rpm")
    ModelLimit(model='anthropic:claude-sonnet-4-5', rpm=50.0, tpm=None)
    >>> parse_rates("openai:gpt-4o", "30000tpm, 500rpm")
    ModelLimit(model='openai:gpt-4o', rpm=500.0, tpm=30000)
    >>> parse_rates("openai:gpt-4o", "500")
    Traceback (most recent call last):
    ...
    ValueError: Model limit of openai:gpt-4o: '500' is not Nrpm or Ntpm (for example 500rpm,30000tpm).

    Raises:
        ValueError: a part that is not ``Nrpm`` or ``Ntpm``, one given twice, a fractional or
            zero number of tokens, or a zero rate.
    """
    model = str(model).strip()
    found: dict[str, float] = {}
    for part in str(rates).split(","):
        match = _RATE.match(part)
        if not match:
            raise ValueError(
                f"Model limit of {model}: {part.strip()!r} is not Nrpm or Ntpm (for example 500rpm,30000tpm)."
            )
        number, unit = float(match.group(1)), match.group(2).lower()
        if unit in found:
            raise ValueError(f"Model limit of {model}: {unit} is given twice in {rates.strip()!r}.")
        if unit == "tpm" and not number.is_integer():
            raise ValueError(f"Model limit of {model}: tokens per minute must be a whole number, not {part.strip()!r}.")
        found[unit] = number
    tpm = found.get("tpm")
    return ModelLimit(model, rpm=found.get("rpm"), tpm=None if tpm is None else int(tpm))


def parse_model_limit(text: str) -> ModelLimit:
    """A limit from the command line's ``MODEL=RATES``.

    The last ``=`` ends the model's name, so a name with one (a server's URL) is read whole.

    >>> parse_model_limit("openai:gpt-4o=500rpm,30000tpm")
    ModelLimit(model='openai:gpt-4o', rpm=500.0, tpm=30000)
    >>> parse_model_limit("python:tests.models:make=0.5rpm")
    ModelLimit(model='python:tests.models:make', rpm=0.5, tpm=None)
    >>> parse_model_limit("openai:gpt-4o")
    Traceback (most recent call last):
    ...
    ValueError: 'openai:gpt-4o' is not of the form MODEL=RATES (for example openai:gpt-4o=500rpm,30000tpm).
    >>> parse_model_limit("openai:gpt-4o=0rpm")
    Traceback (most recent call last):
    ...
    ValueError: The limit of openai:gpt-4o: requests per minute must be above 0, not 0.0.

    Raises:
        ValueError: no ``=``, no model's name, or rates :func:`parse_rates` refuses.
    """
    model, sep, rates = str(text).rpartition("=")
    if not sep or not model.strip() or not rates.strip():
        raise ValueError(
            f"{str(text).strip()!r} is not of the form MODEL=RATES (for example openai:gpt-4o=500rpm,30000tpm)."
        )
    return parse_rates(model, rates)


def model_limits(value: Mapping[str, Any] | Iterable[Any] | None) -> dict[str, ModelLimit]:
    """Limits by model name, from what ``Settings.model_limits`` holds (model name to rates), or
    a sequence of ``MODEL=RATES`` texts or :class:`ModelLimit`; a later limit of a model
    replaces an earlier one.

    >>> sorted(model_limits({"openai:gpt-4o": "500rpm", "openai:o3": "20000tpm"}))
    ['openai:gpt-4o', 'openai:o3']
    >>> model_limits(["openai:gpt-4o=500rpm", "openai:gpt-4o=10rpm"])["openai:gpt-4o"].rpm
    10.0

    Raises:
        ValueError: a limit that cannot be read (see :func:`parse_model_limit`).
    """
    if value is None:
        return {}
    if isinstance(value, Mapping):
        items = [v if isinstance(v, ModelLimit) else parse_rates(k, v) for k, v in value.items()]
    elif isinstance(value, (str, ModelLimit)):
        items = [value if isinstance(value, ModelLimit) else parse_model_limit(value)]
    else:
        items = [v if isinstance(v, ModelLimit) else parse_model_limit(v) for v in value]
    return {limit.model: limit for limit in items}


# -- the reservation ------------------------------------------------------------------------------


def earliest_start(limit: ModelLimit, reservations: Sequence[tuple[float, int]], tokens: int, now: float) -> float:
    """The earliest time, ``now`` or later, at which a request of ``tokens`` prompt tokens keeps
    ``limit``, given the model's earlier reservations.

    Pure, and never waits: the caller records the reservation and sleeps until it.

    Args:
        limit: the model's limit.
        reservations: ``(start, tokens)`` of the model's reservations, oldest first: at least
            the last one (the next request keeps its distance from it), and every one that
            starts after ``now - WINDOW_S`` (older ones no longer count, and may be left out).
            Requests are served in turn: none starts before an earlier reservation, so checking
            the minute before the new start is enough.
        tokens: the new request's prompt tokens.
        now: the current time, on the clock the reservations were made on.

    >>> limit = ModelLimit("m", rpm=60, tpm=1000)
    >>> earliest_start(limit, [], 400, now=100.0)
    100.0
    >>> earliest_start(limit, [(100.0, 400)], 400, now=100.0)  # one second apart
    101.0
    >>> earliest_start(limit, [(100.0, 400), (101.0, 400)], 400, now=101.0)  # the minute is full
    160.0

    Raises:
        TooManyTokensError: ``tokens`` alone is over the tokens per minute.
    """
    limit.check(tokens)
    start = float(now)
    if reservations:
        last = reservations[-1][0]
        start = max(start, last + limit.spacing_s)
    if limit.tpm is not None:
        room, used = limit.tpm - tokens, 0
        for at, n in reversed(reservations):
            used += n
            if used > room:
                # This reservation and every older one must have left the window: the minute
                # before ``start`` then holds only the newer ones, which fit with ``tokens``.
                start = max(start, at + WINDOW_S)
                break
    return start


class Reservations:
    """Every model's reservations and the waits they cost, for one limiter; not thread-safe (a
    :class:`LocalModelLimiter` holds a lock around it, a Ray actor answers one call at a time).

    Args:
        limits: the limits by model name; models not among them are never delayed.
    """

    def __init__(self, limits: Mapping[str, ModelLimit]):
        self.limits: dict[str, ModelLimit] = dict(limits)
        self._booked: dict[str, deque[tuple[float, int]]] = {}
        self.seconds = 0.0
        self.calls = 0
        self.requests = 0

    def reserve(self, model: str, tokens: int, now: float) -> float:
        """Book a request of ``tokens`` for ``model`` at the earliest time it fits, and return
        that time (``now`` for a model with no limit).

        Raises:
            TooManyTokensError: ``tokens`` alone is over the model's tokens per minute.
        """
        limit = self.limits.get(model)
        if limit is None:
            return now
        booked = self._booked.setdefault(model, deque())
        # Out of the window, a reservation no longer counts; the last one is kept for its
        # spacing (below 1 rpm, longer than the window). Bounded by the deque's length.
        while len(booked) > 1 and booked[0][0] <= now - WINDOW_S:
            booked.popleft()
        start = earliest_start(limit, booked, max(0, int(tokens)), now)
        booked.append((start, max(0, int(tokens))))
        self.requests += 1
        if start > now:
            self.seconds += start - now
            self.calls += 1
        return start

    def starts(self, model: str) -> list[float]:
        """The start times of ``model``'s reservations still in the window, oldest first."""
        return [at for at, _ in self._booked.get(model, ())]

    def waited(self) -> dict[str, Any]:
        """The seconds the reservations asked to wait, how many calls waited, how many were made."""
        return {"seconds": round(self.seconds, 6), "calls": self.calls, "requests": self.requests}


# -- limiters --------------------------------------------------------------------------------------


def wait_turn(seconds: float) -> None:
    """Sleep ``seconds``, giving up with :class:`~sqlchorus.core.deadline.Interrupted` once the
    run the caller belongs to is cancelled: a wait of up to a minute for tokens must not hold up
    a cancelled run (the reservation is not given back; it only delays later requests)."""
    end = time.monotonic() + seconds
    while True:  # ends by ``end``: each turn sleeps a slice of what is left
        left = end - time.monotonic()
        if left <= 0:
            return
        if cancel_requested():
            raise Interrupted("the run was cancelled")
        time.sleep(min(left, CANCEL_CHECK_S))


@runtime_checkable
class ModelLimiter(Protocol):
    """What keeps the model limits of the runs that share it (an entry point, a cluster).

    :func:`sqlchorus.core.llm.call_model` calls :meth:`acquire` before each request to a model
    (not for an answer the response cache or the call log serves).
    """

    def acquire(self, model: str, tokens: int) -> float:
        """Wait until a request of ``tokens`` prompt tokens to ``model`` keeps its limit, and
        return the seconds waited (0 for a model with no limit).

        Raises:
            TooManyTokensError: the request could never keep the model's tokens per minute.
        """
        ...

    def waited(self) -> dict[str, Any]:
        """``seconds`` waited in all, ``calls`` that waited and ``requests`` made so far, by
        every run that shares this limiter (for a progress line)."""
        ...


class LocalModelLimiter:
    """The model limits of one process, shared by its threads (a :class:`sqlchorus.Session`'s
    questions): each request is booked under a lock, then waits for its turn outside it.

    Args:
        limits: the limits: by model name, or a sequence of :class:`ModelLimit` or ``MODEL=RATES``
            texts (see :func:`model_limits`).
        clock: the clock reservations are made on (a monotonic one: a wall clock set back would
            stall every model).
        sleep: how to wait (:func:`wait_turn`: a cancelled run stops waiting); tests pass their
            own with ``clock``.

    >>> limiter = LocalModelLimiter(["m:a=60rpm"], clock=lambda: 0.0, sleep=lambda s: None)
    >>> [limiter.acquire("m:a", 10), limiter.acquire("m:a", 10), limiter.acquire("m:b", 10)]
    [0.0, 1.0, 0.0]
    >>> limiter.waited()
    {'seconds': 1.0, 'calls': 1, 'requests': 2}
    """

    def __init__(self, limits: Mapping[str, Any] | Iterable[Any], *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = wait_turn):
        self._book = Reservations(model_limits(limits))
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()

    @property
    def limits(self) -> dict[str, ModelLimit]:
        return dict(self._book.limits)

    def acquire(self, model: str, tokens: int) -> float:
        if model not in self._book.limits:
            return 0.0
        with self._lock:
            now = self._clock()
            delay = self._book.reserve(model, tokens, now) - now
        if delay > 0:
            self._sleep(delay)
        return max(0.0, delay)

    def waited(self) -> dict[str, Any]:
        with self._lock:
            return self._book.waited()

    def starts(self, model: str) -> list[float]:
        """The start times of ``model``'s reservations still in the window, oldest first."""
        with self._lock:
            return self._book.starts(model)

    def __repr__(self) -> str:
        return f"LocalModelLimiter({[limit.text for limit in self._book.limits.values()]!r})"
