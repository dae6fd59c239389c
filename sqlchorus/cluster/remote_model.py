"""A role's model calls run on the node that has a named Ray resource.

A cluster may have one node that can serve a model the others cannot (a GPU node with a local
model, a node inside the network that reaches a private endpoint). Giving that node a custom Ray
resource (``ray start --resources='{"gpu_node": 1}'``) and a role that resource
(``generation=gpu_node``) sends every call of that role there, from every worker:

- :class:`ModelHost` is an actor placed on a node that offers the resource (it asks for a sliver
  of it, :data:`HOST_SHARE`, so that many hosts fit on one node). It resolves the model spec once,
  on that node, and answers calls with LangChain's ``ChatResult``. There is one per resource and
  model (and per command): a named actor, found again by every worker that asks for it.
- :class:`RemoteChatModel` is the ``BaseChatModel`` a worker's :class:`~sqlchorus.Session` holds
  for the role. It forwards each call to its host and gives back the host's ``ChatResult`` as it
  came (token usage and response metadata kept; ``ray_node_id`` added), under the original
  model's name and provider, so usage records, cost and spans read as a local run's.
- :func:`with_role_resources` turns settings into settings whose named roles use such models,
  and says in one line when no node offers a resource, before any question is spent.

Call :func:`with_role_resources` in the command's own process (the driver) before starting the
workers: the hosts it creates then live as long as the command, and a worker that calls it again
with the same settings finds them. A host created by a worker dies with that worker; a model whose
host has died starts another one on its next call (:meth:`RemoteChatModel._generate`).

Ray is imported only by the functions that need it.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import pickle
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import ConfigDict, Field

from sqlchorus.cluster.connect import ClusterError, ray_module, remote_class
from sqlchorus.config.errors import NO_MODEL_HELP
from sqlchorus.config.settings import ROLES, Settings
from sqlchorus.core.llm import ModelTimeoutError, TransientModelError, fixed_sampling, takes_top_p
from sqlchorus.core.models import ModelConfigError, model_name, provider_name, rate_limiter, resolve_model
from sqlchorus.tools.models.cache import made_from
from sqlchorus.tools.errors import EXIT_NO_ANSWER, SqlchorusError

NAMESPACE = "sqlchorus"
"""The Ray namespace of the model hosts: workers find them by name there, whatever namespace the
command itself joined."""

HOST_SHARE = 0.001
"""How much of its resource a host asks for: enough to be placed only on a node that offers it,
little enough that every model of a command (and other commands' models) fit there too."""

HOST_CONCURRENCY = 32
"""Calls one host takes at once. A hosted API model answers many in parallel; an in-process model
(:class:`~sqlchorus.core.local_model.ChatLlamaCpp`) serialises them with its own lock, as it does
in one process."""

READY_TIMEOUT_S = 600.0
"""How long :func:`with_role_resources` waits for a host to be placed and its model resolved
(loading a local model's weights takes a while) before it says the host cannot start."""

RESULT_MARGIN_S = 10.0
"""Time beyond the model's time limit that a caller waits for a host's answer: the limit is the
model's, the margin the trip there and back."""

ALL_ROLES = ("*", "all")
"""Role names that stand for every role in :func:`parse_role_resources`."""

NODE_ID_KEY = "ray_node_id"
"""The key of ``response_metadata`` that names the node a call ran on."""


# -- parsing ------------------------------------------------------------------------------------


def parse_role_resources(values: Sequence[str]) -> dict[str, str]:
    """Roles and the Ray resource each one's model calls need, from ``ROLE=RESOURCE`` values.

    ``ROLE`` is one of :data:`~sqlchorus.config.settings.ROLES`, several joined by commas, or ``*``
    (``all``) for every role; a role named on its own wins over ``*``, whichever comes first. The
    result lists roles in the order of ``ROLES``.

    >>> parse_role_resources(["generation=gpu_node"])
    {'generation': 'gpu_node'}
    >>> resources = parse_role_resources(["selection=cpu_pool", "*=gpu_node"])
    >>> resources["generation"], resources["selection"], len(resources)
    ('gpu_node', 'cpu_pool', 5)
    >>> parse_role_resources(["generation,fixing = gpu_node"])
    {'generation': 'gpu_node', 'fixing': 'gpu_node'}
    >>> parse_role_resources(["generator=gpu_node"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: 'generator=gpu_node': unknown model role 'generator' (did you mean 'generation'?); roles are ...
    >>> parse_role_resources(["generation"])
    Traceback (most recent call last):
    ...
    ValueError: 'generation' is not of the form ROLE=RESOURCE (for example generation=gpu_node).
    >>> parse_role_resources(["generation=gpu_node", "generation=other"])
    Traceback (most recent call last):
    ...
    ValueError: 'generation=other': the generation role already runs on 'gpu_node'.

    Raises:
        ValueError: a value without ``=``, an empty role or resource, a resource with spaces, an
            unknown role, or one role given two resources.
    """
    every: str | None = None
    named: dict[str, str] = {}
    for value in values:
        roles_text, sep, resource = str(value).partition("=")
        resource = resource.strip()
        roles = [r.strip() for r in roles_text.split(",")]
        if not sep or not resource or not all(roles):
            raise ValueError(f"{value!r} is not of the form ROLE=RESOURCE (for example generation=gpu_node).")
        if any(c.isspace() for c in resource):
            raise ValueError(f"{value!r}: a Ray resource name has no spaces.")
        for role in roles:
            if role in ALL_ROLES:
                if every is not None and every != resource:
                    raise ValueError(f"{value!r}: every role already runs on {every!r}.")
                every = resource
                continue
            if role not in ROLES:
                close = difflib.get_close_matches(role, ROLES, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"{value!r}: unknown model role {role!r}{hint}; roles are "
                                 f"{', '.join(ROLES)}, or * for all.")
            if role in named and named[role] != resource:
                raise ValueError(f"{value!r}: the {role} role already runs on {named[role]!r}.")
            named[role] = resource
    return {role: named.get(role, every) for role in ROLES if role in named or every is not None}


# -- errors that cross from the host ------------------------------------------------------------


class RemoteModelFailure(SqlchorusError, RuntimeError):
    """What a model raised on its host, in a form any caller can read.

    Provider SDKs' errors often cannot be rebuilt from a pickle (OpenAI's want the HTTP response
    they came with), and a caller may not even have the provider's package. So the host sends the
    error's class name, its class hierarchy's names, its HTTP status and its message, with the
    pickled error itself when that pickle loads again; :func:`local_error` makes of it an error
    that :func:`sqlchorus.core.llm.is_transient` and :func:`~sqlchorus.core.llm.is_auth_error`
    classify as they would the original.
    """

    kind = "model_failed"
    exit_code = EXIT_NO_ANSWER
    http_status = 502

    def __init__(self, name: str, kinds: tuple[str, ...], message: str, status_code: int | None = None,
                 original: bytes | None = None):
        super().__init__(name, kinds, message, status_code, original)
        self.name, self.kinds, self.message = name, tuple(kinds), message
        self.status_code, self.original = status_code, original

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"


def portable_error(error: BaseException) -> RemoteModelFailure:
    """``error`` as a :class:`RemoteModelFailure` (on the host, before it leaves)."""
    try:
        data: bytes | None = pickle.dumps(error)
        pickle.loads(data)
    except Exception:  # an SDK error that does not rebuild from its pickle
        data = None
    status = getattr(error, "status_code", None) or getattr(getattr(error, "response", None), "status_code", None)
    return RemoteModelFailure(type(error).__name__, tuple(c.__name__ for c in type(error).__mro__),
                              str(error), status if isinstance(status, int) else None, data)


_STAND_IN_BASES: tuple[type[BaseException], ...] = (TimeoutError, ConnectionError, TransientModelError)
_STAND_INS: dict[tuple[str, str], type[Exception]] = {}


def _stand_in(name: str, base_name: str, message: str, status_code: int | None) -> Exception:
    """An error of class ``name`` (made here, on ``base_name``) standing for a host's error whose
    own class cannot be rebuilt here; it pickles by these four values."""
    base: Any = next((b for b in _STAND_IN_BASES if b.__name__ == base_name), RuntimeError)
    cls = _STAND_INS.get((name, base.__name__))
    if cls is None:
        cls = type(name, (base,), {
            "__module__": __name__,
            "__doc__": "A model's error on its Ray host, under its own class name.",
            "__reduce__": lambda self: (_stand_in, (type(self).__name__, base.__name__, str(self),
                                                     getattr(self, "status_code", None))),
        })
        _STAND_INS[(name, base.__name__)] = cls
    error = cls(message)
    error.status_code = status_code  # type: ignore[attr-defined]
    return error


def local_error(cause: BaseException) -> BaseException:
    """The error to raise here for ``cause``, what a :class:`ModelHost` call raised: the model's
    own error when it can be rebuilt here, else one of its class name, kind and HTTP status."""
    if not isinstance(cause, RemoteModelFailure):
        return cause
    if cause.original is not None:
        try:
            error = pickle.loads(cause.original)
        except Exception:  # its class is not importable here
            error = None
        if isinstance(error, BaseException):
            return error
    base = next((b.__name__ for b in _STAND_IN_BASES if b.__name__ in cause.kinds), "RuntimeError")
    return _stand_in(cause.name, base, cause.message, cause.status_code)


# -- the host -----------------------------------------------------------------------------------


class ModelHost:
    """The Ray actor that holds one model on a node with a named resource.

    The model is resolved once, when the actor starts, with the settings' sampling, time limit and
    rate limit (the rate limit is then one for every worker that calls this host). A model that
    cannot be resolved there (its package missing on that node, a bad name) does not kill the
    actor: its error is kept and raised by every method, so the caller says why in one line.

    Args:
        spec: a ``provider:model`` name or a ``BaseChatModel``, as in ``Settings.models``.
        params: :func:`host_params` of the settings.
    """

    def __init__(self, spec: Any, params: Mapping[str, Any]):
        ray = ray_module()
        self.node_id = ray.get_runtime_context().get_node_id()
        self.hostname = socket.gethostname()
        self.spec = spec
        self.error: RemoteModelFailure | None = None
        self.model: BaseChatModel | None = None
        try:
            limit = params.get("rate_limit")
            self.model = resolve_model(
                spec, temperature=params["temperature"], max_tokens=params.get("max_tokens"),
                timeout_s=params.get("timeout_s"), max_retries=0,
                rate_limiter=rate_limiter(limit) if limit else None,
            )
        except Exception as e:  # said by every call, so the caller reports it in one line
            self.error = portable_error(e)

    def _ready_model(self) -> BaseChatModel:
        if self.error is not None:
            raise self.error
        assert self.model is not None
        return self.model

    def where(self) -> dict[str, str]:
        """The node this host runs on: ``{"node_id": ..., "hostname": ...}``."""
        return {"node_id": self.node_id, "hostname": self.hostname}

    def describe(self) -> dict[str, Any]:
        """What a caller needs to stand in for this model: its name and provider for records and
        spans, what :func:`sqlchorus.core.llm.call_model` asks of a model (grammar, per-call
        top-p, a time limit of its own, retries of its own, its context window), and where it is.

        Raises:
            RemoteModelFailure: the model could not be resolved on this node.
        """
        model = self._ready_model()
        try:
            ls = model._get_ls_params()
        except Exception:  # a model whose LangSmith parameters need a call's arguments
            ls = {}
        retries = getattr(model, "max_retries", None)
        profile = getattr(model, "profile", None)
        return {
            "model_name": model_name(model),
            "provider": provider_name(self.spec, model),
            "ls_provider": ls.get("ls_provider"),
            "ls_model_name": ls.get("ls_model_name"),
            "accepts_grammar": bool(getattr(model, "accepts_grammar", False)),
            "accepts_top_p": takes_top_p(model),
            "keeps_time": bool(getattr(model, "keeps_time", False)),
            "max_retries": retries if isinstance(retries, int) else None,
            "profile": dict(profile) if isinstance(profile, Mapping) else None,
            **self.where(),
        }

    def generate(self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
                 metadata: dict[str, Any] | None = None) -> ChatResult:
        """One call of the model: its ``ChatResult``, each message's ``response_metadata`` naming
        this node (:data:`NODE_ID_KEY`).

        ``metadata`` is the caller's run metadata (the prompt, role and node of the call), given
        to the model as a local call gives it. A model whose sampling is fixed (an OpenAI
        reasoning model) is sent no temperature or top-p, as a local call would not send them.

        Raises:
            RemoteModelFailure: what the model raised (:func:`local_error` rebuilds it).
        """
        model = self._ready_model()
        if fixed_sampling(model):
            kwargs = {k: v for k, v in kwargs.items() if k not in ("temperature", "top_p")}
        try:
            result = model.generate([messages], stop=stop, metadata=metadata or None, **kwargs)
        except Exception as e:
            raise portable_error(e) from None
        generations = list(result.generations[0])
        for generation in generations:
            message = getattr(generation, "message", None)
            if message is not None:
                message.response_metadata = {**(message.response_metadata or {}), NODE_ID_KEY: self.node_id}
        return ChatResult(generations=generations, llm_output=result.llm_output)


def host_params(settings: Settings) -> dict[str, Any]:
    """What of ``settings`` a host resolves its model with; hosts differ where these do."""
    return {"temperature": settings.temperature, "max_tokens": settings.max_tokens,
            "timeout_s": settings.model_timeout_s, "rate_limit": settings.rate_limit}


def _spec_text(spec: Any) -> str:
    return spec if isinstance(spec, str) else f"<{model_name(spec)}>"


def host_name(ray: Any, resource: str, spec: Any, params: Mapping[str, Any]) -> str:
    """The name of the host of ``spec`` on ``resource`` for this command (its Ray job): every
    worker of the command computes the same one. A model object is its own: hosts are shared by
    name only for named models."""
    identity = spec if isinstance(spec, str) else f"object:{id(spec)}"
    digest = hashlib.sha256(json.dumps([resource, identity, dict(params)], sort_keys=True, default=str)
                            .encode()).hexdigest()[:12]
    job = ray.get_runtime_context().get_job_id()
    return f"sqlchorus-model|{job}|{resource}|{_spec_text(spec)[:80]}|{digest}"


def model_host(resource: str, spec: Any, params: Mapping[str, Any]) -> Any:
    """The handle of the host of ``spec`` on ``resource``, started if it is not yet running.

    Its owner is the process that starts it: call this (or :func:`with_role_resources`) in the
    command's driver first, so that the host lives as long as the command does.
    """
    ray = ray_module()
    return remote_class(ModelHost).options(
        name=host_name(ray, resource, spec, params), namespace=NAMESPACE, get_if_exists=True,
        resources={resource: HOST_SHARE}, num_cpus=0, max_concurrency=HOST_CONCURRENCY,
        max_restarts=0,
    ).remote(spec, dict(params))


# -- the model a worker holds -------------------------------------------------------------------


class RemoteChatModel(BaseChatModel):
    """A chat model whose calls run on a :class:`ModelHost`.

    It stands for the host's model under that model's name (``model_name``, what usage records
    and cost name) and provider (``_llm_type``, what spans name: the ``provider`` of a
    ``provider:model`` spec, as a local run's spans do), and says what
    :func:`~sqlchorus.core.llm.call_model` asks of a model as the host's model says it. It
    pickles, with its actor handle, so settings holding it go to every worker.

    Build it with :func:`remote_chat_model` or :func:`with_role_resources`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    host: Any = Field(exclude=True)
    """The :class:`ModelHost` actor's handle."""
    spec: Any = Field(exclude=True)
    """The model spec the host resolved: a ``provider:model`` name or a ``BaseChatModel``."""
    resource: str
    """The Ray resource of the node the host runs on."""
    host_params: dict[str, Any] = Field(default_factory=dict)
    """:func:`host_params` of the settings the host was started with (to start another, the same)."""
    model_name: str
    provider: str
    ls_provider: str | None = None
    ls_model_name: str | None = None
    accepts_grammar: bool = False
    accepts_top_p: bool = False
    keeps_time: bool = False
    max_retries: int | None = None
    node_id: str = ""
    """The node the host ran on when this model was made."""
    hostname: str = ""
    timeout_s: float | None = None
    """The model's time limit: a call whose answer has not come back within it (and
    :data:`RESULT_MARGIN_S`) is given up. None: no limit."""

    @property
    def _llm_type(self) -> str:
        return self.provider

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "spec": _spec_text(self.spec), "resource": self.resource}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = self.ls_provider or self.provider
        params["ls_model_name"] = self.ls_model_name or self.model_name
        return params

    def __setstate__(self, state: Any) -> None:
        super().__setstate__(state)
        if isinstance(self.spec, str):  # the cache's identity of a model is kept per process
            made_from(self, self.spec)

    def _bound(self, kwargs: Mapping[str, Any]) -> float | None:
        """How long a call's answer is waited for. A model that keeps its own time (a local
        model) answers within the limit from the moment it is free, as in one process, so its
        calls are waited for until it answers or its host is lost."""
        if self.keeps_time or self.timeout_s is None:
            return None
        return float(kwargs.get("timeout_s") or self.timeout_s) + RESULT_MARGIN_S

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        """Forward the call to the host and give back its ``ChatResult`` unchanged.

        A host that has died (its node lost, or the worker that started it gone) is started
        again once and the call sent there.

        Raises:
            ModelTimeoutError: no answer within the time limit.
            TransientModelError: the host cannot be reached for now (worth a retry).
            ClusterError: the host died twice.
            Exception: what the model raised on the host, as :func:`local_error` rebuilds it.
        """
        ray = ray_module()
        from ray import exceptions as rex

        metadata = _plain_metadata(getattr(run_manager, "metadata", None))
        bound = self._bound(kwargs)
        for attempt in (1, 2):
            ref = self.host.generate.remote(messages, stop, kwargs, metadata)
            try:
                return ray.get(ref, timeout=bound)
            except rex.GetTimeoutError:
                try:
                    ray.cancel(ref)
                except Exception:  # a call already running cannot always be cancelled
                    pass
                raise ModelTimeoutError(f"The {self.model_name} model on {self.resource!r} gave no answer "
                                        f"within {bound:g} s.") from None
            except rex.RayTaskError as e:
                raise local_error(e.cause) from e
            except rex.ActorUnavailableError as e:
                raise TransientModelError(f"The {self.model_name} model's host on {self.resource!r} "
                                          f"cannot be reached for now: {_first_line(e)}") from e
            except rex.RayActorError as e:
                if attempt == 2:
                    raise ClusterError(f"The {self.model_name} model's host on {self.resource!r} died: "
                                       f"{_first_line(e)}") from e
                self.host = model_host(self.resource, self.spec, self.host_params)
        raise AssertionError("unreachable")


def _plain_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The run metadata worth sending to a host: the plain values (the prompt, role and node of
    the call, LangGraph's step), not whatever objects a caller's callbacks carry."""
    plain = (str, int, float, bool, type(None))
    out: dict[str, Any] = {}
    for key, value in (metadata or {}).items():
        if isinstance(value, plain) or (isinstance(value, (list, tuple)) and all(isinstance(v, plain) for v in value)):
            out[str(key)] = value
    return out


def _first_line(error: BaseException) -> str:
    return ((str(error).strip().splitlines() or [type(error).__name__])[0])[:300]


def remote_chat_model(host: Any, spec: Any, resource: str, params: Mapping[str, Any], *,
                      ready_timeout_s: float | None = READY_TIMEOUT_S) -> RemoteChatModel:
    """The :class:`RemoteChatModel` of ``host``, once the host has resolved its model.

    Raises:
        ClusterError: the host was not placed in time, or its model cannot be used there.
    """
    ray = ray_module()
    from ray import exceptions as rex

    what = f"model {_spec_text(spec)} on resource {resource!r}"
    try:
        info = ray.get(host.describe.remote(), timeout=ready_timeout_s)
    except rex.GetTimeoutError:
        _kill(ray, host)
        raise ClusterError(f"The {what} did not start within {ready_timeout_s:g} s: the nodes that offer "
                           f"{resource!r} have no room for it, or it takes longer to load.") from None
    except rex.RayTaskError as e:
        _kill(ray, host)  # so that the next attempt, once the node is fixed, starts afresh
        cause = local_error(e.cause)
        raise ClusterError(f"The {what} cannot be used there: {_first_line(cause)}") from cause
    except rex.RayActorError as e:
        raise ClusterError(f"The {what} could not start: {_first_line(e)}") from e
    model = RemoteChatModel(
        host=host, spec=spec, resource=resource, host_params=dict(params), timeout_s=params.get("timeout_s"),
        model_name=info["model_name"], provider=info["provider"], ls_provider=info.get("ls_provider"),
        ls_model_name=info.get("ls_model_name"), accepts_grammar=info["accepts_grammar"],
        accepts_top_p=info["accepts_top_p"], keeps_time=info["keeps_time"], max_retries=info.get("max_retries"),
        node_id=info["node_id"], hostname=info["hostname"],
        **({"profile": info["profile"]} if info.get("profile") else {}),
    )
    if isinstance(spec, str):
        made_from(model, spec)
    return model


def _kill(ray: Any, host: Any) -> None:
    try:
        ray.kill(host)
    except Exception:  # already gone
        pass


# -- settings -----------------------------------------------------------------------------------


_BUILT_IN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")


def check_resources(role_resources: Mapping[str, str]) -> None:
    """Say, in one line, which resource no node of the cluster offers (rather than let a host
    wait for a node that will never come).

    Raises:
        ClusterError: a resource that no live node offers.
    """
    ray = ray_module()
    offered = {k: v for k, v in ray.cluster_resources().items() if v > 0}
    for resource in dict.fromkeys(role_resources.values()):
        if resource in offered:
            continue
        roles = [r for r, res in role_resources.items() if res == resource]
        custom = sorted(k for k in offered
                        if k not in _BUILT_IN_RESOURCES and not k.startswith(("node:", "accelerator_type:")))
        raise ClusterError(
            f"No node of the Ray cluster offers the resource {resource!r} that the {', '.join(roles)} "
            f"model{'s' if len(roles) > 1 else ''} need{'' if len(roles) > 1 else 's'} "
            f"(its custom resources: {', '.join(custom) or 'none'}); start a node with "
            f"`ray start --address=HEAD:PORT --resources='{{\"{resource}\": 1}}'`."
        )


def with_role_resources(settings: Settings, role_resources: Mapping[str, str], *,
                        ready_timeout_s: float | None = READY_TIMEOUT_S) -> Settings:
    """A copy of ``settings`` whose roles in ``role_resources`` use a :class:`RemoteChatModel`
    on a node with the resource named for them.

    Roles that name the same model and resource share one model (and one host). The hosts are
    started, and their models resolved, before this returns, so a model that cannot be used there
    is said now, once. Needs this process connected to the cluster
    (:func:`sqlchorus.cluster.connect.cluster`).

    Args:
        settings: the command's settings.
        role_resources: role to Ray resource (:func:`parse_role_resources`); empty: ``settings``
            as they are.
        ready_timeout_s: how long a host may take to start and resolve its model.

    Raises:
        ClusterError: not connected, no node offers a resource, or a host cannot start or use its
            model there.
        ModelConfigError: a role named has no model at all.
    """
    if not role_resources:
        return settings
    unknown = [role for role in role_resources if role not in ROLES]
    if unknown:
        raise ClusterError(f"Unknown model role(s) {', '.join(unknown)}; roles are {', '.join(ROLES)}.")
    wanted = {role: resource for role, resource in role_resources.items()
              if not isinstance(settings.model_for(role), RemoteChatModel)}  # made so already: kept
    for role in wanted:
        spec = settings.model_for(role)
        if spec is None or (isinstance(spec, str) and not spec.strip()):
            raise ModelConfigError(NO_MODEL_HELP)  # as a local run says it, before any host starts
    if not wanted:  # a worker given the driver's settings, already made so
        return settings
    ray = ray_module()
    if not ray.is_initialized():
        raise ClusterError("A model on a Ray resource needs this process connected to a Ray cluster (--ray).")
    check_resources(wanted)
    params = host_params(settings)
    made: dict[tuple[str, Any], RemoteChatModel] = {}
    models = dict(settings.models)
    for role, resource in wanted.items():
        spec = settings.model_for(role)
        key = (resource, spec if isinstance(spec, str) else id(spec))
        if key not in made:
            made[key] = remote_chat_model(model_host(resource, spec, params), spec, resource, params,
                                          ready_timeout_s=ready_timeout_s)
        models[role] = made[key]
    return settings.replace(models=models)
