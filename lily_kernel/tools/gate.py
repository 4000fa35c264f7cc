"""The gate: the one function every tool call passes before it runs (docs/permissions.md).

Every route a call can take — the model's own call, ``/confirm`` or a card's button, an
ACP client's permission reply, a ``tool_dispatch`` skill, ``lily logs replay`` — asks
:func:`decide` and acts on the one typed :data:`Outcome` it returns: :class:`Runs` (now, as
is), :class:`Sandboxed` (model code run in the sandbox, tools/sandbox.py: it can read and
compute, and change nothing), :class:`Asks` (a card first) or :class:`Refused` (never, with
the reason). Nothing outside this module decides whether a call may run.

This first version declares the outcome types every room codes against; the decision moves
here from ``agent/pending.verdict`` in the hardening issue's work.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass


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
