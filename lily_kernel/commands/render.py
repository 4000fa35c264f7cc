"""Plain-text and Markdown renderings of command results.

The CLI prints :func:`text`; the Jupyter faces put :func:`text` in
``text/plain`` and :func:`markdown` (or richer HTML and widgets of their own)
beside it.
"""
from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache, singledispatch
from typing import Any, TypeVar

from lily_kernel.agent.pending import HeldCall, short
from lily_kernel.commands import sanitize
from lily_kernel.commands.results import (
    ActionCard,
    ActionDone,
    AgentList,
    Answer,
    ConfirmedRun,
    HelpPage,
    LogsView,
    McpStatus,
    ModelInfo,
    Notice,
    PolicyView,
    ProposedCells,
    SkillRequest,
    SkillTable,
    ToolOutput,
    TrustReview,
)
from lily_kernel.commands.sanitize import code_block, code_span, md_cell, md_text
from lily_kernel.skills.skill import Skill
from lily_kernel.skills.snapshot import Snapshot
from lily_kernel.skills.untrusted import HELD
from lily_kernel.tools.mcp.mcp_tools import McpImage

SKILL_COLUMNS = ("name", "source", "mode", "alias", "summary")
HINT_COLUMNS = ("name", "source", "mode", "alias", "arguments", "summary")
EXCLUDED_COLUMNS = ("name", "source", "kind", "reason")
R = TypeVar("R")


def _has_hints(snap: Snapshot) -> bool:
    return any(s.argument_hint for s in snap.skills)


def skill_columns(snap: Snapshot) -> tuple[str, ...]:
    """The /skills columns: an 'arguments' column (argument-hint) when any skill declares one."""
    return HINT_COLUMNS if _has_hints(snap) else SKILL_COLUMNS


def skill_rows(snap: Snapshot) -> list[tuple[str, ...]]:
    """The /skills table's rows (with an arguments column when a skill has a hint)."""
    if _has_hints(snap):
        return [(s.name, s.source, mode_label(s), f"/{s.command}" if s.command else "",
                 s.argument_hint or "", s.summary) for s in snap.skills]
    return [(s.name, s.source, mode_label(s), f"/{s.command}" if s.command else "",
             s.summary) for s in snap.skills]


def mode_label(skill: Skill) -> str:
    """How a skill runs: its invocation mode, or 'typed (internal|external)'."""
    return f"typed ({skill.typed.kind})" if skill.typed is not None else skill.invocation_mode


def excluded_rows(snap: Snapshot) -> list[tuple[str, ...]]:
    """The rows of the skills a load left out, with why."""
    return [(d.skill or "", d.source or "", d.kind, d.reason)
            for d in snap.diagnostics if d.kind != "loader_error"]


ROOT_COLUMNS = ("source", "root", "state")


def root_rows(snap: Snapshot) -> list[tuple[str, ...]]:
    """Each root the snapshot read, highest precedence first: where every source's skills
    come from (docs/loader.md#roots; ``lily skills list --all`` prints them)."""
    import os
    rows: list[tuple[str, ...]] = []
    for root in snap.roots:
        state = ("set by its variable" if root.explicit else
                 "default" if os.path.isdir(root.path) else "default, absent")
        rows.append((root.source, str(root.path), state))
    return rows


def index_omissions(snap: Snapshot) -> str | None:
    """The line saying which skills the model's index leaves out for its budget, or None
    (docs/agent.md#skills-index)."""
    from lily_kernel.agent.prompt import INDEX_BUDGET, index_plan
    _, omitted = index_plan(snap)
    if not omitted:
        return None
    return (f"{len(omitted)} skill(s) not in the model's index (capped at {INDEX_BUDGET:,} "
            f"characters): {', '.join(omitted)}. The model can still load them by name.")


def untrusted_line(snap: Snapshot) -> str | None:
    """The line saying how many of the workspace's own skills wait for /trust, or None
    (docs/trust-boundary.md#workspace-trust)."""
    held = [d.skill or "" for d in snap.untrusted() if HELD in d.reason]
    n = len(snap.untrusted()) - len(held)
    lines = [f"Held back: {', '.join(held)} (what they can do changed since the workspace was "
             "trusted); /skills --all says what, /trust reviews them."] if held else []
    if n:
        lines.append(f"{n} skill(s) in this workspace's own folders not loaded: the workspace "
                     "is not trusted; /skills --all lists them, /trust reviews them.")
    return " ".join(lines) or None


def table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]], width: int = 60) -> str:
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


def md_table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]],
             markup: tuple[int, ...] = ()) -> str:
    """A Markdown pipe table; every cell shown literally (docs/trust-boundary.md#display),
    except the columns in ``markup``, which hold Markdown Lily built (code spans)."""
    def esc(i: int, v: object) -> str:
        if i in markup:
            return str(v).replace("\n", " ")
        return sanitize.md_cell(str(v))
    out = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    out += ["| " + " | ".join(esc(i, c) for i, c in enumerate(r)) + " |" for r in rows]
    return "\n".join(out)


def skills_heading(snap: Snapshot) -> str:
    """The line above a skills table: how many skills, the snapshot's version and hash."""
    n = len(snap.skills)
    return (f"{n} skill{'s' if n != 1 else ''} in snapshot version {snap.version} "
            f"({snap.hash[:12]})")


@singledispatch
def text(result: object) -> str:
    """A result as plain text (each result type registers its own)."""
    return str(result)


@singledispatch
def markdown(result: object) -> str:
    """A result as Markdown (plain text unless its type registers Markdown)."""
    return text(result)


def _renders(cls: type[R], text_of: Callable[[R], str], markdown_of: Callable[[R], str]) -> None:
    """Render ``cls`` as ``text_of(r)`` in text and ``markdown_of(r)`` in Markdown."""
    text.register(cls, text_of)
    markdown.register(cls, markdown_of)


def _markdown_first(cls: type, markdown_of: Callable[[Any], str]) -> None:
    """Render ``cls`` as ``markdown_of(r)`` in Markdown and as that, made plain, in text."""
    markdown.register(cls, markdown_of)
    text.register(cls, lambda r: _plain(markdown_of(r)))


@text.register
def _(r: SkillTable) -> str:
    snap = r.snapshot
    out = [skills_heading(snap), "", table(skill_columns(snap), skill_rows(snap))]
    omissions = index_omissions(snap)
    if omissions:
        out += ["", omissions]
    waiting = untrusted_line(snap)
    if waiting:
        out += ["", waiting]
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
    out = [f"**{sanitize.md_text(skills_heading(snap))}**", "",
           md_table(skill_columns(snap), skill_rows(snap))]
    omissions = index_omissions(snap)
    if omissions:
        out += ["", sanitize.md_text(omissions)]
    waiting = untrusted_line(snap)
    if waiting:
        out += ["", sanitize.md_text(waiting)]
    if r.show_all:
        rows = excluded_rows(snap)
        out += ["", f"**Excluded, shadowed and notes ({len(rows)})**", ""]
        out.append(md_table(EXCLUDED_COLUMNS, rows) if rows else "(none)")
    return "\n".join(out)


_renders(HelpPage,
         lambda r: f"{r.title}\n\n{plain_text(r.markdown)}",
         lambda r: f"### {sanitize.md_text(r.title)}\n\n{sanitize.markdown(r.markdown)}")


@text.register
def _(r: AgentList) -> str:
    head = f"Switched to agent {r.active}." if r.switched else "Agents:"
    out = head + "\n" + "\n".join(f"{'*' if a == r.active else ' '} {a}" for a in r.agents)
    return out + _rules_text(r.rules)


def _rules_text(rules: tuple[str, ...]) -> str:
    if not rules:
        return "\nWorkspace rules files: none (AGENTS.md, CLAUDE.md)."
    return "\nWorkspace rules files (after the persona):\n" + "\n".join(f"  {x}" for x in rules)


@markdown.register
def _(r: AgentList) -> str:
    md = sanitize.md_text
    head = f"Switched to agent **{md(r.active)}**." if r.switched else "**Agents**"
    return head + "\n\n" + "\n".join(
        f"- **{md(a)}** (active)" if a == r.active else f"- {md(a)}" for a in r.agents) + (
        "\n\n**Workspace rules files** (after the persona):\n\n" + "\n".join(
            f"- {md(x)}" for x in r.rules) if r.rules else
        "\n\nWorkspace rules files: none (`AGENTS.md`, `CLAUDE.md`).")


_markdown_first(Notice, lambda r: sanitize.markdown(r.markdown))
_markdown_first(TrustReview, lambda r: sanitize.markdown(r.markdown))


@text.register
def _(r: ToolOutput) -> str:
    return _value(r.value)


@markdown.register
def _(r: ToolOutput) -> str:
    value = r.value
    if isinstance(value, str):
        return sanitize.markdown(value)
    return sanitize.code_block(_value(value), "json")


@text.register
def _(r: SkillRequest) -> str:
    return f"[skill {r.skill.name}: prompt_rewrite request for the agent]\n\n{r.prompt}"


def _model_rows(r: ModelInfo) -> list[tuple[str, ...]]:
    return [(k, "—" if v is None else str(v)) for k, v in r.config.items()]


def models_line(r: ModelInfo) -> str:
    """The endpoint's models, the one in use marked (``/model NAME`` switches)."""
    if r.models is None:
        return ""
    if not r.models:
        return "The endpoint lists no models."
    shown = [f"{m} (in use)" if m == r.config.get("model") else m for m in r.models[:40]]
    more = f", and {len(r.models) - 40} more" if len(r.models) > 40 else ""
    return f"Models at the endpoint (/model NAME switches): {', '.join(shown)}{more}."


@text.register
def _(r: ModelInfo) -> str:
    head = "Model configuration" + (f" (changed: {', '.join(r.changed)})" if r.changed else "")
    head += f"; permission mode: {r.mode} (/mode, /policy)" if r.mode else ""
    return head + "\n\n" + table(("setting", "value"), _model_rows(r), width=100) \
        + (f"\n\n{models_line(r)}" if r.models is not None else "") \
        + "".join(f"\n\n{n}" for n in r.notes) \
        + (f"\n\n{sent_line(r.sent)}" if r.sent else "") \
        + (f"\n\n{parts_line(r.parts)}" if r.parts else "") \
        + (f"\n\n{usage_line(r.usage)}" if r.usage else "")


@markdown.register
def _(r: ModelInfo) -> str:
    head = "**Model configuration**" + (
        f" (changed: {sanitize.md_text(', '.join(r.changed))})" if r.changed else "")
    head += f"; permission mode: **{r.mode}** (`/mode`, `/policy`)" if r.mode else ""
    return head + "\n\n" + md_table(("setting", "value"), _model_rows(r)) \
        + (f"\n\n{sanitize.md_text(models_line(r))}" if r.models is not None else "") \
        + "".join(f"\n\n{sanitize.md_text(n)}" for n in r.notes) \
        + (f"\n\n{sanitize.md_text(sent_line(r.sent))}" if r.sent else "") \
        + (f"\n\n{sanitize.md_text(parts_line(r.parts))}" if r.parts else "") \
        + (f"\n\n{usage_line(r.usage)}" if r.usage else "")


def sent_line(sent: tuple[tuple[str, str], ...]) -> str:
    """What every request sends besides the conversation (docs/agent.md#model-client)."""
    return "Sent with every request: " + " · ".join(f"{k} {v}" for k, v in sent) + "."


def parts_line(parts: dict[str, Any]) -> str:
    """The prompt's fixed parts in tokens and the window they share (docs/agent.md#context-budget)."""
    counted = "estimated" if parts["counted"] == "estimate" else f"counted with {parts['counted']}"
    source = {"setting": "set", "endpoint": "stated by the endpoint", "table": "built-in table",
              "default": "guessed: the endpoint does not say and the model is not in the "
                         "built-in table; set [model] context_window"}[parts["window_from"]]
    return (f"Every request: system {parts['system']:,} · tools {parts['tools']:,} "
            f"({parts['tool_count']}) · skills index {parts['skills index']:,} tokens "
            f"({counted}); context window {parts['context_window']:,} ({source}), "
            f"{parts['max_tokens']:,} kept for the answer, {parts['margin']:,} margin.")


LOGS_COLUMNS = ("#", "cell", "text", "answer", "tools", "tokens in / out")


def _logs_head(r: LogsView) -> str:
    s = r.summary
    tokens = ("no usage reported" if s["tokens_in"] is None
              else f"{s['tokens_in']:,} in / {s['tokens_out'] or 0:,} out tokens")
    return (f"Session {s['id'][:12]} ({s['label'] or 'no label'}): started {s['started']}, "
            f"{s['requests']} request(s), {s['tool_calls']} tool call(s), {tokens}, "
            f"models: {', '.join(s['models']) or '-'}."
            + (f" Foreign journal: {s['foreign']}." if s.get("foreign") else "")
            + f" Last {r.shown} of {r.total} cell(s):")


@text.register
def _(r: LogsView) -> str:
    return _logs_head(r) + "\n\n" + table(LOGS_COLUMNS, list(r.rows))


@markdown.register
def _(r: LogsView) -> str:
    from lily_kernel.commands import sanitize  # text from the journal is from outside
    out = ["| " + " | ".join(LOGS_COLUMNS) + " |", "|" + " --- |" * len(LOGS_COLUMNS)]
    out += ["| " + " | ".join(sanitize.md_cell(c) for c in row) + " |" for row in r.rows]
    return sanitize.md_text(_logs_head(r)) + "\n\n" + (
        "\n".join(out) if r.rows else "(no cells yet)")


def usage_line(usage: dict[str, Any]) -> str:
    """The session's token totals, as the endpoint reported them."""
    calls = usage.get("calls", 0)
    return (f"This session so far: {usage['prompt_tokens']:,} prompt + "
            f"{usage['completion_tokens']:,} completion tokens over {calls} model "
            f"call{'s' if calls != 1 else ''} that reported usage.")


_renders(Answer,
         lambda r: f"{r.text.rstrip()}\n\n[{r.footer()}]",
         lambda r: f"{sanitize.markdown(r.text.rstrip())}\n\n<sub>{sanitize.md_text(r.footer())}</sub>")


HINTS = (("readOnlyHint", "read-only"), ("destructiveHint", "destructive"),
         ("openWorldHint", "open world"))


RUN_PYTHON_HINT = "runs code in your kernel (your variables, files and network)"


def hints(annotations: Mapping[str, bool], tool: str = "", origin: str = "") -> str:
    """A tool's annotations in words ("destructive, open world"); "none given" when empty.
    The notebook's run_python says what it does instead of MCP's defaults."""
    if tool == "run_python" and origin == "notebook":
        return RUN_PYTHON_HINT
    said = [f"{word}" if annotations[key] else f"not {word}"
            for key, word in HINTS if key in annotations]
    return ", ".join(said) or "none given"


def origin_of(call: HeldCall) -> str:
    """Where a held call's tool comes from: "built-in", "notebook", "MCP server NAME" (hidden
    characters in the name made visible, docs/permissions.md#cards)."""
    if call.origin == "mcp":
        return f"MCP server {sanitize.visible(call.server or '?')[0]}"
    return {"builtin": "built-in"}.get(call.origin, call.origin)


def tool_of(call: HeldCall) -> str:
    """A held call's tool name as a card shows it: hidden characters made visible."""
    return sanitize.visible(call.tool)[0]


def decide_line(card: ActionCard) -> str:
    """How to decide a card, by its id (docs/typed-skills.md#confirmation)."""
    a, ref = card.action, short(card.action.id)
    if not isinstance(a, HeldCall):
        return f"Nothing happens until you confirm: `/confirm {ref}` or `/cancel {ref}`."
    always = (f"`/confirm {ref} --always` (this tool runs without a card until /new), "
              if a.always_refusal is None else "")
    return (f"Nothing runs until you decide: `/confirm {ref}` (run once), {always}"
            f"`/cancel {ref}` (deny).")


def code_only(a: HeldCall) -> str | None:
    """run_python's code when it is the call's only argument (the card shows it once)."""
    code = a.args.get("code")
    if a.tool == "run_python" and isinstance(code, str) and set(a.args) == {"code"}:
        return code
    return None


def decided_line(note: str) -> str:
    """A decided card's last line, in place of how to decide it (a saved notebook)."""
    if not note:
        return "Decided."
    return note if note.split(" ", 1)[0] in ("Decided", "Declined:") else f"Decided: {note}"


def tool_card_markdown(card: ActionCard, footer: bool = True, plain: bool = False) -> str:
    """The approval card of a held call: tool, origin, hints, the full arguments as JSON
    (redacted and capped by the runner), a write's diff; run_python's code once,
    highlighted. Everything from outside is escaped (commands/sanitize.py), except in
    the ``plain`` text version, which is never rendered."""
    a = card.action
    assert isinstance(a, HeldCall)
    name = tool_of(a)
    row = (name, origin_of(a), hints(a.annotations, a.tool, a.origin))
    block: Callable[[str, str], str]
    if plain:  # text as it is, code indented (a fence's language word would stand alone)
        head = f"Approve {name} (tool call, card {short(a.id)})"
        grid = table(("tool", "from", "hints"), [row], width=100)
        def block(body: str, _lang: str) -> str:
            return textwrap.indent(body, "    ")
    else:
        head = f"**Approve {md_text(name)}** (tool call, card `{short(a.id)}`)"
        grid = md_table(("tool", "from", "hints"),
                        [(code_span(name), md_cell(row[1]), md_cell(row[2]))],
                        markup=(0, 1, 2))
        block = code_block
    purpose = (card.purpose if plain else md_text(card.purpose)) if card.purpose else ""
    first = [card.warning if plain else f"**{md_text(card.warning)}**", ""] if card.warning else []
    why = [f"It asks because {card.reason if plain else md_text(card.reason)}.", ""] \
        if card.reason else []
    out = [*first, head + (f": {purpose}" if purpose else ""), "", *why, grid]
    if card.code is not None and code_only(a) is not None:  # the call's one argument: once
        out += ["", "The code:", "", block(card.code, "python")]
    else:
        out += ["", "Arguments (in full):", "", block(card.arguments, "json")]
        if card.code is not None:
            out += ["", "The code:", "", block(card.code, "python")]
    if card.change is not None:
        out += ["", "The change to the file:", "", block(card.change, "diff")]
    if footer:
        out += ["", _plain(decide_line(card)) if plain else decide_line(card)]
    return "\n".join(out)


def card_markdown(card: ActionCard, footer: bool = True) -> str:
    """A card in Markdown: a held call's approval card, or a typed action's effect."""
    a = card.action
    if isinstance(a, HeldCall):
        return tool_card_markdown(card, footer)
    md, span = sanitize.md_text, sanitize.code_span
    purpose = f": {md(card.purpose)}" if card.purpose else ""
    params = [(k, span(json.dumps(v))) for k, v in a.params.items()]
    out = [f"**Confirm {md(a.skill)}** ({md(a.kind)}, card `{short(a.id)}`){purpose}", "",
           md_table(("parameter", "value"), params, markup=(1,))]
    if a.kind == "internal":
        out += ["", md_table(("setting", "now", "after"),
                             [(span(p), "—" if a.old.get(p) is None else span(json.dumps(a.old[p])),
                               span(json.dumps(v))) for p, v in a.changes.items()],
                             markup=(0, 1, 2))]
    else:
        activity = a.activity or {}
        out += ["", f"Sends a **{md(str(activity.get('type')))}** activity to {md(a.target)} "
                    f"(id {span(str(activity.get('id')), table=False)}):", "",
                sanitize.code_block(json.dumps(activity, indent=2, ensure_ascii=False), "json")]
    if footer:
        out += ["", decide_line(card)]
    return "\n".join(out)


_markdown_first(ActionCard, card_markdown)
text.register(ActionCard, lambda r: tool_card_markdown(r, plain=True)
              if isinstance(r.action, HeldCall) else _plain(card_markdown(r)))
_markdown_first(ActionDone, lambda r: sanitize.markdown(r.summary))


_renders(ProposedCells,
         lambda r: "\n\n".join(f"Proposed cell (copy it into a new cell):\n\n{code.rstrip()}"
                               for code in r.cells),
         lambda r: "\n\n".join("Proposed cell:\n\n" + code_block(code, "python")
                               for code in r.cells))


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
        out.append("Output:\n\n" + sanitize.code_block(r.output.rstrip()))
    if r.answer is not None:
        out.append(markdown(r.answer))
    for code in r.proposed:
        out.append("Proposed cell:\n\n" + sanitize.code_block(code.rstrip(), "python"))
    if r.card is not None:
        out.append(markdown(r.card))
    return "\n\n".join(out)


def _plain(md: str) -> str:
    """Short Markdown as plain text: bold and code marks dropped."""
    return md.replace("**", "").replace("`", "")


_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_SEPARATOR = re.compile(r"^\|(\s*:?-+:?\s*\|)+\s*$")


def plain_text(md: str) -> str:
    """Lily's own Markdown (help pages) as terminal text: each Markdown table becomes a
    fixed-width table like ``/skills``'s, headings and bold and code marks are dropped.

    A pure function of its text, so it remembers its last 64 results, as
    :func:`sanitize.markdown` does: the same page (``/help`` of one snapshot) is laid out
    once, not on every cell that shows it."""
    return _laid_out(md)


@lru_cache(maxsize=64)
def _laid_out(md: str) -> str:
    out: list[str] = []
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and _SEPARATOR.match(lines[i + 1]):
            block = [lines[i]]
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                block.append(lines[i])
                i += 1
            rows = [tuple(_plain(c.strip().replace("\\|", "|"))
                          for c in _CELL_SPLIT.split(row.strip())[1:-1]) for row in block]
            out.append(table(rows[0], rows[1:], width=100))
            continue
        out.append(_plain(lines[i].lstrip("#").lstrip() if lines[i].startswith("#") else lines[i]))
        i += 1
    return "\n".join(out)


def _value(value: object) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, indent=2, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _mcp_markdown(r: McpStatus) -> str:
    """``/mcp`` as Markdown; everything a server said is escaped (docs/mcp.md#commands)."""
    def esc(v: object) -> str:
        return md_text(str(v))

    changed = ["The MCP configuration changed since it was read:", "",
               *(f"- {esc(line)}" for line in r.changes), ""] if r.changes else []
    if not r.servers:
        return "\n".join([*changed, "No MCP server is configured (docs: "
                           "`[mcp.servers.NAME]` in lily.toml)."])
    out = changed
    if r.restarted:
        out.append(f"Restarted MCP server **{esc(r.restarted)}**.\n")
    for row in r.servers:
        state = row["state"] + (f": {esc(row['reason'])}" if row.get("reason") else "")
        out.append(f"**{esc(row['name'])}** ({row['transport']}, {esc(row['source'])}): {state}")
        if row.get("protocol"):
            out.append(f"\n{_mcp_protocol(row, esc)}")
        if row.get("note"):
            out.append(f"\n*{esc(row['note'])}*")
        if row.get("stderr"):
            out.append("\n" + "\n".join(f"> {esc(line)}" for line in row["stderr"]))
        if row["tools"]:
            out.append("\n" + md_table(("tool", "approval"),  # escaped once: a code span
                                        [(code_span(t["name"]), t["mode"]) for t in row["tools"]],
                                        markup=(0,)))
        out.append("")
    out += [f"*{esc(p)}*" for p in r.problems]
    return "\n".join(out).strip()


markdown.register(McpStatus, _mcp_markdown)


def _mcp_protocol(row: dict[str, Any], esc: Callable[[object], str]) -> str:
    """A server's protocol version, its extensions and the skills it serves (one line)."""
    ext = ", ".join(esc(e) for e in row.get("extensions") or []) or "none"
    skills = row.get("skills") or []
    line = f"protocol {esc(row['protocol'])}; extensions: {ext}"
    return line + (f"; skills: {', '.join(esc(n) for n in skills)}" if skills else "")


@text.register
def _(r: McpStatus) -> str:
    out = [f"The MCP configuration changed since it was read: {'; '.join(r.changes)}.\n"
           ] if r.changes else []
    if not r.servers:
        return "\n".join([*out, _plain(_mcp_markdown(McpStatus(())))])
    out += [f"Restarted MCP server {r.restarted}.\n"] if r.restarted else []
    for row in r.servers:
        state = row["state"] + (f": {row['reason']}" if row.get("reason") else "")
        out.append(f"{row['name']} ({row['transport']}, {row['source']}): {state}")
        out += [f"  {_mcp_protocol(row, str)}"] if row.get("protocol") else []
        out += [f"  {row['note']}"] if row.get("note") else []
        out += [f"  | {line}" for line in row.get("stderr") or []]
        if row["tools"]:
            out.append(table(("tool", "approval"), [(t["name"], t["mode"]) for t in row["tools"]]))
        out.append("")
    return "\n".join([*out, *r.problems]).strip()


@text.register
def _(r: McpImage) -> str:
    if r.left_out:
        return r.left_out
    return f"[image from {r.tool}: {r.mime}, {len(r.data):,} bytes]"


def _policy_markdown(r: PolicyView) -> str:
    head = (f"Permission mode is now **{r.mode}**" if r.changed
            else f"Permission mode: **{r.mode}**") + f" — {r.what}."
    if not r.rows:
        return head
    out = [head, "", md_table(("setting", "value", "from"), list(r.rows))]
    out += ["", *(f"- {md_text(n)}" for n in r.notes)] if r.notes else []
    return "\n".join(out)


markdown.register(PolicyView, _policy_markdown)


@text.register
def _(r: PolicyView) -> str:
    head = _plain(_policy_markdown(PolicyView(r.mode, changed=r.changed, what=r.what)))
    if not r.rows:
        return head
    return "\n".join([head, "", table(("setting", "value", "from"), list(r.rows), width=100),
                      *(["", *(f"- {n}" for n in r.notes)] if r.notes else [])])
