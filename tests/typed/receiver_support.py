"""An ActivityPub outbox on 127.0.0.1 for the dispatch tests: a real ``http.server`` in a thread.

It records every POST and, like a well-behaved ActivityPub server, accepts an activity
once per Idempotency-Key: a replay gets a 2xx but is not accepted again. No mocks, nothing
beyond loopback (``keep_loopback_direct`` keeps proxies out of the way).
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                   "ALL_PROXY")


def keep_loopback_direct(monkeypatch) -> None:
    """urllib honours *_proxy variables; keep loopback requests on loopback."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


class Receiver:
    """A scripted outbox. ``script[i]`` drives the i-th request; afterwards 201.

    A step is an HTTP status, or a dict: ``status``, ``sleep`` (seconds before answering;
    the request is recorded and, on a 2xx, accepted first: acted on, answered late),
    ``body``, ``headers``, ``echo_auth`` (answer with the Authorization header it got).
    """

    def __init__(self, script=(), path: str = "/users/alice/outbox") -> None:
        self.script = [{"status": s} if isinstance(s, int) else s for s in script]
        self.requests: list[dict] = []
        self.accepted: dict[str, bytes] = {}   # Idempotency-Key -> body, first 2xx only
        self._inflight = 0
        self._cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._cond:
                    index = len(receiver.requests)
                    receiver.requests.append({"path": self.path, "headers": dict(self.headers),
                                              "body": body})
                    step = receiver.script[index] if index < len(receiver.script) else {}
                    status = step.get("status", 201)
                    if 200 <= status < 300:
                        receiver.accepted.setdefault(self.headers.get("Idempotency-Key"), body)
                    receiver._inflight += 1
                try:
                    time.sleep(step.get("sleep", 0))
                    self.answer(index, step, status)
                finally:
                    with receiver._cond:
                        receiver._inflight -= 1
                        receiver._cond.notify_all()

            def answer(self, index: int, step: dict, status: int) -> None:
                payload = step.get("body", b"")
                if step.get("echo_auth"):
                    payload = json.dumps({"error": "bad request from "
                                          + str(self.headers.get("Authorization"))}).encode()
                try:
                    self.send_response(status)
                    for name, value in step.get("headers", {}).items():
                        self.send_header(name, value)
                    if 200 <= status < 300:
                        self.send_header("Location", f"http://127.0.0.1/objects/{index}")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up (timeout): the server still processed it

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"
        self._thread = threading.Thread(target=self.server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def wait_idle(self, timeout: float = 5.0) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self._inflight == 0, timeout), "receiver still busy"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def receivers(**options) -> Iterator[Callable[..., Receiver]]:
    """``make(*script)`` starts a :class:`Receiver` (``options`` passed on); all close on exit."""
    made: list[Receiver] = []

    def make(*script) -> Receiver:
        made.append(Receiver(script, **options))
        return made[-1]

    try:
        yield make
    finally:
        for r in made:
            r.close()
