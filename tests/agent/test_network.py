"""The network as the user configured it (issue 33 §4; docs/limits-and-secrets.md#network).

Every HTTP client Lily uses honours ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and
``NO_PROXY`` as httpx does by default, and a model request is never followed to another
origin. A real proxy on 127.0.0.1 (:class:`RecordingProxy`) forwards what it is sent and
records it; the endpoints are real servers on loopback. Nothing leaves the machine.
"""
from __future__ import annotations

import http.client
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from agent_support import World

from lily_kernel.agent import loop
from lily_kernel.errors import AgentError
from lily_kernel.testing.server import ScriptedServer
from lily_kernel.typed.activity import build_activity
from lily_kernel.typed.outbox import Outbox

pytestmark = pytest.mark.usefixtures("no_machine_model")
KEY = "sk-proxy-test-key-5e4d3c2b1a"
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY",
                   "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


class LocalServer:
    """A threading HTTP server on a free port of 127.0.0.1, serving until :meth:`close`."""

    server: ThreadingHTTPServer

    def serve(self, handler: type[BaseHTTPRequestHandler]) -> str:
        """Start serving with ``handler``; the server's URL (no path)."""
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class RecordingProxy(LocalServer):
    """A forwarding HTTP proxy on 127.0.0.1 that records each request it passes on
    (absolute-form request lines, as a client sends them to a proxy)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def relay(self) -> None:
                proxy.seen.append((self.command, self.path))
                target = urllib.parse.urlsplit(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("proxy-connection", "connection", "host")}
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=10)
                path = target.path + (f"?{target.query}" if target.query else "")
                conn.request(self.command, path, body=body or None, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_POST = relay

        self.url = self.serve(Handler)


class Redirector(LocalServer):
    """An endpoint that answers every POST with ``status``: a redirect to ``location``, or
    (no location) a plain 201, as an ActivityPub outbox accepts an activity."""

    def __init__(self, location: str | None, status: int = 307) -> None:
        self.hits = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                # (a session also asks a configured endpoint about itself: not counted)
                owner.hits += self.path.endswith("/chat/completions") or location is None
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.url = self.serve(Handler) + "/v1"


@pytest.fixture
def proxy() -> Iterator[RecordingProxy]:
    p = RecordingProxy()
    yield p
    p.close()


@pytest.fixture(autouse=True)
def _clean_proxy_env(monkeypatch):
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def world(tmp_path) -> World:
    return World(tmp_path)


def ask(world: World, server: ScriptedServer) -> str:
    server.add("through")
    session = world.session(server, OPENAI_API_KEY=KEY)
    return loop.run(session, "hi").text


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_a_model_request_goes_through_the_configured_proxy(world, server, proxy, monkeypatch,
                                                           variable):
    monkeypatch.setenv(variable, proxy.url)
    assert ask(world, server).startswith("through")
    assert ("POST", f"{server.url}/chat/completions") in proxy.seen
    assert len(server.chat_requests()) == 1


@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "*", "localhost,127.0.0.1"])
def test_no_proxy_sends_it_directly(world, server, proxy, monkeypatch, no_proxy):
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", no_proxy)
    assert ask(world, server).startswith("through")
    assert proxy.seen == [] and len(server.chat_requests()) == 1


def test_a_proxy_for_the_other_scheme_is_not_used(world, server, proxy, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)  # the endpoint is plain http on loopback
    assert ask(world, server).startswith("through")
    assert proxy.seen == []


def test_a_proxy_set_mid_session_is_used_from_the_next_request(world, server, proxy,
                                                               monkeypatch):
    session = world.session(server, OPENAI_API_KEY=KEY)
    server.add("direct", "proxied")
    loop.run(session, "one")
    assert proxy.seen == []
    monkeypatch.setenv("HTTP_PROXY", proxy.url)  # %env HTTP_PROXY=... in the notebook
    loop.run(session, "two")
    assert [url for _, url in proxy.seen] == [f"{server.url}/chat/completions"]


def test_the_outbox_goes_through_the_configured_proxy(tmp_path, proxy, monkeypatch):
    monkeypatch.setenv("ALL_PROXY", proxy.url)  # urllib alone would ignore ALL_PROXY
    receiver = Redirector(None, 201)
    try:
        activity = build_activity("Create", actor="https://a.example/u/a",
                                  to=["https://b.example/u/b"], content="hi")
        done = Outbox.for_workspace(tmp_path).deliver(activity, url=receiver.url, token="t0k")
        assert done.status == "delivered"
        assert ("POST", receiver.url) in proxy.seen and receiver.hits == 1
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        again = build_activity("Create", actor="https://a.example/u/a",
                               to=["https://b.example/u/b"], content="direct")
        Outbox.for_workspace(tmp_path).deliver(again, url=receiver.url, token="t0k")
        assert len(proxy.seen) == 1 and receiver.hits == 2
    finally:
        receiver.close()


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_to_another_origin_is_not_followed(world, server, status):
    """The endpoint sends the request elsewhere (another port is another origin): one
    Error: line naming both origins, and the other one receives nothing."""
    redirector = Redirector(f"{server.url}/chat/completions", status)
    try:
        session = world.session(None, OPENAI_API_KEY=KEY, OPENAI_BASE_URL=redirector.url)
        with pytest.raises(AgentError) as info:
            loop.run(session, "hi")
        line = info.value.line()
        here = redirector.url.rsplit("/", 1)[0]
        assert line.startswith("Error: ") and "\n" not in line
        there = server.url.rsplit("/", 1)[0]
        assert f"endpoint {here} redirected the request to {there}," in line
        assert "another origin" in line
        assert server.requests == [] and redirector.hits == 1  # not retried, not followed
    finally:
        redirector.close()


def test_a_redirect_with_a_malformed_location_is_refused_too(world):
    redirector = Redirector("http://[::1:bad/")
    try:
        session = world.session(None, OPENAI_API_KEY=KEY, OPENAI_BASE_URL=redirector.url)
        with pytest.raises(AgentError) as info:
            loop.run(session, "hi")
        assert "another origin" in info.value.line()
    finally:
        redirector.close()


def test_an_mcp_http_server_is_reached_through_the_configured_proxy(tmp_path, proxy,
                                                                    monkeypatch):
    """The MCP SDK's HTTP client is an httpx client with trust_env: HTTP_PROXY applies."""
    import os

    from mcp_http_support import mcp_http_server

    from lily_kernel.session.session import Session
    from lily_kernel.settings.model_settings import user_config_path
    with mcp_http_server("tok-123") as port:
        env = {"HOME": str(tmp_path / "home"), "SKILLS_USER_DIR": str(tmp_path / "u"),
               "PATH": os.environ.get("PATH", "")}
        (tmp_path / "u").mkdir()
        (tmp_path / "ws").mkdir()
        config = user_config_path(env)
        config.parent.mkdir(parents=True)
        config.write_text(f'[mcp.servers.remote]\nurl = "http://127.0.0.1:{port}/mcp"\n'
                          'headers = { Authorization = "Bearer tok-123" }\n')
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        session = Session(workspace=tmp_path / "ws", env=env, journal=False)
        try:
            session.mcp.sync(session.tools, wait=20)
            assert session.mcp.status()[0]["state"] == "ready", session.mcp.status()
            assert f"http://127.0.0.1:{port}/mcp" in [url for method, url in proxy.seen
                                                      if method == "POST"]
        finally:
            session.mcp.close()
