"""``%load_ext lily``: Lily's commands and agent in any IPython shell or kernel.

After loading, a cell whose first line starts with ``/`` goes to Lily's
command router (``/skills``, ``/help``, ``/plan`` ...), ``%%lily`` sends a
cell to the agent and ``%lily`` one line. ``%unload_ext lily`` restores the
shell. In Python code, ``@lily.tool`` registers a function as a tool of this
shell's Lily session.
"""
from __future__ import annotations

__all__ = ["load_ipython_extension", "session", "tool", "unload_ipython_extension"]


def load_ipython_extension(shell) -> None:
    from lily_kernel.jupyter.integration import Integration
    existing = getattr(shell, "_lily", None)
    if existing is not None:
        return  # already active (the Lily kernel, or loaded twice)
    Integration(shell, kernel_mode=False).install()
    print("Lily is loaded: /help lists the commands; %%lily sends a cell to the agent.")


def unload_ipython_extension(shell) -> None:
    integration = getattr(shell, "_lily", None)
    if integration is not None and not integration.kernel_mode:
        integration.uninstall()


def session():
    """This shell's Lily session."""
    from lily_kernel.jupyter.integration import current
    return current().session


def tool(func=None, *, name=None, description=None, owner_only=False):
    """Register a function as a tool of this shell's Lily session.

    Use as ``@lily.tool`` or ``@lily.tool(name=..., owner_only=True)``. A
    skill that names the tool (``command_tool`` or ``requires_tools``) sees
    it after ``/reload_skills``.
    """
    registry = session().tools
    return registry.register(func, name=name, description=description, owner_only=owner_only)
