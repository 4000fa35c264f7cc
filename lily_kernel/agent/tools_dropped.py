"""Tools dropped by the server's chat template (docs/agent.md#tools-dropped).

A server whose chat template has no tools (SmolLM2's, with llama.cpp) throws the
tools away without a word. After each answer, a reported prompt far below
Lily's count of the request is the sign; llama.cpp's ``GET /props`` (asked once
per endpoint, with its window: agent/endpoint_info.py) decides when it answered.
The result is one line for the answer's footer.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any


def template_lacks_tools(props: dict[str, Any] | None) -> bool | None:
    """Whether llama.cpp's properties show a chat template without tools (None: unknown):
    ``chat_template_caps.supports_tools`` when the server says it, else whether the
    template's text mentions ``tools`` at all."""
    if not props:
        return None
    caps = props.get("chat_template_caps")
    if isinstance(caps, dict) and isinstance(caps.get("supports_tools"), bool):
        return not caps["supports_tools"]
    template = props.get("chat_template")
    if isinstance(template, str) and template:
        return "tools" not in template
    return None



TEMPLATE_NO_TOOLS = ("the server dropped the tools: its chat template has none (llama.cpp "
                     "/props), so the model could not call any; use a model whose template "
                     "supports tools")


def tools_dropped(usage: dict[str, Any] | None, counted: int, tool_tokens: int, n_tools: int,
                  lacks_tools: Callable[[], bool | None]) -> str | None:
    """One line when the server's answer shows it dropped the tools, else None
    (docs/agent.md#tools-dropped). The sign: the prompt tokens it reports are far below
    Lily's count of the request: under 60% of it, and under Lily's count of the request
    without any tools (a server that renders tools compactly, as OpenAI's does, still
    counts more than that), which a template without tools explains. llama.cpp's
    ``/props`` (``lacks_tools()``, read only then) decides when it answered: its template
    has tools, or it has none."""
    if not n_tools or not usage or not usage.get("prompt_tokens"):
        return None
    reported = int(usage["prompt_tokens"])
    if reported >= 0.6 * counted or reported >= counted - tool_tokens:
        return None
    lacks = lacks_tools()
    if lacks is False:  # the template renders tools: the low count has another cause
        return None
    if lacks:
        return TEMPLATE_NO_TOOLS
    return (f"the server counted {reported:,} prompt tokens for about {counted:,} sent with "
            f"{n_tools} tool{'s' if n_tools != 1 else ''}: its chat template seems to drop "
            "the tools, so the model could not call any")
