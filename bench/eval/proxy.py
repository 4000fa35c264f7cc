"""A pass-through proxy on 127.0.0.1 that times each chat request the kernel sends.

The Lily kernel talks to the proxy as to any OpenAI-compatible endpoint; every request is
forwarded unchanged to the real one and every response streamed back unchanged, as it
arrives. On the way the proxy notes, per request: which task sent it, the time to the first
token (the first streamed chunk carrying text, a tool call or reasoning), the whole time, the
usage the endpoint reported, the finish reason, and what the model said (text and tool-call
names), so a failure can be explained without scraping the notebook. Standard library only.

``defaults`` fills in chat-request fields the client leaves out (the DA-Agent peer's
sampling, bench/eval/peer.py); ``port`` fixes where it listens (0: a free one).
"""
from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DUMP = os.environ.get("LILY_EVAL_DUMP", "")
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host",
       "proxy-connection", "te", "trailer", "upgrade", "accept-encoding"}


@dataclass
class Exchange:
    """One request through the proxy."""
    task: str
    path: str
    started: float
    messages: int = 0
    tools_offered: int = 0
    stream: bool = False
    status: int = 0
    first_token: float | None = None   # seconds after the request started
    seconds: float = 0.0
    usage: dict[str, Any] | None = None
    finish: str | None = None
    text: str = ""
    calls: list[str] = field(default_factory=list)
    request_params: dict[str, Any] = field(default_factory=dict)


class Proxy:
    """``Proxy(upstream).start()``; ``url`` is the base URL to give the kernel."""

    def __init__(self, upstream: str, port: int = 0,
                 defaults: dict[str, Any] | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.defaults = defaults or {}
        self.task = ""
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one response per connection, ended by closing it

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                proxy._forward(self, None)

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                proxy._forward(self, self.rfile.read(size))

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> Proxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def of_task(self, task: str) -> list[Exchange]:
        with self._lock:
            return [e for e in self.exchanges if e.task == task and e.path.endswith("/completions")]

    # -- forwarding --------------------------------------------------------------------------
    def _forward(self, h: BaseHTTPRequestHandler, body: bytes | None) -> None:
        path = h.path[3:] if h.path.startswith("/v1/") else h.path
        ex = Exchange(self.task, path, time.monotonic())
        if body:
            try:
                req = json.loads(body)
                if self.defaults and path.endswith("/chat/completions"):
                    body = json.dumps({**self.defaults, **req}).encode()
                    req = {**self.defaults, **req}
                ex.messages = len(req.get("messages") or [])
                ex.tools_offered = len(req.get("tools") or [])
                ex.stream = bool(req.get("stream"))
                ex.request_params = {k: v for k, v in req.items()
                                     if k not in ("messages", "tools")}
            except (ValueError, AttributeError):
                pass
            if DUMP:  # LILY_EVAL_DUMP=DIR: each request body as sent, to read a failure
                os.makedirs(DUMP, exist_ok=True)
                with open(os.path.join(DUMP, f"{self.task}-{len(self.exchanges):03d}.json"),
                          "wb") as f:
                    f.write(body)
        with self._lock:
            self.exchanges.append(ex)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in HOP}
        upstream = urllib.request.Request(self.upstream + path, data=body, headers=headers,
                                          method=h.command)
        try:
            resp = urllib.request.urlopen(upstream, timeout=3600)
        except urllib.error.HTTPError as err:
            resp = err
        except OSError as err:
            ex.status = 502
            ex.seconds = time.monotonic() - ex.started
            h.send_error(502, f"eval proxy: upstream unreachable: {err}")
            return
        ex.status = resp.status if hasattr(resp, "status") else resp.code
        h.send_response(ex.status)
        for k, v in resp.headers.items():
            if k.lower() not in HOP:
                h.send_header(k, v)
        h.end_headers()
        try:
            if ex.stream and ex.status == 200:
                self._relay_stream(h, resp, ex)
            else:
                data = resp.read()
                h.wfile.write(data)
                self._note_whole(data, ex)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            ex.seconds = time.monotonic() - ex.started
            resp.close()

    def _relay_stream(self, h: BaseHTTPRequestHandler, resp: Any, ex: Exchange) -> None:
        names: dict[int, str] = {}
        for line in resp:
            h.wfile.write(line)
            h.wfile.flush()
            text = line.decode("utf-8", "replace").strip()
            if not text.startswith("data:") or text == "data: [DONE]":
                continue
            try:
                chunk = json.loads(text[5:])
            except ValueError:
                continue
            if chunk.get("usage"):
                ex.usage = chunk["usage"]
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                if ex.first_token is None and (delta.get("content") or delta.get("tool_calls")
                                               or delta.get("reasoning_content")):
                    ex.first_token = time.monotonic() - ex.started
                ex.text += delta.get("content") or ""
                for tc in delta.get("tool_calls") or []:
                    fn = tc.get("function") or {}
                    if fn.get("name"):
                        names[int(tc.get("index") or 0)] = fn["name"]
                if choice.get("finish_reason"):
                    ex.finish = choice["finish_reason"]
        ex.calls = [names[i] for i in sorted(names)]

    def _note_whole(self, data: bytes, ex: Exchange) -> None:
        try:
            body = json.loads(data)
        except ValueError:
            return
        if not isinstance(body, dict):
            return
        ex.usage = body.get("usage")
        ex.first_token = time.monotonic() - ex.started
        for choice in body.get("choices") or []:
            msg = choice.get("message") or {}
            ex.text += msg.get("content") or ""
            ex.calls += [(tc.get("function") or {}).get("name", "?")
                         for tc in msg.get("tool_calls") or []]
            ex.finish = choice.get("finish_reason")
