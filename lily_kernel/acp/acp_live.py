"""The live view of one agent request in ``lily acp``: streamed text, tool calls, a model's
reasoning as thought chunks (docs/front-ends.md#acp).

The runner calls :meth:`Live.write` with each piece of the answer and :meth:`Live.event`
with the loop's events; each becomes ``session/update`` messages, sanitised and redacted as
every text Lily shows. Reasoning pieces arrive through ``model_client.REASONING`` (set by the
turn, on the same thread) and are sent a line at a time.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from acp import helpers

from lily_kernel.acp import acp_updates as updates
from lily_kernel.commands import sanitize
from lily_kernel.redaction import redact
from lily_kernel.tools.tool_registry import FILE_WRITES

if TYPE_CHECKING:
    from lily_kernel.acp.acp_turns import AcpSession, Client

THOUGHT_FLUSH = 200  # a reasoning line longer than this is sent at its last space


class Live:
    """The live view of one agent request: streamed text and tool calls."""

    def __init__(self, client: Client, state: AcpSession,
                 on_step: Callable[[], None] = lambda: None) -> None:
        self.client, self.state, self.on_step = client, state, on_step
        self.step = updates.StreamedText()
        self.thinking = ""  # reasoning received, not yet sent

    def _send(self, update: Any) -> None:
        self.client.send(self.state.id, update)

    def think(self, piece: str) -> None:
        """A piece of the model's reasoning: sent as thought chunks, a line at a time."""
        self.thinking += piece
        cut = self.thinking.rfind("\n") + 1
        if not cut and len(self.thinking) > THOUGHT_FLUSH:
            cut = self.thinking.rfind(" ") + 1
        if cut:
            self._thought(self.thinking[:cut])
            self.thinking = self.thinking[cut:]

    def _thought(self, text: str) -> None:
        if text.strip():
            shown = sanitize.md_text(redact(text, self.state.runner.session.environ))
            self._send(helpers.update_agent_thought_text(shown))

    def _end_thinking(self) -> None:
        rest, self.thinking = self.thinking, ""
        self._thought(rest)

    def write(self, piece: str) -> None:
        """A piece of the answer: sent once its lines are complete (StreamedText)."""
        self._end_thinking()
        first = not self.step.sent
        rest = self.step.feed(piece)
        self.state.message(self.client, rest, new_part=first)

    def event(self, kind: str, data: dict[str, Any]) -> None:
        """A loop event: a new model step, a skill used, a tool call started or ended."""
        session, started = self.state.runner.session, self.state.started
        self._end_thinking()
        if kind == "waiting":  # a new model step: the last one's text ends here
            self.on_step()  # the last step's tokens
            if self.step.raw.strip():
                first = not self.step.sent
                self.state.message(self.client, self.step.finish(), new_part=first)
            self.step = updates.StreamedText()
        elif kind == "skill":
            self._send(helpers.update_agent_thought_text(f"using skill {data['name']}"))
        elif kind in ("tool_start", "tool") and "id" in data:
            call_id, name = str(data["id"]), str(data["name"])
            given = data.get("args")
            args: dict[str, Any] = given if isinstance(given, dict) else {}
            if call_id not in started:
                waiting = bool(data.get("waiting"))
                old = updates.old_text(session, args) if name in FILE_WRITES else None
                self._send(updates.tool_started(session, call_id, name, args,
                                                "pending" if waiting else "in_progress", old))
                started.add(call_id)
            if kind == "tool" and not data.get("waiting"):
                self._send(updates.tool_finished(session, call_id, bool(data.get("ok")),
                                                 data.get("result")))

    def close(self, interrupted: bool = False) -> None:
        """The request ended; an interrupted one's text stays as it was sent."""
        self._end_thinking()
