"""The administrator's policy file: where it is, what it may hold, ``lily policy check``.

``/etc/lily/policy.toml`` always counts when it exists; ``LILY_POLICY_FILE`` names one more
(both restrict: the environment cannot point the session away from the system's file). A
file that exists and cannot be read or holds a setting it may not fails closed: the agent
does not run until it is fixed (docs/permissions.md#the-administrators-policy).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lily_kernel.errors import ConfigError
from lily_kernel.settings.limits import MAXIMA
from lily_kernel.settings.permissions import ADMIN, MODEL_CODE, Layer, Mode

SYSTEM_FILE = Path("/etc/lily/policy.toml")
ENV_FILE = "LILY_POLICY_FILE"
MAX_BYTES = 1024 * 1024
#: What an administrator's file may hold: table -> {key: what it must be}.
SCHEMA: dict[str, dict[str, str]] = {
    "permissions": {"mode": "mode", "max_mode": "mode"},
    "tools": {"allow": "names", "deny": "names", "confirm": "names", "offer": "names"},
    "model": {"base_urls": "names"},
    "notebook": {"share_values": "false"},
    "journal": {"capture_reads": "false"},
    "mcp": {"workspace_servers": "false"},
    "sandbox": {"enabled": "false", "model_code": "model_code"},
    "limits": {key: "cap" for key in MAXIMA},
}


def files(env: Mapping[str, str]) -> list[Path]:
    """The administrator's files that apply: the system's, then ``LILY_POLICY_FILE``'s."""
    found = [SYSTEM_FILE] if SYSTEM_FILE.exists() else []
    if env.get(ENV_FILE):
        named = Path(env[ENV_FILE]).expanduser()
        if named not in found:
            found.append(named)
    return found


def read(path: Path) -> dict[str, Any]:
    """The file's tables; ConfigError (one line) when it cannot be read or parsed."""
    import tomllib
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"the administrator's policy {path} cannot be read: "
                          f"{exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"the administrator's policy {path} is larger than {MAX_BYTES:,} bytes")
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"the administrator's policy {path} is not valid TOML: {exc}") from None


def problems(data: Mapping[str, Any]) -> list[str]:
    """Every problem of an administrator's file's tables, one line each ([] when none)."""
    out: list[str] = []
    for table, value in data.items():
        if table not in SCHEMA:
            out.append(f"[{table}]: unknown table (known: {', '.join(SCHEMA)})")
            continue
        if not isinstance(value, Mapping):
            out.append(f"[{table}] must be a table")
            continue
        for key, raw in value.items():
            kind = SCHEMA[table].get(key)
            where = f"[{table}] {key}"
            if kind is None:
                out.append(f"{where}: unknown setting (known: {', '.join(SCHEMA[table])})")
            elif kind == "mode":
                try:
                    Mode.parse(raw, where)
                except ConfigError as exc:
                    out.append(str(exc))
            elif kind == "names" and (not isinstance(raw, list) or
                                      not all(isinstance(n, str) and n for n in raw)):
                out.append(f"{where} must be a list of names")
            elif kind == "false" and raw is not False:
                out.append(f"{where} can only be set to false by an administrator "
                           f"(it forbids; not {raw!r})")
            elif kind == "model_code" and raw not in MODEL_CODE:
                out.append(f"{where} must be one of {', '.join(MODEL_CODE)}, not {raw!r}")
            elif kind == "cap" and (isinstance(raw, bool) or not isinstance(raw, int)
                                    or not 0 < raw <= MAXIMA[key]):
                out.append(f"{where} must be a whole number from 1 to {MAXIMA[key]:,}, "
                           f"not {raw!r}")
    return out


def check(path: Path) -> list[str]:
    """``lily policy check FILE``: every problem of the file, one line each."""
    try:
        data = read(path)
    except ConfigError as exc:
        return [str(exc)]
    return problems(data)


def layers(env: Mapping[str, str]) -> list[Layer]:
    """The administrator's layers; ConfigError (one line) for a file with a problem."""
    out = []
    for path in files(env):
        data = read(path)
        found = problems(data)
        if found:
            raise ConfigError(f"the administrator's policy {path}: {found[0]}"
                              + (f" (and {len(found) - 1} more; lily policy check "
                                 f"{path} lists them)" if len(found) > 1 else ""))
        out.append(Layer(ADMIN, os.fspath(path), data))
    return out
