"""Lily's errors: one base class, one family per room, one way to show them.

Every error Lily raises for a user or a model to read is a :class:`LilyError`
whose ``str()`` is one readable sentence without the ``Error:`` prefix.
:func:`error_line` is the only place that prefix is added; every face (kernel,
``%load_ext lily``, CLI, widgets) shows a failed cell through it
(docs/architecture.md#errors). The families keep the built-in base each class
had before the hierarchy existed (``SkillError`` is still a ``ValueError``), so
no ``except`` clause changes meaning.
"""
from __future__ import annotations

from lily_kernel.redaction import redact


class LilyError(Exception):
    """Base of every error Lily shows to a reader; ``str()`` is one line.

    Its text is redacted when it is made (docs/limits-and-secrets.md#secrets): Jupyter sends
    and notebooks save ``str(exc)`` as the error's ``evalue``, not only the line shown.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))

    def line(self) -> str:
        """The line a face shows: ``Error: <message>``."""
        return error_line(self)


class LoaderError(LilyError, RuntimeError):
    """A skill root that must be read cannot be; loading stops (docs/loader.md#errors)."""


class SkillError(LilyError, ValueError):
    """A skill is malformed; the message names the cause (and the key, if any)."""


class CommandError(LilyError):
    """A command failed; the cell fails with this one line and no traceback."""


class ConfigError(LilyError, ValueError):
    """A setting is malformed: lily.toml, /model, or a Config Registry path, ACL or value."""


class ModelError(LilyError):
    """The model endpoint failed or answered something unusable."""


class ActionError(LilyError, ValueError):
    """A typed-skill action cannot be prepared or carried out."""


class LogsError(LilyError):
    """``lily logs`` cannot do what was asked: no such session, a bad filter, no journal."""


def error_line(exc: BaseException) -> str:
    """The one line shown to users for ``exc``: ``Error: `` and its message on one line."""
    text = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
    return redact(f"Error: {text}")  # also for errors that are not Lily's own


def command_error(exc: LilyError) -> CommandError:
    """``exc`` (an action or configuration error met by a command) as the command's error.

    The message becomes a sentence: a full stop is added unless it already ends one.
    """
    text = str(exc)
    return CommandError(text if text.endswith((".", "!", "?")) else f"{text}.")
