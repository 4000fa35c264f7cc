"""A conversation read back from the journal: resume after a restart, ``/fork``, ``/rewind``.

The journal is the conversation's source of truth (docs/session.md#resume). A session's
conversation is its parent's (the session it resumed or forked from, named in its
``session_created`` record), then its own ``message`` records in order, with each
``conversation_compacted`` (the first ``end`` messages become the summary) and
``conversation_rewound`` (only the first ``keep`` messages stay) applied where it stands.
Only the conversation comes back (docs/session.md#resume): the user's, assistant's and
tool turns, each with only the fields a turn has. Never an endpoint, key, model, header,
policy, mode or system message (a ``model_changed`` record is not read, a ``system`` turn
is dropped), never a pending card nor a ``/confirm --always`` grant: nothing runs in a new
kernel that the user did not see there, and nothing goes elsewhere.
"""
from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lily_kernel.session.journal import UNCHAINED, verify_chain

MAX_PARENTS = 50  # sessions followed back through resumes and forks
ROLES = frozenset({"user", "assistant", "tool"})  # the turns a conversation holds
TURN_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})


#: Whose conversation the resume line names: a notebook's; ``lily acp`` says a chat's.
NOTEBOOK_CONVERSATION = "this notebook's conversation"
CHAT_CONVERSATION = "this chat's conversation"


@dataclass
class Restored:
    """A conversation rebuilt from the journal: its messages (each with the time it was
    journaled, in ``times``), what ``/model`` had set, and why nothing could be, if so."""

    session_id: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    model_set: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None

    @property
    def requests(self) -> int:
        """How many of the messages are the user's requests."""
        return sum(1 for m in self.messages if m.get("role") == "user")

    def line(self) -> str:
        """The one line the first Lily output shows after a resume."""
        when = time.strftime("%H:%M", time.localtime(self.times[-1])) if self.times else "?"
        turns = self.requests
        return (f"Resumed {turns} request{'s' if turns != 1 else ''} of "
                f"{NOTEBOOK_CONVERSATION} (last at {when}); /new starts afresh.")


def latest_session(records: Iterable[dict[str, Any]], but: str | None = None) -> str | None:
    """The id of the last session created in ``records`` (other than ``but``), or None."""
    found = None
    for record in records:
        if record.get("event") == "session_created" and record.get("session_id") != but:
            found = record["session_id"]
    return found


def restore(records: list[dict[str, Any]], session_id: str) -> Restored:
    """The conversation of ``session_id`` as it stood at its last record."""
    by_session: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_session.setdefault(str(record.get("session_id")), []).append(record)
    chain: list[str] = []
    current: str | None = session_id
    while current is not None:
        if current in chain or len(chain) >= MAX_PARENTS:
            return Restored(problem=f"the journal's sessions resume each other in a loop "
                                    f"at {current[:12]}")
        own = by_session.get(current)
        if not own:
            if chain:  # a parent that is gone (pruned): what the child added still stands
                break
            return Restored(problem=f"session {current[:12]} has no records in the journal")
        broken = verify_chain(own)  # a tampered journal must not put words in the history
        if broken is not None and broken != UNCHAINED:
            return Restored(problem=f"the journal does not match its hash chain ({broken})")
        chain.append(current)
        created = next((r for r in own if r.get("event") == "session_created"), {})
        parent = created.get("resumed_from") or created.get("forked_from")
        current = parent if isinstance(parent, str) and parent else None
    out = Restored(session_id=session_id)
    for sid in reversed(chain):
        problem = _apply(out, by_session[sid])
        if problem:
            return Restored(problem=problem)
    _drop_unanswered_calls(out)
    return out


def _apply(out: Restored, records: list[dict[str, Any]]) -> str | None:
    for record in records:
        event = record.get("event")
        raw = record.get("t")
        t = float(raw) if isinstance(raw, int | float) else 0.0
        if event == "message":
            message = record.get("message")
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                return "a message record of the journal is not a message"
            if record.get("cut"):
                return "a message record was cut at the journal's size cap"
            if message["role"] not in ROLES:  # a system turn is never Lily's to resume
                continue
            out.messages.append(_turn(message))
            out.times.append(t)
        elif event == "conversation_compacted":
            end, summary = record.get("end"), record.get("messages")
            if not isinstance(end, int) or not isinstance(summary, list):
                return "a /compact record of the journal has no 'end' (written by an older Lily)"
            kept = [_turn(m) for m in summary
                    if isinstance(m, dict) and m.get("role") in ROLES]
            out.messages[:end] = kept
            out.times[:end] = [t] * len(kept)
        elif event == "conversation_rewound":
            keep = record.get("keep")
            if not isinstance(keep, int) or keep < 0:
                return "a /rewind record of the journal is malformed"
            del out.messages[keep:], out.times[keep:]
    return None


def _turn(message: dict[str, Any]) -> dict[str, Any]:
    """A conversation turn with only the fields a turn has (no extra header or setting)."""
    return {k: v for k, v in message.items() if k in TURN_KEYS}


def _drop_unanswered_calls(out: Restored) -> None:
    """A last assistant turn whose tool calls were not all answered (a card that was never
    decided) is left out: its call is not resumed, and no endpoint takes it unanswered."""
    for i in range(len(out.messages) - 1, -1, -1):
        message = out.messages[i]
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if not calls:
            continue
        ids = {c.get("id") for c in calls if isinstance(c, dict)}
        answered = {m.get("tool_call_id") for m in out.messages[i + 1:] if m.get("role") == "tool"}
        if not ids <= answered:
            del out.messages[i:], out.times[i:]
        return


def requests(messages: list[dict[str, Any]], times: list[float]) -> list[tuple[int, float, str]]:
    """(index in the conversation, time, first line) of each user request, in order."""
    out = []
    for i, message in enumerate(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        text = content if isinstance(content, str) else " ".join(
            str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        out.append((i, times[i] if i < len(times) else 0.0, first))
    return out
