"""One rate limit per provider and model for the whole cluster.

A provider counts a model's requests and tokens per minute by account, not by process: limits
kept by each worker (a :class:`~sqlchorus.core.rate_limits.LocalModelLimiter` apiece) would let a
cluster of N workers send N times as much. So one Ray actor, :class:`LimiterActor`, keeps the
reservations of every model for every worker of a command; a worker's
:class:`RayModelLimiter` asks it when its request may start and sleeps until then itself.

The actor never sleeps: :meth:`LimiterActor.reserve` books the request at the earliest time it
fits (:func:`~sqlchorus.core.rate_limits.earliest_start`) and answers at once with the delay, so
one actor, answering one call at a time, serves a whole cluster. Requests are booked in the order
they reach it; a model with no limit never reaches it at all.

The command's driver calls :func:`shared_limiter` once, inside
:func:`sqlchorus.cluster.connect.cluster`, and hands the :class:`RayModelLimiter` it returns to
every worker's :class:`sqlchorus.Session` (``Session(settings, model_limiter=...)``). Ray is
imported only by the functions that need it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from sqlchorus.cluster.connect import ClusterError, ray_module, remote_class
from sqlchorus.config.errors import ModelConfigError
from sqlchorus.core.rate_limits import ModelLimit, Reservations, model_limits, wait_turn

NAMESPACE = "sqlchorus"
"""The Ray namespace of the limiter: workers reach it there, whatever namespace the command
itself joined."""

ACTOR_PREFIX = "sqlchorus-model-limiter"
"""The start of the limiter's actor name; the command's Ray job completes it, so that each
command has its own, living as long as the command (its owner) does."""

ANSWER_TIMEOUT_S = 60.0
"""How long a worker waits for the limiter to answer (it answers at once when it is alive: it
never sleeps) before its model call fails with a :class:`ClusterError`."""

RESTARTS = 3
"""Restarts of a limiter whose process died. A restarted one starts with the command's limits and
no reservations: for at most a minute, the cluster may send more than a minute's worth."""


class LimiterActor:
    """The reservations of every model of a command, for all its workers (a Ray actor, see
    :func:`shared_limiter`; a plain object here, so it can be tested without Ray).

    Args:
        limits: the limits by model name.
    """

    def __init__(self, limits: Mapping[str, ModelLimit]):
        self._book = Reservations(limits)

    def configure(self, limits: Mapping[str, ModelLimit]) -> list[str]:
        """Set the limits of these models (others keep theirs, every model its reservations);
        the names of the models limited now."""
        self._book.limits.update(limits)
        return sorted(self._book.limits)

    def reserve(self, model: str, tokens: int) -> float:
        """Book a request of ``tokens`` prompt tokens to ``model`` and return the seconds the
        caller must wait before sending it (0 for a model with no limit). Never sleeps.

        Raises:
            sqlchorus.core.rate_limits.TooManyTokensError: ``tokens`` alone is over the model's
                tokens per minute.
        """
        now = time.monotonic()
        return max(0.0, self._book.reserve(model, tokens, now) - now)

    def waited(self) -> dict[str, Any]:
        """The seconds all the workers' calls were told to wait, how many waited, how many
        requests were booked."""
        return self._book.waited()

    def starts(self, model: str) -> list[float]:
        """When ``model``'s reservations in the last minute (or to come) start, on this actor's
        monotonic clock, oldest first: how far apart the cluster's requests were spaced."""
        return self._book.starts(model)


class RayModelLimiter:
    """A :class:`~sqlchorus.core.rate_limits.ModelLimiter` whose reservations the cluster's
    :class:`LimiterActor` keeps; it goes to every worker with the work (it pickles with its
    actor's handle), and each worker sleeps its own waits.

    Args:
        actor: the handle of the command's :class:`LimiterActor`.
        limits: the same limits the actor keeps: a model without one is let through here,
            without asking the actor, and a prompt no minute could hold is refused here.
        timeout_s: how long to wait for the actor's answer.
    """

    def __init__(self, actor: Any, limits: Mapping[str, ModelLimit], *, timeout_s: float = ANSWER_TIMEOUT_S):
        self.actor = actor
        self.limits = dict(limits)
        self.timeout_s = timeout_s

    def acquire(self, model: str, tokens: int) -> float:
        limit = self.limits.get(model)
        if limit is None:
            return 0.0
        limit.check(tokens)
        delay = float(self._ask("reserve", model, max(0, int(tokens))))
        if delay > 0:
            wait_turn(delay)
        return delay

    def waited(self) -> dict[str, Any]:
        return self._ask("waited")

    def starts(self, model: str) -> list[float]:
        """The start times the actor booked for ``model`` (see :meth:`LimiterActor.starts`)."""
        return self._ask("starts", model)

    def _ask(self, method: str, *args: Any) -> Any:
        ray = ray_module()
        try:
            return ray.get(getattr(self.actor, method).remote(*args), timeout=self.timeout_s)
        except ray.exceptions.GetTimeoutError as e:
            raise ClusterError(f"The cluster's model limiter did not answer within {self.timeout_s:g} s.") from e
        except ray.exceptions.RayActorError as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ClusterError(f"The cluster's model limiter is gone: {first}") from e

    def __repr__(self) -> str:
        return f"RayModelLimiter({[limit.text for limit in self.limits.values()]!r})"


def limiter_name(ray: Any) -> str:
    """The name of this command's limiter actor (in :data:`NAMESPACE`): the same in every call of
    the command's driver, another in another command's."""
    return f"{ACTOR_PREFIX}|{ray.get_runtime_context().get_job_id()}"


def shared_limiter(limits: Mapping[str, Any] | Iterable[Any] | None) -> RayModelLimiter:
    """The cluster-wide limiter of this command, its actor started on first call (and given
    ``limits`` again on later ones). Call it in the command's driver, which then owns the actor:
    it lives as long as the command.

    Args:
        limits: what ``Settings.model_limits`` holds (model name to ``Nrpm,Mtpm``), or
            ``MODEL=RATES`` texts or :class:`~sqlchorus.core.rate_limits.ModelLimit`.

    Raises:
        ModelConfigError: a limit cannot be read.
        ClusterError: Ray is missing, this process is not connected to a cluster, or the actor
            does not start.
    """
    try:
        parsed = model_limits(limits)
    except ValueError as e:
        raise ModelConfigError(f"--model-limit: {e}") from e
    ray = ray_module()
    if not ray.is_initialized():
        raise ClusterError("The cluster's model limiter needs a connected cluster: call shared_limiter inside "
                           "sqlchorus.cluster.connect.cluster(...).")
    # No CPU: the actor must start however busy the workers keep the cluster.
    actor = remote_class(LimiterActor).options(
        name=limiter_name(ray), namespace=NAMESPACE, get_if_exists=True, num_cpus=0,
        max_restarts=RESTARTS, max_task_retries=RESTARTS,
    ).remote(parsed)
    limiter = RayModelLimiter(actor, parsed)
    limiter._ask("configure", parsed)  # the actor is up, with these limits when it was already
    return limiter
