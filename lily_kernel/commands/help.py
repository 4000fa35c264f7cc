"""``/help`` pages, built from the snapshot and the command table (no file access)."""
from __future__ import annotations

import json
from functools import lru_cache

from lily_kernel.commands import table
from lily_kernel.commands.render import mode_label
from lily_kernel.commands.results import HelpPage
from lily_kernel.commands.sanitize import code_span, md_cell, md_text
from lily_kernel.skills.skill import Skill
from lily_kernel.skills.snapshot import Snapshot


def _cell(text: str) -> str:
    """Markdown Lily built (code spans of escaped values) as one table cell."""
    return str(text).replace("\n", " ")


def commands_page(snap: Snapshot, mode: str = "ask") -> HelpPage:
    """/help: the permission mode, the built-in commands and the skills' aliases."""
    return _commands_page(tuple(sorted(snap.aliases.items())), mode)


@lru_cache(maxsize=8)
def _commands_page(aliases: tuple[tuple[str, str], ...], mode: str) -> HelpPage:
    """The page for these aliases: built once, not on every ``/help`` of one snapshot."""
    lines = [f"Permission mode: **{md_text(mode)}** (`/mode` changes it, `/policy` shows "
             "where each setting comes from).", "",
             "| command | what it does |", "| --- | --- |"]
    lines += [f"| `{c.usage}` | {_cell(c.summary)} |" for c in table.BUILTINS]
    if aliases:
        lines += ["", "**Skill aliases** in this snapshot:", "",
                  "| alias | runs |", "| --- | --- |"]
        lines += [f"| {code_span('/' + a)} | {code_span('/skill ' + s)} |" for a, s in aliases]
    lines += ["", "Any other cell goes to the agent. `/help <skill>` shows one skill."]
    return HelpPage("Lily commands", "\n".join(lines))


def command_help(cmd: table.BuiltinCommand) -> HelpPage:
    """/help for one built-in command."""
    return HelpPage(f"/{cmd.name}", f"`{cmd.usage}`\n\n{cmd.summary}")


def skill_help(snap: Snapshot, skill: Skill) -> HelpPage:
    """/help for one skill: its keys, its source and how to run it."""
    rows = [
        ("summary", md_cell(skill.summary or "—")),
        ("source", f"{md_cell(skill.source)} ({code_span(str(skill.path))})"),
        ("invocation mode", md_cell(mode_label(skill))),
        ("alias", code_span(f"/{skill.command}") + (" (disabled: claimed by several skills)"
                                                   if skill.command in snap.alias_clashes else "")
         if skill.command else "—"),
        ("command tool", code_span(skill.command_tool) if skill.command_tool else "—"),
        ("required tools", ", ".join(code_span(t) for t in skill.requires_tools) or "—"),
        ("eligibility", md_cell(_eligibility(skill))),
        *([("arguments", f"{code_span(skill.argument_hint)} (argument-hint)")]
          if skill.argument_hint else []),
        ("model may select it", "no (disable-model-invocation)" if skill.disable_model_invocation
         else "yes"),
        *([] if skill.user_invocable else [("user may run it", "no (user-invocable: false)")]),
    ]
    if skill.description and skill.description != skill.summary:
        rows.append(("description", md_cell(skill.description)))
    if skill.license:
        rows.append(("license", md_cell(skill.license)))
    if skill.compatibility:
        rows.append(("compatibility", md_cell(skill.compatibility)))
    declared = skill.declared_not_enforced()
    if declared:  # docs/skills-compat.md#claude-code-conventions
        rows.append(("declared, not enforced by Lily", "; ".join(
            f"{md_text(k)}: {_declared(skill, k, v)}" for k, v in declared)))
    for key, value in skill.metadata.items():
        rows.append((md_cell(f"metadata.{key}"), md_cell(value)))
    lines = ["| field | value |", "| --- | --- |"]
    lines += [f"| {k} | {_cell(v)} |" for k, v in rows]
    if skill.typed is not None:
        lines += ["", *typed_lines(skill)]
    notes = [d.reason for d in snap.for_skill(skill.name) if d.kind in ("note", "shadowed")]
    if notes:
        lines += ["", *[f"- {md_text(n)}" for n in notes]]
    usage = f"/{skill.command}" if skill.command in snap.aliases else f"/skill {skill.name}"
    if skill.user_invocable:
        run = f"{usage} {skill.argument_hint or '[input]'}"
        lines += ["", f"Run it with {code_span(run, table=False)}."]
    else:
        lines += ["", "Only the model runs it, when a request needs it."]
    return HelpPage(skill.name, "\n".join(lines))


def typed_lines(skill: Skill) -> list[str]:
    """The /help lines of a typed skill's declaration (none for another skill)."""
    spec = skill.typed
    if spec is None:
        return []
    out = [f"**Typed skill ({md_text(spec.kind)})**: {md_text(' '.join(spec.purpose.split()))}", ""]
    if spec.params:
        out += ["| parameter | type | required | constraints | description |",
                "| --- | --- | --- | --- | --- |"]
        out += [f"| {code_span(p.name)} | {md_cell(p.type)} | {'yes' if p.required else 'no'} | "
                f"{md_cell(p.constraints()) or '—'} | {md_cell(p.description) or '—'} |"
                for p in spec.params]
    else:
        out.append("No parameters.")
    if spec.kind == "internal":
        acl = [", ".join(code_span(p, table=False) for p in paths) or "—"
               for paths in (spec.acl_read, spec.acl_write)]
        out += ["", f"Config ACL: read {acl[0]}; write {acl[1]}."]
    else:
        out += ["", f"Sends an ActivityStreams **{md_text(spec.activity)}** activity."]
    example = {p.name: "…" for p in spec.params if p.required}
    call = f"/skill {skill.name} {json.dumps(example, ensure_ascii=False)}"
    out += ["", f"Programmatic call (no confirmation): {code_span(call, table=False)} "
                "with every required parameter."]
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


def _declared(skill: Skill, key: str, value: object) -> str:
    if key == "allowed-tools":
        return " ".join(code_span(t) for t in skill.allowed_tools) + " (grants nothing)"
    if isinstance(value, bool):
        return "true" if value else "false"
    return code_span(str(value))
