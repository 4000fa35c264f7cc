"""The agent loop's entry point.

The conversational loop (OpenAI-compatible models, one skill per request,
tools under policy) is the next piece of work; until it lands, every request
fails clearly and names what a user would set.
"""
from __future__ import annotations

from .results import CommandError
from .session import Session

MODEL_VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL")


class AgentError(CommandError):
    """A request to the agent failed; one readable line."""


def run(session: Session, text: str, skill=None):
    raise AgentError(
        "no model is configured: set OPENAI_API_KEY (and OPENAI_BASE_URL for any other "
        "OpenAI-compatible endpoint) in the kernel's environment; "
        "/commands work without a model.")
