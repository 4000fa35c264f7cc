"""A session's policy layers, gathered in one place (docs/permissions.md#layers).

The administrator's files, the user's ``lily.toml``, the environment, the workspace's
``lily.toml`` (with whether the user trusted it) and the session's ``/mode``: each a
:class:`~lily_kernel.settings.permissions.Layer` naming where it was read, folded by
:func:`~lily_kernel.settings.permissions.build`.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from lily_kernel.errors import ConfigError
from lily_kernel.settings import admin_policy
from lily_kernel.settings.limits import Limits
from lily_kernel.settings.permissions import (
    ADMIN,
    DEFAULT_MODE,
    ENV,
    ENV_ALLOW,
    ENV_DENY,
    ENV_MODE,
    ENV_OFFER,
    KNOWN,
    MODEL_CODE,
    SESSION,
    USER,
    WORKSPACE,
    Layer,
    Mode,
    Permissions,
)


def gather(env: Mapping[str, str], user_path: Path, user: Mapping[str, Any],
           workspace: Mapping[str, Any], trusted: bool,
           session_mode: Mode | None = None) -> list[Layer]:
    """Every layer of a session, highest first; ConfigError (one line) for an
    administrator's file that cannot be used (the session fails closed)."""
    layers = admin_policy.layers(env)
    layers.append(Layer(USER, str(user_path), user))
    layers.append(env_layer(env))
    layers.append(Layer(WORKSPACE, "lily.toml", workspace, trusted=trusted))
    if session_mode is not None:
        layers.append(Layer(SESSION, "/mode", {"permissions": {"mode": session_mode.value}}))
    return layers


def permissions(env: Mapping[str, str], user_path: Path, user: Mapping[str, Any],
                workspace: Mapping[str, Any], trusted: bool,
                session_mode: Mode | None = None) -> Permissions:
    """:func:`gather` then :func:`build`; ConfigError (one line) when a layer is malformed."""
    return build(gather(env, user_path, user, workspace, trusted, session_mode))


def with_mode(perms: Permissions, mode: Mode) -> Permissions:
    """``/mode NAME``: the session layer chooses ``mode``; ConfigError (one line) when a
    higher layer caps it below that."""
    layers = [layer for layer in perms.layers if layer.name != SESSION]
    layers.append(Layer(SESSION, "/mode", {"permissions": {"mode": mode.value}}))
    rebuilt = build(layers)
    if rebuilt.mode is not mode:
        raise ConfigError(f"mode {mode.value} is not available: "
                          f"{rebuilt.provenance.get('mode', 'a layer')} caps it at "
                          f"{rebuilt.mode.value}")
    return rebuilt


def _names(value: object, where: str) -> frozenset[str]:
    if isinstance(value, str):  # the environment's "a, b c"
        return frozenset(p.strip() for p in value.replace(",", " ").split() if p.strip())
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise ConfigError(f"{where} must be a list of tool names")
    return frozenset(value)


def _bool(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where} must be true or false, not {value!r}")
    return value


def check_layer(layer: Layer) -> None:
    """ConfigError for a key a non-administrator layer may not hold (the administrator's
    file is checked by :mod:`lily_kernel.settings.admin_policy`)."""
    for table, keys in KNOWN.items():
        data = layer.table(table)
        if table in ("permissions", "notebook", "journal", "sandbox"):
            unknown = sorted(set(data) - keys)
            if unknown:
                extra = (" (max_mode is set only in the administrator's policy)"
                         if unknown[0] == "max_mode" else "")
                raise ConfigError(f"{layer.where}: [{table}] {unknown[0]}: unknown setting "
                                  f"(known: {', '.join(sorted(keys))}){extra}")


def build(layers: Sequence[Layer]) -> Permissions:
    """Fold ``layers`` (any order; each names its kind) into one :class:`Permissions`."""
    by = sorted(layers, key=lambda layer: [ADMIN, USER, ENV, WORKSPACE, SESSION].index(layer.name))
    prov: dict[str, str] = {}
    notes: list[str] = []

    def each(table: str, key: str) -> Iterable[tuple[Layer, Any]]:
        for layer in by:
            data = layer.table(table)
            if key in data:
                yield layer, data[key]

    def note(key: str, layer: Layer) -> None:
        prov[key] = prov[key] + " + " + layer.label if key in prov else layer.label

    for layer in by:
        if layer.name != ADMIN:
            check_layer(layer)
    # lists: deny and confirm union, allow and offer intersect
    deny: frozenset[str] = frozenset()
    confirm: frozenset[str] = frozenset()
    forced: frozenset[str] = frozenset()
    allow: frozenset[str] | None = None
    offer: frozenset[str] | None = None
    for layer, raw in each("tools", "deny"):
        deny |= _names(raw, f"{layer.where}: [tools] deny")
        note("tools.deny", layer)
    for layer, raw in each("tools", "confirm"):
        names = _names(raw, f"{layer.where}: [tools] confirm")
        if layer.name == ADMIN:
            forced |= names
            note("tools.always_ask", layer)
        confirm |= names
        note("tools.confirm", layer)
    for layer, raw in each("tools", "allow"):
        names = _names(raw, f"{layer.where}: [tools] allow")
        allow = names if allow is None else allow & names
        note("tools.allow", layer)
    # offer shapes the prompt, it allows nothing: the environment's, else the workspace's,
    # else the user's, as before layers (docs/agent.md#a-lean-request)
    for name in (ENV, WORKSPACE, USER):
        picks = [(layer, layer.table("tools")["offer"]) for layer in by
                 if layer.name == name and "offer" in layer.table("tools")]
        if picks and offer is None:
            offer = _names(picks[0][1], f"{picks[0][0].where}: [tools] offer")
            note("tools.offer", picks[0][0])
    admin = [layer for layer in by if layer.name == ADMIN]
    # the mode: the user's choice (session > environment > user), else a trusted workspace's,
    # else the administrator's default; then capped by max_mode and any workspace's mode
    max_mode = Mode.AUTO
    for layer, raw in each("permissions", "max_mode"):
        cap = Mode.parse(raw, f"{layer.where}: [permissions] max_mode")
        if cap.rank < max_mode.rank:
            max_mode = cap
            prov["max_mode"] = layer.label
    mode, mode_from = _chosen(by, prov)
    for layer, raw in each("permissions", "mode"):
        value = Mode.parse(raw, f"{layer.where}: [permissions] mode")
        if layer.name == WORKSPACE and value.rank < mode.rank:
            mode, mode_from = value, layer.label
    if max_mode.rank < mode.rank:
        notes.append(f"mode {mode.value} ({mode_from}) is capped at {max_mode.value} by "
                     f"{prov['max_mode']}")
        mode, mode_from = max_mode, prov["max_mode"]
    if mode_from:
        prov["mode"] = mode_from
    limits = _limits(by, prov, notes)
    share = _switch(by, "notebook", "share_values", True, prov, notes)
    # capture_reads copies what tools read into the journal, which holds their results
    # anyway: a workspace may choose it like a trusted one; the administrator may forbid it
    opened = [replace(layer, trusted=True) if layer.name == WORKSPACE else layer for layer in by]
    capture = _switch(opened, "journal", "capture_reads", False, prov, notes)
    base_urls: tuple[str, ...] | None = None
    workspace_mcp = True
    for layer in admin:
        urls = layer.table("model").get("base_urls")
        if urls is not None:
            listed = tuple(sorted(_names(urls, f"{layer.where}: [model] base_urls")))
            base_urls = listed if base_urls is None else tuple(
                u for u in base_urls if u in listed)
            note("model.base_urls", layer)
        servers = layer.table("mcp").get("workspace_servers")
        if servers is not None and not _bool(servers, f"{layer.where}: [mcp] workspace_servers"):
            workspace_mcp = False
            note("mcp.workspace_servers", layer)
    sandbox = _switch(by, "sandbox", "enabled", True, prov, notes)
    model_code = _restricted(by, "sandbox", "model_code", MODEL_CODE[0],
                             lambda a, b: max(a, b, key=MODEL_CODE.index), _model_code, prov,
                             notes)
    return Permissions(mode, max_mode, allow, deny, confirm, forced, offer, limits, share,
                       capture, base_urls, workspace_mcp, sandbox, model_code, prov,
                       tuple(notes), tuple(by))


def _model_code(value: object, where: str) -> str:
    if value not in MODEL_CODE:
        raise ConfigError(f"{where} must be one of {', '.join(MODEL_CODE)}, not {value!r}")
    return str(value)


def _chosen(by: Sequence[Layer], prov: dict[str, str]) -> tuple[Mode, str]:
    """The mode someone chose: the session's, the environment's, the user's file, a
    trusted workspace's, the administrator's default; (ask, "") when nobody did."""
    order = [SESSION, ENV, USER, WORKSPACE, ADMIN]
    for name in order:
        for layer in by:
            raw = layer.table("permissions").get("mode")
            if layer.name != name or raw is None or (name == WORKSPACE and not layer.trusted):
                continue
            return Mode.parse(raw, f"{layer.where}: [permissions] mode"), layer.label
    return DEFAULT_MODE, ""


def _restricted(by: Sequence[Layer], table: str, key: str, default: Any,
                tighter: Any, check: Any, prov: dict[str, str], notes: list[str]) -> Any:
    """One ordered setting: the user's layers choose (session, environment, user file), a
    trusted workspace chooses what they leave open, the administrator's value caps; any
    layer may make it tighter (``tighter(a, b)``: the more restrictive)."""
    chosen, source = default, "default"
    for name in (SESSION, ENV, USER, WORKSPACE):
        picks = [(layer, layer.table(table)[key]) for layer in by
                 if layer.name == name and key in layer.table(table)]
        if picks:
            layer, raw = picks[0]
            value = check(raw, f"{layer.where}: [{table}] {key}")
            if name == WORKSPACE and not layer.trusted:
                if tighter(value, chosen) == value:
                    chosen, source = value, layer.label
                elif value != chosen:
                    notes.append(f"[{table}] {key} = {raw!r} in {layer.label} is not used: "
                                 "an untrusted workspace may only restrict")
            else:
                chosen, source = value, layer.label
            if name != WORKSPACE:
                break
    for layer in by:  # any lower layer, and the administrator, restrict
        if key not in layer.table(table) or layer.name not in (ADMIN, WORKSPACE):
            continue
        value = check(layer.table(table)[key], f"{layer.where}: [{table}] {key}")
        if tighter(value, chosen) == value and value != chosen:
            if layer.name == ADMIN:
                notes.append(f"[{table}] {key} is held at {value!r} by {layer.label}")
            chosen, source = value, layer.label
    if source != "default":
        prov[f"{table}.{key}"] = source
    return chosen


def _switch(by: Sequence[Layer], table: str, key: str, default: bool,
            prov: dict[str, str], notes: list[str]) -> bool:
    return bool(_restricted(by, table, key, default, lambda a, b: a and b, _bool, prov, notes))


def _limits(by: Sequence[Layer], prov: dict[str, str], notes: list[str]) -> Limits:
    for layer in by:  # each table checked whole first: an unknown key names its layer
        try:
            Limits.from_table(layer.table("limits"))
        except ConfigError as exc:
            raise ConfigError(f"{layer.where}: {exc}") from None

    def whole(raw: object, where: str) -> int:
        assert isinstance(raw, int)  # checked by Limits.from_table above
        return raw
    values = {f.name: _restricted(by, "limits", f.name, getattr(Limits(), f.name), min, whole,
                                  prov, notes)
              for f in fields(Limits)}
    return Limits(**values)


def env_layer(env: Mapping[str, str]) -> Layer:
    """The environment layer: ``LILY_MODE``, ``LILY_TOOLS_ALLOW`` / ``_DENY`` / ``_OFFER``."""
    tools = {key: env[var] for var, key in ((ENV_ALLOW, "allow"), (ENV_DENY, "deny"),
                                            (ENV_OFFER, "offer")) if env.get(var) is not None}
    data: dict[str, Any] = {"tools": tools}
    if env.get(ENV_MODE):
        data["permissions"] = {"mode": env[ENV_MODE]}
    where = ", ".join(v for v in (ENV_MODE, ENV_ALLOW, ENV_DENY, ENV_OFFER) if env.get(v)) \
        or "no variable set"
    return Layer(ENV, where, data)
