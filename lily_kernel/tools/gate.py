"""The gate: the one function every tool call passes before it runs (docs/permissions.md#the-gate).

Every route a call can take — the model's own call, ``/confirm`` or a card's button, an
ACP client's permission reply, a ``tool_dispatch`` skill, ``lily logs replay`` — asks
:func:`decide` and acts on the one typed :data:`Outcome` it returns: :class:`Runs` (now, as
is), :class:`Sandboxed` (model code run in the sandbox, tools/sandbox.py: it can read and
compute, and change nothing), :class:`Asks` (a card first) or :class:`Refused` (never, with
the reason). Nothing outside this module decides whether a call may run: the tool policy's
lists, the mode's table (:func:`table`), files that run by themselves
(settings/autorun.py), approvals and their revocation, the sandbox's settings, a replay's
rule and, for a call a card approved, whether what the card showed still holds
(:class:`Card`: the tool's identity, the change it showed) are all asked here.
"""
from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from lily_kernel.errors import ToolError
from lily_kernel.settings import autorun
from lily_kernel.settings.permissions import Call, Mode, Permissions, matches
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

#: The most a card shows of a call (its arguments and a write's diff), always in full: a
#: call that needs more is refused, never confirmed half-seen (docs/permissions.md#cards).
CARD_CHARS = 200_000


class Route(enum.Enum):
    """Which way a call came in: the gate may decide differently for each."""

    MODEL = "model"          # the model's own call, in the agent loop
    CONFIRM = "confirm"      # /confirm, a card's button: a held call decided by the user
    ACP = "acp"              # an ACP client's permission reply
    DISPATCH = "dispatch"    # a tool_dispatch skill's command
    REPLAY = "replay"        # lily logs replay (--include-code)


class Refusal(enum.Enum):
    """Why a call is refused, as a kind the faces and the journal can tell apart."""

    DENIED = "denied"              # a deny list, an allow list that leaves it out
    MODE = "mode"                  # the mode (plan) or the administrator's cap
    POLICY = "policy"              # the administrator's policy (e.g. no model code)
    PROTECTED = "protected"        # a protected path, Lily's own state
    UNSHOWABLE = "unshowable"      # a card could not show it in full
    CHANGED = "changed"            # what was approved changed before it ran
    WAITING = "waiting"            # another card still waits
    INVALID = "invalid"            # not a valid call (unknown tool, bad arguments)


class Replay(enum.Enum):
    """A session that replays a journal (``lily logs replay``): whether code may run."""

    NO_CODE = "no code"      # without --include-code: no record runs code, by any route
    CODE = "code"            # --include-code: calls are decided as in any session


@dataclass(frozen=True)
class Runs:
    """The call runs now, as is."""

    note: str = ""


@dataclass(frozen=True)
class Sandboxed:
    """Model code runs in the sandbox, with no card: it can change nothing."""

    note: str = "ran in the sandbox"


@dataclass(frozen=True)
class Asks:
    """A card asks the user first; ``no_always`` says why ``--always`` is refused, if it is."""

    reason: str
    no_always: str | None = None


@dataclass(frozen=True)
class Refused:
    """The call never runs; ``reason`` is one sentence for the model and the user."""

    kind: Refusal
    reason: str


Outcome = Runs | Sandboxed | Asks | Refused


@dataclass(frozen=True)
class Card:
    """What a card showed, for a call it approved (:data:`Route.CONFIRM`, :data:`Route.ACP`):
    the tool as it was then and the change the card showed (a write's diff)."""

    identity: ToolIdentity | None
    change: str | None


class Holder(Protocol):
    """What the gate needs of a session (docs/session.md#state)."""

    approved: dict[str, ToolIdentity]
    revoked: dict[str, str]  # tool -> the line saying its approval was revoked
    tools: ToolRegistry
    policy: ToolPolicy
    permissions: Permissions
    replay: Replay | None

    @property
    def environ(self) -> Mapping[str, str]:
        """The session's environment (``LILY_SANDBOX=off`` turns the sandbox off)."""
        ...

    def revoke(self, tool: str, why: str) -> None:
        """Forget the approval of ``tool``: ``why`` (one line) says what changed."""
        ...


def arguments_json(args: Mapping[str, Any]) -> str:
    """A call's arguments as pretty JSON (what the card shows, before redaction and cap)."""
    return json.dumps(dict(args), indent=2, ensure_ascii=False, default=repr)


def change_of(tool: Tool, args: Mapping[str, Any]) -> str | None:
    """What the call would change in something that exists (a write's diff), or None;
    ToolError when the call is refused by it (a file that is not text)."""
    return None if tool.change is None else tool.change(args)


def changes_nothing(tool: Tool, args: Mapping[str, Any]) -> bool:
    """Would this call change nothing (a ``write`` of the content the file holds)? It is
    answered "no change" without running or asking."""
    try:
        return change_of(tool, args) == NO_CHANGE
    except ToolError:
        return False


def decide(holder: Holder, name: str, args: Mapping[str, Any], route: Route,
           card: Card | None = None) -> Outcome:
    """Whether the call of tool ``name`` with ``args`` coming in by ``route`` runs, runs in
    the sandbox, asks first or is refused (docs/permissions.md#the-gate). For a call a card
    approved (``card``), it is decided again now: a tool redefined, a file changed since
    the card, a mode or policy that refuses it now → :class:`Refused`, else it runs.

    An approval given to another identity of the tool (redefined, or another server's
    under the same name) is revoked here, with one line saying what changed."""
    refused = unusable(holder, name, route)
    if refused is not None:
        return refused
    tool = holder.tools.get(name)
    assert tool is not None  # unusable() refuses a tool that is not registered
    kind = kind_of(tool)
    if card is not None and card.identity is not None and tool.identity() != card.identity:
        return Refused(Refusal.CHANGED, f"not run: {name} changed since its card was shown "
                                        f"({', '.join(tool.identity().changes(card.identity))});"
                                        " ask again")
    try:
        change = change_of(tool, args)
    except ToolError as exc:  # the call refuses it too (a file that is not text)
        return Refused(Refusal.INVALID, str(exc))
    if card is not None and change != card.change:
        return Refused(Refusal.CHANGED, f"not run: the file {args.get('path')!r} changed since "
                                        "the card was shown; ask again to see the new change")
    perms = holder.permissions
    read_only = tool.annotations.get("readOnlyHint") is True
    if kind == "run":
        ruled = _code(holder, tool, route, card is not None)
        if ruled is not None:
            return ruled
    if route is Route.DISPATCH:  # the user's own command: the mode above, nothing asks
        return Runs()
    runs = None
    if kind == "write":
        path = args.get("path")
        runs = autorun.reason(path, getattr(holder, "workspace", None)) \
            if isinstance(path, str) else None
    approved, revoked = _approval(holder, tool)
    call = Call(tool.name, kind, read_only=read_only, asks=tool.ask, approved=approved,
                runs_by_itself=runs, changes_nothing=change == NO_CHANGE)
    said = table(perms, call)
    if card is not None:  # the user approved what the card showed: it runs unless refused
        return said if isinstance(said, Refused) else Runs("confirmed")
    if isinstance(said, Asks):
        shown = len(arguments_json(args)) + len(change or "")
        if shown > CARD_CHARS:
            return Refused(Refusal.UNSHOWABLE, f"not run: a card shows a call's arguments in "
                                               f"full, and these are {shown:,} characters (more "
                                               f"than {CARD_CHARS:,}); split the work into "
                                               "smaller calls")
        if revoked:
            return Asks(f"{said.reason}; {revoked}", said.no_always)
    return said


def run(tool: Tool, args: Mapping[str, Any], outcome: Outcome) -> Shown:
    """Run the call as ``outcome`` says: in the sandbox for :class:`Sandboxed` (the tool's
    sandboxed form), as is for :class:`Runs`; ToolError for any other outcome, or the
    tool's own failure (information for the model)."""
    if isinstance(outcome, Sandboxed) and tool.sandboxed is not None:
        return invoke(replace(tool, func=tool.sandboxed), args)
    if isinstance(outcome, Runs):
        return invoke(tool, args)
    raise ToolError(outcome.reason if isinstance(outcome, Refused) else
                    f"not run: {tool.name} waits for the user's confirmation")


def user_write(path: str, mode: Mode | None = None,
               workspace: Path | None = None) -> Runs | Refused:
    """A file Lily writes for the user's own command (``/logs export``, ``lily logs export``,
    a replay's ``--to``): refused in plan mode and where something runs it by itself, as the
    model's ``write`` is (the file boundary's own checks are the caller's: docs/logs.md)."""
    if mode is Mode.PLAN:
        return Refused(Refusal.MODE, "in plan mode nothing is written")
    runs = autorun.reason(path, workspace)
    return Refused(Refusal.PROTECTED, runs) if runs else Runs()


def unusable(holder: Holder, name: str, route: Route = Route.MODEL) -> Refused | None:
    """Why no call of tool ``name`` by ``route`` may run now, whatever its arguments, or
    None: the tool policy's lists, owner-only, a replay without code, plan mode (what the
    model is offered is what this leaves, agent/request.py)."""
    policy, tools = holder.policy, holder.tools
    tool = tools.get(name)
    unavailable = policy.unavailable_reason(tools, name)
    if unavailable or tool is None:
        why = Refusal.DENIED if tool is not None else Refusal.INVALID
        return Refused(why, unavailable or f"tool '{name}' is not registered")
    if route is not Route.DISPATCH and tool.owner_only:
        return Refused(Refusal.DENIED, f"tool '{name}' is owner-only: only a /command may run it")
    kind = kind_of(tool)
    code = kind == "run" or (kind in ("mcp", "other") and route is Route.DISPATCH)
    if holder.replay is Replay.NO_CODE and (code or kind == "mcp"):
        return Refused(Refusal.POLICY, f"not run: a replay runs no code or tool server "
                                       f"without `lily logs replay --include-code` ({name})")
    if holder.permissions.mode is Mode.PLAN and kind not in ("read", "propose") and \
            not tool.annotations.get("readOnlyHint"):
        model_code = kind == "run" and route is Route.MODEL
        unsandboxed = sandbox_unavailable(holder, tool) if model_code else "not sandboxed"
        if unsandboxed is not None:
            return Refused(Refusal.MODE, f"tool '{name}' is not available in plan mode "
                                         "(read-only: nothing is written or run; the user can "
                                         "switch with /mode ask)")
    return None


def _approval(holder: Holder, tool: Tool) -> tuple[bool, str]:
    """Whether ``tool`` is approved for the session as it is now, and the line saying an
    approval was revoked (now, or since the last card)."""
    approved, revoked = False, ""
    if tool.name in holder.approved:
        was, now = holder.approved[tool.name], tool.identity()
        approved = was == now
        if not approved:
            revoked = (f"your /confirm --always for {tool.name} is revoked: "
                       f"{', '.join(now.changes(was))} changed")
            holder.revoke(tool.name, revoked)
    return approved, revoked or holder.revoked.get(tool.name, "")


NO_ALWAYS_CODE = ("{tool} is always asked: it runs code in your namespace (in the sandbox, "
                  "where one is usable, it runs without a card)")


def _code(holder: Holder, tool: Tool, route: Route, confirmed: bool) -> Outcome | None:
    """Code the model wrote (``run_python``): the administrator may forbid it or require
    the sandbox; the model's own call runs in the sandbox when one is usable here (it can
    change nothing: no card, in every mode, plan included), else a card asks, with one line
    saying why (docs/permissions.md#the-sandbox). None: the mode's table decides."""
    perms, name = holder.permissions, tool.name
    if route is Route.DISPATCH:
        return None  # the user's own code, typed in a /command
    if perms.model_code == "none":
        return Refused(Refusal.POLICY, f"not run: the administrator's policy forbids code the "
                                       f"model writes ([sandbox] model_code = \"none\"; {name})")
    if confirmed:  # a real run the user approved on a card
        if perms.model_code == "sandbox":
            return Refused(Refusal.POLICY, "not run: the administrator's policy runs code the "
                                           "model writes only in the sandbox "
                                           "([sandbox] model_code = \"sandbox\")")
        if perms.mode is Mode.PLAN:
            return Refused(Refusal.MODE, f"plan mode is read-only: {name} is not run "
                                         "(/mode ask lets it ask)")
        return None
    why = sandbox_unavailable(holder, tool)
    asked = matches(name, perms.forced) or matches(name, perms.confirm)
    if why is None and not asked:
        return Sandboxed()
    if why is None:
        why = "the tool policy ([tools] confirm) asks for it"
    if perms.model_code == "sandbox":
        return Refused(Refusal.POLICY, f"not run: the administrator's policy runs code the "
                                       f"model writes only in the sandbox, and {why}")
    if perms.mode is Mode.PLAN:
        return Refused(Refusal.MODE, f"plan mode is read-only: {name} runs only in the "
                                     f"sandbox there, and {why}")
    return Asks(f"{name} runs code in your namespace: the sandbox is unavailable here ({why}); "
                "a card asks instead", NO_ALWAYS_CODE.format(tool=name))


def sandbox_unavailable(holder: Holder, tool: Tool) -> str | None:
    """Why ``tool``'s call cannot run in the sandbox here (one line), or None when it can:
    the settings, the face (only a notebook has one) and the engine (tools/sandbox.py)."""
    perms = holder.permissions
    if not perms.sandbox:
        where = perms.provenance.get("sandbox.enabled", "a layer")
        return f"[sandbox] enabled = false in {where}"
    if tool.sandboxed is None:
        return "this face has no sandbox (only a notebook runs one)"
    return engine_unavailable(holder.environ)


def engine_unavailable(env: Mapping[str, str]) -> str | None:
    """The sandbox engine's own answer (tools/sandbox.py: turned off with
    ``LILY_SANDBOX=off``, not Linux, no Landlock, a failed probe)."""
    from lily_kernel.tools import sandbox  # loaded by the first call that could use it
    return sandbox.unavailable(env)


def table(perms: Permissions, call: Call) -> Outcome:
    """The mode's table (docs/permissions.md#the-table): run, ask or refuse ``call``. Deny
    and allow lists, and code the model writes, are decided in :func:`decide` before it."""
    mode = perms.mode
    writes = call.kind in ("write", "run") or (
        call.kind in ("mcp", "other") and not call.read_only)
    if mode is Mode.PLAN and writes:
        return Refused(Refusal.MODE, f"plan mode is read-only: {call.tool} is not run "
                                     "(/mode ask lets it ask)")
    if matches(call.tool, perms.forced):
        return Asks("the administrator's policy always asks for this tool",
                    "the administrator's policy always asks for this tool")
    if call.runs_by_itself:
        return Asks(call.runs_by_itself, "a file that something runs by itself is asked "
                                         "every time")
    if call.kind == "run":  # a real run, outside the sandbox: a card in every mode
        return Asks(f"{call.tool} runs code in your namespace",
                    NO_ALWAYS_CODE.format(tool=call.tool))
    if matches(call.tool, perms.confirm):
        return Runs() if call.approved else Asks(
            "the tool policy ([tools] confirm) asks for this tool")
    if call.approved or mode is Mode.AUTO or call.kind in ("read", "propose"):
        return Runs()
    if call.kind == "write":
        if call.changes_nothing or mode is Mode.EDITS:
            return Runs()
        return Asks("in ask mode every write asks")
    if call.asks and call.kind == "mcp":
        return Asks(f"in {mode.value} mode an MCP tool asks unless its server's auto_approve "
                    "lists it")
    if call.asks:
        return Asks(f"{call.tool} asks before it runs")
    return Runs()
