"""What a command returns. Pure data: each face renders it its own way."""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from lily_kernel.agent.pending import PendingItem
from lily_kernel.skills.skill import Skill
from lily_kernel.skills.snapshot import Snapshot
from lily_kernel.errors import CommandError  # re-exported: callers import it from here


@dataclass(frozen=True)
class SkillTable:
    """``/skills``: the snapshot's skills (and, with ``show_all``, what was left out and why)."""
    snapshot: Snapshot
    show_all: bool = False


@dataclass(frozen=True)
class HelpPage:
    """``/help``: Markdown built from the snapshot and the built-in command table."""
    title: str
    markdown: str


@dataclass(frozen=True)
class AgentList:
    agents: tuple[str, ...]
    active: str
    switched: bool = False


@dataclass(frozen=True)
class McpStatus:
    """``/mcp``: each MCP server's state and tools (``Hub.status`` rows), and name clashes."""
    servers: tuple[dict[str, Any], ...]
    problems: tuple[str, ...] = ()
    restarted: str | None = None


@dataclass(frozen=True)
class McpImage:
    """An image an MCP tool returned (``image/png`` or ``image/jpeg``), shown in the notebook."""
    mime: str
    data: bytes
    tool: str


@dataclass(frozen=True)
class Notice:
    """A short confirmation, in Markdown."""
    markdown: str


@dataclass(frozen=True)
class ToolOutput:
    """A ``tool_dispatch`` skill ran its tool; the model was not involved."""
    skill: str
    tool: str
    value: Any


@dataclass(frozen=True)
class SkillRequest:
    """A ``prompt_rewrite`` skill forced by ``/skill`` or an alias: the request for the agent loop."""
    skill: Skill
    input: str

    @property
    def prompt(self) -> str:
        """The skill's instructions followed by the user's input; a body with Claude Code's
        ``$ARGUMENTS`` placeholders gets the input in their place instead
        (docs/skills-compat.md#claude-code-conventions)."""
        body = self.skill.body.strip()
        head = (f"Use the skill '{self.skill.name}' for this request.\n\n"
                f"<skill name=\"{self.skill.name}\">\n")
        if "$" in body and _PLACEHOLDER.search(body):
            return f"{head}{substitute_arguments(body, self.input.strip())}\n</skill>"
        request = self.input.strip() or "(no further input: apply the skill to the conversation so far)"
        return f"{head}{body}\n</skill>\n\n{request}"


_PLACEHOLDER = re.compile(r"\$ARGUMENTS\[(\d+)\]|\$ARGUMENTS\b|\$(\d+)")


def substitute_arguments(body: str, arguments: str) -> str:
    """``$ARGUMENTS`` → the whole input; ``$ARGUMENTS[N]`` and ``$N`` → its word N (from 0,
    shell-style quoting; empty past the last word). One pass: the input is not rescanned."""
    try:
        words = shlex.split(arguments)
    except ValueError:  # an unbalanced quote: plain words
        words = arguments.split()

    def value(m: re.Match) -> str:
        index = m.group(1) or m.group(2)
        if index is None:
            return arguments
        i = int(index)
        return words[i] if i < len(words) else ""
    return _PLACEHOLDER.sub(value, body)


@dataclass(frozen=True)
class ModelInfo:
    config: dict
    changed: tuple[str, ...] = ()
    usage: dict | None = None  # the session's reported token totals, if any were reported


@dataclass(frozen=True)
class Answer:
    """The agent's final answer to one request, and what it used."""
    text: str
    skill: str | None = None
    tools: tuple[str, ...] = ()
    model: str = ""
    usage: dict | None = None  # {"prompt_tokens", "completion_tokens"} when the endpoint reported it

    def footer(self) -> str:
        parts = [f"skill: {self.skill}" if self.skill else "no skill"]
        if self.tools:
            parts.append("tools: " + ", ".join(dict.fromkeys(self.tools)))
        if self.model:
            parts.append(f"model: {self.model}")
        if self.usage:
            parts.append(f"tokens: {self.usage['prompt_tokens']:,} prompt + "
                         f"{self.usage['completion_tokens']:,} completion")
        return " · ".join(parts)


@dataclass(frozen=True)
class ActionCard:
    """Pending work shown to the user: what would happen, and how to allow it. The face
    tells the runner once it is displayed (``Runner.shown``); only then does it wait."""
    action: PendingItem
    purpose: str = ""


@dataclass(frozen=True)
class ActionDone:
    """A typed-skill action carried out (or cancelled), or a held tool call decided."""
    action: PendingItem
    summary: str
    tool_result: str | None = None  # a confirmed tool call: the agent continues with this
    display: object | None = None  # what it showed (the face's own data), for the face


@dataclass(frozen=True)
class ConfirmedRun:
    """A held tool call confirmed with a button: its output and how the request went on."""
    done: ActionDone
    output: str  # what the code printed and showed, as text
    answer: Answer | None = None
    proposed: tuple[str, ...] = ()  # cells the agent proposed (no cell was running to take them)
    card: ActionCard | None = None  # a further call waiting for confirmation
