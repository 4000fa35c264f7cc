"""``%load_ext lily``: Lily's commands and agent in any IPython shell or kernel.

After loading, a cell whose first line starts with ``/`` goes to Lily's
command router (``/skills``, ``/help``, ``/plan`` ...), ``%%lily`` sends a
cell to the agent and ``%lily`` one line. ``%unload_ext lily`` restores the
shell. In Python code, ``@lily.tool`` registers a function as a tool of this
shell's Lily session.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from lily_kernel.session.session import Session

__all__ = ["load_ipython_extension", "session", "tool", "unload_ipython_extension"]


def load_ipython_extension(shell: InteractiveShell) -> None:
    """Install Lily in ``shell`` (``%load_ext lily``)."""
    from lily_kernel.jupyter.integration import Integration
    existing = getattr(shell, "_lily", None)
    if existing is not None:
        return  # already active (the Lily kernel, or loaded twice)
    Integration(shell, kernel_mode=False).install()
    print("Lily is loaded: /help lists the commands; %%lily sends a cell to the agent.")


def unload_ipython_extension(shell: InteractiveShell) -> None:
    """Remove Lily from ``shell`` (``%unload_ext lily``); the Lily kernel keeps it."""
    integration = getattr(shell, "_lily", None)
    if integration is not None and not integration.kernel_mode:
        integration.uninstall()


def session() -> Session:
    """This shell's Lily session."""
    from lily_kernel.jupyter.integration import current
    return current().session


def tool(func: Callable[..., Any] | None = None, *, name: str | None = None,
         description: str | None = None, owner_only: bool = False,
         read_only: bool = False) -> Any:
    """Register a function as a tool of this shell's Lily session.

    Use as ``@lily.tool`` or ``@lily.tool(name=..., owner_only=True, read_only=True)``.
    ``read_only``: you declare that it only reads (MCP's ``readOnlyHint``), so it runs in
    plan mode too, where other tools of yours are refused (docs/permissions.md). A skill
    that names the tool (``command_tool`` or ``requires_tools``) sees it after
    ``/reload_skills``.
    """
    registry = session().tools
    return registry.register(func, name=name, description=description, owner_only=owner_only,
                             annotations={"readOnlyHint": True} if read_only else None)
