"""Lily: a local, skill-driven AI agent that lives inside Jupyter.

Rooms by concern (docs/architecture.md): ``skills/`` (SKILL.md format, loader,
snapshot), ``typed/`` (typed skills and their actions), ``agent/`` (the agent
loop, model client, tools), ``session/``, ``commands/`` (router, results, text
rendering), and ``errors.py`` under them all: the core, with no Jupyter import.
The faces sit on top: ``jupyter/`` (kernel, ``%load_ext lily``), ``cli.py``.
``testing/`` is the scripted model server tests and skill authors use.
"""
import logging

__version__ = "0.1.0"

# Lily logs to the ``lily_kernel`` logger (``lily_kernel.<module>`` children), at debug level
# for each command, model request and tool call; a library adds no handler of its own, so
# nothing shows until the application configures logging (docs/architecture.md#logging).
logging.getLogger(__name__).addHandler(logging.NullHandler())
