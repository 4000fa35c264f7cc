"""``/help`` pages, built from the snapshot and the command table (no file access)."""
from __future__ import annotations

import json

from lily_kernel.commands import table as commands
from lily_kernel.commands.render import mode_label
from lily_kernel.commands.results import HelpPage
from lily_kernel.skills.skill import Skill
from lily_kernel.skills.snapshot import Snapshot


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def commands_page(snap: Snapshot) -> HelpPage:
    lines = ["| command | what it does |", "| --- | --- |"]
    lines += [f"| `{c.usage}` | {_cell(c.summary)} |" for c in commands.BUILTINS]
    if snap.aliases:
        lines += ["", "**Skill aliases** in this snapshot:", "",
                  "| alias | runs |", "| --- | --- |"]
        lines += [f"| `/{a}` | `/skill {s}` |" for a, s in sorted(snap.aliases.items())]
    lines += ["", "Any other cell goes to the agent. `/help <skill>` shows one skill."]
    return HelpPage("Lily commands", "\n".join(lines))


def command_help(cmd: commands.BuiltinCommand) -> HelpPage:
    return HelpPage(f"/{cmd.name}", f"`{cmd.usage}`\n\n{cmd.summary}")


def skill_help(snap: Snapshot, skill: Skill) -> HelpPage:
    rows = [
        ("summary", skill.summary or "—"),
        ("source", f"{skill.source} (`{skill.path}`)"),
        ("invocation mode", mode_label(skill)),
        ("alias", f"`/{skill.command}`" + (" (disabled: claimed by several skills)"
                                           if skill.command in snap.alias_clashes else "")
         if skill.command else "—"),
        ("command tool", f"`{skill.command_tool}`" if skill.command_tool else "—"),
        ("required tools", ", ".join(f"`{t}`" for t in skill.requires_tools) or "—"),
        ("eligibility", _eligibility(skill)),
        *([("arguments", f"`{skill.argument_hint}` (argument-hint)")] if skill.argument_hint else []),
        ("model may select it", "no (disable-model-invocation)" if skill.disable_model_invocation
         else "yes"),
        *([] if skill.user_invocable else [("user may run it", "no (user-invocable: false)")]),
    ]
    if skill.description and skill.description != skill.summary:
        rows.append(("description", skill.description))
    if skill.license:
        rows.append(("license", skill.license))
    if skill.compatibility:
        rows.append(("compatibility", skill.compatibility))
    declared = skill.declared_not_enforced()
    if declared:  # docs/skills-compat.md#claude-code-conventions
        rows.append(("declared, not enforced by Lily", "; ".join(
            f"{k}: {_declared(skill, k, v)}" for k, v in declared)))
    for key, value in skill.metadata.items():
        rows.append((f"metadata.{key}", value))
    lines = ["| field | value |", "| --- | --- |"]
    lines += [f"| {k} | {_cell(v)} |" for k, v in rows]
    if skill.typed is not None:
        lines += ["", *typed_lines(skill)]
    notes = [d.reason for d in snap.for_skill(skill.name) if d.kind in ("note", "shadowed")]
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    usage = f"/{skill.command}" if skill.command in snap.aliases else f"/skill {skill.name}"
    if skill.user_invocable:
        lines += ["", f"Run it with `{usage} {skill.argument_hint or '[input]'}`."]
    else:
        lines += ["", "Only the model runs it, when a request needs it."]
    return HelpPage(skill.name, "\n".join(lines))


def typed_lines(skill: Skill) -> list[str]:
    spec = skill.typed
    out = [f"**Typed skill ({spec.kind})**: {' '.join(spec.purpose.split())}", ""]
    if spec.params:
        out += ["| parameter | type | required | constraints | description |",
                "| --- | --- | --- | --- | --- |"]
        out += [f"| `{p.name}` | {p.type} | {'yes' if p.required else 'no'} | "
                f"{_cell(p.constraints()) or '—'} | {_cell(p.description) or '—'} |"
                for p in spec.params]
    else:
        out.append("No parameters.")
    if spec.kind == "internal":
        out += ["", f"Config ACL: read {', '.join(f'`{p}`' for p in spec.acl_read) or '—'}; "
                    f"write {', '.join(f'`{p}`' for p in spec.acl_write) or '—'}."]
    else:
        out += ["", f"Sends an ActivityStreams **{spec.activity}** activity."]
    example = {p.name: "…" for p in spec.params if p.required}
    out += ["", f"Programmatic call (no confirmation): `/skill {skill.name} "
                f"{json.dumps(example, ensure_ascii=False)}` with every required parameter."]
    return out


def _eligibility(skill: Skill) -> str:
    """The effective requirements: Lily's ``eligibility`` and OpenClaw's gates (all apply)."""
    e = skill.eligibility
    parts = []
    if e.os is not None:
        parts.append("os: " + ", ".join(e.os))
    if e.env:
        parts.append("env: " + ", ".join(e.env))
    if e.binaries:
        parts.append("binaries: " + ", ".join(e.binaries))
    if e.any_binaries:
        parts.append("any of the binaries: " + ", ".join(e.any_binaries))
    if skill.openclaw is not None:
        parts += skill.openclaw.parts()
    return "; ".join(parts) or "any host"


def _declared(skill: Skill, key: str, value) -> str:
    if key == "allowed-tools":
        return " ".join(f"`{t}`" for t in skill.allowed_tools) + " (grants nothing)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"`{value}`"
