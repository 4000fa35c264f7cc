"""A checklist in an answer as the ACP ``plan`` the client draws, its entries updated as later
answers report them (docs/front-ends.md#plans).

The checklist format (the plan skill's ``## Steps`` writes it; any skill may): Markdown task
list items, one a line, outside code fences::

    - [ ] a step to do          pending
    - [~] a step under way      in_progress
    - [x] a step done           completed (``[X]`` too)

An answer with a checklist none of whose items is in the session's plan starts a new plan
(the client's plan is replaced). An answer whose items name entries of the plan (the same
text, case, spacing and a final full stop aside) updates those entries' states, and the
whole plan is sent again, as ACP asks. Items are plain text: inert, shown as written.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from acp.schema import AgentPlanUpdate, PlanEntry

Status = Literal["pending", "in_progress", "completed"]
_ITEM = re.compile(r"^[ \t]{0,3}[-*+][ \t]+\[([ xX~])\][ \t]+(\S.*?)[ \t]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")
_STATES: dict[str, Status] = {" ": "pending", "~": "in_progress", "x": "completed",
                              "X": "completed"}
MAX_ENTRIES = 100  # a plan's entries kept (a longer checklist is cut here)


def checklist(text: str) -> list[tuple[str, Status]]:
    """The task list items of ``text`` outside code fences: (item text, state)."""
    items: list[tuple[str, Status]] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        found = None if fenced else _ITEM.match(line)
        if found:
            items.append((found.group(2), _STATES[found.group(1)]))
    return items[:MAX_ENTRIES]


def _key(text: str) -> str:
    return " ".join(text.lower().split()).rstrip(".")


@dataclass
class PlanTracker:
    """The session's plan as the client was last sent it."""

    entries: list[tuple[str, Status]] = field(default_factory=list)

    def read(self, answer: str) -> AgentPlanUpdate | None:
        """The ``plan`` update ``answer`` calls for: a new plan, the plan with entries'
        states changed, or None (no checklist, or nothing changed)."""
        items = checklist(answer)
        if not items:
            return None
        index = {_key(text): i for i, (text, _) in enumerate(self.entries)}
        known = [(index[_key(text)], state) for text, state in items if _key(text) in index]
        if not known:
            self.entries = items
        else:
            before = list(self.entries)
            for i, state in known:
                self.entries[i] = (self.entries[i][0], state)
            if self.entries == before:
                return None
        return AgentPlanUpdate(session_update="plan", entries=[
            PlanEntry(content=text, status=state, priority="medium")
            for text, state in self.entries])
