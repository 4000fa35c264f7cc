"""What a command returns. Pure data: each face renders it its own way.

An image an MCP tool returned is yielded as the hub kept it,
:class:`lily_kernel.tools.mcp.mcp_tools.McpImage`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lily_kernel.agent.pending import PendingItem
from lily_kernel.skills.skill import Skill
from lily_kernel.skills.snapshot import Snapshot
from lily_kernel.skills.substitution import with_arguments, with_skill_dir
from lily_kernel.tools.gate import Outcome


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
    """/agent: the persona agents and the active one."""
    agents: tuple[str, ...]
    active: str
    switched: bool = False
    rules: tuple[str, ...] = ()  # the workspace's rules files, each with whether it applies


@dataclass(frozen=True)
class McpStatus:
    """``/mcp``: each MCP server's state and tools (``Hub.status`` rows), name clashes, and
    what changed since the configuration was last read (one line each)."""
    servers: tuple[dict[str, Any], ...]
    problems: tuple[str, ...] = ()
    restarted: str | None = None
    changes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Notice:
    """A short confirmation, in Markdown."""
    markdown: str


@dataclass(frozen=True)
class TrustReview:
    """``/trust``: what trusting the workspace would let it do, in Markdown; nothing is
    trusted yet. ``fingerprint`` is what ``/trust --yes`` (or the card's Trust button)
    trusts (docs/trust-boundary.md#workspace-trust)."""
    markdown: str
    fingerprint: str


@dataclass(frozen=True)
class LogsView:
    """``/logs``: the session's summary (``lily logs`` list row) and its last cells."""
    summary: dict[str, Any]
    rows: tuple[tuple[str, ...], ...]
    shown: int
    total: int


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
        """The skill's instructions with the user's input, as Claude Code gives a skill its
        arguments: ``$ARGUMENTS`` placeholders replaced, or ``ARGUMENTS: <input>`` after a
        body that has none; ``${CLAUDE_SKILL_DIR}`` / ``{baseDir}`` are the skill's folder
        (docs/skills-compat.md#claude-code-conventions)."""
        arguments = self.input.strip()
        body = with_skill_dir(with_arguments(self.skill.body.strip(), arguments),
                              self.skill.path)
        prompt = (f"Use the skill '{self.skill.name}' for this request.\n\n"
                  f"<skill name=\"{self.skill.name}\">\n{body}\n</skill>")
        if not arguments:
            prompt += "\n\n(no further input: apply the skill to the conversation so far)"
        return prompt


@dataclass(frozen=True)
class ModelInfo:
    """/model: the model settings, what changed and the token totals."""
    config: dict[str, Any]
    changed: tuple[str, ...] = ()
    usage: dict[str, Any] | None = None  # the session's reported token totals, if any were reported
    parts: dict[str, Any] | None = None  # token counts of the prompt's fixed parts: budget.parts
    models: tuple[str, ...] | None = None  # what the endpoint lists (agent/endpoint_info.py)
    mode: str = ""  # the permission mode (docs/permissions.md#modes)
    sent: tuple[tuple[str, str], ...] = ()  # what each request sends: model_client.sent_settings
    notes: tuple[str, ...] = ()  # e.g. the model the endpoint chose, a withheld base_url


@dataclass(frozen=True)
class PolicyView:
    """``/mode`` and ``/policy``: the permission mode and, for /policy, every effective
    setting with the layer it came from (docs/permissions.md#policy)."""
    mode: str
    rows: tuple[tuple[str, str, str], ...] = ()
    notes: tuple[str, ...] = ()
    changed: bool = False
    what: str = ""  # one line: what the mode lets run without a card


@dataclass(frozen=True)
class CompactRequest:
    """``/compact``: the runner asks the model to summarise the turns that no longer fit."""


@dataclass(frozen=True)
class Answer:
    """The agent's final answer to one request, and what it used."""
    text: str
    skill: str | None = None
    tools: tuple[str, ...] = ()
    model: str = ""
    usage: dict[str, Any] | None = None  # {"prompt_tokens", "completion_tokens"} when the endpoint reported it
    left_out: tuple[int, int] = (0, 0)  # earlier turns not sent, tool results shortened
    notes: tuple[str, ...] = ()  # what the loop did for the model: docs/agent.md#loop-hygiene
    attached: tuple[str, ...] = ()  # what the request's @ mentions attached
    mode: str = ""  # the permission mode the request ran under

    def footer(self) -> str:
        """The line under an answer: the skill and tools used, the step and tokens."""
        parts = [f"skill: {self.skill}" if self.skill else "no skill"]
        if self.attached:
            parts.append("attached: " + ", ".join(self.attached))
        if self.tools:
            parts.append("tools: " + ", ".join(dict.fromkeys(self.tools)))
        if self.model:
            parts.append(f"model: {self.model}")
        if self.mode:
            parts.append(f"mode: {self.mode}")
        if self.usage:
            parts.append(f"tokens: {self.usage['prompt_tokens']:,} prompt + "
                         f"{self.usage['completion_tokens']:,} completion")
        turns, results = self.left_out
        if turns:  # the context budget left them out: docs/agent.md#context-budget
            parts.append(f"{turns:,} earlier turn{'s' if turns != 1 else ''} not sent")
        if results:
            parts.append(f"{results:,} tool result{'s' if results != 1 else ''} "
                         "shortened")
        parts.extend(self.notes)
        return " · ".join(parts)


@dataclass(frozen=True)
class ActionCard:
    """Pending work shown to the user: what would happen, and how to allow it. The face
    tells the runner once it is displayed (``Runner.shown``); only then does it wait."""
    action: PendingItem
    purpose: str = ""
    arguments: str = ""  # a held call: its arguments as pretty JSON, redacted, in full
    change: str | None = None  # a write over an existing file: the diff, redacted, in full
    code: str | None = None  # run_python's code, again, to highlight
    reason: str = ""  # why this call asks
    warning: str = ""  # hidden characters made visible: the card's first line says so


@dataclass(frozen=True)
class ActionDone:
    """A typed-skill action carried out (or cancelled), or a held tool call decided."""
    action: PendingItem
    summary: str
    tool_result: str | None = None  # a confirmed tool call: the agent continues with this
    display: object | None = None  # what it showed (the face's own data), for the face
    outcome: Outcome | None = None  # a tool call's: what the gate decided when it ran


@dataclass(frozen=True)
class ProposedCells:
    """Cells the agent proposed while no cell ran to take them (after a card's button)."""
    cells: tuple[str, ...]


@dataclass(frozen=True)
class ConfirmedRun:
    """A held tool call confirmed with a button: its output and how the request went on."""
    done: ActionDone
    output: str  # what the code printed and showed, as text
    answer: Answer | None = None
    proposed: tuple[str, ...] = ()  # cells the agent proposed (no cell was running to take them)
    card: ActionCard | None = None  # a further call waiting for confirmation
