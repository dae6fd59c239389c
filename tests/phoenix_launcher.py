"""Arize Phoenix for tests, run with the Python of Phoenix's own venv (never the project's).

    python phoenix_launcher.py serve
        Phoenix's server (``phoenix serve``), configured by the PHOENIX_* environment, with its
        gRPC OTLP receiver on 127.0.0.1 instead of every interface: Phoenix binds ``[::]``, so
        ``grpc.aio.server`` is wrapped to give ``add_insecure_port`` the loopback address.

    python phoenix_launcher.py spans BASE_URL [PROJECT]
        Every span Phoenix holds in PROJECT ("default"), read through ``phoenix.client``, printed
        as one JSON list of objects (one per span, the dataframe's columns as keys).

    python phoenix_launcher.py project-id BASE_URL [PROJECT]
        The project's id (what the UI's URLs name), printed as JSON.
"""

from __future__ import annotations

import json
import sys

LOOPBACK = "127.0.0.1"


def serve() -> None:
    import grpc.aio

    make_server = grpc.aio.server

    class LoopbackServer:
        """A grpc.aio server whose ports are on loopback whatever address they are asked on."""

        def __init__(self, server):
            self._server = server

        def add_insecure_port(self, address: str) -> int:
            return self._server.add_insecure_port(_loopback(address))

        def add_secure_port(self, address: str, credentials) -> int:
            return self._server.add_secure_port(_loopback(address), credentials)

        def __getattr__(self, name):
            return getattr(self._server, name)

    def _loopback(address: str) -> str:
        port = address.rsplit(":", 1)[-1]
        return f"{LOOPBACK}:{port}"

    def loopback_server(*args, **kwargs):
        return LoopbackServer(make_server(*args, **kwargs))

    grpc.aio.server = loopback_server
    from phoenix.server.main import main

    sys.argv = ["phoenix", "serve"]
    main()


def _records(frame) -> list[dict]:
    """The dataframe as JSON-ready records: every value made plain (arrays, timestamps...)."""
    frame = frame.reset_index(drop=frame.index.name in frame.columns or frame.index.name is None)
    text = frame.to_json(orient="records", date_format="iso", default_handler=str)
    return json.loads(text)


def spans(base_url: str, project: str = "default") -> None:
    from phoenix.client import Client

    client = Client(base_url=base_url)
    frame = client.spans.get_spans_dataframe(project_identifier=project, limit=100_000)
    json.dump(_records(frame) if frame is not None else [], sys.stdout)


def project_id(base_url: str, project: str = "default") -> None:
    from phoenix.client import Client

    json.dump(Client(base_url=base_url).projects.get(project_name=project)["id"], sys.stdout)


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    {"serve": serve, "spans": spans, "project-id": project_id}[command](*rest)
