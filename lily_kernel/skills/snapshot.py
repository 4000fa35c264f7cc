"""The immutable skill snapshot a session answers from, and its diagnostics."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from lily_kernel.skills.paths import Root
from lily_kernel.skills.skill import Skill

if TYPE_CHECKING:
    from lily_kernel.skills.openclaw import OpenClawGate

DIAGNOSTIC_KINDS = ("loader_error", "skill_error", "ineligible", "shadowed", "note", "untrusted")


@dataclass(frozen=True)
class Diagnostic:
    """One finding of a load: a skill left out, shadowed, or a note."""
    kind: str  # one of DIAGNOSTIC_KINDS
    skill: str | None
    source: str | None
    path: str | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """The diagnostic as JSON data."""
        return {"skill": self.skill, "source": self.source, "path": self.path,
                "kind": self.kind, "reason": self.reason}


@dataclass(frozen=True)
class Snapshot:
    """An immutable result of one load: the included skills and every diagnostic."""
    version: int
    hash: str
    skills: tuple[Skill, ...]  # included skills, sorted by name
    diagnostics: tuple[Diagnostic, ...]
    roots: tuple[Root, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # alias -> the skills that all claim it (the alias is disabled)
    alias_clashes: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    # alias -> the excluded skill that declares it (so /fix can say why it is not here)
    excluded_aliases: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # an MCP server's included skill's path -> the entry it was loaded from (RemoteSkill):
    # what load_skill and read_skill_file verify against (docs/loader.md#mcp-roots)
    held: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {s.name: s for s in self.skills})

    def get(self, name: str) -> Skill | None:
        """The included skill called ``name``, if any."""
        return cast("Skill | None", self._by_name.get(name))  # type: ignore[attr-defined]

    def skill(self, name: str) -> Skill:
        """The included skill called ``name`` (one an alias maps to); KeyError if none is."""
        return cast("Skill", self._by_name[name])  # type: ignore[attr-defined]

    def names(self) -> list[str]:
        """The included skills' names, sorted."""
        return [s.name for s in self.skills]

    def excluded(self) -> tuple[Diagnostic, ...]:
        """Diagnostics of skills that are not in the snapshot (the winner's, not shadowed copies)."""
        return tuple(d for d in self.diagnostics if d.kind in ("skill_error", "ineligible"))

    def untrusted(self) -> tuple[Diagnostic, ...]:
        """The skills of an untrusted workspace's own folders: listed, not loaded."""
        return tuple(d for d in self.diagnostics if d.kind == "untrusted")

    def exclusion(self, name: str) -> Diagnostic | None:
        """Why skill ``name`` was left out, if it was."""
        for diag in self.excluded():
            if diag.skill == name:
                return diag
        return None

    def for_skill(self, name: str) -> tuple[Diagnostic, ...]:
        """The diagnostics about skill ``name``."""
        return tuple(d for d in self.diagnostics if d.skill == name)

    def as_dict(self, include_text: bool = False) -> dict[str, Any]:
        """The snapshot as JSON data (``lily skills list --json``)."""
        return {
            "snapshot_version": self.version,
            "snapshot_hash": self.hash,
            "roots": [r.as_dict() for r in self.roots],
            "skills": [skill_dict(s, include_text) for s in self.skills],
            "aliases": dict(self.aliases),
            "alias_clashes": {k: list(v) for k, v in self.alias_clashes.items()},
            "diagnostics": [d.as_dict() for d in self.diagnostics],
        }


def skill_dict(skill: Skill, include_text: bool = False) -> dict[str, Any]:
    """One skill as JSON data (its text too with ``include_text``)."""
    data = {
        "name": skill.name,
        "source": skill.source,
        "path": skill.path,
        "summary": skill.summary,
        "description": skill.description,
        "invocation_mode": skill.invocation_mode,
        "command": skill.command,
        "command_tool": skill.command_tool,
        "requires_tools": list(skill.requires_tools),
        "eligibility": skill.eligibility.as_dict(),
        "license": skill.license,
        "compatibility": skill.compatibility,
        "metadata": _plain(skill.metadata),
        "allowed_tools": list(skill.allowed_tools),
        "disable_model_invocation": skill.disable_model_invocation,
        "argument_hint": skill.argument_hint,
        "openclaw": _gate_dict(skill.openclaw),
    }
    if skill.typed is not None:
        spec = skill.typed
        data["typed"] = {"kind": spec.kind, "purpose": spec.purpose, "activity": spec.activity,
                         "acl": {"read": list(spec.acl_read), "write": list(spec.acl_write)},
                         "parameters": [{k: v for k, v in vars(p).items() if k != "line"}
                                        for p in spec.params]}
    if include_text:
        data["text"] = skill.text
    return data


def _gate_dict(gate: OpenClawGate | None) -> dict[str, Any] | None:
    """An OpenClaw gate (skills/openclaw.py) as JSON data, in OpenClaw's own key names."""
    if gate is None:
        return None
    return {"origin": gate.origin, "os": list(gate.os) if gate.os is not None else None,
            "requires": {"bins": list(gate.bins), "anyBins": list(gate.any_bins),
                         "env": list(gate.env), "config": list(gate.config)},
            "always": gate.always}


def _plain(value: object) -> Any:
    """YAML values as JSON-friendly data (dates and the like become strings)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
