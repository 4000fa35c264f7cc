"""Helpers shared by the agent-loop tests (tests/, tests/jupyter/ and tests/e2e/ import it)."""
from __future__ import annotations

import collections
from pathlib import Path

from lily_kernel.session.session import Session
from lily_kernel.testing.server import ScriptedServer


class World:
    """A workspace with its own skill folder, an empty user root and a private HOME."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.workspace = base / "ws"
        self.skills = self.workspace / "skills"
        self.user = base / "user_skills"
        for d in (self.skills, self.user, base / "home"):
            d.mkdir(parents=True, exist_ok=True)

    def env(self, server: ScriptedServer | None, **extra: str) -> dict[str, str]:
        env = {"SKILLS_WORKSPACE_DIR": str(self.skills), "SKILLS_USER_DIR": str(self.user),
               "HOME": str(self.base / "home"), "LILY_MAX_RETRIES": "0", "LILY_TIMEOUT": "5"}
        if server is not None:
            env["OPENAI_BASE_URL"] = server.url
        env.update(extra)
        return env

    def session(self, server: ScriptedServer | None, journal: bool = False, **extra: str) -> Session:
        return Session(workspace=self.workspace, env=self.env(server, **extra), journal=journal)


def assert_consistent(messages: list[dict]) -> None:
    """Every assistant tool call is followed at once by its result; no orphan results."""
    i = 0
    while i < len(messages):
        m = messages[i]
        assert m["role"] in ("user", "assistant"), f"orphan {m['role']} message at {i}: {m}"
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            after = messages[i + 1:i + 1 + len(ids)]
            assert [(r["role"], r.get("tool_call_id")) for r in after] == \
                [("tool", cid) for cid in ids], f"tool calls {ids} not answered in order: {after}"
            i += 1 + len(ids)
            continue
        i += 1


class Script:
    """A ScriptedServer responder whose turns each test queues; an empty queue answers HTTP 500.

    ``label`` names the suite in that 500's message, so a missing turn says where it was missed.
    """

    def __init__(self, label: str = "test script") -> None:
        self.label = label
        self.turns: collections.deque = collections.deque()

    def __call__(self, request: dict):
        if not self.turns:
            return {"status": 500, "error_message": f"{self.label}: no turn queued"}
        return self.turns.popleft()


def run_shown(session, text: str, **kwargs):
    """``agent.run`` as a face runs it: a proposal's card is displayed, so it waits now
    (docs/typed-skills.md#confirmation)."""
    from lily_kernel.agent import loop
    reply = loop.run(session, text, **kwargs)
    if reply.proposal is not None:
        session.show(reply.proposal.id)
    return reply
