"""Who may call a server, and how much they may send: loopback by default, a bearer token
otherwise, and a size limit on request bodies. Shared by the REST API and the MCP server."""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from starlette.responses import JSONResponse

from sqlchorus.config.errors import SqlchorusError

TOKEN_ENV = "SQLCHORUS_TOKEN"
"""The environment variable that holds the bearer token."""
COOKIE = "sqlchorus_token"
"""The cookie a browser page keeps the token in, followed by the server's port (see :class:`Guard`)."""


class UnsafeBindingError(SqlchorusError):
    """A server asked to listen beyond this machine without a token."""

    kind = "unsafe_binding"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _hostname(netloc: str) -> str:
    """The host of a ``host[:port]`` (``[::1]:8000`` included)."""
    if netloc.startswith("["):
        return netloc[1:netloc.find("]")] if "]" in netloc else netloc
    return netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc


def server_token(host: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """The token a server on ``host`` requires: ``SQLCHORUS_TOKEN`` when set (on loopback too).

    Raises:
        UnsafeBindingError: ``host`` is not loopback and no token is set.
    """
    token = (environ.get(TOKEN_ENV) or "").strip() or None
    if token is None and not is_loopback(host):
        raise UnsafeBindingError(
            f"Listening on {host} lets other machines in: set a token in {TOKEN_ENV} first "
            f"(clients then send 'Authorization: Bearer TOKEN'), or listen on 127.0.0.1."
        )
    return token


HTTP_KINDS = {400: "invalid_request", 401: "unauthorized", 404: "not_found", 405: "method_not_allowed",
              413: "payload_too_large", 415: "unsupported_media_type"}


def install_error_handlers(app: Any, extra: Mapping[type[BaseException], tuple[int, str]] = {}) -> None:
    """Make every error of ``app`` a JSON error with a stable kind: sqlchorus's own errors with
    theirs and their HTTP status (:mod:`sqlchorus.tools.errors`), a body that does not fit, an
    unknown path or method, ``extra`` (other error types to status and kind), and any other fault
    (500, ``internal``, without a traceback)."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    def fixed(status: int, kind: str) -> Any:
        async def handle(request: Any, e: Exception) -> JSONResponse:
            return error_response(status, kind, str(e))
        return handle

    async def refused(request: Any, e: SqlchorusError) -> JSONResponse:
        return error_response(e.http_status, e.kind, str(e))

    async def invalid(request: Any, e: RequestValidationError) -> JSONResponse:
        errors = e.errors()
        if any(err.get("type") == "json_invalid" for err in errors):
            return error_response(400, "invalid_json", "The request body is not valid JSON.")
        where = "; ".join(f"{'.'.join(str(p) for p in err.get('loc', ())[1:]) or 'body'}: {err.get('msg')}"
                          for err in errors[:5])
        return error_response(422, "invalid_request", f"The request does not fit: {where}.")

    async def http_error(request: Any, e: HTTPException) -> JSONResponse:
        return error_response(e.status_code, HTTP_KINDS.get(e.status_code, "http_error"), str(e.detail))

    async def fault(request: Any, e: Exception) -> JSONResponse:
        return error_response(500, "internal", f"The server failed: {type(e).__name__}.")

    app.add_exception_handler(SqlchorusError, refused)
    for error, (status, kind) in extra.items():
        app.add_exception_handler(error, fixed(status, kind))
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, fault)


def error_response(status: int, kind: str, message: str, **extra: Any) -> JSONResponse:
    """An error as JSON: ``{"error": {"kind": ..., "message": ...}}``."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": {"kind": kind, "message": message, **extra}}, status_code=status, headers=headers)


class Guard:
    """ASGI middleware: the token, and the size of request bodies.

    A body is read whole (up to ``max_body_bytes``) before the app sees it, so that an oversized
    one is refused with 413 however it is sent (with a length or in chunks). With ``browser``, a
    page opened once as ``/?token=TOKEN`` gets the token as a same-site, script-proof cookie,
    which its later requests carry instead of the header a browser cannot add.
    """

    def __init__(self, app: Any, token: str | None, max_body_bytes: int, *, open_paths: frozenset[str] = frozenset(),
                 browser: bool = False):
        self.app = app
        self.token = token
        self.max_body_bytes = max_body_bytes
        self.open_paths = open_paths
        self.browser = browser

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if not self.token and not self._from_this_machine(scope):
            # Without a token the server is for this machine only: a page elsewhere that renamed
            # itself to 127.0.0.1 (DNS rebinding), or posts from another origin, is refused.
            await error_response(403, "forbidden_host", "This server answers requests for 127.0.0.1 or localhost "
                                 "only; set SQLCHORUS_TOKEN to serve other names.")(scope, receive, send)
            return
        if self.token and scope["path"] not in self.open_paths and not self._authorised(scope):
            if self.browser and self._query_token(scope):
                send = self._setting_cookie(send, scope)
            else:
                await error_response(401, "unauthorized",
                                     "A valid bearer token is required: Authorization: Bearer TOKEN.")(scope, receive, send)
                return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            await self._too_large(scope, receive, send)
            return
        if scope["method"] in ("POST", "PUT", "PATCH"):
            body = bytearray()
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body += message.get("body", b"")
                if len(body) > self.max_body_bytes:
                    await self._too_large(scope, receive, send)
                    return
                if not message.get("more_body"):
                    break
            sent = False

            async def replay() -> dict:
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": bytes(body), "more_body": False}
                return await receive()

            await self.app(scope, replay, send)
            return
        await self.app(scope, receive, send)

    def _authorised(self, scope: dict) -> bool:
        for name, value in scope.get("headers") or []:
            if name == b"authorization":
                scheme, _, given = value.decode("latin-1").partition(" ")
                return scheme.lower() == "bearer" and self._matches(given.strip())
            if name == b"cookie" and self.browser:
                for part in value.decode("latin-1").split(";"):
                    key, _, given = part.strip().partition("=")
                    if key == self._cookie(scope) and self._matches(given):
                        return True
        return False

    @staticmethod
    def _from_this_machine(scope: dict) -> bool:
        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1")
        if host and not is_loopback(_hostname(host)):
            return False
        origin = headers.get(b"origin", b"").decode("latin-1")
        if not origin or origin == "null" and scope.get("method") == "GET":
            return True
        return is_loopback(_hostname(urlsplit(origin).netloc))

    def _matches(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())

    def _query_token(self, scope: dict) -> bool:
        given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]
        return scope["method"] == "GET" and bool(given) and self._matches(given)

    @staticmethod
    def _cookie(scope: dict) -> str:
        """The cookie's name, one per port: cookies are not kept apart by port, tokens are."""
        server = scope.get("server") or ("", 0)
        return f"{COOKIE}_{server[1] or 0}"

    def _setting_cookie(self, send: Any, scope: dict) -> Any:
        async def sending(message: dict) -> None:
            if message["type"] == "http.response.start":
                cookie = f"{self._cookie(scope)}={self.token}; HttpOnly; SameSite=Strict; Path=/"
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie.encode("latin-1"))]}
            await send(message)
        return sending

    async def _too_large(self, scope: dict, receive: Any, send: Any) -> None:
        await error_response(413, "payload_too_large",
                             f"The request body is over {self.max_body_bytes} bytes.")(scope, receive, send)
