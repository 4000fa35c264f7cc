"""Lily: a local, skill-driven AI agent that lives inside Jupyter.

The pure-Python core (no Jupyter imports): :mod:`.skill` parses a SKILL.md,
:mod:`.loader` builds a :class:`~.snapshot.Snapshot`, :mod:`.router` runs
``/commands`` against a :class:`~.session.Session`. The faces sit on top:
:mod:`.kernel` (the Jupyter kernel), :mod:`lily` (``%load_ext lily``) and
:mod:`.cli` (the ``lily`` command).
"""
__version__ = "0.1.0"
