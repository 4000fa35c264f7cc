"""Helpers shared by the agent-loop tests and every test that runs a command cell (tests/,
tests/jupyter/ and tests/e2e/ import it)."""
from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from lily_kernel.commands import router
from lily_kernel.commands.results import ActionCard, SkillRequest
from lily_kernel.commands.runner import Runner
from lily_kernel.session.session import Session
from lily_kernel.testing.server import ScriptedServer
from lily_kernel.tools import notebook_tools


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
        if server is not None:  # the model these tests stand in for, named: the scripted
            # server lists one model, which Lily would take for an unnamed one
            # (docs/agent.md#the-endpoints-models)
            env["OPENAI_BASE_URL"], env["LILY_MODEL"] = server.url, "gpt-4o-mini"
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


def command_results(session: Session, cell: str) -> list[Any]:
    """What a face receives for the command ``cell``, in order: the cell run as every face
    runs it, through a :class:`~lily_kernel.commands.runner.Runner` bound to ``session``
    (a skill request goes on to the agent; a card shown waits, as the faces show it).
    A failing command raises its ``CommandError``, as it fails the face's cell."""
    return _received(session, lambda runner: runner.command(cell))


def prose_results(session: Session, text: str) -> list[Any]:
    """What a face receives for the prose cell ``text``, in order (as :func:`command_results`)."""
    return _received(session, lambda runner: runner.ask(text))


def _received(session: Session, run: Callable[[Runner], Iterable[Any]]) -> list[Any]:
    """Each result of ``run`` on a Runner bound to ``session``; a card shown waits."""
    runner = Runner(lambda: session)
    results = []
    for result in run(runner):
        if isinstance(result, ActionCard):
            runner.shown(result)
        results.append(result)
    return results


def run_command(session: Session, cell: str) -> Any:
    """The one result a face shows for the command ``cell`` (see :func:`command_results`)."""
    results = command_results(session, cell)
    assert len(results) == 1, (cell, results)
    return results[0]


def skill_request(session: Session, cell: str) -> SkillRequest:
    """What the router resolves the skill cell ``cell`` to (which skill, with what prompt),
    before the Runner sends it to the agent: for tests of that resolution, with no model."""
    command = router.parse(cell)
    assert command is not None, cell
    request = router.execute(session, command)
    assert isinstance(request, SkillRequest), (cell, request)
    return request


class Book:
    """A notebook stand-in for the notebook tools: an empty namespace (or ``ns``) and
    history; run() records the code and prints ``RAN <code>``; propose() records the code."""

    def __init__(self, ns: dict[str, Any] | None = None) -> None:
        self.ran: list[str] = []
        self.proposed: list[str] = []
        self.ns = ns or {}

    def namespace(self) -> dict[str, Any]:
        return self.ns

    def hidden(self) -> dict[str, Any]:
        return {}

    def cells(self, last: int) -> list[Any]:
        return []

    def last_error(self) -> None:
        return None

    def propose(self, code: str) -> bool:
        self.proposed.append(code)
        return True

    def run(self, code: str) -> notebook_tools.RunResult:
        self.ran.append(code)
        return notebook_tools.RunResult(f"RAN {code}")
