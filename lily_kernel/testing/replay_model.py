"""The scripted model of a replay: recorded answers, given only to the recorded questions.

:class:`Replayer` is a responder for :class:`~lily_kernel.testing.server.ScriptedServer`
built from the ``turns`` of a replay script (``lily logs replay``, docs/logs.md#replay).
Each turn holds what the model answered and the messages it had been sent since its
previous answer (the request, or the tool results). A request whose messages differ is
answered with HTTP 400 naming the turn and the first difference, so the notebook cell
that sent it fails and nbval shows it. Standard library only.
"""
from __future__ import annotations

import threading
from typing import Any

from lily_kernel.testing.messages import message_text

CONTEXT = 60  # characters shown around the first difference


def difference(expected: str, got: str) -> str:
    """Where ``got`` first differs from ``expected``, with a little of each around it."""
    at = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
              min(len(expected), len(got)))
    start = max(0, at - CONTEXT // 2)

    def show(text: str) -> str:
        piece = text[start:at + CONTEXT]
        more = "…" if at + CONTEXT < len(text) else ""
        return ("…" if start else "") + repr(piece)[1:-1] + more

    return f"at character {at}: expected {show(expected)} but got {show(got)}"


class Replayer:
    """A ``responder(request) -> turn`` replaying ``turns`` in order (thread-safe)."""

    def __init__(self, turns: list[dict[str, Any]]) -> None:
        self.turns = list(turns)
        self.used = 0
        self.divergence: str | None = None
        self._lock = threading.Lock()

    def remaining(self) -> int:
        """Recorded turns not yet given."""
        return len(self.turns) - self.used

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        """The recorded turn for ``request``, or HTTP 400 naming the first difference."""
        with self._lock:
            if self.used >= len(self.turns):
                return self._diverged(f"the recording has {len(self.turns)} model turn(s); "
                                      f"this request would be turn {self.used + 1}")
            item = self.turns[self.used]
            self.used += 1
            problem = self._compare(item.get("sent") or [], request.get("messages") or [])
            if problem:
                return self._diverged(f"model turn {self.used}: {problem}")
            return dict(item["turn"])

    @staticmethod
    def _compare(expected: list[str], messages: list[Any]) -> str | None:
        last = max((i for i, m in enumerate(messages)
                    if isinstance(m, dict) and m.get("role") == "assistant"), default=-1)
        sent = [m for m in messages[last + 1:]
                if isinstance(m, dict) and m.get("role") != "system"]
        got = [message_text(m) for m in sent]
        if len(got) != len(expected):
            return (f"Lily sent {len(got)} new message(s), the recording {len(expected)}"
                    + (f"; first: {difference(expected[0], got[0])}" if got and expected else ""))
        for i, (want, have) in enumerate(zip(expected, got, strict=False)):
            if want != have:
                role = sent[i].get("role", "?")
                return f"the {role} message differs from the recording {difference(want, have)}"
        return None

    def _diverged(self, text: str) -> dict[str, Any]:
        self.divergence = self.divergence or text
        return {"status": 400, "error_message": f"replay diverged: {text}"}
