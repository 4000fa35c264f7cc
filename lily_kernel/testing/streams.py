"""The scripted server's streamed answers: server-sent events over chunked encoding, with
the faults a turn can script.

:func:`stream_events` sends a stream's chunk objects as ``data:`` events (slowly, truncated,
endless, or one byte at a time); :func:`stream_raw` sends a turn's ``raw`` payload as the
event stream; :func:`gzip_line` makes the compression bomb of a ``gzip_line`` turn. The turn
keys: docs/testing.md#turns. Standard library only.
"""
from __future__ import annotations

import functools
import json
import math
import time
import zlib
from collections.abc import Callable
from typing import Any

from lily_kernel.testing.transport import Handler

__all__ = ["Wait", "gzip_line", "stream_events", "stream_raw"]

Wait = Callable[[float], bool]
"""Sleep this many seconds; False when the server is stopping (then hang up)."""

_BIG_PIECE = "x" * 65536  # one content delta of an endless or huge stream
_DONE = b"data: [DONE]\n\n"
_END = b"0\r\n\r\n"  # the last chunk of a chunked body


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode("utf-8") + b"\n\n"


def _open(h: Handler, turn: dict[str, Any], wait: Wait) -> tuple[Callable[[bytes], None], float]:
    """Send the stream's headers; return its chunk sender and the time it must end by."""
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream; charset=utf-8")
    h.send_header("Cache-Control", "no-cache")
    h.send_header("Transfer-Encoding", "chunked")
    h.send_header("Connection", "close")
    h.end_headers()
    drip = float(turn.get("drip", 0))
    until = time.monotonic() + float(turn.get("max_duration", 20))

    def send(data: bytes) -> None:
        if not drip:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()
            return
        for i in range(len(data)):  # one byte per chunk, a pause between them
            if time.monotonic() > until or not wait(drip):
                raise ConnectionAbortedError("drip: max_duration reached")
            h.wfile.write(b"1\r\n%s\r\n" % data[i:i + 1])
            h.wfile.flush()

    return send, until


def _end(h: Handler) -> None:
    h.wfile.write(_END)
    h.wfile.flush()


def stream_raw(h: Handler, turn: dict[str, Any], wait: Wait) -> None:
    """Send the turn's ``raw`` text as the event stream, verbatim (``truncate``: its first
    half, then hang up)."""
    send, _ = _open(h, turn, wait)
    payload = turn["raw"].encode("utf-8")
    if turn.get("truncate"):
        send(payload[: len(payload) // 2])
        return
    if payload:
        send(payload)
    h.wfile.write(_END)


def stream_events(h: Handler, turn: dict[str, Any], body: list[dict[str, Any]],
                  closing: list[dict[str, Any]], wait: Wait) -> None:
    """Send ``body`` then ``closing`` chunk objects as events, then ``data: [DONE]``,
    pausing ``chunk_delay`` between events (``truncate``: about the first half of the body,
    then hang up; ``endless``/``stream_chars``: see :func:`_stream_big`)."""
    send, until = _open(h, turn, wait)
    if turn.get("endless") or "stream_chars" in turn:
        return _stream_big(h, turn, body, closing, send, until, wait)
    events = [_event(e) for e in body]
    if turn.get("truncate"):
        events = events[: max(1, math.ceil(len(events) / 2))]
    else:
        events += [_event(e) for e in closing]
        events.append(_DONE)
    delay = float(turn.get("chunk_delay", 0))
    for i, event in enumerate(events):
        if i and not wait(delay):
            return  # stopping: hang up mid-stream
        send(event)
    if not turn.get("truncate"):
        _end(h)


def _stream_big(h: Handler, turn: dict[str, Any], body: list[dict[str, Any]],
                closing: list[dict[str, Any]], send: Callable[[bytes], None], until: float,
                wait: Wait) -> None:
    """An endless stream, or one of ``stream_chars`` characters, made as it is sent."""
    for obj in body:
        send(_event(obj))
    template = dict(body[0])
    left = None if turn.get("endless") else int(turn["stream_chars"])
    while left is None or left > 0:
        if time.monotonic() > until or not wait(float(turn.get("chunk_delay", 0))):
            return  # max_duration (or stopping): hang up
        piece = _BIG_PIECE if left is None else _BIG_PIECE[:left]
        if left is not None:
            left -= len(piece)
        template["choices"] = [{"index": 0, "delta": {"content": piece},
                                "logprobs": None, "finish_reason": None}]
        send(_event(template))
    for obj in closing:
        send(_event(obj))
    send(_DONE)
    _end(h)


@functools.cache  # the same bomb for every turn that asks for it: made once, 0.3 MB kept
def gzip_line(size: int) -> bytes:
    """A gzip body holding one SSE line of ``size`` bytes and no line end (a compression
    bomb: 300 MB of it compress to about 0.3 MB), made without holding it uncompressed."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [packer.compress(b"data: ")]
    block = b"x" * (1 << 20)
    left = size
    while left > 0:
        out.append(packer.compress(block[:left]))
        left -= len(block)
    out.append(packer.flush())
    return b"".join(out)
