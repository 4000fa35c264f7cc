"""Parse one skill directory's SKILL.md into an immutable :class:`Skill`.

Every rule of SPEC §2 that can be checked from the file alone lives here; the
rules that need the other skills or the tool registry (built-in command
collisions, alias clashes, ``command_tool`` registration, eligibility) live in
:mod:`lily_kernel.loader`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from . import frontmatter

NAME_RE = re.compile(r"^[a-z0-9]+(?:[_-][a-z0-9]+)*$")
COMMAND_RE = re.compile(r"^[a-z0-9_-]+$")
MAX_NAME_LEN = 64
INVOCATION_MODES = ("prompt_rewrite", "tool_dispatch")
OS_NAMES = ("darwin", "linux", "win32")
ELIGIBILITY_KEYS = ("os", "env", "binaries")

# Keys Lily reads. Everything else is kept in ``frontmatter`` and listed as a note.
V0_KEYS = ("summary", "invocation_mode", "command", "command_tool", "requires_tools", "eligibility")
AGENT_SKILLS_KEYS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
EXTRA_KEYS = ("disable-model-invocation",)
KNOWN_KEYS = frozenset(V0_KEYS + AGENT_SKILLS_KEYS + EXTRA_KEYS)


class SkillError(ValueError):
    """A skill is malformed; the message names the cause (and the key, if any)."""


@dataclass(frozen=True)
class Eligibility:
    os: tuple[str, ...] | None = None  # None: any OS
    env: tuple[str, ...] = ()
    binaries: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"os": list(self.os) if self.os is not None else None,
                "env": list(self.env), "binaries": list(self.binaries)}


@dataclass(frozen=True)
class Skill:
    name: str
    source: str  # workspace | user | bundled
    path: str  # the skill directory
    text: str  # the whole SKILL.md, decoded
    body: str
    summary: str = ""
    description: str = ""
    invocation_mode: str = "prompt_rewrite"
    command: str | None = None
    command_tool: str | None = None
    requires_tools: tuple[str, ...] = ()
    eligibility: Eligibility = Eligibility()
    license: str | None = None
    compatibility: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    allowed_tools: tuple[str, ...] = ()
    disable_model_invocation: bool = False
    unknown_keys: tuple[str, ...] = ()
    frontmatter: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def skill_md(self) -> str:
        return self.path.rstrip("/\\") + "/SKILL.md"

    @property
    def model_invocable(self) -> bool:
        return not self.disable_model_invocation


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid skill name, or None when it is."""
    if not name:
        return "skill name is empty"
    if len(name) > MAX_NAME_LEN:
        return f"skill name '{name}' is {len(name)} characters; the limit is {MAX_NAME_LEN}"
    if not NAME_RE.match(name):
        return (f"skill name '{name}' is invalid: use lowercase letters and digits, "
                "separated by single '-' or '_'")
    return None


def parse(name: str, source: str, path: str, data: bytes) -> Skill:
    """Parse SKILL.md bytes of the skill directory ``path`` named ``name``.

    Raises :class:`SkillError` with a readable reason when the skill is malformed.
    """
    problem = name_problem(name)
    if problem:
        raise SkillError(problem)
    try:
        text = frontmatter.decode(data)
        raw_yaml, body = frontmatter.split(text)
        meta = frontmatter.parse_yaml(raw_yaml) if raw_yaml is not None else {}
    except frontmatter.FrontmatterError as exc:
        raise SkillError(str(exc)) from None
    return _from_mapping(name, source, path, text, body, meta)


def _from_mapping(name: str, source: str, path: str, text: str, body: str, meta: dict) -> Skill:
    for key in meta:
        if not isinstance(key, str):
            raise SkillError(f"frontmatter key {key!r} is not a string")

    declared_name = _opt_str(meta, "name")
    if declared_name is not None and declared_name != name:
        raise SkillError(f"'name' is '{declared_name}' but the skill directory is '{name}'")

    description = _opt_str(meta, "description") or ""
    summary = _opt_str(meta, "summary")
    mode = _opt_str(meta, "invocation_mode") or "prompt_rewrite"
    if mode not in INVOCATION_MODES:
        raise SkillError(f"'invocation_mode' must be one of {', '.join(INVOCATION_MODES)}, not '{mode}'")

    command = _opt_str(meta, "command")
    if command is not None and not COMMAND_RE.match(command):
        raise SkillError(f"'command' '{command}' must match ^[a-z0-9_-]+$")

    command_tool = _opt_str(meta, "command_tool")
    if mode == "tool_dispatch" and not command_tool:
        raise SkillError("'invocation_mode' is tool_dispatch but 'command_tool' is missing")

    disable = meta.get("disable-model-invocation", False)
    if not isinstance(disable, bool):
        raise SkillError(f"'disable-model-invocation' must be true or false, not {_kind(disable)}")

    metadata = meta.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise SkillError(f"'metadata' must be a mapping, not {_kind(metadata)}")

    return Skill(
        name=name,
        source=source,
        path=path,
        text=text,
        body=body,
        summary=summary if summary is not None else description,
        description=description,
        invocation_mode=mode,
        command=command,
        command_tool=command_tool,
        requires_tools=_str_list(meta.get("requires_tools"), "requires_tools"),
        eligibility=_eligibility(meta.get("eligibility")),
        license=_opt_str(meta, "license"),
        compatibility=_opt_str(meta, "compatibility"),
        metadata=MappingProxyType(dict(metadata)),
        allowed_tools=_allowed_tools(meta.get("allowed-tools")),
        disable_model_invocation=disable,
        unknown_keys=tuple(sorted(k for k in meta if k not in KNOWN_KEYS)),
        frontmatter=MappingProxyType(dict(meta)),
    )


def _opt_str(meta: dict, key: str) -> str | None:
    value = meta.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise SkillError(f"'{key}' must be a string, not {_kind(value)}")
    return value


def _str_list(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise SkillError(f"'{key}' must be a list of strings, not {_kind(value)}")
    for item in value:
        if not isinstance(item, str) or not item:
            raise SkillError(f"'{key}' must be a list of non-empty strings; found {_kind(item)}")
    return tuple(value)


def _eligibility(value: Any) -> Eligibility:
    if value is None:
        return Eligibility()
    if not isinstance(value, dict):
        raise SkillError(f"'eligibility' must be a mapping, not {_kind(value)}")
    unknown = sorted(str(k) for k in value if k not in ELIGIBILITY_KEYS)
    if unknown:
        raise SkillError(f"'eligibility' has unknown key(s): {', '.join(unknown)} "
                         f"(allowed: {', '.join(ELIGIBILITY_KEYS)})")
    os_list = value.get("os")
    if os_list is not None:
        os_list = _str_list(os_list, "eligibility.os")
        bad = [o for o in os_list if o not in OS_NAMES]
        if bad:
            raise SkillError(f"'eligibility.os' has unknown OS {', '.join(map(repr, bad))} "
                             f"(allowed: {', '.join(OS_NAMES)})")
        if not os_list:  # an empty list means "no constraint", as in seed 000's example
            os_list = None
    return Eligibility(
        os=os_list,
        env=_str_list(value.get("env"), "eligibility.env"),
        binaries=_str_list(value.get("binaries"), "eligibility.binaries"),
    )


def _allowed_tools(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(value.split())
    return _str_list(value, "allowed-tools")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"
