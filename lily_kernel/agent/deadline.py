"""The total deadline of one model request, enforced under the openai client.

The ``openai`` client's ``timeout`` applies to each socket operation, so an endpoint that
drips one byte at a time, or streams forever, is never timed out. :class:`DeadlineTransport`
is the HTTP transport Lily gives that client: while a :func:`Deadline` is running, every
attempt (including the client's own retries) gets only the time left as its timeouts, an
attempt that could only be retried after the deadline (its backoff is longer than the time
left) or starts after it is answered at once with a synthetic ``408`` that the client does
not retry, every received chunk checks the clock, and a timer (the process's shared one,
``agent/timers.py``) shuts the socket
of a stream still open at the deadline (which wakes a blocked read). See
docs/limits-and-secrets.md#deadline.

Giving a client its own transport turns off httpx's reading of the proxy variables, so
this transport does what httpx does by default itself: ``HTTP_PROXY``, ``HTTPS_PROXY``,
``ALL_PROXY`` and ``NO_PROXY`` (read by httpx's own ``get_environment_proxies``, matched by
its ``URLPattern``, most specific first) choose a proxy or none for each request. And it
keeps a model request at its origin: a redirect to another scheme, host or port is not
handed to the client to follow (it would re-send the conversation and the key there), but
answered as a non-retried error naming both origins (docs/limits-and-secrets.md#network).
"""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any, cast

import httpx2
from httpx2._utils import URLPattern, get_environment_proxies

from lily_kernel.agent.timers import TIMERS

EXPIRED_HEADER = "x-lily-deadline"
#: Set on a redirect Lily did not follow: the origin the endpoint sent the request to.
REDIRECT_HEADER = "x-lily-redirect"
#: The longest line of a response body Lily reads (an SSE reader buffers a line whole);
#: one streamed delta is far smaller. docs/limits-and-secrets.md#caps.
MAX_LINE_BYTES = 8 * 1024 * 1024


class DeadlineExceeded(httpx2.ReadTimeout):
    """Raised inside the transport when the request's deadline has passed."""


def env_proxies() -> dict[str, str | None]:
    """The proxy map httpx would build from this process's ``*_PROXY`` variables now."""
    return get_environment_proxies()


def origin(url: httpx2.URL) -> str:
    """``scheme://host:port`` of ``url`` (the port as the scheme implies when absent)."""
    port = url.port or {"http": 80, "https": 443}.get(url.scheme)
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{url.scheme}://{host}:{port}"


class DeadlineTransport(httpx2.BaseTransport):
    """An ``httpx2`` transport that knows the current request's deadline (monotonic), sends
    each request directly or through the proxy the environment names for its URL, and
    answers a cross-origin redirect without letting the client follow it.

    ``proxies``: httpx's proxy map (``{"https://": url, "all://*.corp": None}``); by
    default the process environment's, read as httpx reads it (:func:`env_proxies`)."""

    def __init__(self, proxies: Mapping[str, str | None] | None = None, **kwargs: Any) -> None:
        self._direct = httpx2.HTTPTransport(**kwargs)
        self._mounts: dict[URLPattern, httpx2.HTTPTransport | None] = {}
        if proxies is None:
            proxies = get_environment_proxies()
        for pattern, url in proxies.items():
            self._mounts[URLPattern(pattern)] = (
                None if url is None else httpx2.HTTPTransport(proxy=httpx2.Proxy(url), **kwargs))
        self._mounts = dict(sorted(self._mounts.items()))  # most specific first, as httpx
        self.deadline: float | None = None
        self.expired = False
        self.attempts = 0  # attempts under the current deadline (the client's backoff grows)
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()

    def route(self, url: httpx2.URL) -> httpx2.HTTPTransport:
        """The transport for ``url``: a proxy's, or the direct one (NO_PROXY, no proxy)."""
        for pattern, transport in self._mounts.items():
            if pattern.matches(url):
                return self._direct if transport is None else transport
        return self._direct

    def close(self) -> None:
        """Close the direct transport and every proxy's."""
        for transport in {self._direct, *(t for t in self._mounts.values() if t is not None)}:
            transport.close()

    def _send(self, request: httpx2.Request) -> httpx2.Response:
        response = self.route(request.url).handle_request(request)
        location = response.headers.get("location")
        if location and 300 <= response.status_code < 400:
            try:
                target = request.url.join(location)
            except (httpx2.InvalidURL, ValueError):
                target = None
            if target is None or origin(target) != origin(request.url):
                # Not followed: no Location left, a header naming where it pointed; the
                # client raises it as an HTTP error it does not retry.
                response.headers.pop("location")
                response.headers[REDIRECT_HEADER] = (origin(target) if target is not None
                                                     else location[:200])
                response.headers["x-should-retry"] = "false"
        return response

    def remaining(self) -> float | None:
        """Seconds left before the deadline (negative once past), or None without one."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def _expired(self, request: httpx2.Request) -> httpx2.Response:
        """The answer to an attempt that cannot finish in time: a 408 the client won't retry."""
        self.expired = True
        return httpx2.Response(408, headers={"x-should-retry": "false", EXPIRED_HEADER: "1"},
                               content=b'{"error": {"message": "deadline"}}', request=request)

    def _backoff(self, response: httpx2.Response | None) -> float:
        """The longest the openai client may sleep before its next attempt."""
        if response is not None:
            for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
                try:
                    value = float(response.headers.get(name, "")) * scale
                except ValueError:
                    continue
                if 0 < value <= 60:
                    return value
        return min(0.5 * 2.0 ** self.attempts, 8.0)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send ``request`` within the deadline; its body is read through the caps."""
        # No compression: a small compressed body could hold gigabytes, decoded before any
        # cap of Lily's could see it (docs/limits-and-secrets.md#caps).
        request.headers["Accept-Encoding"] = "identity"
        left = self.remaining()
        if left is None:
            response = self._send(request)
            response.stream = _Bounded(cast(httpx2.SyncByteStream, response.stream), self, None, _encoding(response))
            return response
        if left <= 0:
            return self._expired(request)
        request.extensions = {**request.extensions, "timeout": {
            "connect": left, "read": left, "write": left, "pool": left}}
        try:
            response = self._send(request)
        except httpx2.TransportError:
            # A retry would only start after a backoff sleep past the deadline: end now.
            if self._backoff(None) >= (self.remaining() or 0):
                return self._expired(request)
            raise
        finally:
            self.attempts += 1
        retryable = response.status_code in (408, 409, 429) or response.status_code >= 500
        if retryable and self._backoff(response) >= (self.remaining() or 0):
            response.close()
            return self._expired(request)
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            with self._lock:
                self._sockets.add(sock)
        response.stream = _Bounded(cast(httpx2.SyncByteStream, response.stream), self, sock, _encoding(response))
        return response

    def forget(self, sock: socket.socket | None) -> None:
        """Stop tracking ``sock`` (its stream ended)."""
        with self._lock:
            self._sockets.discard(sock)

    def cut(self) -> None:
        """At the deadline: end every stream still open (a blocked read returns at once)."""
        self.expired = True
        with self._lock:
            socks, self._sockets = list(self._sockets), set()
        for sock in socks:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class StreamRefused(httpx2.ReadError):
    """The response body broke one of Lily's caps; reading stopped there."""


def _encoding(response: httpx2.Response) -> str:
    """The response's content coding, lower case ('' or 'identity' when none)."""
    return response.headers.get("content-encoding", "").strip().lower()


class _Bounded(httpx2.SyncByteStream):
    """A response body that stops at the deadline, chunk by chunk, and before any line grows
    past :data:`MAX_LINE_BYTES` (the SSE reader above buffers a whole line)."""

    def __init__(self, inner: httpx2.SyncByteStream, owner: DeadlineTransport,
                 sock: socket.socket | None, encoding: str = "") -> None:
        self.inner, self.owner, self.sock = inner, owner, sock
        self.encoding = encoding

    def __iter__(self) -> Iterator[bytes]:
        if self.encoding not in ("", "identity"):
            raise StreamRefused(f"the endpoint sent a {self.encoding[:40]}-compressed response "
                                "though Lily asked for none (Accept-Encoding: identity); it "
                                "was not decompressed")
        run = 0  # bytes since the last line end
        for chunk in self.inner:
            left = self.owner.remaining()
            if left is not None and left <= 0:
                self.owner.expired = True
                raise DeadlineExceeded("the request's deadline passed")
            end = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
            run = len(chunk) - end - 1 if end >= 0 else run + len(chunk)
            if run > MAX_LINE_BYTES:
                raise StreamRefused(f"a line of the response was longer than "
                                    f"{MAX_LINE_BYTES:,} bytes; Lily stopped reading it")
            yield chunk

    def close(self) -> None:
        self.owner.forget(self.sock)
        self.inner.close()


@contextmanager
def deadline(transport: DeadlineTransport | None, seconds: float) -> Iterator[None]:
    """Run one model request under a total deadline of ``seconds``."""
    if transport is None:
        yield
        return
    transport.deadline = time.monotonic() + seconds
    transport.expired = False
    transport.attempts = 0
    timer = TIMERS.add(seconds, transport.cut)  # cut returns None: runs once
    try:
        yield
    finally:
        TIMERS.cancel(timer)
        transport.deadline = None
