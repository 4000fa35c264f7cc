"""``/trust``: show what the workspace's lily.toml would change, then trust the workspace.

A command, never a tool: the model cannot call it. The record it writes lives in the user's
data folder (``settings/workspace_trust.py``), out of the file tools' reach. ``/trust --revoke`` forgets
it. Contract: docs/trust-boundary.md#workspace-trust.
"""
from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from lily_kernel.commands.results import Notice
from lily_kernel.errors import CommandError, ConfigError, command_error
from lily_kernel.redaction import redact_urls
from lily_kernel.session.session import Session
from lily_kernel.settings.model_settings import CONFIG_FILE, read_config_file
from lily_kernel.settings.workspace_trust import fingerprint

#: What each lily.toml setting governs, in the order /trust shows them.
_SHOWN: tuple[tuple[str, str, str], ...] = (
    ("model", "base_url", "endpoint (receives OPENAI_API_KEY and the conversation)"),
    ("activitypub", "outbox", "outbox (receives LILY_OUTBOX_TOKEN and the activities)"),
    ("activitypub", "actor", "ActivityPub actor"),
    ("tools", "allow", "tools policy: allow"),
    ("tools", "deny", "tools policy: deny"),
    ("tools", "confirm", "tools policy: confirm first"),
)


def _value(value: Any) -> str:
    """A setting as shown: URL credentials masked, cut short, HTML-escaped."""
    text = redact_urls(value if isinstance(value, str) else repr(value))
    if len(text) > 200:
        text = text[:197] + "..."
    return html.escape(text)  # sanitize


def changes(workspace: Path, data: dict[str, Any]) -> list[str]:
    """Markdown bullet lines: what this lily.toml (and .mcp.json) would change."""
    lines = []
    for table, key, what in _SHOWN:
        section = data.get(table)
        if isinstance(section, dict) and key in section:
            lines.append(f"- {what}: `[{table}] {key}` = {_value(section[key])}")
    for table in ("model", "limits", "notebook"):
        section = data.get(table)
        if isinstance(section, dict):
            for key, value in section.items():
                if (table, key) != ("model", "base_url"):
                    lines.append(f"- `[{table}] {_value(key)}` = {_value(value)}")
    if (workspace / ".mcp.json").exists():
        lines.append("- `.mcp.json`: the MCP servers it names may be started")
    return lines


def run(session: Session, args: str) -> Notice:
    """``/trust`` or ``/trust --revoke`` against ``session``'s workspace."""
    if args not in ("", "--revoke"):
        raise CommandError("/trust takes no arguments, or --revoke.")
    workspace = session.workspace
    try:
        if args == "--revoke":
            session.apply_trust(False)
            return Notice(f"This workspace is no longer trusted: its {CONFIG_FILE} may not send "
                          "OPENAI_API_KEY or LILY_OUTBOX_TOKEN elsewhere. /trust trusts it again.")
        before = fingerprint(workspace)
        data = read_config_file(workspace)
        lines = changes(workspace, data)
        session.apply_trust(True)
        if fingerprint(workspace) != before:  # changed while it was being shown
            session.apply_trust(False)
            raise CommandError(f"{CONFIG_FILE} changed while /trust read it; nothing was "
                               "trusted. Run /trust again.")
    except ConfigError as exc:
        raise command_error(exc) from None
    where = html.escape(str(workspace))  # sanitize
    listing = "\n".join(lines) if lines else f"- nothing: there is no {CONFIG_FILE} or .mcp.json"
    return Notice(f"Trusted this workspace (`{where}`) with its {CONFIG_FILE} as it is now; "
                  f"editing it asks again. It now changes:\n\n{listing}\n\n"
                  "`/trust --revoke` undoes this.")
