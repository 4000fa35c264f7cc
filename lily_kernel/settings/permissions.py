"""Permissions: one model with one owner — the mode, the policy layers and who is asked.

Policy comes from layers, each recorded with where it came from (:class:`Layer`): the
administrator's file, the user's ``lily.toml``, the environment, the workspace's
``lily.toml`` and the session (``/mode``). :func:`build` folds them into one
:class:`Permissions`, where a lower layer can only restrict a higher one: deny and confirm
lists union, allow lists intersect, a numeric cap is the minimum, a switch that shares or
keeps more (``share_values``, ``capture_reads``) is off when any layer turns it off, and the
mode is the most restrictive of the user's choice, the administrator's ``max_mode`` and the
workspace's (settings/policy_layers.py folds them). Whether one call runs, asks or is
refused is decided by the gate alone, from these values (tools/gate.py, docs/permissions.md).
"""
from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from fnmatch import fnmatchcase
from typing import Any, Literal

from lily_kernel.errors import ConfigError
from lily_kernel.settings.limits import Limits


class Mode(enum.Enum):
    """How much runs without a card, least first (docs/permissions.md#modes)."""

    PLAN = "plan"
    ASK = "ask"
    EDITS = "edits"
    AUTO = "auto"

    @property
    def rank(self) -> int:
        """0 for ``plan`` up to 3 for ``auto``: the lower, the more restrictive."""
        return list(Mode).index(self)

    @classmethod
    def parse(cls, raw: object, where: str) -> Mode:
        """The mode ``raw`` names; ConfigError naming ``where`` otherwise."""
        for mode in cls:
            if raw == mode.value:
                return mode
        names = ", ".join(m.value for m in cls)
        raise ConfigError(f"{where} must be one of {names}, not {str(raw)[:40]!r}")


DEFAULT_MODE = Mode.ASK
#: The layers, highest first (docs/permissions.md#layers).
ADMIN, USER, ENV, WORKSPACE, SESSION = "administrator", "user", "environment", "workspace", "session"
#: Environment variables of the environment layer.
ENV_MODE, ENV_ALLOW, ENV_DENY, ENV_OFFER = ("LILY_MODE", "LILY_TOOLS_ALLOW", "LILY_TOOLS_DENY",
                                            "LILY_TOOLS_OFFER")
#: The settings a non-administrator layer may hold (table -> keys).
KNOWN: dict[str, frozenset[str]] = {
    "permissions": frozenset({"mode"}),
    "tools": frozenset({"allow", "deny", "confirm", "offer"}),
    "notebook": frozenset({"share_values"}),
    "journal": frozenset({"capture_reads"}),
    "sandbox": frozenset({"enabled", "model_code"}),
}
#: ``[sandbox] model_code``: what code the model writes may do, least restrictive first:
#: ``any`` (the sandbox where usable, else a card), ``sandbox`` (only in the sandbox: refused
#: where it is unavailable), ``none`` (never run) (docs/permissions.md#the-sandbox).
MODEL_CODE = ("any", "sandbox", "none")


@dataclass(frozen=True)
class Layer:
    """One source of policy: its name (:data:`ADMIN` ... :data:`SESSION`), where it was
    read (a path, a variable, ``/mode``) and its tables (lily.toml's shape)."""

    name: str
    where: str
    data: Mapping[str, Any]
    trusted: bool = True  # a workspace layer: whether the user trusted it (/trust)

    @property
    def label(self) -> str:
        """``user (~/.config/lily/lily.toml)``: how /policy names it."""
        return f"{self.name} ({self.where})"

    def table(self, name: str) -> Mapping[str, Any]:
        """The layer's table ``name`` ({} when absent); ConfigError when it is not a table."""
        value = self.data.get(name, {})
        if not isinstance(value, Mapping):
            raise ConfigError(f"{self.where}: [{name}] must be a table")
        return value


Kind = Literal["read", "propose", "write", "run", "mcp", "other"]


@dataclass(frozen=True)
class Call:
    """What the mode's table needs to know of one call (built by tools/gate.py)."""

    tool: str
    kind: Kind
    read_only: bool = False      # declared read-only (readOnlyHint)
    asks: bool = False           # the tool asks by default (MCP unless auto_approve'd)
    approved: bool = False       # /confirm --always for this tool's identity
    runs_by_itself: str | None = None  # a write whose target something runs by itself: why
    changes_nothing: bool = False  # a write of exactly what the file holds


@dataclass(frozen=True)
class Permissions:
    """The effective policy of a session and where each part of it came from."""

    mode: Mode = DEFAULT_MODE
    max_mode: Mode = Mode.AUTO
    allow: frozenset[str] | None = None
    deny: frozenset[str] = frozenset()
    confirm: frozenset[str] = frozenset()
    forced: frozenset[str] = frozenset()  # the administrator's confirm: asked every time
    offer: frozenset[str] | None = None
    limits: Limits = field(default_factory=Limits)
    share_values: bool = True
    capture_reads: bool = False
    base_urls: tuple[str, ...] | None = None  # the administrator's endpoint allowlist
    workspace_mcp: bool = True
    sandbox: bool = True  # [sandbox] enabled: model code may run in the sandbox, unasked
    model_code: str = "any"  # [sandbox] model_code, one of MODEL_CODE
    #: setting -> the layer(s) it came from, for /policy (docs/permissions.md#policy)
    provenance: Mapping[str, str] = field(default_factory=dict, compare=False)
    #: what a layer asked for and did not get, one line each (shown by /policy)
    notes: tuple[str, ...] = field(default=(), compare=False)
    layers: tuple[Layer, ...] = field(default=(), compare=False)

    def endpoint_refusal(self, base_url: str | None) -> str | None:
        """Why the administrator's policy does not allow ``base_url`` (None: the default
        endpoint), or None when it does."""
        if self.base_urls is None:
            return None
        url = base_url or "https://api.openai.com/v1"
        if any(url == p or fnmatchcase(url, p) for p in self.base_urls):
            return None
        return (f"the endpoint {url} is not in the administrator's allowlist "
                f"([model] base_urls: {', '.join(self.base_urls)})")

    def rows(self) -> list[tuple[str, str, str]]:
        """Every effective setting, its value and the layer it came from (``/policy``)."""
        def names(value: frozenset[str] | None, none: str) -> str:
            return none if value is None else (", ".join(sorted(value)) or "(none)")
        values = {
            "mode": self.mode.value, "max_mode": self.max_mode.value,
            "tools.allow": names(self.allow, "every tool"), "tools.deny": names(self.deny, ""),
            "tools.confirm": names(self.confirm, ""),
            "tools.always_ask": names(self.forced, ""),
            "tools.offer": names(self.offer, "every usable tool"),
            "notebook.share_values": str(self.share_values).lower(),
            "journal.capture_reads": str(self.capture_reads).lower(),
            "model.base_urls": "any" if self.base_urls is None else ", ".join(self.base_urls),
            "mcp.workspace_servers": str(self.workspace_mcp).lower(),
            "sandbox.enabled": str(self.sandbox).lower(),
            "sandbox.model_code": self.model_code,
        }
        values.update({f"limits.{f.name}": f"{getattr(self.limits, f.name):,}"
                       for f in fields(Limits)})
        return [(k, v, self.provenance.get(k, "default")) for k, v in values.items()]


#: A tool a rule names under another name too: ``edit`` writes the files ``write`` does, so a
#: rule for ``write`` (deny, allow, confirm, always_ask) governs it as well, and a rule
#: written before ``edit`` existed is not slipped past (docs/permissions.md#the-table).
GOVERNED_AS = {"edit": "write"}


def matches(name: str, names: Iterable[str]) -> bool:
    """Is ``name`` in ``names``, exactly or by a glob (``mcp__notes__*``), or is the name it
    is governed as (:data:`GOVERNED_AS`)?"""
    wanted = (name, GOVERNED_AS[name]) if name in GOVERNED_AS else (name,)
    return any(n == p or fnmatchcase(n, p) for p in names for n in wanted)
