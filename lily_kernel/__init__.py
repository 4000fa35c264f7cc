"""Lily: a local, skill-driven AI agent that lives inside Jupyter.

Rooms by concern (docs/architecture.md): ``skills/`` (SKILL.md format, loader,
snapshot), ``typed/`` (typed skills and their actions), ``agent/`` (the agent
loop, model client, tools), ``session/``, ``commands/`` (router, results, text
rendering), and ``errors.py`` under them all: the core, with no Jupyter import.
The faces sit on top: ``jupyter/`` (kernel, ``%load_ext lily``), ``cli.py``.
``testing/`` is the scripted model server tests and skill authors use.
"""
__version__ = "0.1.0"
