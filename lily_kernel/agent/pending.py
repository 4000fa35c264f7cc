"""Pending work: what waits for the user's Confirm or Cancel, and the one way it is decided.

Two things can wait: a typed skill's :class:`~lily_kernel.typed.actions.Action` (a
settings change, a message to send) and a model's tool call the policy asks the user
about (:class:`HeldCall`: what the gate says asks, tools/gate.py,
docs/permissions.md#the-gate). Both satisfy :class:`Pending`.

An item is *offered* by the agent loop and becomes *pending* only once the face has
displayed its card (:meth:`Holder.show`); a request that fails first leaves nothing
pending. While one item waits, a new proposal is refused, never silently replacing it.
:func:`decide` is the single entry point for every Confirm and Cancel — a card's buttons,
``/confirm``, ``/cancel`` — and returns what happened (:class:`Decision`), output included,
instead of leaving it somewhere for a face to pick up (docs/typed-skills.md#confirmation,
docs/notebook-tools.md#confirmation).
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from lily_kernel import redaction
from lily_kernel.errors import ActionError, ToolError, Uncertain
from lily_kernel.settings.limits import Limits
from lily_kernel.tools import gate
from lily_kernel.tools.gate import CARD_CHARS as CARD_CHARS  # the card's measures: the gate's
from lily_kernel.tools.gate import arguments_json as arguments_json
from lily_kernel.tools.tool_registry import Shown, Tool, ToolIdentity

if TYPE_CHECKING:  # typed skills load on first use, not at `%load_ext lily` (bench/README.md)
    from lily_kernel.typed.actions import Action, ActionHost

DECLINED = "declined by the user"
SHORT = 8  # hex digits of an id shown on a card and accepted by /confirm ID


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
    outcome: gate.Outcome | None = None  # a tool call's: what the gate decided when it ran


class Holder(gate.Holder, Protocol):
    """What pending work needs of a session (docs/session.md#state), besides what the gate
    needs (tools/gate.py)."""

    pending: PendingItem | None
    limits: Limits

    def settle(self, item: Pending, outcome: str) -> None:
        """Drop ``item`` from pending and journal ``outcome``."""
        ...

    def approve(self, tool: str, identity: ToolIdentity) -> None:
        """Let ``tool``, as ``identity``, run without a card for the rest of the session
        (journaled)."""
        ...

    def add_message(self, message: dict[str, Any]) -> None:
        """Add one message to the conversation."""
        ...


def short(item_id: str) -> str:
    """The id a card shows and ``/confirm ID`` takes."""
    return item_id[:SHORT]


# -- holding a call ---------------------------------------------------------------------

def _change(tool: Tool, args: Mapping[str, Any]) -> str | None:
    try:
        return gate.change_of(tool, args)
    except ToolError:
        return None


def hold(session: Holder, tool: Tool, args: Mapping[str, Any], paused: Paused,
         asks: gate.Asks) -> HeldCall:
    """A :class:`HeldCall` for ``tool`` called with ``args``, which the gate said ``asks``:
    its card's data, diff included, the reason it asks and the identity an approval would
    be bound to."""
    session.revoked.pop(tool.name, None)  # said on this card
    return HeldCall(uuid.uuid4().hex, paused.skill or "", tool.name, dict(args), paused,
                    tool.origin, tool.server, dict(tool.annotations), _change(tool, args),
                    asks.no_always, asks.reason, tool.identity())


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


def _run(session: Holder, call: HeldCall, route: gate.Route) -> tuple[gate.Outcome, Shown]:
    """Run a confirmed call if the gate, asked again now, lets it (the tool, the file, the
    mode or the policy may have changed since the card was shown): the outcome, and the
    capped result text (errors start with 'Error:') and what it showed."""
    said = gate.decide(session, call.tool, call.args, route,
                       gate.Card(call.identity, call.change))
    tool = session.tools.get(call.tool)
    if not isinstance(said, gate.Runs) or tool is None:
        reason = said.reason if isinstance(said, gate.Refused) else \
            f"not run: {call.tool} was not decided to run"
        return said, Shown(f"Error: {reason}")
    try:
        value = gate.run(tool, call.args, said)
    except ToolError as exc:
        return said, Shown(f"Error: {exc}")
    masked = redaction.redact(value.text, getattr(session, "environ", None))  # before the cut
    return said, Shown(cap(masked, session.limits.tool_result_chars)[0], value.display)


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


def decide(session: Holder, ref: str | None, ok: bool, always: bool = False,
           route: gate.Route = gate.Route.CONFIRM) -> Decision:
    """Confirm (``ok``) or cancel the pending item ``ref`` names (None: the one waiting);
    ``route``: a card's button or ``/confirm`` (:data:`~gate.Route.CONFIRM`) or an ACP
    client's permission reply (:data:`~gate.Route.ACP`).

    ``always`` (``/confirm --always``) also lets that tool run without a card for the rest
    of the session; refused for a typed action and for ``run_python``. Only the item the
    session holds can be decided: a card that was cancelled or done does nothing. A failed
    typed execution leaves the action pending so it can be retried or cancelled.
    """
    item = find(session, ref)
    if always and not ok:
        raise ActionError("--always goes with /confirm, not /cancel")
    if isinstance(item, HeldCall):
        return _decide_call(session, item, ok, always, route)
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


def _decide_call(session: Holder, call: HeldCall, ok: bool, always: bool,
                 route: gate.Route) -> Decision:
    """Cancel: answered "declined by the user". Confirm: the gate decides it again, now;
    it runs, once (``always``: and the tool is approved for the session), or the reply
    says it did not run and why — never that it ran."""
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
        said, ran = _run(session, call, route)
    except KeyboardInterrupt:
        decline(session, call, "Error: interrupted by the user while it ran")
        raise
    if not isinstance(said, gate.Runs):
        reason = said.reason if isinstance(said, gate.Refused) else "it was not decided to run"
        session.settle(call, "refused")  # journaled: confirmed, then refused when it ran
        return Decision(call, f"**{call.tool}** did not run: {reason}.", ran.text, ran.display,
                        said)
    note = (" It runs without a card for the rest of this session (until /new)."
            if always else "")
    return Decision(call, f"**{call.tool}** ran (confirmed).{note}", ran.text, ran.display,
                    said)
