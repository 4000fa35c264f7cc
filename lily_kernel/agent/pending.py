"""Pending work: what waits for the user's Confirm or Cancel, and the one way it is decided.

Two things can wait: a typed skill's :class:`~lily_kernel.typed.actions.Action` (a
settings change, a message to send) and a model's tool call the policy asks the user
about (:class:`HeldCall`: what the session's permissions say asks, :func:`verdict`,
docs/permissions.md#the-table). Both satisfy :class:`Pending`.

An item is *offered* by the agent loop and becomes *pending* only once the face has
displayed its card (:meth:`Holder.show`); a request that fails first leaves nothing
pending. While one item waits, a new proposal is refused, never silently replacing it.
:func:`decide` is the single entry point for every Confirm and Cancel — a card's buttons,
``/confirm``, ``/cancel`` — and returns what happened (:class:`Decision`), output included,
instead of leaving it somewhere for a face to pick up (docs/typed-skills.md#confirmation,
docs/notebook-tools.md#confirmation).
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from lily_kernel import redaction
from lily_kernel.errors import ActionError, ToolError, Uncertain
from lily_kernel.settings import autorun
from lily_kernel.settings.limits import Limits
from lily_kernel.settings.permissions import Call, Permissions, Verdict
from lily_kernel.tools.builtin_tools import NO_CHANGE
from lily_kernel.tools.tool_registry import (
    Shown,
    Tool,
    ToolIdentity,
    ToolPolicy,
    ToolRegistry,
    invoke,
    kind_of,
)

if TYPE_CHECKING:  # typed skills load on first use, not at `%load_ext lily` (bench/README.md)
    from lily_kernel.typed.actions import Action, ActionHost

DECLINED = "declined by the user"
SHORT = 8  # hex digits of an id shown on a card and accepted by /confirm ID
#: The most a card shows of a call (its arguments and a write's diff), always in full: a
#: call that needs more is refused, never confirmed half-seen (docs/permissions.md#cards).
CARD_CHARS = 200_000


class Pending(Protocol):
    """What every waiting item offers: an id, what it belongs to, a journal record."""

    @property
    def id(self) -> str:
        """The item's id (hex); a card shows its first :data:`SHORT` digits."""
        ...

    @property
    def kind(self) -> str:
        """``internal`` | ``external`` (typed actions) | ``tool`` (a held call)."""
        ...

    @property
    def skill(self) -> str:
        """The skill it was proposed under ("" when none)."""
        ...

    @property
    def uncertain(self) -> bool:
        """A delivery may have happened: only /confirm or /cancel may end it."""
        ...

    def as_dict(self) -> dict[str, Any]:
        """The item as plain data, for the journal."""
        ...


@dataclass
class Paused:
    """A request stopped at a tool call that waits for the user (kept in its :class:`HeldCall`)."""

    pending: list[dict[str, Any]]  # the request's messages so far; the held call has no result
    call_id: str
    skill: str | None
    tools_used: list[str]
    steps: int
    usage: dict[str, int] | None
    at: int = -1  # where in ``pending`` the held call's result goes (calls answered in order)

    def answered(self, result: str) -> list[dict[str, Any]]:
        """``pending`` with the held call answered by ``result``, in call order."""
        at = len(self.pending) if self.at < 0 else self.at
        return [*self.pending[:at], {"role": "tool", "tool_call_id": self.call_id,
                                     "content": result}, *self.pending[at:]]


@dataclass(frozen=True)
class HeldCall:
    """A model's tool call held until the user decides; what its card shows."""

    id: str
    skill: str
    tool: str
    args: dict[str, Any]
    paused: Paused = field(compare=False, repr=False)
    origin: str = "builtin"  # builtin | notebook | mcp
    server: str | None = None  # an MCP tool's server
    annotations: Mapping[str, bool] = field(default_factory=dict)
    change: str | None = None  # a write over an existing file: the unified diff
    always_refusal: str | None = None  # why --always is refused for this tool, if it is
    reason: str = ""  # why it asks (the card's second line)
    identity: ToolIdentity | None = field(default=None, compare=False, repr=False)
    kind: Literal["tool"] = "tool"
    uncertain: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The call as plain data, for the journal."""
        return {"id": self.id, "skill": self.skill, "kind": self.kind, "tool": self.tool,
                "origin": self.origin, "server": self.server, "args": self.args}


if TYPE_CHECKING:
    PendingItem = Action | HeldCall
else:  # annotations only (never isinstance): the union would import lily_kernel.typed
    PendingItem = "Action | HeldCall"


@dataclass(frozen=True)
class Decision:
    """What Confirm or Cancel did: the item, a Markdown summary, and for a confirmed tool
    call its result (the agent goes on with it) and what it showed (``display``, face data
    such as IPython's captured output, shown by the face where the user decided)."""

    item: PendingItem
    summary: str
    result: str | None = None
    display: object | None = None


class Holder(Protocol):
    """What pending work needs of a session (docs/session.md#state)."""

    pending: PendingItem | None
    approved: dict[str, ToolIdentity]
    revoked: dict[str, str]  # tool -> the line saying its approval was revoked, until a card shows it
    tools: ToolRegistry
    policy: ToolPolicy
    permissions: Permissions
    limits: Limits

    def settle(self, item: Pending, outcome: str) -> None:
        """Drop ``item`` from pending and journal ``outcome``."""
        ...

    def approve(self, tool: str, identity: ToolIdentity) -> None:
        """Let ``tool``, as ``identity``, run without a card for the rest of the session
        (journaled)."""
        ...

    def revoke(self, tool: str, why: str) -> None:
        """Forget the approval of ``tool``: ``why`` (one line) says what changed (journaled)."""
        ...

    def add_message(self, message: dict[str, Any]) -> None:
        """Add one message to the conversation."""
        ...


def short(item_id: str) -> str:
    """The id a card shows and ``/confirm ID`` takes."""
    return item_id[:SHORT]


# -- holding a call ---------------------------------------------------------------------

def verdict(session: Holder, tool: Tool, args: Mapping[str, Any]) -> Verdict:
    """Run, ask or refuse this call of ``tool``: the session's permissions decide
    (settings/permissions.py, docs/permissions.md#the-table). An approval given to another
    identity of the tool (redefined, or another server's under the same name) is revoked
    here, with one line saying what changed."""
    kind = kind_of(tool)
    runs, change = None, None
    if tool.change is not None:
        try:
            change = tool.change(args)
        except ToolError as exc:  # the call refuses it too (a file that is not text)
            return Verdict("refuse", str(exc))
    if kind == "write":
        path = args.get("path")
        runs = autorun.reason(path, getattr(session, "workspace", None)) \
            if isinstance(path, str) else None
    approved, revoked = False, ""
    if tool.name in session.approved:
        was, now = session.approved[tool.name], tool.identity()
        approved = was == now
        if not approved:
            revoked = (f"your /confirm --always for {tool.name} is revoked: "
                       f"{', '.join(now.changes(was))} changed")
            session.revoke(tool.name, revoked)
    revoked = revoked or session.revoked.get(tool.name, "")
    call = Call(tool.name, kind, read_only=tool.annotations.get("readOnlyHint") is True,
                asks=tool.ask, approved=approved, runs_by_itself=runs,
                changes_nothing=change == NO_CHANGE)
    said = session.permissions.verdict(call)
    if said.action == "ask":
        shown = len(arguments_json(args)) + len(change or "")
        if shown > CARD_CHARS:
            return Verdict("refuse", f"not run: a card shows a call's arguments in full, and "
                                     f"these are {shown:,} characters (more than {CARD_CHARS:,}); "
                                     "split the work into smaller calls")
    return replace(said, reason=f"{said.reason}; {revoked}") if revoked else said


def _change(tool: Tool, args: Mapping[str, Any]) -> str | None:
    if tool.change is None:
        return None
    try:
        return tool.change(args)
    except ToolError:
        return None


def hold(session: Holder, tool: Tool, args: Mapping[str, Any], paused: Paused) -> HeldCall:
    """A :class:`HeldCall` for ``tool`` called with ``args``: its card's data, diff included,
    the reason it asks and the identity an approval would be bound to."""
    said = verdict(session, tool, args)
    session.revoked.pop(tool.name, None)  # said on this card
    return HeldCall(uuid.uuid4().hex, paused.skill or "", tool.name, dict(args), paused,
                    tool.origin, tool.server, dict(tool.annotations), _change(tool, args),
                    said.no_always, said.reason, tool.identity())


def waiting_refusal(session: Holder, offered: Pending | None = None) -> str | None:
    """Why nothing new may be held now: an item waits (shown, or offered in this request)."""
    held = session.pending or offered
    if held is None:
        return None
    from lily_kernel.typed import actions
    blocked = actions.uncertain_block(cast("ActionHost", session))  # the session is both
    if blocked:
        return blocked
    what = f"the call of {held.tool}" if isinstance(held, HeldCall) else f"{held.skill}"
    return (f"not run: card {short(held.id)} ({what}) still waits for the user's decision; "
            "a new proposal never replaces it. Ask the user to /confirm or /cancel it first")


# -- answering a held call --------------------------------------------------------------

def consistent(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with a result added for any tool call left without one."""
    out = list(messages)
    answered = {m.get("tool_call_id") for m in out if m.get("role") == "tool"}
    for m in list(out):
        for call in m.get("tool_calls") or []:
            if call["id"] not in answered:
                out.append({"role": "tool", "tool_call_id": call["id"],
                            "content": "Error: interrupted before this tool ran"})
    return out


def commit(session: Holder, messages: Iterable[dict[str, Any]]) -> None:
    """Add ``messages`` to the conversation, every tool call answered."""
    for message in consistent(messages):
        session.add_message(message)


def decline(session: Holder, call: HeldCall, reason: str = DECLINED) -> None:
    """Answer a paused request's held call with ``reason`` and keep the request as it was."""
    commit(session, call.paused.answered(reason))


def decline_waiting(session: Holder) -> None:
    """If a tool call waits for confirmation, settle it as declined by the user."""
    waiting = session.pending
    if isinstance(waiting, HeldCall):
        session.settle(waiting, "declined")
        decline(session, waiting)


def _run(session: Holder, call: HeldCall) -> Shown:
    """Run a confirmed call under the policy (it may have changed since the card was
    shown); its capped result text (errors start with 'Error:') and what it showed."""
    tool = session.tools.get(call.tool)
    refusal = session.policy.model_refusal(session.tools, call.tool)
    if refusal or tool is None:
        return Shown(f"Error: {refusal}")
    if call.identity is not None and tool.identity() != call.identity:
        return Shown(f"Error: not run: {call.tool} changed since its card was shown "
                     f"({', '.join(tool.identity().changes(call.identity))}); ask again")
    if _change(tool, call.args) != call.change:
        return Shown(f"Error: not run: the file {call.args.get('path')!r} changed since the "
                     "card was shown; ask again to see the new change")
    try:
        value = invoke(tool, call.args)
    except ToolError as exc:
        return Shown(f"Error: {exc}")
    masked = redaction.redact(value.text, getattr(session, "environ", None))  # before the cut
    return Shown(cap(masked, session.limits.tool_result_chars)[0], value.display)


def cap(text: str, limit: int) -> tuple[str, bool]:
    """A tool result kept to ``limit`` characters, with a visible marker; whether it was cut
    (docs/limits-and-secrets.md#caps)."""
    if len(text) <= limit:
        return text, False
    return (text[:limit] + f"\n[… cut: Lily kept the first {limit:,} characters of this "
            "tool result (lily.toml [limits] tool_result_chars) …]"), True


# -- deciding ---------------------------------------------------------------------------

def find(session: Holder, ref: str | None) -> PendingItem:
    """The pending item ``ref`` (a card's id, or its first digits) names; None: the one
    waiting. A card that no longer waits is named in the refusal, with the one that does."""
    item = session.pending
    if item is None:
        if ref:
            raise ActionError(f"card {short(ref)} is no longer waiting (it was cancelled, "
                              "declined or done); nothing is waiting for confirmation")
        raise ActionError("nothing is waiting for confirmation")
    if ref is not None and not (len(ref) >= 4 and item.id.startswith(ref.lower())):
        raise ActionError(f"card {short(ref)} is no longer waiting (it was cancelled, declined "
                          f"or done); card {short(item.id)} waits: /confirm {short(item.id)} "
                          f"or /cancel {short(item.id)}")
    return item


def decide(session: Holder, ref: str | None, ok: bool, always: bool = False) -> Decision:
    """Confirm (``ok``) or cancel the pending item ``ref`` names (None: the one waiting).

    ``always`` (``/confirm --always``) also lets that tool run without a card for the rest
    of the session; refused for a typed action and for ``run_python``. Only the item the
    session holds can be decided: a card that was cancelled or done does nothing. A failed
    typed execution leaves the action pending so it can be retried or cancelled.
    """
    item = find(session, ref)
    if always and not ok:
        raise ActionError("--always goes with /confirm, not /cancel")
    if isinstance(item, HeldCall):
        return _decide_call(session, item, ok, always)
    if always:
        raise ActionError("--always approves a tool for the session; a typed skill's action "
                          "is confirmed each time")
    if not ok:
        session.settle(item, "cancelled")
        return Decision(item, f"Cancelled: **{item.skill}** did nothing.")
    from lily_kernel.typed import actions
    try:
        outcome = actions.execute(cast("ActionHost", session), item)
    except Uncertain as exc:
        raise actions.held(cast("ActionHost", session), item, exc) from None
    except ActionError as exc:
        raise ActionError(f"{exc}; the action is still waiting (/confirm to retry, "
                          "/cancel to drop it)") from None
    session.settle(item, "executed")
    return Decision(item, outcome.summary)


def _decide_call(session: Holder, call: HeldCall, ok: bool, always: bool) -> Decision:
    """Cancel: answered "declined by the user". Confirm: it runs, once (``always``: and the
    tool is approved for the session)."""
    if not ok:
        session.settle(call, "cancelled")
        decline(session, call)
        return Decision(call, f"Cancelled: **{call.tool}** did not run; the agent is told it "
                              "was declined by the user.")
    if always and call.always_refusal:
        raise ActionError(f"--always is refused: {call.always_refusal}; /confirm runs this "
                          "call once")
    session.settle(call, "confirmed")  # settled first: a second click finds nothing
    if always and call.identity is not None:
        session.approve(call.tool, call.identity)
    try:
        ran = _run(session, call)
    except KeyboardInterrupt:
        decline(session, call, "Error: interrupted by the user while it ran")
        raise
    note = (" It runs without a card for the rest of this session (until /new)."
            if always else "")
    return Decision(call, f"**{call.tool}** ran (confirmed).{note}", ran.text, ran.display)


def arguments_json(args: Mapping[str, Any]) -> str:
    """A call's arguments as pretty JSON (what the card shows, before redaction and cap)."""
    return json.dumps(dict(args), indent=2, ensure_ascii=False, default=repr)

