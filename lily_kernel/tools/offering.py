"""A lean prompt: tools offered only when usable, schemas kept short (docs/agent.md#a-lean-prompt).

Every request pays for the tool schemas it offers, so a tool is offered only
when it can be used: ``read_skill_file`` when a skill has a ``references/``
folder, ``propose_action`` when a typed skill can be loaded, ``read_config``
when an internal typed skill reads settings; the notebook tools exist only in a
notebook (the face registers them). ``[tools] offer`` narrows the set further.
A registered tool's schema carries the first paragraph of its description
(the rest stays in its docstring) and no empty ``required`` list.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lily_kernel.skills.snapshot import Snapshot

_DOC_REF = re.compile(r"\s*\((?:see )?docs/[^)]*\)")
_REFERENCES: dict[int, tuple[Snapshot, bool]] = {}  # id(snapshot) -> (it, any references/?)


def brief(description: str) -> str:
    """The first paragraph of ``description``, on one line, without docs/ references."""
    first = description.strip().split("\n\n", 1)[0]
    return _DOC_REF.sub("", " ".join(first.split()))


def spec(name: str, description: str | None, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A registered tool's schema as offered to the model."""
    params = dict(parameters)
    if not params.get("required"):
        params.pop("required", None)
    return {"type": "function", "function": {"name": name,
                                             "description": brief(description or "") or name,
                                             "parameters": params}}


def _usable(snap: Snapshot, forced: str | None) -> list[Any]:
    return [s for s in snap.skills if s.model_invocable or s.name == forced]


def has_references(snap: Snapshot) -> bool:
    """Whether any skill of ``snap`` has a ``references/`` folder (cached per snapshot)."""
    hit = _REFERENCES.get(id(snap))
    if hit is None or hit[0] is not snap:
        if len(_REFERENCES) > 64:
            _REFERENCES.clear()
        hit = (snap, any((Path(s.path) / "references").is_dir() for s in snap.skills))
        _REFERENCES[id(snap)] = hit
    return hit[1]


def builtin_specs(snap: Snapshot, forced: str | None, read_skill_file: dict[str, Any],
                  propose_action: dict[str, Any], read_config: dict[str, Any]
                  ) -> list[dict[str, Any]]:
    """The skill tools besides ``load_skill`` that this snapshot can use."""
    skills = _usable(snap, forced)
    out = [read_skill_file] if has_references(snap) else []
    typed = [s.typed for s in skills if s.typed is not None]
    if typed:
        out.append(propose_action)
    if any(t.kind == "internal" and t.acl_read for t in typed):
        out.append(read_config)
    return out
