"""A chat request as the scripted server reads it: a message's text and the prompt's size.

:func:`message_text` is what ``expect`` turns, the demo stand-in and the replayer read of a
message; :func:`prompt_tokens` and :func:`context_error` are how the server counts a prompt
and refuses one longer than its ``context_window`` (docs/testing.md#scripted-server).
Standard library only.
"""
from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["context_error", "message_text", "prompt_tokens"]


def message_text(message: Any) -> str:
    """The text of a chat message: its str content, or its text parts joined."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return ""


def prompt_tokens(request: dict[str, Any]) -> int:
    """The prompt's tokens as this server counts them: the request's ``messages`` and
    ``tools`` as JSON (non-ASCII kept), one token per 4 UTF-8 bytes, rounded up — about
    what a BPE tokenizer makes of English text with a chat template's markers."""
    data = json.dumps(request.get("messages", []), ensure_ascii=False)
    if request.get("tools"):
        data += json.dumps(request["tools"], ensure_ascii=False)
    return math.ceil(len(data.encode("utf-8", "surrogatepass")) / 4)


def context_error(style: str, window: int, prompt: int, cap: int | None) -> str | None:
    """The endpoint's context-length message when the request does not fit, else None.

    ``style`` is ``"llama.cpp"`` (the prompt alone must fit) or ``"openai"`` (the prompt and
    the completion cap ``cap`` together must fit)."""
    if style == "openai":
        asked = prompt + (cap or 0)
        if asked <= window:
            return None
        if cap:
            return (f"This model's maximum context length is {window} tokens. However, you "
                    f"requested {asked} tokens ({prompt} in the messages, {cap} in the "
                    "completion). Please reduce the length of the messages or completion.")
        return (f"This model's maximum context length is {window} tokens. However, your "
                f"messages resulted in {prompt} tokens. Please reduce the length of the "
                "messages.")
    if prompt <= window:
        return None
    return (f"request ({prompt} tokens) exceeds the available context size ({window} "
            "tokens), try increasing it")
