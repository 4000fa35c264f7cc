"""The scripted server's script: the turns it answers with, checked, and which one is next.

A script is a list of turns used in order, or a ``responder(request) -> turn`` callable.
:func:`validate_turn` refuses an unknown key or a value of the wrong kind, so a typo never
silently yields an empty answer. The turn keys: docs/testing.md#turns. Standard library only.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["TURN_KEYS", "Responder", "Script", "Turn", "TurnError", "validate_turn"]

Turn = dict[str, Any] | str
Responder = Callable[[dict[str, Any]], Turn]

TURN_KEYS = frozenset({
    "content", "tool_calls", "finish_reason", "usage", "chunks", "chunk_delay", "delay",
    "status", "retry_after", "error_message", "raw", "truncate", "expect",
    "endless", "stream_chars", "drip", "max_duration", "echo_headers", "gzip_line",
    "reasoning",  # streamed as reasoning_content before the answer (a reasoning model)
})
_TOOL_CALL_KEYS = frozenset({"name", "arguments", "id"})
_EXPECT_KEYS = frozenset({"contains"})


class TurnError(Exception):
    """No turn can answer the request (script exhausted, responder broken); carries the HTTP
    status and message the server answers with instead."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def validate_turn(turn: Any, where: str) -> dict[str, Any]:
    """Return ``turn`` as a dict (a str is its ``content``), or raise ValueError naming
    what is wrong; ``where`` names the turn in the message."""
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


class Script:
    """The turns a server answers with, one per chat request (thread-safe).

    ``script`` is a list of turns (checked now), a responder callable (its turns checked
    as it returns them), or None (an empty list).
    """

    def __init__(self, script: list[Turn] | Responder | None = None) -> None:
        self.responder: Responder | None = None
        self._turns: list[dict[str, Any]] = []
        self._next = 0
        self._requests = 0
        self._lock = threading.Lock()
        if callable(script):
            self.responder = script
        elif script is not None:
            self._turns = [validate_turn(t, f"turn {i + 1}") for i, t in enumerate(script)]

    def add(self, *turns: Turn) -> None:
        """Append turns to a list script (ValueError on an unknown turn key)."""
        if self.responder is not None:
            raise TypeError("add() needs a list script; this server uses a responder callable")
        with self._lock:
            start = len(self._turns)
            self._turns.extend(validate_turn(t, f"turn {start + i + 1}")
                               for i, t in enumerate(turns))

    def remaining(self) -> int:
        """Unconsumed turns of a list script (always 0 with a responder callable)."""
        with self._lock:
            return len(self._turns) - self._next

    def take(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The turn answering ``request`` and its number (the responder is called under the
        lock, one request at a time); :class:`TurnError` when there is none."""
        with self._lock:
            self._requests += 1
            count = self._requests
            if self.responder is not None:
                try:
                    turn = self.responder(request)
                except Exception as exc:  # report the responder's bug to the client
                    raise TurnError(500, f"scripted server: the responder raised "
                                         f"{type(exc).__name__}: {exc}") from None
                try:
                    return count, validate_turn(turn, "the responder's turn")
                except ValueError as exc:
                    raise TurnError(500, f"scripted server: {exc}") from None
            if self._next >= len(self._turns):
                raise TurnError(500, f"scripted server: script exhausted "
                                     f"({count} requests so far)")
            self._next += 1
            return self._next, self._turns[self._next - 1]
