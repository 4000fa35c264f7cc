"""A scripted, OpenAI-compatible Chat Completions server for tests and demos.

:class:`ScriptedServer` listens on ``127.0.0.1`` (a free port by default) and
answers ``POST /v1/chat/completions`` from a *script* (a list of turns, or a
``responder(request) -> turn`` callable) instead of a model, over real HTTP, so
Lily's agent loop and the real ``openai`` client are exercised exactly as with
a hosted model. This module is the server itself: its lifecycle, what it records, and
which answer a request gets; the script is :mod:`.script`, the answer bodies
:mod:`.replies`, the HTTP side :mod:`.transport` and streams :mod:`.streams`.
Standard library only. The manual (turn keys, streaming shape, errors, faults):
docs/testing.md#scripted-server.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any

from lily_kernel.testing.messages import context_error, message_text, prompt_tokens
from lily_kernel.testing.replies import Replies
from lily_kernel.testing.script import Responder, Script, Turn, TurnError
from lily_kernel.testing.streams import gzip_line, stream_events, stream_raw
from lily_kernel.testing.transport import Handler, Listener, send_bytes, send_error, send_json

__all__ = ["ScriptedServer"]


def _format_seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _route(path: str) -> str | None:
    bare = path.split("?", 1)[0].rstrip("/")
    if bare.startswith("/v1/"):
        bare = bare[3:]
    return {"/chat/completions": "chat", "/models": "models", "/props": "props"}.get(bare)


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
        models: more model ids ``GET /v1/models`` lists after ``model``.
        max_model_len: when set, each listed model carries it, as vLLM lists its window.
        props: when set, ``GET /props`` answers it, as llama.cpp's server does
            (``{"default_generation_settings": {"n_ctx": 4096}}``); else 404.
    """

    def __init__(self, script: list[Turn] | Responder | None = None, *,
                 host: str = "127.0.0.1", port: int = 0, model: str = "scripted-model",
                 reject_params: Iterable[str] = (), context_window: int | None = None,
                 context_style: str = "llama.cpp", models: Iterable[str] = (),
                 max_model_len: int | None = None, props: dict[str, Any] | None = None):
        if context_style not in ("llama.cpp", "openai"):
            raise ValueError("context_style must be 'llama.cpp' or 'openai'")
        self.host = host
        self.context_window = context_window
        self.context_style = context_style
        self.prompt_sizes: list[int] = []
        self.reject_params = frozenset(reject_params)
        self.port = port
        self.model = model
        self.models = list(models)
        self.max_model_len = max_model_len
        self.props = props
        self.requests: list[dict[str, Any]] = []
        self._script = Script(script)
        self._replies = Replies()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: Listener | None = None
        self._thread: threading.Thread | None = None

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
        self._httpd = Listener((self.host, self.port), self._handle)
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
        httpd.drop_connections()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f"{self.host}:{self.port}" if self._httpd else "stopped"
        kind = "responder" if self._script.responder else f"{self.remaining()} turn(s) left"
        return f"<ScriptedServer {where}, {kind}, {len(self.requests)} request(s)>"

    # -- script ----------------------------------------------------------

    def add(self, *turns: Turn) -> None:
        """Append turns to a list script (ValueError on an unknown turn key)."""
        self._script.add(*turns)

    def remaining(self) -> int:
        """Unconsumed turns of a list script (always 0 with a responder callable)."""
        return self._script.remaining()

    def chat_requests(self) -> list[dict[str, Any]]:
        """The parsed bodies of the ``POST /chat/completions`` requests, in order."""
        return [r["json"] for r in list(self.requests)
                if r["method"] == "POST" and _route(r["path"]) == "chat"]

    # -- serving ---------------------------------------------------------

    def _wait(self, seconds: float) -> bool:
        """Sleep; False if the server is stopping (the caller should hang up)."""
        if seconds > 0:
            return not self._stopping.wait(seconds)
        return not self._stopping.is_set()

    def _handle(self, h: Handler) -> None:
        """Record the request, then answer it: the models list, a refusal, or its turn."""
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
            extra = {"max_model_len": self.max_model_len} if self.max_model_len else {}
            return send_json(h, 200, {"object": "list", "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "scripted", **extra}
                for name in [self.model, *self.models]]})
        if route == "props" and h.command == "GET" and self.props is not None:
            return send_json(h, 200, self.props)
        if route != "chat" or h.command != "POST":
            return send_error(h, 404, f"Invalid URL ({h.command} {h.path.split('?')[0]})")
        if bad_json or not isinstance(parsed, dict):
            return send_error(h, 400, "scripted server: the request body is not a JSON object")
        if not isinstance(parsed.get("messages"), list):
            return send_error(h, 400, "scripted server: the request has no 'messages' list")
        refused = sorted(self.reject_params & set(parsed))
        if refused:
            return send_error(h, 400, f"Unrecognized request argument supplied: {refused[0]}")
        size = prompt_tokens(parsed)
        with self._lock:
            self.prompt_sizes.append(size)
        if self.context_window is not None:
            cap = parsed.get("max_completion_tokens") or parsed.get("max_tokens")
            too_long = context_error(self.context_style, self.context_window, size,
                                     cap if isinstance(cap, int) else None)
            if too_long:
                return send_error(h, 400, too_long)
        try:
            index, turn = self._script.take(parsed)
        except TurnError as err:
            return send_error(h, err.status, err.message)
        self._answer(h, parsed, index, turn)

    def _answer(self, h: Handler, request: dict[str, Any], index: int,
                turn: dict[str, Any]) -> None:
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
                return send_error(
                    h, 400, f"scripted server: turn {index} expected the last message to "
                            f"contain {expect['contains']!r}, but got the {role} message "
                            f"{shown!r}")
        truncate = bool(turn.get("truncate"))
        if "status" in turn:
            extra = {}
            if "retry_after" in turn:
                extra["Retry-After"] = _format_seconds(turn["retry_after"])
            if "raw" in turn:
                return send_bytes(h, turn["status"], turn["raw"].encode("utf-8"),
                                  "application/json", extra, truncate)
            message = turn.get("error_message")
            if turn.get("echo_headers"):
                items = sorted(h.headers.items(), key=lambda kv: kv[0].lower() != "authorization")
                echoed = "; ".join(f"{k}: {v}" for k, v in items)
                message = f"{message or 'bad request'} (request headers: {echoed})"
            return send_error(h, turn["status"], message, extra, truncate)
        if "gzip_line" in turn:
            return send_bytes(h, 200, gzip_line(turn["gzip_line"]), "text/event-stream",
                              {"Content-Encoding": "gzip"})
        model = request.get("model") or self.model
        if stream and "raw" in turn:
            return stream_raw(h, turn, self._wait)
        if stream:
            body, closing = self._replies.chunks(request, turn, model)
            return stream_events(h, turn, body, closing, self._wait)
        if "raw" in turn:
            return send_bytes(h, 200, turn["raw"].encode("utf-8"), "application/json",
                              truncate=truncate)
        return send_json(h, 200, self._replies.completion(request, turn, model),
                         truncate=truncate)
