"""Eligibility and notes: what the loader checks of a parsed skill against this host.

Lily's own ``eligibility`` (os, env, binaries, any_binaries), the tools a
skill needs, and OpenClaw's gating (docs/skills-compat.md#openclaw-gating) all
apply; any failure makes the skill ineligible with every reason listed. The
notes (unknown keys, no description, a description over the Agent Skills
limit) never exclude a skill (docs/skills-compat.md#notes).
"""
from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lily_kernel.skills import openclaw
from lily_kernel.skills.skill import MAX_DESCRIPTION, Skill, body_summary

if TYPE_CHECKING:  # passed in by the session
    from lily_kernel.tools.tool_registry import ToolPolicy, ToolRegistry



@dataclass(frozen=True)
class Host:
    """What eligibility is checked against (the real machine by default)."""

    platform: str
    env: Mapping[str, str]
    path: str | None

    @classmethod
    def current(cls) -> Host:
        """This host: its platform, environment and PATH."""
        return cls(sys.platform, dict(os.environ), os.environ.get("PATH"))



def ineligibility(skill: Skill, tools: ToolRegistry, policy: ToolPolicy,
                  host: Host, which: WhichCache,
                  tool_reasons: ToolReasons | None = None) -> str | None:
    """Why ``skill`` cannot run on ``host`` (every failed rule, '; '-joined), or None."""
    if tool_reasons is None:
        tool_reasons = ToolReasons(tools, policy)
    elig = skill.eligibility
    # The usual skill passes every rule: tell that first, asking the same questions in the
    # same order (tool_reasons asks the policy once per name), and build no list.
    if ((elig.os is None or host.platform in elig.os) and not elig.env and not elig.binaries
            and not elig.any_binaries and skill.openclaw is None
            and (not skill.command_tool or not tool_reasons[skill.command_tool])):
        for tool in skill.requires_tools:
            if tool_reasons[tool]:
                break
        else:
            return None
    problems: list[str] = []
    if elig.os is not None and host.platform not in elig.os:
        problems.append(f"requires OS {' or '.join(elig.os)}; this is {host.platform}")
    if elig.env:
        missing_env = [v for v in elig.env if not host.env.get(v)]
        if missing_env:
            problems.append(f"requires environment variable(s) {', '.join(missing_env)} "
                            "(unset or empty)")
    if elig.binaries:
        missing_bin = [b for b in elig.binaries if not which(b)]
        if missing_bin:
            problems.append(f"requires binar{'y' if len(missing_bin) == 1 else 'ies'} "
                            f"{', '.join(missing_bin)} on PATH (not found)")
    if elig.any_binaries and not any(which(b) for b in elig.any_binaries):
        problems.append(f"requires one of the binaries {', '.join(elig.any_binaries)} "
                        "on PATH (none found)")
    if skill.openclaw is not None:
        problems += openclaw.problems(skill.openclaw, host.platform, host.env, which)
    if skill.command_tool:
        reason = tool_reasons[skill.command_tool]
        if reason:
            problems.append(f"its command_tool is unavailable: {reason}")
    notebook = []
    for tool in skill.requires_tools:
        reason = tool_reasons[tool]
        if reason and tool_reasons.needs_notebook(tool):  # ineligible here, not broken
            notebook.append(tool)
        elif reason:
            problems.append(f"requires tool '{tool}': {reason}")
    if notebook:  # one reason, not one per tool: the fix is the same (open a notebook)
        problems.append(f"{NOTEBOOK_ONLY} (the Lily kernel or %load_ext lily) for its notebook "
                        f"tool{'s' if len(notebook) > 1 else ''} {', '.join(notebook)}")
    return "; ".join(problems) or None


def asks_path(skill: Skill) -> bool:
    """Does the skill's eligibility look binaries up on PATH? Its verdict can change with
    no change of the host's settings (a binary installed), so it is asked at every load."""
    elig, gate = skill.eligibility, skill.openclaw
    return bool(elig.binaries or elig.any_binaries
                or (gate is not None and not gate.always and (gate.bins or gate.any_bins)))


NOTEBOOK_ONLY = "needs a notebook"  # the start of the reason a notebook face removes


def notes(skill: Skill) -> list[str]:
    """The notes of an included skill: things the author should know, none excluding."""
    out = []
    if skill.unknown_keys:
        out.append(f"unknown frontmatter key(s) ignored: {', '.join(skill.unknown_keys)}")
    if not skill.summary:
        stand_in = body_summary(skill.body)
        out.append("no summary or description: the model's skills index shows the first "
                   "paragraph of the body instead" if stand_in else
                   "no summary or description, and no body text: the skill is left out of "
                   "the model's skills index (it still runs with /skill)")
    if len(skill.description) > MAX_DESCRIPTION:
        out.append(f"description is {len(skill.description)} characters; the Agent Skills "
                   f"limit is {MAX_DESCRIPTION} (other agents may refuse the skill)")
    return out


class ToolReasons(dict[str, Any]):
    """``policy.unavailable_reason(tools, name)`` per tool name, asked once per load."""

    def __init__(self, tools: ToolRegistry, policy: ToolPolicy) -> None:
        super().__init__()
        self._tools, self._policy = tools, policy

    def __missing__(self, name: str) -> str | None:
        reason = self[name] = self._policy.unavailable_reason(self._tools, name)
        return reason

    def needs_notebook(self, name: str) -> bool:
        """Is tool ``name`` missing only because this is no notebook?"""
        return self._policy.needs_notebook(self._tools, name)


class WhichCache:
    """Whether a binary is on the host's PATH, looked up once per name per load."""

    def __init__(self, path: str | None) -> None:
        self._path = path
        self._seen: dict[str, bool] = {}

    def __call__(self, binary: str) -> bool:
        """Whether ``binary`` is on the PATH (asked once per binary)."""
        if binary not in self._seen:
            self._seen[binary] = shutil.which(binary, path=self._path) is not None
        return self._seen[binary]
