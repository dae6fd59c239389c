"""Servers refuse what another site, another local port or a renamed host sends them: Host checked
whatever the loopback spelling, changing requests only from the server's own pages (Origin,
Sec-Fetch-Site, the viewer's CSRF token), the viewer's cookie kept to its session folder, the
token gone from the address after login, and tokens too weak to guard a server refused."""

from __future__ import annotations

import http.server
import secrets
import subprocess
import threading
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from conftest import WAIT_S, wait_for
from servers import BIN, TOKEN, free_port, running, server_env
from sqlchorus.interfaces.http_guard import token_weakness
from sqlchorus.runs.demo import demo_db_path

QUESTION = "How many customers do we have?"


def _db(folder: Path) -> Path:
    db = folder / "shop.sqlite"
    db.write_bytes(demo_db_path().read_bytes())
    return db


def _model_args(folder: Path) -> list[str]:
    return ["--db", str(_db(folder)), "--model", "python:server_factories:mixed", "--no-cache",
            "--trace-dir", str(folder / "traces"), "--checkpoints", str(folder / "checkpoints.sqlite")]


class Elsewhere:
    """A page on another local port: it keeps the Cookie headers it is sent, and serves a form
    that posts itself to ``target`` as soon as it loads (what a hostile local page would do)."""

    def __init__(self, target: str):
        self.cookies: list[str] = []
        self.target = target
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.cookies.append(self.headers.get("Cookie") or "")
                body = (f'<form id="f" method="POST" enctype="text/plain" action="{owner.target}">'
                        '<input name=\'{"question": "x", "pad": "\' value=\'"}\'></form>'
                        '<script>document.getElementById("f").submit()</script>').encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.slow
def test_weak_tokens_are_refused_with_a_way_to_make_one(tmp_path):
    assert token_weakness(secrets.token_urlsafe(32)) is None
    assert token_weakness(secrets.token_hex(32)) is None
    for weak in ("a", "s3cret-token", secrets.token_hex(16), "x" * 80):
        assert token_weakness(weak), weak
    for command in (["serve"], ["mcp", "--transport", "http"], ["ui"]):
        refused = subprocess.run([str(BIN), *command, "--port", str(free_port())], capture_output=True, text=True,
                                 timeout=WAIT_S, env=server_env(tmp_path, SQLCHORUS_TOKEN="s3cret-token"), cwd=tmp_path)
        assert refused.returncode == 2, (command, refused.stderr)
        assert "too weak" in refused.stderr and "secrets.token_urlsafe(32)" in refused.stderr
        assert "Traceback" not in refused.stderr and "s3cret-token" not in refused.stderr


@pytest.mark.slow
def test_mcp_checks_host_whatever_the_loopback_spelling(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    with running(["mcp", "--transport", "http", "--host", "LOCALHOST", "--port", str(port), *_model_args(tmp_path)],
                 tmp_path, server_env(tmp_path), url):
        renamed = httpx.post(url, json=listing, headers={**accept, "Host": "evil.example"}, timeout=WAIT_S)
        assert renamed.status_code == 403 and renamed.json()["error"]["kind"] == "forbidden_host"
        posted = httpx.post(url, json=listing, headers={**accept, "Origin": "http://evil.example"}, timeout=WAIT_S)
        assert posted.status_code == 403
        other_port = httpx.post(url, json=listing, headers={**accept, "Origin": f"http://127.0.0.1:{free_port()}"},
                                timeout=WAIT_S)
        assert other_port.status_code == 403 and other_port.json()["error"]["kind"] == "cross_site"
        for spelling in (f"LOCALHOST:{port}", f"127.0.0.5:{port}", f"localhost:{port}"):
            answered = httpx.post(url, json=listing, headers={**accept, "Host": spelling}, timeout=WAIT_S)
            assert answered.status_code not in (401, 403), (spelling, answered.text)


@pytest.mark.slow
def test_rest_takes_changes_only_from_its_own_origin(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with running(["serve", "--port", str(port), *_model_args(tmp_path)], tmp_path, server_env(tmp_path),
                 base + "/v1/health"):
        for headers in ({"Origin": f"http://127.0.0.1:{free_port()}"}, {"Origin": "null"},
                        {"Sec-Fetch-Site": "same-site"}, {"Sec-Fetch-Site": "cross-site"}):
            refused = httpx.post(base + "/v1/runs", json={"question": QUESTION}, headers=headers, timeout=WAIT_S)
            assert refused.status_code == 403 and refused.json()["error"]["kind"] == "cross_site", headers
        own = httpx.post(base + "/v1/ask", json={"question": QUESTION},
                         headers={"Origin": base, "Sec-Fetch-Site": "same-origin"}, timeout=WAIT_S)
        assert own.status_code == 200 and own.json()["rows"] == [[62]]
        # Reading is not changing: a GET from elsewhere is answered (its page cannot read it).
        assert httpx.get(base + "/v1/databases", headers={"Sec-Fetch-Site": "same-site"}).status_code == 200


@pytest.mark.slow
def test_the_viewers_session_keeps_its_cookie_and_takes_no_cross_site_change(browser, tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    args = ["ui", "--port", str(port), *_model_args(tmp_path), "--evals-dir", str(tmp_path / "evals")]
    with running(args, tmp_path, server_env(tmp_path, SQLCHORUS_TOKEN=TOKEN), base + "/api/runs", headers=bearer):
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.goto(f"{base}/?token={TOKEN}")
        page.wait_for_selector("#runs")
        # Logged in, the address no longer holds the token, and the page lives in its folder.
        folder = urlsplit(page.url).path
        assert TOKEN not in page.url and folder.startswith("/s/") and folder.endswith("/")
        assert [h for h in context.cookies() if h["name"].startswith("sqlchorus_token")][0]["path"] == folder
        # The page's own changes go through (they carry the CSRF token) ...
        started = page.evaluate("async (q) => (await api('api/debug', {method: 'POST', body: JSON.stringify({question: q})})).run_id",
                                QUESTION)
        assert started
        # ... a request without it, even from the page's own origin, does not.
        bare = page.evaluate("async () => (await fetch('api/debug', {method: 'POST', headers: {'content-type': "
                             "'application/json'}, body: JSON.stringify({question: 'x'})})).status")
        assert bare == 403
        runs = lambda: len(httpx.get(base + "/api/runs", headers=bearer, timeout=WAIT_S).json()["runs"])  # noqa: E731
        before = runs()

        # A page on another local port is sent no cookie of the viewer's, and its form, even one
        # that knows the session folder, changes nothing.
        elsewhere = Elsewhere(f"{base}{folder}api/live")
        try:
            attack = context.new_page()
            attack.goto(elsewhere.url)
            wait_for(lambda: "error" in attack.content(), "the viewer's answer to the posted form")
            assert "cross_site" in attack.content() or "csrf" in attack.content()
            assert elsewhere.cookies and not any("sqlchorus" in c for c in elsewhere.cookies)
        finally:
            elsewhere.close()
        assert runs() == before

        # The request the viewer refuses, sent outright with the cookie: another origin.
        cookie = "; ".join(f"{c['name']}={c['value']}" for c in context.cookies())
        for headers in ({"Origin": "http://evil.example"}, {"Origin": f"http://127.0.0.1:{free_port()}"},
                        {"Sec-Fetch-Site": "same-site"}):
            refused = httpx.post(f"{base}{folder}api/live", json={"question": QUESTION},
                                 headers={"Cookie": cookie, **headers}, timeout=WAIT_S)
            assert refused.status_code == 403, headers
        # With the cookie but outside the folder, or without it inside, nothing is answered.
        assert httpx.get(base + "/api/runs", headers={"Cookie": cookie}).status_code == 401
        assert httpx.get(f"{base}{folder}api/runs").status_code == 401
        context.close()
