"""The servers' access checks, in process (no server is started): the guard's Host, Origin,
Sec-Fetch-Site, token, CSRF and body-size checks (tests/fixtures/rules/access.txt), a browser's
login and session cookie, which addresses are loopback, which tokens are too weak, when a server
must have a token, the REST API's bound on runs running and queued, and the unit of PostgreSQL's
statement timeout. Each case changes its outcome when its check changes."""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections.abc import Iterable
from typing import Any

import pytest

from conftest import FIXTURES, load_pairs
from sqlchorus.interfaces.http_guard import (
    Guard,
    UnsafeBindingError,
    WeakTokenError,
    is_loopback,
    server_token,
    token_weakness,
)

CASES = load_pairs(FIXTURES / "rules" / "access.txt")
TOKEN = secrets.token_urlsafe(32)
CSRF = secrets.token_urlsafe(16)
MAX_BODY = 64


async def echo(scope: dict, receive: Any, send: Any) -> None:
    """The app behind the guard: says what reached it (method, path, root path, body length)."""
    if scope["type"] == "lifespan":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    answer = json.dumps({"method": scope["method"], "path": scope["path"], "root_path": scope.get("root_path", ""),
                         "body": len(body)}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": answer})


def guard(kind: str) -> Guard:
    return {
        "loopback": lambda: Guard(echo, None, MAX_BODY, host="127.0.0.1"),
        "token": lambda: Guard(echo, TOKEN, MAX_BODY, host="0.0.0.0", open_paths=frozenset({"/open"})),
        "token-loopback": lambda: Guard(echo, TOKEN, MAX_BODY, host="127.0.0.1"),
        "token-named": lambda: Guard(echo, TOKEN, MAX_BODY, host="10.1.2.3"),
        "open-named": lambda: Guard(echo, None, MAX_BODY, host="10.1.2.3"),
        "token-any": lambda: Guard(echo, TOKEN, MAX_BODY),
        "token-v6": lambda: Guard(echo, TOKEN, MAX_BODY, host="[FD00::1]"),
        "token-box": lambda: Guard(echo, TOKEN, MAX_BODY, host="BOX"),
        "csrf": lambda: Guard(echo, None, MAX_BODY, host="127.0.0.1", csrf=CSRF),
        "browser": lambda: Guard(echo, TOKEN, MAX_BODY, host="127.0.0.1", browser=True, csrf=CSRF),
    }[kind]()


def call(app: Guard, method: str, target: str, headers: Iterable[tuple[str, str]] = (),
         chunks: Iterable[bytes | None] = (b"",), *, host: bool = True, **scope_changes: Any,
         ) -> tuple[int, dict[str, str], bytes]:
    """One request through ``app`` as an ASGI server would send it: status, headers, body. A
    chunk of None is a message without a body; ``host=False`` sends no Host header;
    ``scope_changes`` replace (or, as None, remove) keys of the scope."""
    path, _, query = target.partition("?")
    given = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    if host and not any(k == b"host" for k, _ in given):
        given.insert(0, (b"host", b"localhost:8000"))
    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "root_path": "",
             "query_string": query.encode(), "headers": given, "server": ("127.0.0.1", 8000),
             "client": ("127.0.0.1", 50000), "scheme": "http", "http_version": "1.1"}
    scope.update(scope_changes)
    scope = {k: v for k, v in scope.items() if v is not None}
    parts = list(chunks)
    messages = [{"type": "http.request", **({} if b is None else {"body": b}), "more_body": i < len(parts) - 1}
                for i, b in enumerate(parts)]
    sent: list[dict] = []

    async def receive() -> dict:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body


def request_of(text: str) -> tuple[str, str, list[tuple[str, str]]]:
    lines = text.replace("{CSRF}", CSRF).replace("{TOKEN}", TOKEN).splitlines()
    method, target = lines[0].split()
    return method, target, [tuple(part.strip() if i == 0 else part[1:] for i, part in enumerate(line.split(":", 1)))
                            for line in lines[1:]]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_who_may_call(case):
    method, target, headers = request_of(case.input)
    length = next((v for k, v in headers if k.lower() == "content-length"), None)
    chunks = [b"x" * int(length)] if length and length.isdigit() else [b""]
    status, sent_headers, body = call(guard(case.meta["guard"]), method, target, headers, chunks)
    expected = case.expected.split()
    assert status == int(expected[0]), body
    if status == 200:
        assert json.loads(body)["method"] == method
    else:
        error = json.loads(body)["error"]
        assert error["kind"] == expected[1] and error["message"]
        assert ("www-authenticate" in sent_headers) is (status == 401)


def test_the_app_gets_the_whole_body_however_it_came():
    status, _, body = call(guard("loopback"), "POST", "/echo", chunks=[b"a" * 30, b"b" * 30, b"c" * 4])
    assert status == 200 and json.loads(body)["body"] == MAX_BODY


def test_a_body_sent_in_parts_over_the_bound_is_refused():
    status, _, body = call(guard("loopback"), "POST", "/echo", chunks=[b"a" * 40, b"b" * 25])
    assert status == 413 and json.loads(body)["error"] == {
        "kind": "payload_too_large", "message": f"The request body is over {MAX_BODY} bytes."}


def test_a_client_gone_before_its_body_ended_gets_nothing():
    app = guard("loopback")
    scope = {"type": "http", "method": "POST", "path": "/echo", "root_path": "", "query_string": b"",
             "headers": [(b"host", b"localhost:8000")], "server": ("127.0.0.1", 8000)}
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    assert sent == []


def test_other_scopes_pass_through_whole():
    seen = []

    async def app(scope, receive, send):
        seen.append((scope, receive, send))

    async def receive():
        return {}

    async def send(message):
        pass

    lifespan = {"type": "lifespan"}
    asyncio.run(Guard(app, TOKEN, MAX_BODY, host="127.0.0.1")(lifespan, receive, send))
    assert seen == [(lifespan, receive, send)]


def websocket(app: Guard, headers: list[tuple[bytes, bytes]]) -> list[Any]:
    """What the app behind ``app`` was given for a WebSocket handshake, or what was sent back."""
    seen: list[Any] = []

    async def behind(scope, receive, send):
        seen.append(("app", scope["path"], receive, send))

    async def receive():
        return {"type": "websocket.connect"}

    async def send(message):
        seen.append(("sent", message.get("status")))

    guard_of = Guard(behind, app.token, MAX_BODY, host=app.host)
    scope = {"type": "websocket", "path": "/ws", "root_path": "", "query_string": b"", "headers": headers,
             "server": ("127.0.0.1", 8000)}
    asyncio.run(guard_of(scope, receive, send))
    return [s if s[0] == "sent" else (s[0], s[1], s[2] is receive, s[3] is send) for s in seen]


def test_a_websocket_is_guarded_as_a_request_is():
    assert websocket(guard("token-loopback"), [(b"host", b"localhost:8000"),
                                               (b"authorization", f"Bearer {TOKEN}".encode())]) == [("app", "/ws", True, True)]
    assert websocket(guard("token-loopback"), [(b"host", b"localhost:8000")])[0] == ("sent", 401)
    assert websocket(guard("loopback"), [(b"host", b"evil.example")])[0] == ("sent", 403)


REFUSALS = [
    ("token", "GET", "/echo", [], 401,
     "A valid bearer token is required: Authorization: Bearer TOKEN."),
    ("loopback", "GET", "/echo", [("Host", "evil.example")], 403,
     "This server does not answer for 'evil.example': it answers 127.0.0.1 or localhost only; set "
     "SQLCHORUS_TOKEN and listen on that address to serve other names."),
    ("token-named", "GET", "/echo", [("Host", "other.example")], 403,
     "This server does not answer for 'other.example': it answers its own address only; set "
     "SQLCHORUS_TOKEN and listen on that address to serve other names."),
    ("loopback", "GET", "/echo", [("Origin", "http://evil.example")], 403,
     "Requests from pages at http://evil.example are refused: this server is for this machine only."),
    ("loopback", "POST", "/echo", [("Sec-Fetch-Site", "cross-site")], 403,
     "A cross-site request cannot change anything here: send it from this server's own pages."),
    ("loopback", "POST", "/echo", [("Origin", "http://localhost:9")], 403,
     "A request from http://localhost:9 cannot change anything here: send it from this server's own pages."),
    ("csrf", "POST", "/echo", [("Origin", "http://localhost:8000")], 403,
     "This request needs the page's CSRF token (X-CSRF-Token): send it from the viewer's own page."),
    ("loopback", "POST", "/echo", [("Content-Length", "x")], 400, "The request's Content-Length is not a number of bytes."),
    ("loopback", "POST", "/echo", [("Content-Length", "65")], 413, f"The request body is over {MAX_BODY} bytes."),
]


@pytest.mark.parametrize("kind, method, target, headers, status, message", REFUSALS,
                         ids=[f"{r[4]} {r[5][:30]}" for r in REFUSALS])
def test_each_refusal_says_why(kind, method, target, headers, status, message):
    got, _, body = call(guard(kind), method, target, headers)
    assert got == status and json.loads(body)["error"]["message"] == message


def test_changing_methods_have_their_bodies_bounded_and_others_pass_them_on():
    for method in ("POST", "PUT", "PATCH"):
        assert call(guard("loopback"), method, "/echo", chunks=[b"a" * 40, b"b" * 25])[0] == 413, method
    status, _, body = call(guard("loopback"), "DELETE", "/echo", chunks=[b"a" * 40, b"b" * 25])
    assert status == 200 and json.loads(body)["body"] == 65  # not read by the guard: streamed on


def test_a_message_without_a_body_adds_nothing():
    status, _, body = call(guard("loopback"), "POST", "/echo", chunks=[b"abc", None, b"de"])
    assert status == 200 and json.loads(body)["body"] == 5


def test_after_the_body_the_app_hears_what_the_client_sends_next():
    heard: list[dict] = []

    async def app(scope, receive, send):
        heard.append(await receive())
        heard.append(await receive())
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    assert call(Guard(app, None, MAX_BODY, host="127.0.0.1"), "POST", "/x", chunks=[b"ab", b"c"])[0] == 204
    assert heard == [{"type": "http.request", "body": b"abc", "more_body": False}, {"type": "http.disconnect"}]


def test_a_request_without_a_host_header_is_judged_by_the_rest():
    assert call(guard("loopback"), "GET", "/echo", host=False)[0] == 200
    assert call(guard("loopback"), "POST", "/echo", [("Origin", "null")], host=False)[0] == 403


def test_a_request_without_a_query_string_logs_nobody_in():
    assert call(guard("browser"), "GET", "/", query_string=None)[0] == 401


# -- a browser's session -----------------------------------------------------------------------


def login(app: Guard) -> tuple[str, str, str]:
    """The session folder, the cookie's name and value a browser gets for its token."""
    status, headers, _ = call(app, "GET", f"/?token={TOKEN}")
    assert status == 303
    folder = headers["location"]
    cookie = headers["set-cookie"]
    name, value = cookie.split(";", 1)[0].split("=", 1)
    assert folder.startswith("/s/") and folder.endswith("/") and TOKEN not in folder + cookie
    assert f"Path={folder}" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert headers["cache-control"] == "no-store" and headers["referrer-policy"] == "no-referrer"
    return folder, name, value


def test_a_browser_logs_in_once_and_its_cookie_counts_in_its_folder_only():
    app = guard("browser")
    folder, name, value = login(app)
    assert name == "sqlchorus_token_8000"  # one cookie per port
    status, _, body = call(app, "GET", folder + "echo", [("Cookie", f"other=1; {name}={value}")])
    assert status == 200 and json.loads(body)["root_path"] == folder.rstrip("/")
    for cookie in (f"{name}=nope", f"{name}=", f"x{name}={value}", f"sqlchorus_token_9000={value}", f"{name}={TOKEN}"):
        assert call(app, "GET", folder + "echo", [("Cookie", cookie)])[0] == 401, cookie
    assert call(app, "GET", "/echo", [("Cookie", f"{name}={value}")])[0] == 401  # outside its folder
    assert call(app, "GET", "/s/other/echo", [("Cookie", f"{name}={value}")])[0] == 401
    assert call(app, "GET", "/echo", [("Authorization", f"Bearer {TOKEN}")])[0] == 200
    # The folder without its slash is sent on to the folder.
    status, headers, _ = call(app, "GET", folder.rstrip("/"))
    assert status == 303 and headers["location"] == folder


def test_a_cookie_is_found_among_others_however_they_are_joined():
    app = guard("browser")
    folder, name, value = login(app)
    assert call(app, "GET", folder + "echo", [("Cookie", f"{name}={value};other=1")])[0] == 200
    assert call(app, "GET", folder + "echo", [("Cookie", f"first=0;{name}={value}")])[0] == 200


def test_a_server_without_a_known_port_names_its_cookie_for_port_0():
    app = guard("browser")
    status, headers, _ = call(app, "GET", f"/?token={TOKEN}", server=None)
    assert status == 303 and headers["set-cookie"].startswith("sqlchorus_token_0=")


def test_a_session_folder_is_24_random_characters_kept_whole(monkeypatch):
    assert len(login(guard("browser"))[0]) == len("/s/") + 24 + len("/")
    import sqlchorus.interfaces.http_guard as http_guard

    monkeypatch.setattr(http_guard.secrets, "token_urlsafe", lambda n: "A" * (4 * n // 3 - 1) + "X")
    app = guard("browser")
    folder, name, value = login(app)
    status, _, body = call(app, "GET", folder + "echo", [("Cookie", f"{name}={value}")])
    assert status == 200 and json.loads(body)["root_path"] == folder.rstrip("/") and folder.endswith("X/")


def test_each_server_has_its_own_session_folder_and_cookie_value():
    first, second = guard("browser"), guard("browser")
    (folder_a, _, value_a), (folder_b, _, value_b) = login(first), login(second)
    assert folder_a != folder_b and value_a != value_b


@pytest.mark.parametrize("method, target", [("GET", "/?token=nope"), ("GET", "/?token="), ("POST", f"/?token={TOKEN}"),
                                            ("GET", "/?other=1")])
def test_a_login_needs_the_right_token_in_a_get(method, target):
    status, _, body = call(guard("browser"), method, target)
    assert status == 401 and json.loads(body)["error"]["kind"] == "unauthorized"


def test_without_browser_sessions_a_token_in_the_address_logs_nobody_in():
    assert call(guard("token-loopback"), "GET", f"/?token={TOKEN}")[0] == 401


def test_a_browsers_change_in_its_session_needs_the_csrf_token():
    app = guard("browser")
    folder, name, value = login(app)
    cookie = ("Cookie", f"{name}={value}")
    assert call(app, "POST", folder + "echo", [cookie])[0] == 403
    assert call(app, "POST", folder + "echo", [cookie, ("X-CSRF-Token", CSRF)])[0] == 200


# -- addresses and tokens ----------------------------------------------------------------------


@pytest.mark.parametrize("host, loopback", [
    ("localhost", True), (" LocalHost ", True), ("127.0.0.1", True), ("127.9.9.9", True), ("::1", True),
    ("[::1]", True), ("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("example.com", False),
    ("127.0.0.1.example.com", False), ("", False), ("localhost.example", False), ("X127.0.0.1X", False),
])
def test_which_hosts_are_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_a_server_beyond_loopback_needs_a_token():
    assert server_token("127.0.0.1", {}) is None
    assert server_token("localhost", {"SQLCHORUS_TOKEN": "  "}) is None
    assert server_token("0.0.0.0", {"SQLCHORUS_TOKEN": TOKEN}) == TOKEN
    assert server_token("127.0.0.1", {"SQLCHORUS_TOKEN": f" {TOKEN}\n"}) == TOKEN  # on loopback too
    for host in ("0.0.0.0", "10.1.2.3", "::", "example.com"):
        with pytest.raises(UnsafeBindingError, match=f"Listening on {host} lets other machines in"):
            server_token(host, {})
    with pytest.raises(WeakTokenError, match="SQLCHORUS_TOKEN is too weak"):
        server_token("127.0.0.1", {"SQLCHORUS_TOKEN": "s3cret-token"})


@pytest.mark.parametrize("token, weak", [
    (secrets.token_urlsafe(32), False),
    (secrets.token_hex(32), False),
    ("0123456789abcdef" * 4, False),           # 64 hex digits: 256 bits
    (("0123456789abcdef" * 4)[:62], False),  # 248 bits: within the margin
    (("0123456789abcdef" * 4)[:61], True),    # 244 bits
    (("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")[:42], False),  # 252 bits
    (("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")[:41], True),   # 246 bits
    ("!" + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLM", False),  # printable ASCII: 40 characters of 6.6 bits
    ("!" + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ", True),      # 37: 243 bits
    ("ab" * 40, True),                           # long, but two characters over and over
    ("abcdefg" * 12, True),                      # seven different characters
    ("abcdefgh" * 12, False),                    # eight
    ("a", True),
])
def test_which_tokens_are_too_weak(token, weak):
    assert (token_weakness(token) is not None) is weak


@pytest.mark.parametrize("token, weak", [
    ("X" + ("0123456789abcdef" * 3)[:41], False),   # not hex: 42 characters of 6 bits
    (("0123456789ABCDEF" * 3)[:42], True),          # hex in capitals: 42 characters of 4 bits
    (("0123456789ABCDEF" * 4)[:64], False),
])
def test_hex_is_either_case_and_nothing_else(token, weak):
    assert (token_weakness(token) is not None) is weak


def test_the_refusals_of_a_token_say_how_to_make_one():
    with pytest.raises(WeakTokenError) as refused:
        server_token("127.0.0.1", {"SQLCHORUS_TOKEN": "s3cret-token"})
    assert str(refused.value) == ("SQLCHORUS_TOKEN is too weak to guard a server: 12 characters carry about 72 bits, "
                                  "under 256. Make one of 32 random bytes: python -c 'import secrets; "
                                  "print(secrets.token_urlsafe(32))'")
    with pytest.raises(UnsafeBindingError) as unsafe:
        server_token("0.0.0.0", {})
    assert str(unsafe.value) == ("Listening on 0.0.0.0 lets other machines in: set a token in SQLCHORUS_TOKEN first "
                                 "(clients then send 'Authorization: Bearer TOKEN'), or listen on 127.0.0.1.")


def test_a_weak_token_says_why():
    assert token_weakness("0123456789abcdef" * 2) == "32 characters carry about 128 bits, under 256"
    assert token_weakness("ab" * 40) == "it repeats a few characters (2 different)"


# -- the REST API's bound on runs --------------------------------------------------------------


def test_the_rest_api_takes_as_many_runs_as_its_bound_then_says_when_to_come_back(tmp_path):
    from fastapi.testclient import TestClient

    from sqlchorus.config.settings import Settings
    from sqlchorus.interfaces.rest import create_app
    from sqlchorus.runs.service import RunService
    from sqlchorus.testing import ScriptedChatModel

    released = threading.Event()

    def held(messages: Any) -> str:
        released.wait()  # no run ends while the test asks: the bound counts runs running and queued
        return "SELECT 1"

    service = RunService(settings=Settings(trace_dir=str(tmp_path / "traces"), checkpoints=str(tmp_path / "c.sqlite"),
                                           max_pending_runs=2, model_retries=0, cache=False),
                         model=ScriptedChatModel(held), workers=1)
    try:
        client = TestClient(create_app(service), base_url="http://127.0.0.1:8000")
        assert client.get("/v1/health").json()["max_pending"] == 2
        taken = [client.post("/v1/runs", json={"question": f"How many customers? ({n})"}) for n in range(2)]
        assert [r.status_code for r in taken] == [202, 202]
        for path in ("/v1/runs", "/v1/ask"):
            refused = client.post(path, json={"question": "How many customers?"})
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["kind"] == "queue_full"
            assert refused.headers["Retry-After"] == "2"
    finally:
        released.set()
        service.close()


def test_the_bound_on_runs_is_per_worker_unless_set(tmp_path):
    from sqlchorus.config.settings import Settings
    from sqlchorus.runs.service import PENDING_PER_WORKER, RunService

    from sqlchorus.testing import ScriptedChatModel

    settings = Settings(trace_dir=str(tmp_path / "traces"), checkpoints=str(tmp_path / "c.sqlite"))
    for workers, expected in ((1, PENDING_PER_WORKER), (3, 3 * PENDING_PER_WORKER), (0, PENDING_PER_WORKER)):
        service = RunService(settings=settings, workers=workers, model=ScriptedChatModel(["SELECT 1"]))
        try:
            assert service.max_pending == expected
        finally:
            service.close()


# -- PostgreSQL's statement timeout ------------------------------------------------------------


@pytest.mark.parametrize("seconds, sql", [
    (2.5, "SET LOCAL statement_timeout = 2500"),
    (30, "SET LOCAL statement_timeout = 30000"),
    (0.0004, "SET LOCAL statement_timeout = 1"),  # never 0, which PostgreSQL reads as no limit
])
def test_each_statement_is_timed_in_milliseconds(seconds, sql):
    from sqlchorus.tools.engines import postgres

    class Connection:
        def __init__(self) -> None:
            self.executed: list[str] = []

        def execute(self, text: str, *args: Any) -> None:
            self.executed.append(text)

    conn = Connection()
    postgres._set_timeout(conn, seconds)
    assert conn.executed == [sql]


def test_a_sessions_own_timeouts_are_in_milliseconds(monkeypatch):
    psycopg = pytest.importorskip("psycopg")
    from sqlchorus.tools.engines.postgres import PostgresDatabase

    asked: list[dict[str, Any]] = []

    def connect(url: str, **kwargs: Any) -> Any:
        asked.append(kwargs)
        raise psycopg.OperationalError("connection refused")

    monkeypatch.setattr(psycopg, "connect", connect)
    with pytest.raises(Exception, match="connection refused"):
        PostgresDatabase("postgresql://reader@localhost/shop", timeout_s=2.5)
    options = asked[0]["options"].split()
    assert "statement_timeout=2500" in options and "lock_timeout=2500" in options
    assert "default_transaction_read_only=on" in options
