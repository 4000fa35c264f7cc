"""A scripted, OpenAI-compatible Chat Completions server for tests and demos.

:class:`ScriptedServer` listens on ``127.0.0.1`` (a free port by default) and
answers ``POST /v1/chat/completions`` from a *script* instead of a model, over
real HTTP, so Lily's agent loop, the real ``openai`` client and its retries,
timeouts and streaming are all exercised exactly as with a hosted model. It
uses the standard library only and never touches the network beyond the
address it listens on.

Usage::

    import openai
    from lily_kernel.testing.server import ScriptedServer

    script = [
        {"tool_calls": [{"name": "load_skill", "arguments": {"name": "plan_compiler"}}]},
        {"expect": {"contains": "plan_compiler"}, "content": "# Plan\\n\\n## Objective\\n..."},
    ]
    with ScriptedServer(script) as server:
        client = openai.OpenAI(base_url=server.url, api_key="test")
        first = client.chat.completions.create(model="m", messages=[...], tools=[...])
        ...                                   # run the tool, send its result back
        assert server.remaining() == 0        # every scripted turn was used
        print(server.chat_requests()[-1]["messages"])  # what the model was sent

A *script* is one of:

* a list of turn dicts, consumed in order, one per chat-completions request
  (error turns and ``expect`` mismatches use up their turn too); when it runs
  out the server answers HTTP 500 ``scripted server: script exhausted (N
  requests so far)``, N counting chat-completions requests including this one;
* a callable ``responder(request_json) -> turn`` called (under a lock, one at a
  time) with the parsed request body, e.g. :func:`demo_responder`;
* ``None``: an empty list; add turns later with :meth:`ScriptedServer.add`.

A turn is a dict; every key is optional (a plain ``str`` is short for
``{"content": str}``):

``content`` (str)
    The assistant text.
``tool_calls`` (list)
    ``[{"name": str, "arguments": dict | str, "id": str}]``. Dict arguments are
    sent as ``json.dumps(arguments)``; a str is sent verbatim (so a test can
    send invalid JSON); missing arguments are ``"{}"``. ``id`` defaults to
    ``"call_<n>"``, n counting tool calls over the server's life (from 1).
``finish_reason`` (str)
    Default ``"tool_calls"`` when there are tool calls, else ``"stop"``.
``usage`` (dict)
    Token usage to report instead of a rough estimate. A stream sends its usage
    chunk only when the request asks (``stream_options.include_usage``) *and*
    the turn scripts ``usage``; otherwise it behaves like a server that ignores
    ``stream_options`` (non-streaming answers always carry an estimate).
``chunks`` (int), ``chunk_delay`` (float seconds)
    Streaming only: split ``content`` into this many content deltas (default:
    one per word), and wait between events (for slow streams, e.g. interrupts).
``delay`` (float seconds)
    Sleep before answering at all (to provoke client timeouts).
``status`` (int), ``retry_after`` (float seconds), ``error_message`` (str)
    Answer with this HTTP status and an OpenAI-style error body
    ``{"error": {"message", "type", "param", "code"}}``; ``retry_after`` adds a
    ``Retry-After`` header; ``error_message`` replaces the default message.
``raw`` (str)
    Send this exact body: non-streaming as ``application/json`` (status 200, or
    ``status`` if given); for a streaming request as the ``text/event-stream``
    payload, verbatim. For malformed-response tests.
``truncate`` (bool)
    Streaming: send about the first half of the events, then close the
    connection mid-body (no ``data: [DONE]``, no finish chunk; the client sees
    an incomplete chunked body). Non-streaming: declare the full
    ``Content-Length``, send half the body and close.
``expect`` (dict)
    ``{"contains": str}``: the text of the request's *last* message (whatever
    its role; text parts joined) must contain this string, or the server
    answers HTTP 400 saying what it expected and what it got. The turn is used
    up either way; nothing else is consumed. For golden tests of skills.

A turn with an unknown key is refused (``ValueError`` from the constructor or
:meth:`~ScriptedServer.add`; HTTP 500 if a responder returns one), so a typo
never silently yields an empty answer.

Responses are shaped like OpenAI's: ``chat.completion`` objects, or for
``"stream": true`` a ``text/event-stream`` of ``chat.completion.chunk``
objects (a role delta, content deltas, for each tool call a delta with its id,
type, name and empty arguments followed by the arguments in 2-3 pieces, a
finish chunk, a usage chunk if ``stream_options.include_usage`` and the turn
scripts ``usage``, then
``data: [DONE]``), sent with chunked encoding and ``Connection: close``.
``GET /v1/models`` lists the server's ``model``. Any other path is a 404 with
an OpenAI-style error body. The ``/v1`` prefix is optional on both endpoints.

:func:`demo_responder` is a small rule-based stand-in model for ``make demo``
when no API key is set; everything it says starts with ``[scripted model] ``.
"""
from __future__ import annotations

import json
import math
import re
import socket
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Union

__all__ = ["ScriptedServer", "demo_responder", "message_text", "TURN_KEYS"]

Turn = Union[dict, str]
Responder = Callable[[dict], Turn]

TURN_KEYS = frozenset({
    "content", "tool_calls", "finish_reason", "usage", "chunks", "chunk_delay", "delay",
    "status", "retry_after", "error_message", "raw", "truncate", "expect",
})
_TOOL_CALL_KEYS = frozenset({"name", "arguments", "id"})
_EXPECT_KEYS = frozenset({"contains"})

# OpenAI's error "type" and "code" for the statuses tests usually script.
_ERROR_KINDS = {
    400: ("invalid_request_error", None),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("invalid_request_error", "not_found"),
    408: ("timeout_error", None),
    409: ("conflict_error", None),
    422: ("invalid_request_error", None),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    500: ("server_error", None),
    502: ("server_error", "bad_gateway"),
    503: ("server_error", "service_unavailable"),
    504: ("server_error", "gateway_timeout"),
}


class _TurnError(Exception):
    """A turn (or the request) cannot be answered normally; carries the HTTP answer."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _validate_turn(turn: Any, where: str) -> dict:
    """Return ``turn`` as a dict, or raise ValueError naming what is wrong."""
    if isinstance(turn, str):
        return {"content": turn}
    if not isinstance(turn, dict):
        raise ValueError(f"{where}: a turn must be a dict (or a str), not {type(turn).__name__}")
    unknown = sorted(set(turn) - TURN_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown turn key(s) {', '.join(map(repr, unknown))}; "
                         f"known keys: {', '.join(sorted(TURN_KEYS))}")
    if "content" in turn and turn["content"] is not None and not isinstance(turn["content"], str):
        raise ValueError(f"{where}: 'content' must be a str")
    calls = turn.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            raise ValueError(f"{where}: 'tool_calls' must be a list of dicts")
        for i, call in enumerate(calls):
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise ValueError(f"{where}: tool_calls[{i}] must be a dict with a str 'name'")
            bad = sorted(set(call) - _TOOL_CALL_KEYS)
            if bad:
                raise ValueError(f"{where}: tool_calls[{i}] has unknown key(s) "
                                 f"{', '.join(map(repr, bad))}; known: arguments, id, name")
            args = call.get("arguments", {})
            if not isinstance(args, (dict, str)):
                raise ValueError(f"{where}: tool_calls[{i}]['arguments'] must be a dict or a str")
    expect = turn.get("expect")
    if expect is not None:
        if not isinstance(expect, dict) or set(expect) - _EXPECT_KEYS \
                or not isinstance(expect.get("contains"), str):
            raise ValueError(f"{where}: 'expect' must be {{'contains': str}}")
    if "status" in turn and not (isinstance(turn["status"], int) and 100 <= turn["status"] <= 599):
        raise ValueError(f"{where}: 'status' must be an HTTP status code (int)")
    if "raw" in turn and not isinstance(turn["raw"], str):
        raise ValueError(f"{where}: 'raw' must be a str")
    if "chunks" in turn and not (isinstance(turn["chunks"], int) and turn["chunks"] >= 1):
        raise ValueError(f"{where}: 'chunks' must be an int >= 1")
    for key in ("delay", "chunk_delay", "retry_after"):
        if key in turn and not (isinstance(turn[key], (int, float)) and turn[key] >= 0):
            raise ValueError(f"{where}: '{key}' must be a number of seconds >= 0")
    return turn


def message_text(message: Any) -> str:
    """The text of a chat message: its str content, or its text parts joined."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return ""


def _split_even(text: str, n: int) -> list[str]:
    """``text`` in ``n`` contiguous pieces of near-equal length (fewer if it is shorter)."""
    n = max(1, min(n, len(text)))
    size, extra = divmod(len(text), n)
    pieces, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


def _content_pieces(content: str, chunks: int | None) -> list[str]:
    if not content:
        return []
    if chunks is not None:
        return _split_even(content, chunks)
    return re.findall(r"\s*\S+\s*", content) or [content]


def _format_seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address, handler, owner: "ScriptedServer"):
        self.owner = owner
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS lookup
        # that can take seconds on some machines; the name is never used here.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), port

    def handle_error(self, request, client_address) -> None:
        # Clients that hang up (timeouts, interrupted streams, stop()) are normal here.
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "LilyScriptedServer/1.0"
    sys_version = ""
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def setup(self) -> None:
        super().setup()
        self.server.owner._connection_opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.owner._connection_closed(self.connection)

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _dispatch(self) -> None:
        try:
            self.server.owner._handle(self)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, socket.timeout):
            pass
        except OSError:
            pass
        self.close_connection = True

    def read_body(self) -> bytes:
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


class ScriptedServer:
    """An OpenAI-compatible Chat Completions endpoint that answers from a script.

    ``script`` is a list of turn dicts (one per chat-completions request, in
    order), a callable ``responder(request_json) -> turn``, or None (an empty
    list). See the module docstring for the turn keys. Use as a context
    manager, or call :meth:`start` and :meth:`stop`.

    Attributes:
        url: ``"http://127.0.0.1:<port>/v1"``, the ``base_url`` for the openai
            client (valid after :meth:`start`).
        requests: every request received, in order, as dicts with ``method``,
            ``path``, ``headers`` (Authorization shown as ``"<redacted>"``) and
            ``json`` (the parsed body, or None).
        model: the model name listed by ``GET /v1/models`` (responses echo the
            request's ``model``).
        reject_params: top-level request parameters this server refuses, like a
            server that does not know them: such a request gets HTTP 400
            ``Unrecognized request argument supplied: <name>`` and uses no turn.
    """

    def __init__(self, script: list[Turn] | Responder | None = None, *,
                 host: str = "127.0.0.1", port: int = 0, model: str = "scripted-model",
                 reject_params: Iterable[str] = ()):
        self.host = host
        self.reject_params = frozenset(reject_params)
        self.port = port
        self.model = model
        self.requests: list[dict] = []
        self._responder: Responder | None = None
        self._turns: list[dict] = []
        self._next = 0
        if callable(script):
            self._responder = script
        elif script is not None:
            self._turns = [_validate_turn(t, f"turn {i + 1}") for i, t in enumerate(script)]
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._conn_lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._chat_count = 0
        self._call_count = 0
        self._completion_count = 0

    # -- lifecycle -------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL to give the openai client: ``http://<host>:<port>/v1``."""
        if self._httpd is None:
            raise RuntimeError("ScriptedServer.url is known once the server is started; "
                               "call start() or use it as a context manager")
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> "ScriptedServer":
        """Bind and serve in a daemon thread; returns self."""
        if self._httpd is not None:
            raise RuntimeError("ScriptedServer is already started")
        self._stopping.clear()
        self._httpd = _HTTPServer((self.host, self.port), _Handler, self)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name=f"ScriptedServer:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and drop open connections (in-progress streams end abruptly).

        Returns promptly even during a slow stream; safe to call twice.
        """
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        with self._conn_lock:
            conns = list(self._connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None

    def __enter__(self) -> "ScriptedServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f"{self.host}:{self.port}" if self._httpd else "stopped"
        kind = "responder" if self._responder else f"{self.remaining()} turn(s) left"
        return f"<ScriptedServer {where}, {kind}, {len(self.requests)} request(s)>"

    # -- script ----------------------------------------------------------

    def add(self, *turns: Turn) -> None:
        """Append turns to a list script (ValueError on an unknown turn key)."""
        if self._responder is not None:
            raise TypeError("add() needs a list script; this server uses a responder callable")
        with self._lock:
            start = len(self._turns)
            self._turns.extend(_validate_turn(t, f"turn {start + i + 1}")
                               for i, t in enumerate(turns))

    def remaining(self) -> int:
        """Unconsumed turns of a list script (always 0 with a responder callable)."""
        with self._lock:
            return len(self._turns) - self._next

    def chat_requests(self) -> list[dict]:
        """The parsed bodies of the ``POST /chat/completions`` requests, in order."""
        return [r["json"] for r in list(self.requests)
                if r["method"] == "POST" and _route(r["path"]) == "chat"]

    # -- serving ---------------------------------------------------------

    def _connection_opened(self, conn: socket.socket) -> None:
        with self._conn_lock:
            self._connections.add(conn)

    def _connection_closed(self, conn: socket.socket) -> None:
        with self._conn_lock:
            self._connections.discard(conn)

    def _wait(self, seconds: float) -> bool:
        """Sleep; False if the server is stopping (the caller should hang up)."""
        if seconds > 0:
            return not self._stopping.wait(seconds)
        return not self._stopping.is_set()

    def _handle(self, h: _Handler) -> None:
        body = h.read_body()
        parsed: Any = None
        bad_json = False
        if body:
            try:
                parsed = json.loads(body)
            except ValueError:
                bad_json = True
        headers = {k: ("<redacted>" if k.lower() == "authorization" else v)
                   for k, v in h.headers.items()}
        with self._lock:
            self.requests.append({"method": h.command, "path": h.path,
                                  "headers": headers, "json": parsed})
        route = _route(h.path)
        if route == "models" and h.command == "GET":
            return self._send_json(h, 200, {"object": "list", "data": [
                {"id": self.model, "object": "model", "created": 0, "owned_by": "scripted"}]})
        if route != "chat" or h.command != "POST":
            return self._send_error(h, 404, f"Invalid URL ({h.command} {h.path.split('?')[0]})")
        if bad_json or not isinstance(parsed, dict):
            return self._send_error(h, 400, "scripted server: the request body is not a JSON object")
        if not isinstance(parsed.get("messages"), list):
            return self._send_error(h, 400, "scripted server: the request has no 'messages' list")
        refused = sorted(self.reject_params & set(parsed))
        if refused:
            return self._send_error(h, 400, f"Unrecognized request argument supplied: {refused[0]}")
        try:
            index, turn = self._take_turn(parsed)
        except _TurnError as err:
            return self._send_error(h, err.status, err.message)
        self._answer(h, parsed, index, turn)

    def _take_turn(self, request: dict) -> tuple[int, dict]:
        with self._lock:
            self._chat_count += 1
            count = self._chat_count
            if self._responder is not None:
                try:
                    turn = self._responder(request)
                except Exception as exc:  # report the responder's bug to the client
                    raise _TurnError(500, f"scripted server: the responder raised "
                                          f"{type(exc).__name__}: {exc}") from None
                try:
                    return count, _validate_turn(turn, "the responder's turn")
                except ValueError as exc:
                    raise _TurnError(500, f"scripted server: {exc}") from None
            if self._next >= len(self._turns):
                raise _TurnError(500, f"scripted server: script exhausted "
                                      f"({count} requests so far)")
            self._next += 1
            return self._next, self._turns[self._next - 1]

    def _answer(self, h: _Handler, request: dict, index: int, turn: dict) -> None:
        stream = bool(request.get("stream"))
        if not self._wait(float(turn.get("delay", 0))):
            return
        expect = turn.get("expect")
        if expect is not None:
            messages = request["messages"]
            last = messages[-1] if messages else None
            text = message_text(last)
            if expect["contains"] not in text:
                role = last.get("role", "?") if isinstance(last, dict) else "no"
                shown = text if len(text) <= 500 else text[:500] + "…"
                return self._send_error(
                    h, 400, f"scripted server: turn {index} expected the last message to "
                            f"contain {expect['contains']!r}, but got the {role} message "
                            f"{shown!r}")
        if "status" in turn:
            extra = {}
            if "retry_after" in turn:
                extra["Retry-After"] = _format_seconds(turn["retry_after"])
            if "raw" in turn:
                return self._send_bytes(h, turn["status"], turn["raw"].encode("utf-8"),
                                        "application/json", extra, bool(turn.get("truncate")))
            return self._send_error(h, turn["status"], turn.get("error_message"), extra,
                                    truncate=bool(turn.get("truncate")))
        if stream:
            return self._stream(h, request, turn)
        if "raw" in turn:
            return self._send_bytes(h, 200, turn["raw"].encode("utf-8"), "application/json",
                                    truncate=bool(turn.get("truncate")))
        return self._send_json(h, 200, self._completion(request, turn),
                               truncate=bool(turn.get("truncate")))

    # -- response bodies -------------------------------------------------

    def _tool_calls(self, turn: dict) -> list[dict]:
        calls = []
        for call in turn.get("tool_calls") or []:
            args = call.get("arguments", {})
            if not isinstance(args, str):
                args = json.dumps(args)
            with self._lock:
                self._call_count += 1
                n = self._call_count
            calls.append({"id": call.get("id") or f"call_{n}", "type": "function",
                          "function": {"name": call["name"], "arguments": args}})
        return calls

    def _usage(self, request: dict, turn: dict, content: str | None, calls: list[dict]) -> dict:
        if isinstance(turn.get("usage"), dict):
            usage = dict(turn["usage"])
            usage.setdefault("total_tokens", int(usage.get("prompt_tokens", 0))
                             + int(usage.get("completion_tokens", 0)))
            return usage
        prompt = max(1, len(json.dumps(request.get("messages", []))) // 4)
        out_chars = len(content or "") + sum(len(c["function"]["arguments"]) + 8 for c in calls)
        completion = max(1, math.ceil(out_chars / 4))
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}

    def _ids(self) -> tuple[str, int]:
        with self._lock:
            self._completion_count += 1
            n = self._completion_count
        return f"chatcmpl-scripted-{n}", int(time.time())

    def _completion(self, request: dict, turn: dict) -> dict:
        calls = self._tool_calls(turn)
        content = turn.get("content")
        if content is None and not calls:
            content = ""
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        if calls:
            message["tool_calls"] = calls
        cid, created = self._ids()
        return {
            "id": cid, "object": "chat.completion", "created": created,
            "model": request.get("model") or self.model, "system_fingerprint": None,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": turn.get("finish_reason")
                         or ("tool_calls" if calls else "stop")}],
            "usage": self._usage(request, turn, content, calls),
        }

    def _stream_events(self, request: dict, turn: dict) -> tuple[list[dict], list[dict]]:
        """The chunk objects of a stream: (body events, closing events)."""
        calls = self._tool_calls(turn)
        content = turn.get("content")
        cid, created = self._ids()
        model = request.get("model") or self.model
        options = request.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))

        def chunk(delta: dict | None, finish: str | None = None) -> dict:
            obj: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk",
                                   "created": created, "model": model,
                                   "system_fingerprint": None,
                                   "choices": [] if delta is None else [
                                       {"index": 0, "delta": delta, "logprobs": None,
                                        "finish_reason": finish}]}
            if include_usage:
                obj["usage"] = None
            return obj

        body = [chunk({"role": "assistant"})]
        body += [chunk({"content": piece})
                 for piece in _content_pieces(content or "", turn.get("chunks"))]
        for i, call in enumerate(calls):
            fn = call["function"]
            body.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                               "function": {"name": fn["name"],
                                                            "arguments": ""}}]}))
            args = fn["arguments"]
            if args:
                for piece in _split_even(args, 3 if len(args) >= 3 else len(args)):
                    body.append(chunk({"tool_calls": [{"index": i,
                                                       "function": {"arguments": piece}}]}))
        finish = turn.get("finish_reason") or ("tool_calls" if calls else "stop")
        closing = [chunk({}, finish)]
        if include_usage and isinstance(turn.get("usage"), dict):
            last = chunk(None)
            last["usage"] = self._usage(request, turn, content, calls)
            closing.append(last)
        return body, closing

    def _stream(self, h: _Handler, request: dict, turn: dict) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream; charset=utf-8")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Transfer-Encoding", "chunked")
        h.send_header("Connection", "close")
        h.end_headers()
        delay = float(turn.get("chunk_delay", 0))

        def send(data: bytes) -> None:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()

        if "raw" in turn:
            payload = turn["raw"].encode("utf-8")
            if turn.get("truncate"):
                send(payload[: len(payload) // 2])
                return
            if payload:
                send(payload)
            h.wfile.write(b"0\r\n\r\n")
            return
        body, closing = self._stream_events(request, turn)
        events = [b"data: " + json.dumps(e).encode("utf-8") + b"\n\n" for e in body]
        if turn.get("truncate"):
            events = events[: max(1, math.ceil(len(events) / 2))]
        else:
            events += [b"data: " + json.dumps(e).encode("utf-8") + b"\n\n" for e in closing]
            events.append(b"data: [DONE]\n\n")
        for i, event in enumerate(events):
            if i and not self._wait(delay):
                return  # stopping: hang up mid-stream
            send(event)
        if not turn.get("truncate"):
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()

    def _send_bytes(self, h: _Handler, status: int, data: bytes, content_type: str,
                    extra: dict | None = None, truncate: bool = False) -> None:
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

    def _send_json(self, h: _Handler, status: int, obj: Any, extra: dict | None = None,
                   truncate: bool = False) -> None:
        self._send_bytes(h, status, json.dumps(obj).encode("utf-8"), "application/json",
                         extra, truncate)

    def _send_error(self, h: _Handler, status: int, message: str | None,
                    extra: dict | None = None, truncate: bool = False) -> None:
        kind, code = _ERROR_KINDS.get(status, ("server_error" if status >= 500
                                               else "invalid_request_error", None))
        if message is None:
            message = f"scripted server: scripted HTTP {status} error"
        self._send_json(h, status, {"error": {"message": message, "type": kind,
                                              "param": None, "code": code}}, extra, truncate)


def _route(path: str) -> str | None:
    bare = path.split("?", 1)[0].rstrip("/")
    if bare.startswith("/v1/"):
        bare = bare[3:]
    return {"/chat/completions": "chat", "/models": "models"}.get(bare)


# -- the demo's stand-in model ----------------------------------------------

_DEMO_PREFIX = "[scripted model] "
_SEPARATOR_ROW = re.compile(r"^\|[\s:\-|]+\|$")


def _offered_tools(request: dict) -> set[str]:
    names = set()
    for tool in request.get("tools") or []:
        if isinstance(tool, dict):
            fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
            if isinstance(fn.get("name"), str):
                names.add(fn["name"])
    return names


def _answered_call(messages: list, tool_message: dict) -> tuple[str | None, dict]:
    """The name and arguments of the tool call a tool message answers."""
    wanted = tool_message.get("tool_call_id")
    fallback: tuple[str | None, dict] = (None, {})
    for msg in reversed(messages):
        if not isinstance(msg, dict) or msg.get("role") != "assistant":
            continue
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = {}
            found = (fn.get("name"), args if isinstance(args, dict) else {})
            if call.get("id") == wanted:
                return found
            if fallback[0] is None:
                fallback = found
    return fallback


def _count_table_rows(text: str) -> int:
    rows = [line.strip() for line in text.splitlines() if line.strip().startswith("|")]
    separators = [i for i, row in enumerate(rows) if _SEPARATOR_ROW.match(row)]
    if separators:  # a header row precedes each separator row
        skip = set(separators) | {i - 1 for i in separators if i > 0}
        rows = [row for i, row in enumerate(rows) if i not in skip]
    return len(rows)


def demo_responder(request: dict) -> dict:
    """A rule-based stand-in "model" for ``make demo`` when no API key is set.

    Use it as ``ScriptedServer(demo_responder)``. It is clearly labelled: every
    text it returns starts with ``"[scripted model] "``. Rules, first match wins:

    1. The last message is a tool result: after ``scan_todos``, summarise
       ``I found N markers.`` (N = the table rows of the result); after
       ``list_variables``, repeat what it listed; after ``run_python``, say
       what the code printed; after any
       other tool (e.g. ``load_skill``), answer a short Markdown plan
       (``# Plan`` / ``## Objective`` ...) saying it followed the loaded skill.
    2. A ``load_skill`` tool is offered, no tool message follows the last user
       message, and that message mentions "plan": call
       ``load_skill {"name": "plan_compiler"}``.
    3. The last user message contains "TODO" or "todo" and ``scan_todos`` is
       offered: call ``scan_todos {"input": "."}``.
    4. ``list_variables`` is offered and the last user message asks about
       "variables": call it. ``run_python`` is offered and the message holds
       ``run: <code>``: call ``run_python`` with that code (Lily then asks the
       user to confirm).
    5. Otherwise echo: ``You said: <first 200 characters>.`` plus a note on how
       to use a real model.
    """
    messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    tools = _offered_tools(request)
    last = messages[-1] if messages else {}
    last_user_at = max((i for i, m in enumerate(messages) if m.get("role") == "user"),
                       default=-1)
    user_text = message_text(messages[last_user_at]).strip() if last_user_at >= 0 else ""

    if last.get("role") == "tool":
        name, args = _answered_call(messages, last)
        result = message_text(last)
        if name == "scan_todos":
            n = _count_table_rows(result)
            return {"content": f"{_DEMO_PREFIX}I found {n} marker{'' if n == 1 else 's'}."}
        if name == "list_variables":
            head, *lines = result.splitlines() or [""]
            return {"content": f"{_DEMO_PREFIX}I can see {head.rstrip(':')}.\n\n"
                               + "\n".join(f"- {line}" for line in lines)}
        if name == "run_python":
            return {"content": f"{_DEMO_PREFIX}You confirmed, so the code ran. What came back:"
                               f"\n\n```\n{result.strip()}\n```"}
        skill = args.get("name") if name == "load_skill" else None
        objective = (user_text.splitlines() or ["(no objective given)"])[0][:200]
        followed = (f"I followed the loaded skill `{skill}`" if skill
                    else f"I followed the result of the `{name or 'tool'}` tool")
        return {"content": (
            f"{_DEMO_PREFIX}{followed} to draft this plan.\n\n"
            "# Plan\n\n"
            f"## Objective\n{objective}\n\n"
            "## Constraints\n- (none stated)\n\n"
            "## Phases\n1. Understand the goal (1 step)\n2. Do the work (2 steps)\n\n"
            "## Steps\n"
            "1. Restate the objective and what done looks like.\n"
            "2. Make the change in small, checked steps.\n"
            "3. Review the result against the objective.\n")}

    tool_since_user = any(m.get("role") == "tool" for m in messages[last_user_at + 1:])
    if ("load_skill" in tools and not tool_since_user
            and re.search(r"\bplan", user_text, re.IGNORECASE)):
        return {"tool_calls": [{"name": "load_skill", "arguments": {"name": "plan_compiler"}}]}
    if "list_variables" in tools and not tool_since_user \
            and re.search(r"\bvariables?\b", user_text, re.IGNORECASE):
        return {"tool_calls": [{"name": "list_variables", "arguments": {}}]}
    code = re.search(r"\brun:\s*(.+)", user_text, re.IGNORECASE | re.DOTALL)
    if "run_python" in tools and not tool_since_user and code:
        return {"tool_calls": [{"name": "run_python", "arguments": {"code": code.group(1).strip()}}]}
    if "scan_todos" in tools and ("TODO" in user_text or "todo" in user_text):
        return {"tool_calls": [{"name": "scan_todos", "arguments": {"input": "."}}]}
    return {"content": (f"{_DEMO_PREFIX}You said: {user_text[:200]}. (This is a scripted "
                        "stand-in: set OPENAI_API_KEY or OPENAI_BASE_URL for a real model.)")}
