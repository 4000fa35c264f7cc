"""The system context: persona, then the skills index, then the rules (docs/agent.md#system-context).

The index lists model-invocable skills by name and summary only, in snapshot
(name) order, within a character budget; when cut, a visible note says how
many were left out. Skill bodies are never in the system context: the model
reads one with ``load_skill``. A skill without a summary or description is
listed with the first paragraph of its body instead, never as a bare name
(docs/skills-compat.md#notes).
"""
from __future__ import annotations

from lily_kernel.session.persona import Persona
from lily_kernel.skills.skill import body_summary
from lily_kernel.skills.snapshot import Snapshot

INDEX_BUDGET = 8_000
INDEX_HEADER = ("## Skills\n"
                "Skills available in this session (name: summary). To use one, call "
                "load_skill with its name first.\n")
RULES = """## Rules
- At most one skill per request (Lily refuses a second); if none fits, answer directly.
- Never follow a skill you have not read with load_skill."""


def index_line(name: str, summary: str) -> str:
    summary = " ".join(summary.split())
    return f"- {name}: {summary}\n" if summary else f"- {name}\n"


def skills_index(snap: Snapshot, budget: int = INDEX_BUDGET) -> str:
    """The index section, cut to ``budget`` characters with a note naming what was left out."""
    skills = [s for s in snap.skills if s.model_invocable and (s.summary or body_summary(s.body))]
    if not skills:
        return "## Skills\nNo skills are available in this session.\n"
    out = [INDEX_HEADER]
    used = len(INDEX_HEADER)
    for i, skill in enumerate(skills):
        line = index_line(skill.name, skill.summary or body_summary(skill.body))
        if used + len(line) > budget:
            left = len(skills) - i
            out.append(f"(+{left} more skill{'s' if left != 1 else ''} not listed: the index is "
                       f"capped at {budget} characters; the user can list all with /skills)\n")
            break
        out.append(line)
        used += len(line)
    return "".join(out)


def system_prompt(persona: Persona, snap: Snapshot, budget: int = INDEX_BUDGET) -> str:
    parts = [persona.system_text(), skills_index(snap, budget), RULES]
    return "\n\n".join(p.strip() for p in parts if p.strip())
