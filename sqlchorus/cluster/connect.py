"""Reach a Ray cluster by its address, or start one for one command.

``ADDRESS`` is what ``--ray`` takes:

- ``local``: a cluster started for this command alone, stopped when it ends;
- ``auto``: the cluster this machine belongs to (``ray start`` was run here);
- ``HOST:PORT``: a head's address (its GCS port, 6379 by default);
- ``ray://HOST:PORT``: a head's Ray Client server (10001 by default), from a machine outside the
  cluster.

Every way a cluster cannot be reached ends in a :class:`ClusterError` of one line, before any
question is spent:

    >>> parse_address("10.0.0.5:6379")
    ('gcs', '10.0.0.5', 6379)
    >>> parse_address("ray://head:10001")
    ('client', 'head', 10001)
    >>> parse_address("local")
    ('local', None, None)
    >>> parse_address("head")
    Traceback (most recent call last):
    ...
    sqlchorus.cluster.connect.ClusterAddressError: --ray takes local, auto, HOST:PORT or ray://HOST:PORT, not 'head'.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlchorus.tools.errors import EXIT_CLUSTER, SqlchorusError

PROBE_TIMEOUT_S = 5.0
"""How long the address is given to accept a connection before the command says nobody is there."""


class ClusterError(SqlchorusError, RuntimeError):
    """The Ray cluster cannot do the work; the message says why in one line."""

    kind = "cluster_unavailable"
    exit_code = EXIT_CLUSTER
    http_status = 503


class ClusterAddressError(SqlchorusError, ValueError):
    """A ``--ray`` address that is not one: bad input, said before anything is tried."""


def ray_module() -> Any:
    """Ray, or a :class:`ClusterError` that names the extra to install."""
    try:
        import ray
    except ImportError as e:
        raise ClusterError(
            "--ray needs Ray on this machine and on every worker: pip install 'sqlchorus[ray]'."
        ) from e
    return ray


@functools.cache
def remote_class(cls: type) -> Any:
    """``cls`` as a Ray actor class, made once per process (Ray itself imported only here, when
    first asked)."""
    return ray_module().remote(cls)


def parse_address(address: str) -> tuple[str, str | None, int | None]:
    """``(kind, host, port)`` of a ``--ray`` address; kind is local, auto, gcs or client."""
    text = (address or "").strip()
    if text in ("local", "auto"):
        return text, None, None
    kind = "gcs"
    if text.startswith("ray://"):
        kind, text = "client", text[len("ray://"):]
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterAddressError(
            f"--ray takes local, auto, HOST:PORT or ray://HOST:PORT, not {address!r}."
        )
    return kind, host.strip("[]"), int(port)


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class ClusterInfo:
    """What a command found at its address."""

    address: str
    nodes: int
    cpus: float
    resources: dict[str, float]
    started_here: bool


def runtime_env() -> dict[str, Any]:
    """What every worker is started with: this command's own import path first (a ``python:``
    model or a scripted model from the current folder imports there as here, when the folder is
    shared), and no output of Ray's own on the command's terminal."""
    paths = [os.getcwd(), *[p for p in sys.path if p and os.path.isdir(p) and "site-packages" not in p]]
    extra = os.environ.get("PYTHONPATH")
    if extra:
        paths.append(extra)
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}}


@contextlib.contextmanager
def cluster(address: str, *, cpus: int | None = None) -> Iterator[ClusterInfo]:
    """Connect this process to the cluster at ``address`` for the ``with`` block.

    Args:
        address: see the module's docstring.
        cpus: for ``local``, the logical CPUs of the cluster started here (default: this
            machine's, or more when asked: a worker waiting on a model takes one).

    Raises:
        ClusterAddressError: the address is malformed.
        ClusterError: Ray is missing, or nobody answers at the address.
    """
    kind, host, port = parse_address(address)
    ray = ray_module()
    if ray.is_initialized():  # a caller (a test, a notebook) is already connected: use that
        yield _info(ray, address, started_here=False)
        return
    if kind in ("gcs", "client") and not _answers(host or "", port or 0):
        raise ClusterError(f"No Ray cluster answers at {address}: start one with "
                           f"`ray start --head` there, or use --ray local.")
    kwargs: dict[str, Any] = {
        "runtime_env": runtime_env(),
        "log_to_driver": False,
        "logging_level": logging.ERROR,
        "configure_logging": True,
    }
    if kind == "local":
        # address="local" starts a cluster of its own even where another runs on this machine (with
        # no address, Ray would join that one).
        kwargs.update(address="local", num_cpus=max(cpus or 0, os.cpu_count() or 1), include_dashboard=False)
    else:
        kwargs["address"] = address if kind != "client" else f"ray://{host}:{port}"
    try:
        with _quiet():
            ray.init(**kwargs)
    except Exception as e:  # Ray's own errors, of many kinds: one line each
        raise ClusterError(_why_not(address, e)) from e
    try:
        yield _info(ray, address, started_here=kind == "local")
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()


def _why_not(address: str, error: BaseException) -> str:
    text = str(error)
    if "AuthenticationError" in type(error).__name__ or "InvalidAuthToken" in text:
        return (f"The Ray cluster at {address} wants its authentication token: set RAY_AUTH_TOKEN, or "
                "RAY_AUTH_TOKEN_PATH to the token's file, as on its nodes (with RAY_AUTH_MODE=token).")
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
    return f"Cannot join the Ray cluster at {address}: {first}"


def _info(ray: Any, address: str, *, started_here: bool) -> ClusterInfo:
    resources = {k: float(v) for k, v in ray.cluster_resources().items()}
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    return ClusterInfo(address=address, nodes=nodes, cpus=resources.get("CPU", 0.0),
                       resources=resources, started_here=started_here)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Ray prints a banner and warnings on stdout and stderr while it starts; a command's stdout
    is for its results (``--json``), so they go nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(1)
    try:
        sys.stdout.flush()
        os.dup2(devnull, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
