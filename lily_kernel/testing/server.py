"""A scripted, OpenAI-compatible Chat Completions server for tests and demos.

:class:`ScriptedServer` listens on ``127.0.0.1`` (a free port by default) and
answers ``POST /v1/chat/completions`` from a *script* (a list of turns, or a
``responder(request) -> turn`` callable) instead of a model, over real HTTP, so
Lily's agent loop and the real ``openai`` client are exercised exactly as with
a hosted model. Standard library only. The manual (turn keys, streaming shape,
errors, faults): docs/testing.md#scripted-server.
"""
from __future__ import annotations

import contextlib
import json
import math
import re
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["TURN_KEYS", "ScriptedServer", "message_text", "prompt_tokens"]

Turn = dict[str, Any] | str
Responder = Callable[[dict[str, Any]], Turn]

TURN_KEYS = frozenset({
    "content", "tool_calls", "finish_reason", "usage", "chunks", "chunk_delay", "delay",
    "status", "retry_after", "error_message", "raw", "truncate", "expect",
    "endless", "stream_chars", "drip", "max_duration", "echo_headers", "gzip_line",
})
_BIG_PIECE = "x" * 65536  # one content delta of an endless or huge stream
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


def _validate_turn(turn: Any, where: str) -> dict[str, Any]:
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
    if expect is not None and (not isinstance(expect, dict) or set(expect) - _EXPECT_KEYS
                               or not isinstance(expect.get("contains"), str)):
        raise ValueError(f"{where}: 'expect' must be {{'contains': str}}")
    if "status" in turn and not (isinstance(turn["status"], int) and 100 <= turn["status"] <= 599):
        raise ValueError(f"{where}: 'status' must be an HTTP status code (int)")
    if "raw" in turn and not isinstance(turn["raw"], str):
        raise ValueError(f"{where}: 'raw' must be a str")
    if "chunks" in turn and not (isinstance(turn["chunks"], int) and turn["chunks"] >= 1):
        raise ValueError(f"{where}: 'chunks' must be an int >= 1")
    if "gzip_line" in turn and not (isinstance(turn["gzip_line"], int)
                                    and turn["gzip_line"] >= 0):
        raise ValueError(f"{where}: 'gzip_line' must be an int >= 0")
    if "stream_chars" in turn and not (isinstance(turn["stream_chars"], int)
                                       and turn["stream_chars"] >= 0):
        raise ValueError(f"{where}: 'stream_chars' must be an int >= 0")
    for key in ("delay", "chunk_delay", "retry_after", "drip", "max_duration"):
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


def prompt_tokens(request: dict[str, Any]) -> int:
    """The prompt's tokens as this server counts them: the request's ``messages`` and
    ``tools`` as JSON (non-ASCII kept), one token per 4 UTF-8 bytes, rounded up — about
    what a BPE tokenizer makes of English text with a chat template's markers."""
    data = json.dumps(request.get("messages", []), ensure_ascii=False)
    if request.get("tools"):
        data += json.dumps(request["tools"], ensure_ascii=False)
    return math.ceil(len(data.encode("utf-8", "surrogatepass")) / 4)


def _context_error(style: str, window: int, prompt: int, cap: int | None) -> str | None:
    """The endpoint's context-length message when the request does not fit, else None."""
    if style == "openai":
        asked = prompt + (cap or 0)
        if asked <= window:
            return None
        if cap:
            return (f"This model's maximum context length is {window} tokens. However, you "
                    f"requested {asked} tokens ({prompt} in the messages, {cap} in the "
                    "completion). Please reduce the length of the messages or completion.")
        return (f"This model's maximum context length is {window} tokens. However, your "
                f"messages resulted in {prompt} tokens. Please reduce the length of the "
                "messages.")
    if prompt <= window:
        return None
    return (f"request ({prompt} tokens) exceeds the available context size ({window} "
            "tokens), try increasing it")


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


def _gzip_line(size: int) -> bytes:
    """A gzip body holding one SSE line of ``size`` bytes and no line end (a compression
    bomb: 300 MB of it compress to about 0.3 MB), made without holding it uncompressed."""
    import zlib
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [packer.compress(b"data: ")]
    block = b"x" * (1 << 20)
    left = size
    while left > 0:
        out.append(packer.compress(block[:left]))
        left -= len(block)
    out.append(packer.flush())
    return b"".join(out)


def _format_seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 owner: ScriptedServer) -> None:
        self.owner = owner
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS lookup
        # that can take seconds on some machines; the name is never used here.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), port

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that hang up (timeouts, interrupted streams, stop()) are normal here.
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "LilyScriptedServer/1.0"
    sys_version = ""
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
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
        except (TimeoutError, BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
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
    list). The turn keys: docs/testing.md#turns. Use as a context
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
        context_window: when set, a request whose prompt (:func:`prompt_tokens`) is
            longer gets HTTP 400 with llama.cpp's message (``context_style="llama.cpp"``)
            or OpenAI's (``"openai"``, which counts the completion cap too) and uses no turn.
        prompt_sizes: the prompt tokens of every chat request, as counted, in order.
    """

    def __init__(self, script: list[Turn] | Responder | None = None, *,
                 host: str = "127.0.0.1", port: int = 0, model: str = "scripted-model",
                 reject_params: Iterable[str] = (), context_window: int | None = None,
                 context_style: str = "llama.cpp"):
        if context_style not in ("llama.cpp", "openai"):
            raise ValueError("context_style must be 'llama.cpp' or 'openai'")
        self.host = host
        self.context_window = context_window
        self.context_style = context_style
        self.prompt_sizes: list[int] = []
        self.reject_params = frozenset(reject_params)
        self.port = port
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._responder: Responder | None = None
        self._turns: list[dict[str, Any]] = []
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

    def start(self) -> ScriptedServer:
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
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None

    def __enter__(self) -> ScriptedServer:
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

    def chat_requests(self) -> list[dict[str, Any]]:
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
        size = prompt_tokens(parsed)
        with self._lock:
            self.prompt_sizes.append(size)
        if self.context_window is not None:
            cap = parsed.get("max_completion_tokens") or parsed.get("max_tokens")
            too_long = _context_error(self.context_style, self.context_window, size,
                                      cap if isinstance(cap, int) else None)
            if too_long:
                return self._send_error(h, 400, too_long)
        try:
            index, turn = self._take_turn(parsed)
        except _TurnError as err:
            return self._send_error(h, err.status, err.message)
        self._answer(h, parsed, index, turn)

    def _take_turn(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
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

    def _answer(self, h: _Handler, request: dict[str, Any], index: int, turn: dict[str, Any]) -> None:
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
            message = turn.get("error_message")
            if turn.get("echo_headers"):
                items = sorted(h.headers.items(), key=lambda kv: kv[0].lower() != "authorization")
                echoed = "; ".join(f"{k}: {v}" for k, v in items)
                message = f"{message or 'bad request'} (request headers: {echoed})"
            return self._send_error(h, turn["status"], message, extra,
                                    truncate=bool(turn.get("truncate")))
        if "gzip_line" in turn:
            return self._send_bytes(h, 200, _gzip_line(turn["gzip_line"]), "text/event-stream",
                                    {"Content-Encoding": "gzip"})
        if stream:
            return self._stream(h, request, turn)
        if "raw" in turn:
            return self._send_bytes(h, 200, turn["raw"].encode("utf-8"), "application/json",
                                    truncate=bool(turn.get("truncate")))
        return self._send_json(h, 200, self._completion(request, turn),
                               truncate=bool(turn.get("truncate")))

    # -- response bodies -------------------------------------------------

    def _tool_calls(self, turn: dict[str, Any]) -> list[dict[str, Any]]:
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

    def _usage(self, request: dict[str, Any], turn: dict[str, Any], content: str | None,
               calls: list[dict[str, Any]]) -> dict[str, Any]:
        """The turn's ``usage`` as given, or (``usage: True`` or none) an estimate."""
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

    def _completion(self, request: dict[str, Any], turn: dict[str, Any]) -> dict[str, Any]:
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

    def _stream_events(self, request: dict[str, Any], turn: dict[str, Any],
                       ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The chunk objects of a stream: (body events, closing events)."""
        calls = self._tool_calls(turn)
        content = turn.get("content")
        cid, created = self._ids()
        model = request.get("model") or self.model
        options = request.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))

        def chunk(delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
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
        if include_usage and (isinstance(turn.get("usage"), dict) or turn.get("usage") is True):
            last = chunk(None)
            last["usage"] = self._usage(request, turn, content, calls)
            closing.append(last)
        return body, closing

    def _stream(self, h: _Handler, request: dict[str, Any], turn: dict[str, Any]) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream; charset=utf-8")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Transfer-Encoding", "chunked")
        h.send_header("Connection", "close")
        h.end_headers()
        delay = float(turn.get("chunk_delay", 0))
        drip = float(turn.get("drip", 0))
        until = time.monotonic() + float(turn.get("max_duration", 20))

        def send(data: bytes) -> None:
            if not drip:
                h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                h.wfile.flush()
                return
            for i in range(len(data)):  # one byte per chunk, a pause between them
                if time.monotonic() > until or not self._wait(drip):
                    raise ConnectionAbortedError("drip: max_duration reached")
                h.wfile.write(b"1\r\n%s\r\n" % data[i:i + 1])
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
        if turn.get("endless") or "stream_chars" in turn:
            return self._stream_big(h, turn, body, closing, send, until)
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

    def _stream_big(self, h: _Handler, turn: dict[str, Any], body: list[dict[str, Any]], closing: list[dict[str, Any]],
                    send: Callable[[bytes], None], until: float) -> None:
        """An endless stream, or one of ``stream_chars`` characters, made as it is sent."""
        def event(obj: dict[str, Any]) -> bytes:
            return b"data: " + json.dumps(obj).encode("utf-8") + b"\n\n"

        for obj in body:
            send(event(obj))
        template = dict(body[0])
        left = None if turn.get("endless") else int(turn["stream_chars"])
        while left is None or left > 0:
            if time.monotonic() > until or not self._wait(float(turn.get("chunk_delay", 0))):
                return  # max_duration (or stopping): hang up
            piece = _BIG_PIECE if left is None else _BIG_PIECE[:left]
            if left is not None:
                left -= len(piece)
            template["choices"] = [{"index": 0, "delta": {"content": piece},
                                    "logprobs": None, "finish_reason": None}]
            send(event(template))
        for obj in closing:
            send(event(obj))
        send(b"data: [DONE]\n\n")
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def _send_bytes(self, h: _Handler, status: int, data: bytes, content_type: str,
                    extra: dict[str, Any] | None = None, truncate: bool = False) -> None:
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

    def _send_json(self, h: _Handler, status: int, obj: Any, extra: dict[str, Any] | None = None,
                   truncate: bool = False) -> None:
        self._send_bytes(h, status, json.dumps(obj).encode("utf-8"), "application/json",
                         extra, truncate)

    def _send_error(self, h: _Handler, status: int, message: str | None,
                    extra: dict[str, Any] | None = None, truncate: bool = False) -> None:
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

