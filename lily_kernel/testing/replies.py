"""The bodies the scripted server answers with, shaped like OpenAI's.

:class:`Replies` turns a turn into a ``chat.completion`` object or the
``chat.completion.chunk`` objects of a stream, numbering completion and tool-call ids over
the server's life; :func:`error_body` is the ``{"error": ...}`` body of an HTTP error. The
shapes: docs/testing.md#responses. Standard library only.
"""
from __future__ import annotations

import json
import math
import re
import threading
import time
from typing import Any

from lily_kernel.testing.messages import prompt_tokens

__all__ = ["Replies", "error_body"]

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


def error_body(status: int, message: str | None) -> dict[str, Any]:
    """OpenAI's error body for ``status``: ``{"error": {message, type, param, code}}``
    (``message`` None: a default naming the status)."""
    kind, code = _ERROR_KINDS.get(status, ("server_error" if status >= 500
                                           else "invalid_request_error", None))
    if message is None:
        message = f"scripted server: scripted HTTP {status} error"
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


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


def _finish_reason(turn: dict[str, Any], calls: list[dict[str, Any]]) -> str:
    return turn.get("finish_reason") or ("tool_calls" if calls else "stop")


class Replies:
    """Makes the answer objects of turns, counting ids over the server's life (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls = 0
        self._completions = 0

    def _tool_calls(self, turn: dict[str, Any]) -> list[dict[str, Any]]:
        calls = []
        for call in turn.get("tool_calls") or []:
            args = call.get("arguments", {})
            if not isinstance(args, str):
                args = json.dumps(args)
            with self._lock:
                self._calls += 1
                n = self._calls
            calls.append({"id": call.get("id") or f"call_{n}", "type": "function",
                          "function": {"name": call["name"], "arguments": args}})
        return calls

    @staticmethod
    def _usage(request: dict[str, Any], turn: dict[str, Any], content: str | None,
               calls: list[dict[str, Any]]) -> dict[str, Any]:
        """The turn's ``usage`` as given, or (``usage: True`` or none) an estimate."""
        if isinstance(turn.get("usage"), dict):
            usage = dict(turn["usage"])
            usage.setdefault("total_tokens", int(usage.get("prompt_tokens", 0))
                             + int(usage.get("completion_tokens", 0)))
            return usage
        prompt = max(1, prompt_tokens(request))  # the messages and the tools, as counted
        out_chars = len(content or "") + sum(len(c["function"]["arguments"]) + 8 for c in calls)
        completion = max(1, math.ceil(out_chars / 4))
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}

    def _ids(self) -> tuple[str, int]:
        with self._lock:
            self._completions += 1
            n = self._completions
        return f"chatcmpl-scripted-{n}", int(time.time())

    def completion(self, request: dict[str, Any], turn: dict[str, Any],
                   model: str) -> dict[str, Any]:
        """The ``chat.completion`` object answering ``request`` with ``turn``."""
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
            "model": model, "system_fingerprint": None,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": _finish_reason(turn, calls)}],
            "usage": self._usage(request, turn, content, calls),
        }

    def chunks(self, request: dict[str, Any], turn: dict[str, Any], model: str,
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The ``chat.completion.chunk`` objects of a stream: (body, closing). The body is a
        role delta, the content deltas and each tool call's deltas; the closing is the finish
        chunk and, when asked and scripted, the usage chunk."""
        calls = self._tool_calls(turn)
        content = turn.get("content")
        cid, created = self._ids()
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
        if turn.get("reasoning"):  # a reasoning model's thinking, before its answer
            body.append(chunk({"content": None, "reasoning_content": str(turn["reasoning"])}))
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
        closing = [chunk({}, _finish_reason(turn, calls))]
        if include_usage and (isinstance(turn.get("usage"), dict) or turn.get("usage") is True):
            last = chunk(None)
            last["usage"] = self._usage(request, turn, content, calls)
            closing.append(last)
        return body, closing
