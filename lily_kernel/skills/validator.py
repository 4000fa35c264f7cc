"""``lily skills validate``: check skill folders one by one, without loading a snapshot.

Three rule sets (docs/skills-compat.md#validation):

- default: Lily's format rules, from the file alone (the same parser as the loader);
- ``lily``: what a load here would make of the skill: the loader's own reasons,
  including the tools, eligibility on this host and the notes;
- ``strict``: the Agent Skills specification (its six fields, its name rules and
  length limits, ``metadata`` mapping strings to strings), with the deliberate
  differences from ``skills-ref`` the docs list: a key Lily reads (``summary``,
  ``command``, Claude Code's) is a warning, not an error; a key nobody here reads is an
  error, as in skills-ref; ``allowed-tools`` or ``license`` not a string and an empty
  ``compatibility`` are warnings (docs/skills-compat.md#strict).
"""
from __future__ import annotations

import os
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lily_kernel.errors import FrontmatterError, SkillError
from lily_kernel.skills import frontmatter
from lily_kernel.skills.skill import (
    AGENT_SKILLS_KEYS,
    CLAUDE_CODE_KEYS,
    KNOWN_KEYS,
    MAX_DESCRIPTION,
    MAX_NAME_LEN,
    V0_KEYS,
    kind_of,
    parse,
)

if TYPE_CHECKING:
    from lily_kernel.skills.eligibility import Host
    from lily_kernel.tools.tool_registry import ToolPolicy, ToolRegistry

MAX_COMPATIBILITY = 500
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


def validate(path: str | os.PathLike[str], strict: bool = False, *,
             reserved: frozenset[str] = frozenset()) -> list[str]:
    """Problems found in the skill at ``path`` (a skill folder or its SKILL.md); [] if valid.
    With ``strict``, only the errors: :func:`validate_strict` has the warnings too.
    ``reserved``: the built-in command names, which the skill's ``command`` may not take
    (``lily skills validate`` passes them)."""
    if strict:
        return validate_strict(path)[0]
    try:
        folder, data = _read(path)
    except SkillError as exc:
        return [str(exc)]
    name = folder.resolve().name
    try:
        skill = parse(name, "workspace", str(folder), data)
    except SkillError as exc:
        return [str(exc)]
    if skill.command and skill.command in reserved:
        return [f"'command' /{skill.command} collides with the built-in command "
                f"/{skill.command}"]
    return []


def validate_lily(path: str | os.PathLike[str], tools: ToolRegistry, policy: ToolPolicy,
                  host: Host | None = None, *, reserved: frozenset[str] = frozenset(),
                  ) -> list[tuple[str, str]]:
    """``(kind, reason)`` of every diagnostic a load here would give the skill at ``path``:
    ``skill_error`` and ``ineligible`` exclude it, ``note`` does not; ``reserved`` as for
    :func:`validate`."""
    from lily_kernel.skills.loader import Candidate, check_one
    from lily_kernel.skills.paths import Root
    try:
        folder, _ = _read(path)
    except SkillError as exc:
        return [("skill_error", str(exc))]
    folder = Path(os.path.abspath(folder))
    cand = Candidate(folder.name, Root("workspace", folder.parent, True), folder)
    _, diagnostics = check_one(cand, tools, policy, host, reserved=reserved)
    return [(d.kind, d.reason) for d in diagnostics]


def _read(path: str | os.PathLike[str]) -> tuple[Path, bytes]:
    """(the skill folder, SKILL.md's bytes); :class:`SkillError` says why not."""
    path = Path(path)
    if path.name == "SKILL.md" and path.is_file():
        path = path.parent
    if not path.is_dir():
        raise SkillError(f"{path} is not a skill folder")
    skill_md = path / "SKILL.md"
    # Spelled exactly: on a case-insensitive file system 'skill.md' opens as SKILL.md too.
    if "SKILL.md" not in os.listdir(path):
        others = [n for n in os.listdir(path) if n.lower() == "skill.md"]
        raise SkillError("SKILL.md is missing" + (f"; found '{others[0]}': the file must be "
                                                  "named SKILL.md exactly" if others else ""))
    try:
        return path, skill_md.read_bytes()
    except OSError as exc:
        raise SkillError(f"SKILL.md cannot be read: {exc.strerror or exc}") from None


def validate_strict(path: str | os.PathLike[str]) -> tuple[list[str], list[str]]:
    """``--strict`` on the skill at ``path``: (errors, warnings)."""
    try:
        folder, data = _read(path)
    except SkillError as exc:
        return [str(exc)], []
    return strict_findings(folder.resolve().name, data)


def strict_problems(dir_name: str, data: bytes) -> list[str]:
    """The Agent Skills rules' errors, one message per problem, each naming its field."""
    return strict_findings(dir_name, data)[0]


def strict_findings(dir_name: str, data: bytes) -> tuple[list[str], list[str]]:
    """The Agent Skills rules as (errors, warnings): a key Lily reads but the format does
    not have is a warning (other clients ignore it, skills-ref refuses it); any other key
    outside the format is an error; ``metadata`` not mapping strings to strings is an
    error, as the specification states (skills-ref turns the values into text)."""
    try:
        text = frontmatter.decode(data)
        source, _ = frontmatter.split(text)
        if source is None:
            return ["SKILL.md must start with YAML frontmatter (a first line '---')"], []
        meta = frontmatter.parse_yaml(source)
    except FrontmatterError as exc:
        return [str(exc)], []
    outside = [key for key in meta if key not in AGENT_SKILLS_KEYS]
    out = [_not_in_format(key) for key in outside if key not in KNOWN_KEYS]
    warnings = [_not_in_format(key) for key in outside if key in KNOWN_KEYS]
    out += _name(meta, dir_name)
    description = meta.get("description")
    if "description" not in meta:
        out.append("missing required field 'description'")
    elif not isinstance(description, str) or not description.strip():
        out.append("'description' must be a non-empty string")
    elif len(description) > MAX_DESCRIPTION:
        out.append(f"description exceeds {MAX_DESCRIPTION} characters ({len(description)})")
    if "compatibility" in meta:
        compat = meta["compatibility"]
        if not isinstance(compat, str) or not compat:
            warnings.append(f"'compatibility' must be a string of 1 to {MAX_COMPATIBILITY} "
                            "characters")
        elif len(compat) > MAX_COMPATIBILITY:
            out.append(f"compatibility exceeds {MAX_COMPATIBILITY} characters ({len(compat)})")
    if "license" in meta and not isinstance(meta["license"], str):
        warnings.append("'license' must be a string")
    if "allowed-tools" in meta and not isinstance(meta["allowed-tools"], str):
        warnings.append("'allowed-tools' must be a string (tool names separated by spaces)")
    if "metadata" in meta:
        out += _metadata(meta["metadata"])
    return out, warnings


def _not_in_format(key: object) -> str:
    whose = (" (a Lily key)" if key in V0_KEYS or key == "activity" else
             " (a Claude Code key)" if key in CLAUDE_CODE_KEYS else "")
    return f"'{key}' is not part of the Agent Skills format{whose}"


def _name(meta: dict[str, Any], dir_name: str) -> list[str]:
    if "name" not in meta:
        return ["missing required field 'name'"]
    name = meta["name"]
    if not isinstance(name, str) or not name.strip():
        return ["'name' must be a non-empty string"]
    out = []
    if len(name) > MAX_NAME_LEN:
        out.append(f"name '{name}' exceeds {MAX_NAME_LEN} characters ({len(name)})")
    if name != name.lower():
        out.append(f"name '{name}' must be lowercase")
    bad = sorted({c for c in name.lower() if c not in _NAME_CHARS})
    if bad:
        out.append(f"name '{name}' contains {' '.join(map(repr, bad))}: only lowercase ASCII "
                   "letters, digits and hyphens are allowed")
    if name.startswith("-") or name.endswith("-"):
        out.append(f"name '{name}' cannot start or end with a hyphen")
    if "--" in name:
        out.append(f"name '{name}' cannot contain consecutive hyphens")
    if name != dir_name:
        out.append(f"name '{name}' does not match the directory name '{dir_name}'"
                   + (" (the same after NFKC normalisation, but Lily compares names exactly)"
                      if unicodedata.normalize("NFKC", name) ==
                      unicodedata.normalize("NFKC", dir_name) else ""))
    return out


def _metadata(value: object) -> list[str]:
    if not isinstance(value, dict):
        return ["'metadata' must be a mapping of strings to strings"]
    out = []
    for key, item in value.items():
        if not isinstance(key, str):
            out.append(f"'metadata' key {key!r} must be a string")
        elif not isinstance(item, str):
            out.append(f"'metadata.{key}' must be a string, not {kind_of(item)}")
    return out


