"""``lily skills validate``: check skill folders one by one, without loading a snapshot.

The default rules are Lily's (SPEC §2). ``strict`` adds the public Agent
Skills rules exactly: hyphen-only names, NFKC name comparison, a required
``description`` of at most 1024 characters, ``compatibility`` of at most 500,
and no frontmatter fields outside the Agent Skills set and Lily's own keys.
"""
from __future__ import annotations

import os
import unicodedata
from pathlib import Path

from lily_kernel.commands.table import BUILTIN_NAMES
from lily_kernel.skills.skill import AGENT_SKILLS_KEYS, KNOWN_KEYS, MAX_NAME_LEN, SkillError, parse

MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500


def validate(path: str | os.PathLike, strict: bool = False) -> list[str]:
    """Problems found in the skill at ``path`` (a skill folder or its SKILL.md); [] if valid."""
    path = Path(path)
    if path.name == "SKILL.md" and path.is_file():
        path = path.parent
    if not path.is_dir():
        return [f"{path} is not a skill folder"]
    skill_md = path / "SKILL.md"
    try:
        data = skill_md.read_bytes()
    except FileNotFoundError:
        return ["SKILL.md is missing"]
    except OSError as exc:
        return [f"SKILL.md cannot be read: {exc.strerror or exc}"]

    name = path.resolve().name
    problems: list[str] = []
    if strict:
        problems += _strict_name(name)
    try:
        skill = parse(name, "workspace", str(path), data)
    except SkillError as exc:
        # Skip Lily's name message only when the strict rules already reported the name:
        # they accept some names Lily cannot load (e.g. 'café'), which must not pass.
        if not (problems and "skill name" in str(exc)):
            problems.append(str(exc))
        return problems
    if skill.command and skill.command in BUILTIN_NAMES:
        problems.append(f"'command' /{skill.command} collides with the built-in command "
                        f"/{skill.command}")
    if strict:
        problems += _strict_fields(dict(skill.frontmatter), name)
    return problems


def _strict_name(name: str) -> list[str]:
    name = unicodedata.normalize("NFKC", name)
    out = []
    if not name:
        out.append("name must not be empty")
    if len(name) > MAX_NAME_LEN:
        out.append(f"name '{name}' exceeds {MAX_NAME_LEN} characters ({len(name)})")
    if name != name.lower():
        out.append(f"name '{name}' must be lowercase")
    if "_" in name:
        out.append(f"name '{name}' contains '_'; the Agent Skills format allows only "
                   "letters, digits and hyphens")
    if name.startswith("-") or name.endswith("-"):
        out.append(f"name '{name}' cannot start or end with a hyphen")
    if "--" in name:
        out.append(f"name '{name}' cannot contain consecutive hyphens")
    bad = sorted({c for c in name if not (c.isalnum() or c in "-_")})
    if bad:
        out.append(f"name '{name}' contains invalid characters: {' '.join(map(repr, bad))}")
    return out


def _strict_fields(meta: dict, dir_name: str) -> list[str]:
    out = []
    declared = meta.get("name")
    if declared is None:
        out.append("missing required field 'name'")
    elif unicodedata.normalize("NFKC", declared) != unicodedata.normalize("NFKC", dir_name):
        out.append(f"name '{declared}' does not match the directory name '{dir_name}'")
    desc = meta.get("description")
    if not isinstance(desc, str) or not desc.strip():
        out.append("missing required field 'description'")
    elif len(desc) > MAX_DESCRIPTION:
        out.append(f"description exceeds {MAX_DESCRIPTION} characters ({len(desc)})")
    compat = meta.get("compatibility")
    if isinstance(compat, str) and len(compat) > MAX_COMPATIBILITY:
        out.append(f"compatibility exceeds {MAX_COMPATIBILITY} characters ({len(compat)})")
    extra = sorted(k for k in meta if k not in KNOWN_KEYS)
    if extra:
        out.append(f"unexpected field(s) in frontmatter: {', '.join(extra)} "
                   f"(Agent Skills allows: {', '.join(sorted(AGENT_SKILLS_KEYS))})")
    return out

