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

from typing import TYPE_CHECKING

from lily_kernel.redaction import redact

if TYPE_CHECKING:
    from lily_kernel.skills.install_scan import Finding


# ---------------------------------------------------------------- signals between rooms
# Not for a reader as they are: the room that catches one turns it into a LilyError.


class JSONInputError(ValueError):
    """JSON from outside is not acceptable (``safejson``); ``str()`` is one line."""


class DispatchError(RuntimeError):
    """A dispatch problem, described in one readable line (never containing the token);
    ``typed/actions.py`` turns it into an ``ActionError`` or ``Uncertain``.

    ``uncertain`` is True when the activity may have been delivered anyway: an attempt sent
    the whole request and then timed out or lost the connection before the answer.
    """

    def __init__(self, message: str, uncertain: bool = False):
        text = " ".join(str(message).split())
        super().__init__(text if len(text) <= 500 else text[:499] + "…")
        self.uncertain = uncertain


class AttemptFailed(Exception):
    """One failed POST to an outbox (``typed/outbox_http.py``), which ``typed/outbox.py``
    retries or turns into a :class:`DispatchError`. ``retryable``: another attempt may
    succeed; ``retry_after``: the server's wish, if any; ``uncertain``: the request was sent
    whole, so the server may have acted on it."""

    def __init__(self, reason: str, *, retryable: bool, http_status: int | None = None,
                 retry_after: float | None = None, uncertain: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.uncertain = uncertain
        self.http_status = http_status
        self.retry_after = retry_after


# ---------------------------------------------------------------- what a reader sees


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


# The rooms' own kinds, each in its family (one home, one import path:
# ``from lily_kernel.errors import ...``).

class InstallError(SkillError):
    """An install or removal refused, with its reason (and the findings, when scanned)."""

    def __init__(self, message: str, findings: tuple[Finding, ...] = ()) -> None:
        super().__init__(message)
        self.findings = findings


class FrontmatterError(SkillError):
    """The frontmatter cannot be read; the message says why."""


class Uncertain(ActionError):
    """The delivery may have happened (sent whole, no answer): the action stays pending."""


class TypedError(SkillError):
    """A typed skill is malformed; the message names the line."""


class ParamError(ActionError):
    """A parameter value does not fit its declaration; the message names the parameter."""


class AclError(ActionError, PermissionError):
    """A skill tried to read or write a path its Config ACL does not grant."""


class ContextExceeded(ModelError):
    """The endpoint refused the prompt as longer than its context window (HTTP 400)."""

    def __init__(self, detail: str, window: int | None, requested: int | None) -> None:
        super().__init__(f"the model endpoint rejected the request (HTTP 400): {detail}")
        self.detail = detail
        self.window = window  # the endpoint's context size, when it named it
        self.requested = requested  # the prompt's tokens as the endpoint counted them


class AgentError(CommandError):
    """A request to the agent failed; one readable line."""


class ContextTooSmall(ModelError):
    """Even the minimum (system prompt, tools, this request) does not fit the window."""


class ToolError(LilyError):
    """A tool could not run or refused its input; the message is for the reader."""


class PersonaError(ConfigError):
    """A persona (agent) cannot be loaded or switched to; the message says why."""


class Interrupted(CommandError):
    """The user interrupted the cell (Jupyter's interrupt, Ctrl-C): one line, kernel alive."""


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
