"""``@`` mentions in a request: what the user names is attached to it
(docs/notebook-tools.md#mentions).

``@name`` attaches a bounded summary of a notebook variable, ``@path`` a workspace file,
``@In[3]`` / ``@cell[-1]`` a cell's source and outputs, ``@figure`` the last cell that
drew a figure (its description; its image too for a model with vision), ``@error`` the
last error. Each is read through the same tool the model would call (``inspect_variable``,
``read``, ``read_cell``, ``read_figure``, ``last_error``), so the same rules hold: secrets refused, protected files
refused, ``share_values = false`` honoured, the tool policy's deny list obeyed, each
result capped. A mention that names nothing (an e-mail address, a decorator, a name not
in the notebook) stays as text and attaches nothing.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lily_kernel.errors import ToolError
from lily_kernel.tools import gate, images

if TYPE_CHECKING:
    from lily_kernel.session.session import Session

MAX_MENTIONS = 8  # attached per request
ATTACH_CHARS = 4_000  # characters of one attachment
TOTAL_CHARS = 12_000  # characters of all of a request's attachments

# "@" at the start or after a space or an opening bracket; a name, a path or a cell.
MENTION = re.compile(r"(?:(?<=^)|(?<=[\s(\[{'\"]))@(In\[-?\d+\]|cell\[-?\d+\]|[\w.\-/]+)")
_IDENT = re.compile(r"[A-Za-z_]\w*\Z")
_CELL = re.compile(r"(?:In|cell)\[(-?\d+)\]\Z")


@dataclass(frozen=True)
class Attached:
    """One mention that attached something: what it named, as what, and the text."""
    mention: str
    kind: str  # "variable", "file", "cell", "figure", "error"
    text: str
    images: tuple[str, ...] = ()  # the hashes of the images it showed (tools/images.py)


def mentions(text: str) -> list[str]:
    """The distinct mentions in ``text``, in order (trailing sentence punctuation dropped)."""
    found: list[str] = []
    for match in MENTION.finditer(text):
        name = match.group(1).rstrip(".,;:!?")
        if name and name not in found:
            found.append(name)
    return found


def attach(session: Session, text: str, variables: Iterable[str] = ()) -> list[Attached]:
    """What each mention in ``text`` names, read through the tools (at most
    :data:`MAX_MENTIONS`, each and all capped); ``variables``: the notebook's names."""
    out: list[Attached] = []
    room = TOTAL_CHARS
    names = set(variables)
    images.take()  # offered by no request: not this one's
    for name in mentions(text)[:MAX_MENTIONS]:
        found = _resolve(session, name, names)
        shown = tuple(images.take())
        if found is None or room <= 0:
            continue
        kind, body = found
        body = body if len(body) <= min(ATTACH_CHARS, room) else \
            body[: min(ATTACH_CHARS, room) - 1] + "…"
        room -= len(body)
        out.append(Attached(name, kind, body, shown))
    return out


def attached_images(attached: list[Attached]) -> list[str]:
    """The images the mentions showed, each once, at most :data:`images.MAX_IMAGES`."""
    return list(dict.fromkeys(h for a in attached for h in a.images))[:images.MAX_IMAGES]


def with_attachments(text: str, attached: list[Attached]) -> str:
    """The request as the model receives it: the user's text, then what was attached."""
    if not attached:
        return text
    blocks = [f"@{a.mention} ({a.kind}):\n```\n{a.text.replace('```', 'ʼʼʼ')}\n```"
              for a in attached]
    return text.rstrip() + "\n\nAttached by the user:\n\n" + "\n\n".join(blocks)


def _resolve(session: Session, name: str, variables: set[str]) -> tuple[str, str] | None:
    cell = _CELL.match(name)
    if cell:
        return _call(session, "read_cell", {"number": int(cell.group(1))}, "cell")
    if name == "error":
        return _call(session, "last_error", {}, "error")
    if _IDENT.match(name) and name in variables:
        return _call(session, "inspect_variable", {"name": name}, "variable")
    if name == "figure":  # a variable named figure is that variable
        return _call(session, "read_figure", {}, "figure")
    path = session.workspace / name
    if "/" in name or "." in name:
        try:
            exists = path.is_file()
        except OSError:
            exists = False
        if exists:
            return _call(session, "read", {"path": name}, "file")
    return None


def _call(session: Session, tool: str, args: dict[str, object], kind: str) -> tuple[str, str] | None:
    """The tool's text for this mention; its refusal (a secret, a protected file, the
    policy) is attached as what the user would be told, so they see why."""
    found = session.tools.get(tool)
    if found is None:
        return None
    said = gate.decide(session, tool, args, gate.Route.DISPATCH)  # the user's own mention
    if not isinstance(said, gate.Runs):
        reason = said.reason if isinstance(said, gate.Refused | gate.Asks) else "not run"
        return kind, f"(not attached: {reason})"
    try:
        return kind, gate.run(found, args, said).text
    except ToolError as exc:
        return kind, f"(not attached: {exc})"
