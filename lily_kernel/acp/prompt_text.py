"""What an ACP prompt says: the user's own text after a client's preamble, and its
attachments (docs/front-ends.md#what-lily-reads-of-a-prompt).

A client may put text of its own before what the user typed. jupyter-ai 3.x starts the
first prompt of a session with a fixed paragraph ("System note: When creating or editing
Jupyter notebooks ...") and, after a session it could not load, a transcript ending in
"Current user message:"; a chat with several personas keeps the ``@name`` the user typed.
A ``/`` command is looked for in what remains, so ``/skills`` runs deterministically there
as it does in a cell. Attachments arrive as ``resource_link`` blocks (``file://`` URIs) and
are named at the end of a prose request, so the model can read them with its file tools.
Pure: no SDK import, so the rules are tested on plain data.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

#: How a client's preamble paragraph starts (jupyter-ai's notebook guidance).
PREAMBLE_PREFIXES = ("System note:",)
#: Where jupyter-ai's recovery transcript ends and the user's message begins.
CURRENT_MESSAGE = "Current user message:\n"
_MENTION = re.compile(r"^@[\w.-]+[ \t]+(?=/)")


@dataclass(frozen=True)
class PromptText:
    """A prompt's parts: the user's own text, and the files it points at."""

    text: str
    attachments: tuple[str, ...] = ()  # paths (file:// URIs) or the URIs as given

    @property
    def is_command(self) -> bool:
        """Whether the user's text is a ``/`` command (its first non-blank character)."""
        return self.text.lstrip().startswith("/")

    def request(self, workspace: Path) -> str:
        """The text sent to the agent: the user's, then one line per attachment, named
        relative to the workspace when it lies inside it."""
        if not self.attachments:
            return self.text
        lines = [self.text.rstrip(), "", "Attached:"]
        for path in self.attachments:
            lines.append(f"- {_relative(path, workspace)}")
        return "\n".join(lines)


def user_text(text: str) -> str:
    """``text`` without a client's preamble: leading "System note:" paragraphs, a recovery
    transcript up to "Current user message:", and an ``@persona`` mention before a command."""
    if CURRENT_MESSAGE in text and "<conversation_history>" in text:
        text = text.rsplit(CURRENT_MESSAGE, 1)[1]
    paragraphs = re.split(r"\n[ \t]*\n", text.lstrip("\n"), maxsplit=0)
    while len(paragraphs) > 1 and paragraphs[0].lstrip().startswith(PREAMBLE_PREFIXES):
        paragraphs.pop(0)
    rest = "\n\n".join(paragraphs) if paragraphs else ""
    return _MENTION.sub("", rest.lstrip(), count=1)


def read_prompt(blocks: Iterable[object]) -> PromptText:
    """The user's text and attachments from a prompt's content blocks (SDK models or
    anything with ``type``, ``text`` and ``uri``); images and audio are not read."""
    texts: list[str] = []
    attachments: list[str] = []
    for block in blocks:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(str(getattr(block, "text", "")))
        elif kind == "resource_link":
            attachments.append(str(getattr(block, "uri", "")))
        elif kind == "resource":  # embedded: its URI names it; the text is not trusted more
            resource = getattr(block, "resource", None)
            uri = getattr(resource, "uri", None)
            if uri:
                attachments.append(str(uri))
    return PromptText(user_text("\n\n".join(texts)), tuple(attachments))


def _relative(uri: str, workspace: Path) -> str:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return uri
    path = Path(unquote(parsed.path))
    try:
        return path.resolve().relative_to(workspace.resolve()).as_posix()
    except ValueError:
        return str(path)
