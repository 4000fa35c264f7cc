"""The core's data as ACP messages: commands, streamed text, tool calls, permission choices
(docs/front-ends.md#acp).

This module turns what the runner yields and the agent loop's events into the SDK's
models; it decides nothing. What a face shows of the model's text goes through
:mod:`lily_kernel.commands.sanitize` first, as in the notebook: :class:`StreamedText` sends a
line once it is complete and its sanitised form no longer changes, so a chat panel
renders inert Markdown while the answer streams.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from acp import helpers
from acp.schema import (
    AvailableCommand,
    AvailableCommandInput,
    ContentToolCallContent,
    FileEditToolCallContent,
    PermissionOption,
    TerminalToolCallContent,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UnstructuredCommandInput,
)

from lily_kernel.acp.acp_clients import ClientProfile
from lily_kernel.agent.pending import HeldCall, short
from lily_kernel.commands import sanitize
from lily_kernel.commands.results import ActionCard, Answer
from lily_kernel.commands.table import BUILTINS
from lily_kernel.redaction import redact, redact_value
from lily_kernel.session.session import Session

ToolKind = Literal["read", "edit", "delete", "move", "search", "execute", "think", "fetch",
                   "switch_mode", "other"]
ToolContent = ContentToolCallContent | FileEditToolCallContent | TerminalToolCallContent
#: The permission choices of a card: Lily's Confirm, Confirm --always, Cancel.
ONCE, ALWAYS, DENY = "once", "always", "deny"
RESULT_CHARS = 4_000
#: The diff path under which ``run_python``'s code is shown (no such file is written).
CODE_PATH = "(run_python code).py"  # what a tool call's update shows of its result
_KINDS: dict[str, ToolKind] = {"read": "read", "list": "search", "scan_todos": "search",
                               "write": "edit", "edit": "edit", "run_python": "execute",
                               "load_skill": "read", "read_skill_file": "read"}


def available_commands(session: Session | None) -> list[AvailableCommand]:
    """The built-in commands and the snapshot's skill aliases the user may run, as the
    ``/`` menu of the client lists them (only the built-ins while no session could start)."""
    found: dict[str, AvailableCommand] = {}
    for command in BUILTINS:
        hint = command.usage.partition(" ")[2]
        found[command.name] = AvailableCommand(
            name=command.name, description=command.summary,
            input=AvailableCommandInput(root=UnstructuredCommandInput(hint=hint)) if hint else None)
    if session is None:
        return list(found.values())
    snap = session.snapshot
    for alias, name in sorted(snap.aliases.items()):
        skill = snap.skill(name)
        if not skill.user_invocable or alias in found:
            continue
        hint = skill.argument_hint or "input"
        found[alias] = AvailableCommand(
            name=alias, description=skill.summary or f"Run the skill {name}.",
            input=AvailableCommandInput(root=UnstructuredCommandInput(hint=hint)))
    return list(found.values())


def command_names(commands: list[AvailableCommand]) -> tuple[tuple[str, str], ...]:
    """What a list of commands says, to tell whether the client must be told again."""
    return tuple((c.name, c.description) for c in commands)


class StreamedText:
    """One model step's text, sent as sanitised Markdown while it streams.

    :meth:`feed` returns what to send now: the sanitised form of the text up to the last
    line end (or, in a long line, the last space once :data:`FLUSH_CHARS` more arrived),
    minus what was sent, when what was sent is still its prefix (a later line can change
    how an earlier one renders, a table's or a heading's underline; then it waits).
    :meth:`finish` returns the rest once the whole text is known.
    """

    FLUSH_CHARS = 80

    def __init__(self) -> None:
        self.raw = ""
        self.sent = ""
        self._cut = 0  # how much of ``raw`` was sanitised and offered

    def feed(self, piece: str) -> str:
        """Take one more streamed piece; what to send now ("" while it waits)."""
        self.raw += piece
        cut = self.raw.rfind("\n") + 1
        if cut <= self._cut:
            if len(self.raw) - self._cut < self.FLUSH_CHARS:
                return ""
            cut = self.raw.rfind(" ") + 1
            if cut <= self._cut:
                return ""
        self._cut = cut
        return self._advance(sanitize.markdown(self.raw[:cut]))

    def finish(self, text: str | None = None) -> str:
        """The rest to send for the step's whole ``text`` (default: what streamed); a text
        whose sanitised form no longer starts with what was sent comes whole, after a
        break, so nothing shown is taken back and nothing is shown unsanitised."""
        full = sanitize.markdown((self.raw if text is None else text).rstrip())
        rest = self._advance(full)
        if rest or full.startswith(self.sent):
            return rest
        whole = "\n\n" + full
        self.sent = full
        return whole

    def _advance(self, safe: str) -> str:
        safe = safe.rstrip()
        if not safe.startswith(self.sent) or len(safe) == len(self.sent):
            return ""
        rest, self.sent = safe[len(self.sent):], safe
        return rest


def footer(answer: Answer) -> str:
    """The line under an answer (skill, tools, model, tokens), as Markdown."""
    return "\n\n*" + sanitize.md_text(answer.footer()) + "*"


def tool_kind(name: str, annotations: Mapping[str, bool] | None = None) -> ToolKind:
    """How a client groups the call: the built-ins by name, others by their hints."""
    if name in _KINDS:
        return _KINDS[name]
    if annotations and annotations.get("readOnlyHint"):
        return "read"
    return "fetch" if name.startswith("mcp__") else "other"


def _json(value: Any, env: Mapping[str, str]) -> str:
    """``value`` as JSON, each string masked on its own (a mask never breaks the JSON)."""
    return json.dumps(redact_value(value, env), indent=2, ensure_ascii=False, default=repr)


def _text(text: str) -> ContentToolCallContent:
    return helpers.tool_content(helpers.text_block(text))


def _title(name: str, args: Mapping[str, Any]) -> str:
    path = args.get("path")
    return f"{name} {path}" if isinstance(path, str) and path else name


def write_diff(session: Session, name: str, args: Mapping[str, Any],
               old: str | None) -> FileEditToolCallContent | None:
    """A ``write`` or ``edit`` call's change as the client's diff (absolute path, old and
    new text); None for another tool, or an edit whose ``old`` is not once in the file."""
    path, content = args.get("path"), args.get("content")
    if name == "edit":
        cut, new = args.get("old"), args.get("new")
        content = (old.replace(cut, new, 1) if isinstance(old, str) and isinstance(cut, str)
                   and isinstance(new, str) and cut and old.count(cut) == 1 else None)
    elif name != "write":
        return None
    if not isinstance(path, str) or not isinstance(content, str):
        return None
    env = session.environ
    return helpers.tool_diff_content(str(session.workspace / path),
                                     _visible(redact(content, env)),
                                     None if old is None else _visible(redact(old, env)))


def old_text(session: Session, args: Mapping[str, Any]) -> str | None:
    """The text a ``write`` or ``edit`` would replace, read through the file boundary; None for a new
    file, or one the boundary refuses (the write is refused too)."""
    from lily_kernel.errors import ToolError
    path = args.get("path")
    if not isinstance(path, str):
        return None
    try:
        data, _size = session.files.read_bytes_of(path)
    except ToolError:
        return None
    return data.decode("utf-8", errors="replace")


def tool_started(session: Session, call_id: str, name: str, args: Mapping[str, Any],
                 status: Literal["pending", "in_progress"] = "in_progress",
                 old: str | None = None) -> ToolCallStart:
    """A model's tool call as the client first sees it; a ``write`` or ``edit`` carries its diff."""
    tool = session.tools.get(name)
    content: list[ToolContent] = []
    diff = write_diff(session, name, args, old)
    if diff is not None:
        content.append(diff)
    locations = [ToolCallLocation(path=diff.path)] if diff is not None else None
    return helpers.start_tool_call(
        call_id, _title(name, args), kind=tool_kind(name, tool.annotations if tool else None),
        status=status, content=content or None, locations=locations,
        raw_input=json.loads(_json(args, session.environ)))


def tool_finished(session: Session, call_id: str, ok: bool,
                  result: str | None) -> ToolCallProgress:
    """The call ran (or was refused): its status and the start of its result."""
    content = None
    if result:
        shown = redact(result, session.environ)
        if len(shown) > RESULT_CHARS:
            shown = shown[:RESULT_CHARS] + f"\n[… {len(shown) - RESULT_CHARS:,} more characters]"
        content = [_text(shown)]
    return helpers.update_tool_call(call_id, status="completed" if ok else "failed",
                                    content=content)


def card_call_id(card: ActionCard) -> str:
    """The tool call a card asks about: the model's own call id for a held call."""
    action = card.action
    if isinstance(action, HeldCall):
        return action.paused.call_id
    return f"lily-action-{short(action.id)}"


def _visible(text: str) -> str:
    return sanitize.visible(text)[0]


def _visible_data(value: Any) -> Any:
    """JSON data with each string's hidden characters made visible (``rawInput`` is shown
    as text by some clients: jupyter-ai lists it as ``key: value`` lines)."""
    if isinstance(value, str):
        return _visible(value)
    if isinstance(value, list):
        return [_visible_data(v) for v in value]
    if isinstance(value, dict):
        return {_visible(str(k)): _visible_data(v) for k, v in value.items()}
    return value


def code_diff(session: Session, code: str) -> FileEditToolCallContent:
    """``run_python``'s code as a new file's diff: the form jupyter-ai shows in full (its
    panel draws no text content); the path names no real file (:data:`CODE_PATH`)."""
    return helpers.tool_diff_content(str(session.workspace / CODE_PATH), code, None)


def card_tool_call(session: Session, card: ActionCard, old: str | None,
                   profile: ClientProfile | None = None) -> ToolCallUpdate:
    """What the permission request shows, in the forms ``profile``'s client displays: the
    call's title, its exact code or arguments (redacted and with hidden characters made
    visible, as on the kernel's card), a write's diff; for a typed skill's action, what it
    would do (docs/front-ends.md#what-each-client-is-sent)."""
    profile = profile or ClientProfile()
    action = card.action
    content: list[ToolContent] = []
    warning = f"{card.warning}." if card.warning else ""
    if isinstance(action, HeldCall):
        env = session.environ
        title = _visible(_title(action.tool, action.args))
        kind = tool_kind(action.tool, action.annotations)
        diff = write_diff(session, action.tool, action.args, old)
        code = redact(card.code, env) if card.code is not None else None
        if diff is not None and profile.shows("diff"):
            content.append(diff)
        elif code is not None and profile.shows("diff") and not profile.shows("text"):
            content.append(code_diff(session, code))
        if diff is not None and card.warning and profile.shows("text"):
            # the client's diff would draw the hidden characters as nothing
            content.append(_text(f"{card.warning}\n\n```json\n{card.arguments}\n```"))
        if profile.shows("text") and diff is None:
            shown = (sanitize.code_block(code, "python") if code is not None
                     else sanitize.code_block(card.arguments, "json"))
            lines = [warning, sanitize.md_text(card.purpose), sanitize.md_text(card.reason), shown]
            content.append(_text("\n\n".join(line for line in lines if line)))
        raw: Any = _visible_data(json.loads(_json(action.args, env)))
    else:
        title, kind = _visible(f"{action.skill}: {action.kind} action"), "other"
        purpose = card.purpose or f"The skill {action.skill} proposes an action."
        if profile.shows("text"):
            content.append(_text(sanitize.md_text(purpose)))
        raw = {"__tool_use_purpose": _visible(purpose), "skill": _visible(action.skill),
               "action": _visible(action.kind)}
    if warning:
        title = f"{title} — {warning}"
    return ToolCallUpdate(tool_call_id=card_call_id(card), title=title, kind=kind,
                          status="pending", content=content or None, raw_input=raw)


def displayed(profile: ClientProfile, call: ToolCallUpdate) -> bool:
    """Whether ``profile``'s client displays what a permission request asks about: a diff,
    a text content, or the raw input (jupyter-ai shows an ``execute`` call's only as
    ``command``, which Lily's calls never carry)."""
    for item in call.content or []:
        if isinstance(item, FileEditToolCallContent) and profile.shows("diff"):
            return True
        if isinstance(item, ContentToolCallContent) and profile.shows("text"):
            return True
    raw = call.raw_input
    return raw is not None and profile.shows("raw_input") and not (
        profile.jupyter_ai and call.kind == "execute")


def unshowable(call: ToolCallUpdate) -> ToolCallUpdate:
    """A request whose code the client cannot display: it says so; only Deny is offered."""
    note = ("this client cannot display the code or arguments to approve, so Lily offers "
            "only Deny; run the request in a notebook (the Lily kernel) to see and allow it")
    return call.model_copy(update={
        "title": f"{call.title} — {note}", "content": [_text(f"**{note}.**")]})


def permission_options(card: ActionCard, shown: bool = True) -> list[PermissionOption]:
    """Lily's choices for a card: run once, always this session (only where ``/confirm
    --always`` is allowed: never for ``run_python`` nor a typed action), deny; only deny
    when the client cannot display what would run (``shown`` false)."""
    action = card.action
    deny = PermissionOption(option_id=DENY, name="Deny", kind="reject_once")
    if not shown:
        return [deny]
    options = [PermissionOption(option_id=ONCE, name="Run once", kind="allow_once")]
    if isinstance(action, HeldCall) and not action.always_refusal:
        options.append(PermissionOption(option_id=ALWAYS, name="Always this session",
                                        kind="allow_always"))
    options.append(deny)
    return options

