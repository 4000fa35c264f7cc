"""``/mode`` and ``/policy``: the permission mode and where each setting comes from.

Both are commands, never tools: the model cannot change the mode. The permission model
itself is ``settings/permissions.py`` (docs/permissions.md).
"""
from __future__ import annotations

from lily_kernel.commands.results import PolicyView
from lily_kernel.errors import CommandError, ConfigError, command_error
from lily_kernel.session.session import Session
from lily_kernel.settings.permissions import Mode

#: What each mode lets run without a card, in one line (docs/permissions.md#modes).
WHAT = {
    Mode.PLAN: "read-only: reads run; nothing is written or run (the model proposes)",
    Mode.ASK: "reads run; every write, run_python and MCP tool asks first",
    Mode.EDITS: "reads and writes of ordinary workspace files run; code and files that run "
                "by themselves ask",
    Mode.AUTO: "what the policy allows runs without a card, except files that run by "
               "themselves and what the administrator always asks",
}


def mode(session: Session, args: str) -> PolicyView:
    """``/mode`` shows the mode; ``/mode NAME`` changes it for this session (until /new)."""
    perms = session.permissions
    name = args.strip()
    if not name:
        return PolicyView(perms.mode.value, what=WHAT[perms.mode])
    try:
        chosen = Mode.parse(name, "/mode")
        perms = session.set_mode(chosen)
    except ConfigError as exc:
        raise command_error(exc) from None
    return PolicyView(perms.mode.value, changed=True, what=WHAT[perms.mode])


def show(session: Session) -> PolicyView:
    """``/policy``: every effective setting, its value and the layer it came from."""
    perms = session.permissions
    if session.config_error and perms.mode is Mode.PLAN and not perms.layers:
        raise CommandError(f"the policy could not be read, so Lily holds to plan mode: "
                           f"{session.config_error}")
    return PolicyView(perms.mode.value, tuple(perms.rows()), perms.notes,
                      what=WHAT[perms.mode])
