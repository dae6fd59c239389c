"""Who may call a server, and how much they may send: loopback by default, a bearer token
otherwise, and a size limit on request bodies. Shared by the REST API and the MCP server."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import math
import os
import secrets
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from starlette.responses import JSONResponse

from sqlchorus.config.errors import SqlchorusError

TOKEN_ENV = "SQLCHORUS_TOKEN"
"""The environment variable that holds the bearer token."""
COOKIE = "sqlchorus_token"
"""The cookie a browser page keeps the token in, followed by the server's port (see :class:`Guard`)."""
_log = logging.getLogger(__name__)


class UnsafeBindingError(SqlchorusError):
    """A server asked to listen beyond this machine without a token."""

    kind = "unsafe_binding"


def client_of(request: Any) -> str | None:
    """Who sent ``request``, for the per-client share of each database's statement workers: its
    remote address."""
    return request.client.host if request.client else None


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host.strip().lower() == "localhost":
        return True
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _hostname(netloc: str) -> str:
    """The host of a ``host[:port]`` (``[::1]:8000`` included); anything else after a bracketed
    address leaves the text whole, which names no host this server answers."""
    if netloc.startswith("["):
        close = netloc.find("]")
        rest = netloc[close + 1:]  # the whole text when no bracket closes
        if rest and not (rest[0] == ":" and rest[1:].isdigit()):
            return netloc
        return netloc[1:close]
    return netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc


class WeakTokenError(SqlchorusError):
    """The token set for a server could be guessed."""

    kind = "weak_token"


MIN_TOKEN_BITS = 256
"""What a token must carry at least: 32 random bytes, as ``secrets.token_urlsafe(32)`` gives."""


def token_weakness(token: str) -> str | None:
    """Why ``token`` could be guessed, or None. Its strength is estimated from its length and
    the smallest alphabet its characters fit (hex, URL-safe base64, printable ASCII), so a
    64-digit hex token or ``token_urlsafe(32)`` passes and a password does not."""
    alphabet = (16 if all(c in "0123456789abcdefABCDEF" for c in token) else
                64 if all(c.isascii() and (c.isalnum() or c in "-_+/=") for c in token) else 95)
    bits = len(token) * math.log2(alphabet)
    if bits < MIN_TOKEN_BITS - 8:  # token_urlsafe(32) gives 43 characters of 6 bits: 258
        return f"{len(token)} characters carry about {int(bits)} bits, under {MIN_TOKEN_BITS}"
    if len(set(token)) < min(len(token), 16) // 2:
        return f"it repeats a few characters ({len(set(token))} different)"
    return None


def server_token(host: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """The token a server on ``host`` requires: ``SQLCHORUS_TOKEN`` when set (on loopback too).

    Raises:
        UnsafeBindingError: ``host`` is not loopback and no token is set.
    """
    token = (environ.get(TOKEN_ENV) or "").strip() or None
    if token is not None and (weak := token_weakness(token)):
        raise WeakTokenError(f"{TOKEN_ENV} is too weak to guard a server: {weak}. Make one of 32 random bytes: "
                             "python -c 'import secrets; print(secrets.token_urlsafe(32))'")
    if token is None and not is_loopback(host):
        raise UnsafeBindingError(
            f"Listening on {host} lets other machines in: set a token in {TOKEN_ENV} first "
            f"(clients then send 'Authorization: Bearer TOKEN'), or listen on 127.0.0.1."
        )
    return token


HTTP_KINDS = {400: "invalid_request", 401: "unauthorized", 404: "not_found", 405: "method_not_allowed",
              413: "payload_too_large", 415: "unsupported_media_type"}
BAD_LENGTH = "The request's Content-Length is not a number of bytes."
BAD_HTTP = ("The request is not valid HTTP/1.1: its request line or a header cannot be read (a Content-Length "
            "that is not a number of bytes, or too large a number, among others).")


def _send_json_400(self: Any, msg: str) -> None:
    """A uvicorn protocol's answer to a request it cannot parse, as a JSON error (see
    :func:`json_http_protocol`); the connection is closed after it, as uvicorn does."""
    body = json.dumps({"error": {"kind": "invalid_request", "message": BAD_HTTP}}, separators=(",", ":")).encode()
    head = [b"HTTP/1.1 400 Bad Request\r\n"]
    for name, value in getattr(getattr(self, "server_state", None), "default_headers", None) or ():
        head += [name, b": ", value, b"\r\n"]
    head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body),
             b"connection: close\r\n", b"\r\n"]
    self.transport.write(b"".join(head) + body)
    self.transport.close()


def json_http_protocol() -> Any:
    """uvicorn's HTTP protocol (httptools' where installed, as uvicorn's "auto" picks, else h11's)
    with its answer to a request it cannot parse (a Content-Length that is not a number, or
    beyond any, a header that is not HTTP) made a JSON error of the same shape as every other
    error, not plain text; for ``uvicorn.Config(http=...)``. Such a request never reaches the
    app: the protocol answers it itself."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:  # httptools is not installed
        from uvicorn.protocols.http.h11_impl import H11Protocol as base
    return type(f"Json{base.__name__}", (base,), {"send_400_response": _send_json_400})


def install_error_handlers(app: Any, extra: Mapping[type[BaseException], tuple[int, str]] = {},
                           public: Callable[[BaseException], str] | None = None,
                           hint: Callable[[str, str], str | None] | None = None) -> None:
    """Make every error of ``app`` a JSON error with a stable kind: sqlchorus's own errors with
    theirs and their HTTP status (:mod:`sqlchorus.tools.errors`), a body that does not fit, an
    unknown path or method (405 with ``Allow``), ``extra`` (other error types to status and
    kind), and any other fault (500, ``internal``, without a traceback). ``public``: what a
    client is told of one of sqlchorus's errors, when that is less than its message (the whole
    message goes to the log). ``hint``: what a request of a method its path does not take may
    have meant (method, path to a sentence, or None), added to the 405's message."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    def fixed(status: int, kind: str) -> Any:
        async def handle(request: Any, e: Exception) -> JSONResponse:
            return error_response(status, kind, str(e))
        return handle

    async def refused(request: Any, e: SqlchorusError) -> JSONResponse:
        message = str(e)
        told = public(e) if public is not None else message
        if told != message:
            _log.warning("sqlchorus: %s %s: %s: %s", request.method, request.url.path, e.kind, message)
        response = error_response(e.http_status, e.kind, told)
        if getattr(e, "retry_after_s", None) is not None:  # a refusal that passes: say when to try again
            response.headers["Retry-After"] = str(e.retry_after_s)
        return response

    async def invalid(request: Any, e: RequestValidationError) -> JSONResponse:
        errors = e.errors()
        if any(err.get("type") == "json_invalid" for err in errors):
            return error_response(400, "invalid_json", "The request body is not valid JSON.")
        where = "; ".join(f"{'.'.join(str(p) for p in err.get('loc', ())[1:]) or 'body'}: {err.get('msg')}"
                          for err in errors[:5])
        return error_response(422, "invalid_request", f"The request does not fit: {where}.")

    async def http_error(request: Any, e: HTTPException) -> JSONResponse:
        headers = dict(e.headers or {})
        message = str(e.detail)
        if e.status_code == 405:
            allowed = allowed_methods(request) or [m.strip() for m in headers.get("Allow", "").split(",") if m.strip()]
            headers["Allow"] = ", ".join(allowed)
            message = (f"{request.method} is not allowed on {request.url.path}; "
                       f"it takes {', '.join(allowed) or 'nothing'}.")
            meant = hint(request.method, request.url.path) if hint is not None else None
            if meant:
                message = f"{message} {meant}"
        response = error_response(e.status_code, HTTP_KINDS.get(e.status_code, "http_error"), message)
        response.headers.update(headers)
        return response

    async def fault(request: Any, e: Exception) -> JSONResponse:
        return error_response(500, "internal", f"The server failed: {type(e).__name__}.")

    app.add_exception_handler(SqlchorusError, refused)
    for error, (status, kind) in extra.items():
        app.add_exception_handler(error, fixed(status, kind))
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, fault)


def allowed_methods(request: Any) -> list[str]:
    """The methods some route of the request's app takes on its path (an ``Allow`` header's),
    every route's together: ``/v1/databases/{id}/schema`` takes ``GET``."""
    from starlette.routing import Match

    methods: set[str] = set()
    for route in getattr(getattr(request.app, "router", None), "routes", ()):
        try:
            match, _ = route.matches(request.scope)
        except Exception:  # noqa: BLE001 - a route that cannot say adds nothing
            continue
        if match != Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)


def error_response(status: int, kind: str, message: str, **extra: Any) -> JSONResponse:
    """An error as JSON: ``{"error": {"kind": ..., "message": ...}}``."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": {"kind": kind, "message": message, **extra}}, status_code=status, headers=headers)


UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
"""Methods that change something: a browser must send them from the server's own pages."""
CSRF_HEADER = "x-csrf-token"
"""The header the viewer's page sends its CSRF token in (see :class:`Guard`)."""
SESSION_PREFIX = "/s/"
"""Where a browser session's pages live once a token has logged it in: ``/s/<session>/``."""
WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]", "*"})


class Guard:
    """ASGI middleware: who may call, from where, and how much they may send.

    * **Host.** A server bound to loopback answers only requests whose ``Host`` is a loopback
      name, however spelt (``localhost``, ``LOCALHOST``, ``127.0.0.5``, ``[::1]``): a page elsewhere
      that renamed itself to 127.0.0.1 (DNS rebinding) is refused. A server bound to one other
      address also answers that name; one bound to every address relies on its token.
    * **Token.** With a token, every request but ``open_paths`` carries it as a bearer header.
    * **Cross-site requests.** A request that changes something (``POST``, ``PUT``, ``PATCH``,
      ``DELETE``) is refused when the browser says it comes from another site or another port
      (``Sec-Fetch-Site``) or names another origin (``Origin``); with ``csrf``, one that a
      browser sends must also carry that CSRF token in ``X-CSRF-Token``, which only the server's
      own pages know.
    * **Browser sessions** (``browser``). A page opened once as ``/?token=TOKEN`` is sent on to
      ``/s/<session>/`` with a script-proof cookie whose path is that folder. The token leaves
      the address bar and history, and the cookie reaches nothing but this server's session
      pages: browsers keep cookies apart by path, not by port, so a name alone would reach every
      other service on this machine. The cookie holds a value derived from the token, not the
      token itself.
    * **Body size.** A body is read whole (up to ``max_body_bytes``) before the app sees it, so
      that an oversized one is refused with 413 however it is sent (with a length or in chunks);
      a ``Content-Length`` that is not a number is refused with 400. Each refusal is a JSON
      error, as is uvicorn's own answer to a request it cannot parse, with the protocol of
      :func:`json_http_protocol`.
    """

    def __init__(self, app: Any, token: str | None, max_body_bytes: int, *, open_paths: frozenset[str] = frozenset(),
                 browser: bool = False, host: str | None = None, csrf: str | None = None):
        self.app = app
        self.token = token
        self.max_body_bytes = max_body_bytes
        self.open_paths = open_paths
        self.browser = browser
        self.host = host
        self.csrf = csrf
        # One session folder per server: unknowable elsewhere, so no other local service is
        # ever sent the cookie.
        self.session = secrets.token_urlsafe(18)
        self.session_path = f"{SESSION_PREFIX}{self.session}/"
        self._session_value = (hmac.new(token.encode(), f"session:{self.session}".encode(), hashlib.sha256).hexdigest()
                               if token else None)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await error_response(403, *refusal)(scope, receive, send)
            return
        if self.browser and scope["path"] == self.session_path.rstrip("/"):
            await _redirect(self.session_path)(scope, receive, send)
            return
        in_session = self.browser and scope["path"].startswith(self.session_path)
        if in_session:
            # The app routes what follows the session folder (ASGI's root_path), its own paths.
            scope = {**scope, "root_path": self.session_path.rstrip("/")}
        if self.token and scope["path"] not in self.open_paths and not self._authorised(scope, in_session):
            if self.browser and self._query_token(scope):
                await self._login(scope, receive, send)
            else:
                await error_response(401, "unauthorized",
                                     "A valid bearer token is required: Authorization: Bearer TOKEN.")(scope, receive, send)
            return
        if self.csrf and self._needs_csrf(scope) and not self._csrf_matches(scope):
            await error_response(403, "csrf", "This request needs the page's CSRF token (X-CSRF-Token): "
                                 "send it from the viewer's own page.")(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and not length.strip().isdigit():
            await error_response(400, "invalid_request", BAD_LENGTH)(scope, receive, send)
            return
        if length is not None and int(length) > self.max_body_bytes:
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

    def _refusal(self, scope: dict) -> tuple[str, str] | None:
        """Why a request is refused before its token is looked at (kind, message), or None."""
        headers = dict(scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1")
        if host and not self._host_allowed(_hostname(host)):
            return ("forbidden_host", f"This server does not answer for {_hostname(host)!r}: it answers "
                    f"{'127.0.0.1 or localhost' if self._loopback_only() else 'its own address'} only; "
                    "set SQLCHORUS_TOKEN and listen on that address to serve other names.")
        origin = headers.get(b"origin", b"").decode("latin-1")
        if origin and not self.token and origin != "null" and not is_loopback(_hostname(urlsplit(origin).netloc)):
            return ("cross_site", f"Requests from pages at {origin} are refused: this server is for this machine only.")
        if scope.get("method") in UNSAFE_METHODS:
            site = headers.get(b"sec-fetch-site", b"").decode("latin-1").lower()
            if site and site not in ("same-origin", "none"):
                return ("cross_site", f"A {site} request cannot change anything here: send it from this "
                        "server's own pages.")
            if origin and (origin == "null" or urlsplit(origin).netloc.lower() != host.lower()):
                return ("cross_site", f"A request from {origin} cannot change anything here: send it from "
                        "this server's own pages.")
        return None

    def _loopback_only(self) -> bool:
        return not self.token or self.host is None or is_loopback(self.host)

    def _host_allowed(self, name: str) -> bool:
        if is_loopback(name):
            return True
        if self._loopback_only():
            return False
        return self.host.strip("[]").lower() in WILDCARDS or name.lower() == self.host.strip("[]").lower()

    def _authorised(self, scope: dict, in_session: bool) -> bool:
        for name, value in scope.get("headers") or []:
            if name == b"authorization":
                scheme, _, given = value.decode("latin-1").partition(" ")
                return scheme.lower() == "bearer" and self._matches(given.strip())
        if not in_session:
            return False
        for name, value in scope.get("headers") or []:
            if name == b"cookie":
                for part in value.decode("latin-1").split(";"):
                    key, _, given = part.strip().partition("=")
                    if key == self._cookie(scope) and hmac.compare_digest(given.encode(), self._session_value.encode()):
                        return True
        return False

    def _needs_csrf(self, scope: dict) -> bool:
        """A changing request a browser sent (it carries a cookie, an origin or fetch metadata);
        one with a bearer header, which no page elsewhere can add, needs no CSRF token."""
        if scope.get("method") not in UNSAFE_METHODS:
            return False
        names = {name for name, _ in scope.get("headers") or []}
        return b"authorization" not in names and bool(names & {b"cookie", b"origin", b"sec-fetch-site"})

    def _csrf_matches(self, scope: dict) -> bool:
        given = dict(scope.get("headers") or []).get(CSRF_HEADER.encode(), b"")
        return hmac.compare_digest(given, self.csrf.encode())

    def _matches(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())

    def _query_token(self, scope: dict) -> bool:
        given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]
        return scope["method"] == "GET" and bool(given) and self._matches(given)

    @staticmethod
    def _cookie(scope: dict) -> str:
        """The cookie's name, one per port, so that two servers' sessions do not overwrite each other."""
        server = scope.get("server") or ("", 0)
        return f"{COOKIE}_{server[1] or 0}"

    async def _login(self, scope: dict, receive: Any, send: Any) -> None:
        """Send a browser that brought the token on to its session folder, with the cookie."""
        cookie = f"{self._cookie(scope)}={self._session_value}; HttpOnly; SameSite=Strict; Path={self.session_path}"
        await _redirect(self.session_path, cookie)(scope, receive, send)

    async def _too_large(self, scope: dict, receive: Any, send: Any) -> None:
        await error_response(413, "payload_too_large",
                             f"The request body is over {self.max_body_bytes} bytes.")(scope, receive, send)


def _redirect(location: str, cookie: str | None = None) -> Any:
    from starlette.responses import RedirectResponse

    response = RedirectResponse(location, status_code=303, headers={"Cache-Control": "no-store",
                                                                   "Referrer-Policy": "no-referrer"})
    if cookie:
        response.raw_headers.append((b"set-cookie", cookie.encode("latin-1")))
    return response
