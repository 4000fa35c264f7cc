"""The system context: Lily's instructions, the persona, the skills index (docs/agent.md#system-context).

Lily's own instructions come first, short and imperative (they hold whatever the
persona says); a small model follows the top of its prompt best (issue 30).

The index lists model-invocable skills by name and summary only, within a
character budget, by one rule (docs/agent.md#skills-index): in name order (code
point), each skill whose line still fits in what is left of the budget is
listed; the others are omitted, and a note after the list names them, so the
model can still ``load_skill`` one by name. Skill bodies are never in the system context: the model
reads one with ``load_skill``. A skill without a summary or description is
listed with the first paragraph of its body instead, never as a bare name
(docs/skills-compat.md#notes).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from lily_kernel.skills.skill import body_summary
from lily_kernel.skills.snapshot import Snapshot

if TYPE_CHECKING:  # the session passes its persona in
    from lily_kernel.session.persona import Persona

INDEX_BUDGET = 8_000
OMITTED_NAMES_BUDGET = 2_000  # the note names omitted skills up to this many characters
INDEX_HEADER = "## Skills\n"  # the instructions above say how to use one
#: Lily's own instructions, before the persona (docs/agent.md#system-context).
RULES = """You are Lily, a local, skill-driven agent in a Jupyter notebook (one session each).
- Answer directly unless a tool is needed.
- To follow a skill, call load_skill first; one skill per request.
- Never claim to have done what you did not."""


def index_line(name: str, summary: str) -> str:
    """One line of the skills index: ``- name: summary``."""
    summary = " ".join(summary.split())
    return f"- {name}: {summary}\n" if summary else f"- {name}\n"


def index_plan(snap: Snapshot, budget: int = INDEX_BUDGET) -> tuple[list[tuple[str, str]], list[str]]:
    """The index's ``(name, line)`` pairs and the names it omits for the budget, by the
    rule above. Skills the model may not invoke, or with no text to show, are in neither."""
    listed: list[tuple[str, str]] = []
    omitted: list[str] = []
    used = len(INDEX_HEADER)
    for skill in snap.skills:  # sorted by name
        if not skill.model_invocable:
            continue
        summary = skill.summary or body_summary(skill.body)
        if not summary:
            continue
        line = index_line(skill.name, summary)
        if used + len(line) > budget:
            omitted.append(skill.name)
            continue
        listed.append((skill.name, line))
        used += len(line)
    return listed, omitted


def omitted_note(omitted: list[str], budget: int) -> str:
    """The line after the index naming what the budget left out (names up to
    OMITTED_NAMES_BUDGET characters, then a count)."""
    n = len(omitted)
    names: list[str] = []
    used = 0
    for name in omitted:
        if used + len(name) + 2 > OMITTED_NAMES_BUDGET:
            break
        names.append(name)
        used += len(name) + 2
    rest = n - len(names)
    shown = ", ".join(names) + (f" and {rest} more (the user can list all with /skills)"
                                if rest else "")
    return (f"(+{n} more skill{'s' if n != 1 else ''} not listed: the index is capped at "
            f"{budget:,} characters. Not listed: {shown}. Call load_skill with one of these "
            "names to read it.)\n")


def skills_index(snap: Snapshot, budget: int = INDEX_BUDGET) -> str:
    """The index section, cut to ``budget`` characters with a note naming what was left out."""
    listed, omitted = index_plan(snap, budget)
    if not listed and not omitted:
        return "## Skills\nNo skills are available in this session.\n"
    out = [INDEX_HEADER, *(line for _, line in listed)]
    if omitted:
        out.append(omitted_note(omitted, budget))
    return "".join(out)


def system_prompt(persona: Persona, snap: Snapshot, budget: int = INDEX_BUDGET,
                  workspace_rules: str = "") -> str:
    """The system prompt: Lily's instructions, the persona, the workspace's rules files
    (AGENTS.md, when the workspace is trusted: agent/workspace_rules.py) and the skills
    index within ``budget``."""
    parts = [RULES, persona.system_text(), workspace_rules, skills_index(snap, budget)]
    return "\n\n".join(p.strip() for p in parts if p.strip())
