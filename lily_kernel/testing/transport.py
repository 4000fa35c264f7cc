"""The scripted server's HTTP side: a threaded listener on 127.0.0.1 and whole-body answers.

:class:`Listener` serves each request in a daemon thread, hands it to one ``answer``
callable, and keeps its open connections so a stop can cut them (a slow stream must not
keep a test waiting). :func:`send_bytes`, :func:`send_json` and :func:`send_error` write a
complete answer (``Connection: close``), or only half of it for a ``truncate`` turn.
Standard library only.
"""
from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from lily_kernel.testing.replies import error_body

__all__ = ["Handler", "Listener", "send_bytes", "send_error", "send_json"]


class Listener(ThreadingHTTPServer):
    """A threaded HTTP server giving every request to ``answer(handler)``."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], answer: Callable[[Handler], None]) -> None:
        self.answer = answer
        self._connections: set[socket.socket] = set()
        self._conn_lock = threading.Lock()
        super().__init__(address, Handler)

    def server_bind(self) -> None:
        """Bind without HTTPServer's ``socket.getfqdn()``, a reverse DNS lookup that can
        take seconds on some machines; the name is never used here."""
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), port

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Say nothing: clients that hang up (timeouts, interrupted streams, stop()) are
        normal here."""

    def opened(self, conn: socket.socket) -> None:
        """Keep ``conn`` until it closes, for :meth:`drop_connections`."""
        with self._conn_lock:
            self._connections.add(conn)

    def closed(self, conn: socket.socket) -> None:
        """Forget ``conn``."""
        with self._conn_lock:
            self._connections.discard(conn)

    def drop_connections(self) -> None:
        """Shut every open connection down (in-progress streams end abruptly)."""
        with self._conn_lock:
            conns = list(self._connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class Handler(BaseHTTPRequestHandler):
    """One connection's request: every method goes to the listener's ``answer``."""

    protocol_version = "HTTP/1.1"
    server_version = "LilyScriptedServer/1.0"
    sys_version = ""
    server: Listener

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing (the server's ``requests`` list is its record)."""

    def setup(self) -> None:
        """Open the connection and register it with the listener."""
        super().setup()
        self.server.opened(self.connection)

    def finish(self) -> None:
        """Close the connection (a client gone already is fine) and unregister it."""
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.closed(self.connection)

    def do_GET(self) -> None:
        """Answer any method through the listener's ``answer``; the connection then closes."""
        with contextlib.suppress(OSError):  # the client hung up, timed out or reset
            self.server.answer(self)
        self.close_connection = True

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def read_body(self) -> bytes:
        """The request body, with ``Content-Length`` or chunked transfer encoding."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            out = bytearray()
            while True:
                size_line = self.rfile.readline(65537)
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline(65537)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""


def send_bytes(h: Handler, status: int, data: bytes, content_type: str,
               extra: dict[str, Any] | None = None, truncate: bool = False) -> None:
    """Answer ``data`` whole (``truncate``: declare it whole, send half, close)."""
    h.send_response(status)
    h.send_header("Content-Type", content_type)
    h.send_header("Content-Length", str(len(data)))
    h.send_header("Connection", "close")
    for key, value in (extra or {}).items():
        h.send_header(key, value)
    h.end_headers()
    if h.command != "HEAD":
        h.wfile.write(data[: len(data) // 2] if truncate else data)
    h.wfile.flush()


def send_json(h: Handler, status: int, obj: Any, extra: dict[str, Any] | None = None,
              truncate: bool = False) -> None:
    """Answer ``obj`` as ``application/json``."""
    send_bytes(h, status, json.dumps(obj).encode("utf-8"), "application/json", extra, truncate)


def send_error(h: Handler, status: int, message: str | None,
               extra: dict[str, Any] | None = None, truncate: bool = False) -> None:
    """Answer HTTP ``status`` with OpenAI's error body (:func:`~.replies.error_body`)."""
    send_json(h, status, error_body(status, message), extra, truncate)
