"""MCP server configuration: ``[mcp.servers.NAME]`` tables and ``.mcp.json`` (docs/mcp.md).

Servers come from the user's config file (trusted), the workspace's ``lily.toml`` and the
workspace's ``.mcp.json`` (both start only in a trusted workspace). ``${VAR}`` and
``${VAR:-default}`` are expanded from the kernel's environment in ``command``, ``args``,
``env``, ``url`` and ``headers``; every expanded value is registered as a secret with
:func:`lily_kernel.redaction.add_secret`, so it is masked in every output, the journal and
errors. Nothing here imports the MCP SDK.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lily_kernel import redaction
from lily_kernel.errors import ConfigError
from lily_kernel.settings.model_settings import read_config_file, user_config_path

MCP_JSON = ".mcp.json"
DEFAULT_TIMEOUT = 30.0
#: Variables whose values are not secrets (paths and names every child sees anyway).
NOT_SECRET = frozenset({"HOME", "USER", "LOGNAME", "PATH", "PWD", "SHELL", "TMPDIR", "LANG",
                        "TERM", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"})
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_KEYS = {"command", "args", "env", "cwd", "url", "headers", "auto_approve", "timeout",
         "disabled", "type", "transport"}


@dataclass(frozen=True)
class ServerConfig:
    """One configured MCP server, its ``${VAR}``s expanded (or ``error`` saying which is unset)."""

    name: str
    source: str  # "user" | "client" (an ACP client's session/new) | "workspace" | ".mcp.json"
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    auto_approve: frozenset[str] = frozenset()
    timeout: float = DEFAULT_TIMEOUT
    disabled: bool = False
    error: str | None = None  # why this server cannot start (one line)

    @property
    def transport(self) -> str:
        """``stdio`` (a command) or ``http`` (Streamable HTTP at ``url``)."""
        return "http" if self.url else "stdio"

    @property
    def from_workspace(self) -> bool:
        """Whether the server comes from the workspace (starts only once it is trusted); the
        user's file and the user's ACP client are the user's own layer."""
        return self.source not in ("user", "client")


def read_mcp_json(path: Path) -> dict[str, Any]:
    """A ``.mcp.json`` / ``mcp_settings.json`` file's servers as ``{name: table}``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} cannot be read: {exc}") from None
    return servers_from_json(data, str(path))


def servers_from_json(data: Any, where: str) -> dict[str, Any]:
    """The servers of Claude Code / Cursor / notebook-intelligence's ``{"mcpServers": {...}}``
    or jupyter-ai's ``{"mcp_servers": [{"name": ...}, ...]}``, as lily.toml tables."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object")
    raw = data.get("mcpServers", data.get("mcp_servers", data.get("servers")))
    if isinstance(raw, list):
        items = {}
        for entry in raw:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise ConfigError(f"{where}: each server in the list needs a 'name'")
            items[entry["name"]] = {k: v for k, v in entry.items() if k != "name"}
        raw = items
    if raw is None:
        raise ConfigError(f"{where}: no 'mcpServers' table")
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: 'mcpServers' must be an object")
    out: dict[str, Any] = {}
    for name, spec in raw.items():
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: server '{name}' must be an object")
        table: dict[str, Any] = {}
        for key in ("command", "args", "env", "cwd", "url", "headers", "timeout", "disabled"):
            if key in spec:
                table[key] = spec[key]
        if "serverUrl" in spec and "url" not in table:
            table["url"] = spec["serverUrl"]
        approve = spec.get("autoApprove", spec.get("alwaysAllow"))
        if approve is not None:
            table["auto_approve"] = approve
        out[str(name)] = table
    return out


def expand(value: str, env: Mapping[str, str], secrets: list[str]) -> str:
    """``value`` with ``${VAR}`` / ``${VAR:-default}`` expanded; the values that came from a
    variable are appended to ``secrets``. ConfigError names an unset variable."""
    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env and env[name] != "":
            if name not in redaction.SECRET_ENV and name not in NOT_SECRET:
                secrets.append(env[name])
            return env[name]
        if default is None:
            raise ConfigError(f"${{{name}}} is not set")
        return default
    return _VAR.sub(one, value)


def parse_server(name: str, table: Any, source: str, env: Mapping[str, str]) -> ServerConfig:
    """One server table, checked and expanded; a problem becomes the config's ``error``."""
    try:
        return _parse(name, table, source, env)
    except ConfigError as exc:
        return ServerConfig(name, source, error=f"MCP server '{name}' ({source}): {exc}")


def _strings(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{what} must be a list of strings")
    return value


def _table(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{what} must be a table of strings")
    return {str(k): v for k, v in value.items()}


def _parse(name: str, table: Any, source: str, env: Mapping[str, str]) -> ServerConfig:
    if not isinstance(table, dict):
        raise ConfigError("must be a table")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(f"unknown setting '{unknown[0]}'")
    secrets: list[str] = []
    command = table.get("command")
    url = table.get("url")
    if (command is None) == (url is None):
        raise ConfigError("needs either 'command' (stdio) or 'url' (Streamable HTTP)")
    if command is not None and not isinstance(command, str):
        raise ConfigError("'command' must be a string")
    if url is not None and not isinstance(url, str):
        raise ConfigError("'url' must be a string")
    args = [expand(a, env, secrets) for a in _strings(table.get("args", []), "'args'")]
    child_env = {k: expand(v, env, secrets)
                 for k, v in _table(table.get("env", {}), "'env'").items()}
    headers = {k: expand(v, env, secrets)
               for k, v in _table(table.get("headers", {}), "'headers'").items()}
    command = expand(command, env, secrets) if command is not None else None
    url = expand(url, env, secrets) if url is not None else None
    if url is not None and not url.startswith(("http://", "https://")):
        raise ConfigError("'url' must start with http:// or https://")
    timeout = table.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not 0 < timeout < 86400:
        raise ConfigError("'timeout' must be a positive number of seconds")
    disabled = table.get("disabled", False)
    if not isinstance(disabled, bool):
        raise ConfigError("'disabled' must be true or false")
    cwd = table.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ConfigError("'cwd' must be a string")
    approve = frozenset(_strings(table.get("auto_approve", []), "'auto_approve'"))
    for value in secrets:
        redaction.add_secret(value)
    return ServerConfig(name, source, command, tuple(args), child_env, cwd, url, headers,
                        approve, float(timeout), disabled)


def load(workspace: Path, env: Mapping[str, str], user: Mapping[str, Any] | None = None,
         workspace_toml: Mapping[str, Any] | None = None,
         client: Mapping[str, Any] | None = None) -> list[ServerConfig]:
    """Every configured server: the user file's, an ACP client's (``client``: server tables
    by name, from its ``session/new``), then the workspace's ``lily.toml`` and ``.mcp.json``
    (a later source replaces a server of the same name within its layer). A workspace
    server never replaces one of the user's own layer: a lower layer only restricts
    (docs/permissions.md), and in the user's server's place it would inherit the user's
    rules and approvals for ``mcp__<name>__*``; it is listed as failed, saying why."""
    if user is None:
        user = read_config_file(workspace, user_config_path(env))
    if workspace_toml is None:
        workspace_toml = read_config_file(workspace)
    found: dict[str, ServerConfig] = {}
    sources: list[tuple[str, Mapping[str, Any]]] = [
        ("user", _mcp_servers(user, "user lily.toml")),
        ("client", client or {}),
        ("workspace", _mcp_servers(workspace_toml, "lily.toml")),
    ]
    try:
        sources.append((".mcp.json", read_mcp_json(Path(workspace) / MCP_JSON)))
    except ConfigError as exc:
        found["(.mcp.json)"] = ServerConfig("(.mcp.json)", ".mcp.json", error=str(exc))
    for source, servers in sources:
        for name, table in servers.items():
            config = parse_server(name, table, source, env)
            mine = found.get(name)
            if config.from_workspace and mine is not None and not mine.from_workspace:
                shown = f"{name} ({source})"
                found[shown] = ServerConfig(shown, source, error=(
                    f"not used: a server named '{name}' comes from your own "
                    f"{'lily.toml' if mine.source == 'user' else 'client'}, and a workspace "
                    "cannot replace it (rename it in the workspace)"))
                continue
            found[name] = config
    return list(found.values())


def _mcp_servers(data: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    mcp = data.get("mcp", {})
    servers = mcp.get("servers", {}) if isinstance(mcp, dict) else None
    if not isinstance(servers, dict):
        raise ConfigError(f"{where}: [mcp.servers] must be a table")
    return servers


def configured(workspace: Path, user: Mapping[str, Any],
               workspace_toml: Mapping[str, Any]) -> bool:
    """Is any MCP server configured (cheap: no parsing, no SDK)?"""
    def has(data: Mapping[str, Any]) -> bool:
        mcp = data.get("mcp")
        return isinstance(mcp, dict) and bool(mcp.get("servers"))
    return has(user) or has(workspace_toml) or (Path(workspace) / MCP_JSON).is_file()


# -- `lily mcp import`: lily.toml tables -------------------------------------------------

def to_toml(servers: Mapping[str, Mapping[str, Any]]) -> str:
    """``[mcp.servers.NAME]`` tables for ``servers`` (as :func:`servers_from_json` returns)."""
    out = []
    for name, table in servers.items():
        out.append(f"[mcp.servers.{_key(name)}]")
        for key, value in table.items():
            out.append(f"{_key(key)} = {_value(value)}")
        out.append("")
    return "\n".join(out)


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(str(k))} = {_value(v)}" for k, v in value.items()) + " }"
    raise ConfigError(f"cannot write {type(value).__name__} as TOML")
