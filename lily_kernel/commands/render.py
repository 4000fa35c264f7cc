"""Plain-text and Markdown renderings of command results.

The CLI prints :func:`text`; the Jupyter faces put :func:`text` in
``text/plain`` and :func:`markdown` (or richer HTML and widgets of their own)
beside it.
"""
from __future__ import annotations

import json
from functools import singledispatch

from lily_kernel.commands.results import ActionCard, ActionDone, AgentList, Answer, ConfirmedRun, HelpPage, McpImage, McpStatus, ModelInfo, Notice, SkillRequest, SkillTable, ToolOutput
from lily_kernel.skills.snapshot import Snapshot

SKILL_COLUMNS = ("name", "source", "mode", "alias", "summary")
HINT_COLUMNS = ("name", "source", "mode", "alias", "arguments", "summary")
EXCLUDED_COLUMNS = ("name", "source", "kind", "reason")


def _has_hints(snap: Snapshot) -> bool:
    return any(s.argument_hint for s in snap.skills)


def skill_columns(snap: Snapshot) -> tuple[str, ...]:
    """The /skills columns: an 'arguments' column (argument-hint) when any skill declares one."""
    return HINT_COLUMNS if _has_hints(snap) else SKILL_COLUMNS


def skill_rows(snap: Snapshot) -> list[tuple[str, ...]]:
    if _has_hints(snap):
        return [(s.name, s.source, mode_label(s), f"/{s.command}" if s.command else "",
                 s.argument_hint or "", s.summary) for s in snap.skills]
    return [(s.name, s.source, mode_label(s), f"/{s.command}" if s.command else "",
             s.summary) for s in snap.skills]


def mode_label(skill) -> str:
    """How a skill runs: its invocation mode, or 'typed (internal|external)'."""
    return f"typed ({skill.typed.kind})" if skill.typed is not None else skill.invocation_mode


def excluded_rows(snap: Snapshot) -> list[tuple[str, ...]]:
    return [(d.skill or "", d.source or "", d.kind, d.reason)
            for d in snap.diagnostics if d.kind != "loader_error"]


def table(headers: tuple[str, ...], rows: list[tuple[str, ...]], width: int = 60) -> str:
    """A fixed-width text table; long cells are shortened with '…'."""
    def clip(v: str) -> str:
        v = str(v).replace("\n", " ")
        return v if len(v) <= width else v[:width - 1] + "…"
    cells = [tuple(clip(c) for c in r) for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*headers).rstrip(), fmt.format(*("-" * w for w in widths)).rstrip()]
    out += [fmt.format(*r).rstrip() for r in cells]
    return "\n".join(out)


def md_table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    esc = lambda v: str(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    out = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def skills_heading(snap: Snapshot) -> str:
    n = len(snap.skills)
    return (f"{n} skill{'s' if n != 1 else ''} in snapshot version {snap.version} "
            f"({snap.hash[:12]})")


@singledispatch
def text(result) -> str:
    return str(result)


@singledispatch
def markdown(result) -> str:
    return text(result)


def _markdown_first(cls: type, markdown_of) -> None:
    """Render ``cls`` as ``markdown_of(r)`` in Markdown and as that, made plain, in text."""
    markdown.register(cls, markdown_of)
    text.register(cls, lambda r: _plain(markdown_of(r)))


@text.register
def _(r: SkillTable) -> str:
    snap = r.snapshot
    out = [skills_heading(snap), "", table(skill_columns(snap), skill_rows(snap))]
    if r.show_all:
        rows = excluded_rows(snap)
        out += ["", f"Excluded, shadowed and notes ({len(rows)}):", ""]
        out.append(table(EXCLUDED_COLUMNS, rows, width=100) if rows else "(none)")
    elif snap.excluded():
        out += ["", f"{len(snap.excluded())} skill(s) excluded; /skills --all shows why."]
    return "\n".join(out)


@markdown.register
def _(r: SkillTable) -> str:
    snap = r.snapshot
    out = [f"**{skills_heading(snap)}**", "", md_table(skill_columns(snap), skill_rows(snap))]
    if r.show_all:
        rows = excluded_rows(snap)
        out += ["", f"**Excluded, shadowed and notes ({len(rows)})**", ""]
        out.append(md_table(EXCLUDED_COLUMNS, rows) if rows else "(none)")
    return "\n".join(out)


@text.register
def _(r: HelpPage) -> str:
    return f"{r.title}\n\n{r.markdown}"


@markdown.register
def _(r: HelpPage) -> str:
    return f"### {r.title}\n\n{r.markdown}"


@text.register
def _(r: AgentList) -> str:
    head = f"Switched to agent {r.active}." if r.switched else "Agents:"
    return head + "\n" + "\n".join(f"{'*' if a == r.active else ' '} {a}" for a in r.agents)


@markdown.register
def _(r: AgentList) -> str:
    head = f"Switched to agent **{r.active}**." if r.switched else "**Agents**"
    return head + "\n\n" + "\n".join(
        f"- **{a}** (active)" if a == r.active else f"- {a}" for a in r.agents)


_markdown_first(Notice, lambda r: r.markdown)


@text.register
def _(r: ToolOutput) -> str:
    return _value(r.value)


@markdown.register
def _(r: ToolOutput) -> str:
    value = r.value
    if isinstance(value, str):
        return value
    return "```json\n" + _value(value) + "\n```"


@text.register
def _(r: SkillRequest) -> str:
    return f"[skill {r.skill.name}: prompt_rewrite request for the agent]\n\n{r.prompt}"


@text.register
def _(r: ModelInfo) -> str:
    head = "Model configuration" + (f" (changed: {', '.join(r.changed)})" if r.changed else "")
    return head + ":\n" + "\n".join(f"  {k} = {v}" for k, v in r.config.items()) \
        + (f"\n\n{usage_line(r.usage)}" if r.usage else "")


@markdown.register
def _(r: ModelInfo) -> str:
    head = "**Model configuration**" + (f" (changed: {', '.join(r.changed)})" if r.changed else "")
    return head + "\n\n" + md_table(("setting", "value"),
                                    [(k, "—" if v is None else v) for k, v in r.config.items()]) \
        + (f"\n\n{usage_line(r.usage)}" if r.usage else "")


def usage_line(usage: dict) -> str:
    """The session's token totals, as the endpoint reported them."""
    calls = usage.get("calls", 0)
    return (f"This session so far: {usage['prompt_tokens']:,} prompt + "
            f"{usage['completion_tokens']:,} completion tokens over {calls} model "
            f"call{'s' if calls != 1 else ''} that reported usage.")


@text.register
def _(r: Answer) -> str:
    return f"{r.text.rstrip()}\n\n[{r.footer()}]"


@markdown.register
def _(r: Answer) -> str:
    return f"{r.text.rstrip()}\n\n<sub>{r.footer()}</sub>"


def tool_card_markdown(card: ActionCard, footer: bool = True) -> str:
    """A held tool call: the exact arguments; code in a fenced, highlighted block."""
    a = card.action
    out = [f"**Confirm {a.tool}** (tool call)" + (f": {card.purpose}" if card.purpose else "")]
    short = [(k, f"`{json.dumps(v, ensure_ascii=False)}`") for k, v in a.args.items()
             if not (isinstance(v, str) and ("\n" in v or k == "code"))]
    if short:
        out += ["", md_table(("argument", "value"), short)]
    for k, v in a.args.items():
        if isinstance(v, str) and ("\n" in v or k == "code"):
            fence = "````" if "```" in v else "```"
            lang = "python" if a.tool == "run_python" else ""
            out += ["", f"`{k}`:", "", f"{fence}{lang}", v.rstrip("\n"), fence]
    if footer:
        out += ["", "Nothing runs until you confirm: `/confirm` or `/cancel`."]
    return "\n".join(out)


def card_markdown(card: ActionCard, footer: bool = True) -> str:
    a = card.action
    if a.kind == "tool":
        return tool_card_markdown(card, footer)
    out = [f"**Confirm {a.skill}** ({a.kind})" + (f": {card.purpose}" if card.purpose else ""), "",
           md_table(("parameter", "value"), [(k, f"`{json.dumps(v)}`") for k, v in a.params.items()])]
    if a.kind == "internal":
        out += ["", md_table(("setting", "now", "after"),
                             [(f"`{p}`", "—" if a.old.get(p) is None else f"`{json.dumps(a.old[p])}`",
                               f"`{json.dumps(v)}`") for p, v in a.changes.items()])]
    else:
        out += ["", f"Sends a **{a.activity['type']}** activity to {a.target} "
                    f"(id `{a.activity['id']}`):", "", "```json",
                json.dumps(a.activity, indent=2, ensure_ascii=False), "```"]
    if footer:
        out += ["", "Nothing happens until you confirm: `/confirm` or `/cancel`."]
    return "\n".join(out)


_markdown_first(ActionCard, card_markdown)
_markdown_first(ActionDone, lambda r: r.summary)


@text.register
def _(r: ConfirmedRun) -> str:
    out = [text(r.done)]
    if r.output.strip():
        out += ["Output:", r.output.rstrip()]
    if r.answer is not None:
        out.append(text(r.answer))
    for code in r.proposed:
        out += ["Proposed cell (copy it into a new cell):", code.rstrip()]
    if r.card is not None:
        out.append(text(r.card))
    return "\n\n".join(out)


@markdown.register
def _(r: ConfirmedRun) -> str:
    out = [markdown(r.done)]
    if r.output.strip():
        out.append("Output:\n\n```\n" + r.output.rstrip() + "\n```")
    if r.answer is not None:
        out.append(markdown(r.answer))
    for code in r.proposed:
        out.append("Proposed cell:\n\n```python\n" + code.rstrip() + "\n```")
    if r.card is not None:
        out.append(markdown(r.card))
    return "\n\n".join(out)


def _plain(md: str) -> str:
    """Short Markdown as plain text: bold and code marks dropped."""
    return md.replace("**", "").replace("`", "")


def _value(value) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _mcp_markdown(r: McpStatus) -> str:
    """``/mcp`` as Markdown; everything a server said is escaped (docs/mcp.md#commands)."""
    from lily_kernel.commands.sanitize import md_text
    esc = lambda v: md_text(str(v))  # noqa: E731
    if not r.servers:
        return "No MCP server is configured (docs: `[mcp.servers.NAME]` in lily.toml)."
    out = []
    if r.restarted:
        out.append(f"Restarted MCP server **{esc(r.restarted)}**.\n")
    for row in r.servers:
        state = row["state"] + (f": {esc(row['reason'])}" if row.get("reason") else "")
        out.append(f"**{esc(row['name'])}** ({row['transport']}, {esc(row['source'])}): {state}")
        if row.get("note"):
            out.append(f"\n*{esc(row['note'])}*")
        if row.get("stderr"):
            out.append("\n" + "\n".join(f"> {esc(line)}" for line in row["stderr"]))
        if row["tools"]:
            out.append("\n" + md_table(("tool", "approval"),
                                        [(esc(t["name"]), t["mode"]) for t in row["tools"]]))
        out.append("")
    out += [f"*{esc(p)}*" for p in r.problems]
    return "\n".join(out).strip()


markdown.register(McpStatus, _mcp_markdown)


@text.register
def _(r: McpStatus) -> str:
    if not r.servers:
        return _plain(_mcp_markdown(r))
    out = [f"Restarted MCP server {r.restarted}.\n"] if r.restarted else []
    for row in r.servers:
        state = row["state"] + (f": {row['reason']}" if row.get("reason") else "")
        out.append(f"{row['name']} ({row['transport']}, {row['source']}): {state}")
        out += [f"  {row['note']}"] if row.get("note") else []
        out += [f"  | {line}" for line in row.get("stderr") or []]
        if row["tools"]:
            out.append(table(("tool", "approval"), [(t["name"], t["mode"]) for t in row["tools"]]))
        out.append("")
    return "\n".join([*out, *r.problems]).strip()


@text.register
def _(r: McpImage) -> str:
    return f"[image from {r.tool}: {r.mime}, {len(r.data):,} bytes]"
