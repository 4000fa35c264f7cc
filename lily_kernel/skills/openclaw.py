"""OpenClaw's gating, read as Lily eligibility (docs/skills-compat.md#openclaw-gating).

OpenClaw skills declare what they need under ``metadata.openclaw`` (older
copies: ``metadata.clawdbot``, ``metadata.moltbot``): ``os``, and under
``requires`` the keys ``bins`` (all on PATH), ``anyBins`` (at least one),
``env`` (set and non-empty) and ``config`` (OpenClaw configuration, which Lily
does not have: the skill is ineligible). ``always: true`` skips these gates,
as in OpenClaw. The loader applies them after precedence, beside Lily's own
``eligibility`` (both apply; no fallback to a shadowed copy).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

METADATA_NAMES = ("openclaw", "clawdbot", "moltbot")
REQUIRES_KEYS = ("bins", "anyBins", "env", "config")
# OpenClaw uses Node's platform names; a few manifests spell them as people do.
OS_MAP = {"darwin": "darwin", "macos": "darwin", "mac": "darwin", "osx": "darwin",
          "linux": "linux", "win32": "win32", "windows": "win32"}


@dataclass(frozen=True)
class OpenClawGate:
    """The gating rules of one ``metadata.<origin>`` block."""

    origin: str  # e.g. "metadata.openclaw": every reason names it
    os: tuple[str, ...] | None = None  # Lily's names (OS_MAP), None: any OS
    bins: tuple[str, ...] = ()
    any_bins: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    config: tuple[str, ...] = ()
    always: bool = False

    def parts(self) -> list[str]:
        """The requirements as ``key: values`` parts, each naming its origin (for /help)."""
        o = self.origin
        out = []
        if self.os is not None:
            out.append(f"os: {', '.join(self.os)} ({o}.os)")
        for label, key, values in (("binaries", "bins", self.bins),
                                   ("any of the binaries", "anyBins", self.any_bins),
                                   ("env", "env", self.env),
                                   ("OpenClaw config", "config", self.config)):
            if values:
                out.append(f"{label}: {', '.join(values)} ({o}.requires.{key})")
        if self.always:
            out.append(f"always: true ({o}.always: the OpenClaw gates are skipped)")
        return out


def gate(metadata: Mapping[str, Any]) -> OpenClawGate | None:
    """The gate declared in ``metadata`` (the first of METADATA_NAMES present), or None.

    Raises ValueError naming the key when a present rule has the wrong shape.
    """
    for name in METADATA_NAMES:
        block = metadata.get(name)
        if block is not None:
            return _parse(f"metadata.{name}", block)
    return None


def _parse(origin: str, block: Any) -> OpenClawGate:
    if not isinstance(block, dict):
        raise ValueError(f"'{origin}' must be a mapping")
    os_names = block.get("os")
    if os_names is not None:
        os_names = tuple(OS_MAP.get(o.lower(), o.lower())
                         for o in _names(os_names, f"{origin}.os")) or None
    requires = block.get("requires")
    if requires is None:
        requires = {}
    elif not isinstance(requires, dict):
        raise ValueError(f"'{origin}.requires' must be a mapping")
    bins, any_bins, env, config = (_names(requires.get(k), f"{origin}.requires.{k}")
                                   for k in REQUIRES_KEYS)
    always = block.get("always", False)
    if always is not True and always is not False:
        raise ValueError(f"'{origin}.always' must be true or false")
    return OpenClawGate(origin, os_names, bins, any_bins, env, config, always=always)


def _names(value: Any, key: str) -> tuple[str, ...]:
    """A list of non-empty strings (a single string counts as a list of one)."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"'{key}' must be a list of non-empty strings")
    return tuple(value)


def problems(g: OpenClawGate, platform: str, env: Mapping[str, str],
             which: Callable[[str], bool]) -> list[str]:
    """Why the host fails ``g``, one reason per failed rule, each naming its key."""
    if g.always:
        return []
    o = g.origin
    out = []
    if g.os is not None and not any(platform == n or platform.startswith(n) for n in g.os):
        out.append(f"{o}.os: requires {' or '.join(g.os)}; this is {platform}")
    missing = [b for b in g.bins if not which(b)]
    if missing:
        out.append(f"{o}.requires.bins: {', '.join(missing)} not on PATH")
    if g.any_bins and not any(which(b) for b in g.any_bins):
        out.append(f"{o}.requires.anyBins: none of {', '.join(g.any_bins)} on PATH")
    unset = [v for v in g.env if not env.get(v)]
    if unset:
        out.append(f"{o}.requires.env: {', '.join(unset)} unset or empty")
    if g.config:
        out.append(f"{o}.requires.config: {', '.join(g.config)} is OpenClaw configuration, "
                   "which Lily does not have")
    return out
