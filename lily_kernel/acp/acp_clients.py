"""Who the ACP client is and what it displays, from its ``initialize`` request
(docs/front-ends.md#what-each-client-is-sent).

A permission request must carry the exact code or arguments in a form the client shows,
so Lily keeps a small table of what a client renders of a tool call: the ACP
specification's clients show a call's ``content`` (text as Markdown, diffs), its title and
its ``rawInput``; jupyter-ai 3.2 (``clientInfo.name`` "Jupyter AI") shows the title, a
``diff`` content and ``rawInput`` (as ``key: value`` lines, except for an ``execute``
call, of which it shows only ``rawInput.command``), never text content; it also keeps each
chat's history in its ``.chat`` file, so ``session/load`` replays nothing to it.
The client's ``fs`` and ``terminal`` capabilities are read here too.

Pure: plain data in, a frozen profile out; no SDK import.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

#: What a client may display of a tool call.
Display = Literal["text", "diff", "raw_input", "title"]
SPEC_DISPLAYS: frozenset[Display] = frozenset({"text", "diff", "raw_input", "title"})
#: jupyter-ai 3.2 (jupyter-ai-acp-client 0.3.x): no text content (measured in its source,
#: ``tool_call_renderer.py`` and the panel's ``ToolCall`` component).
JUPYTER_AI_DISPLAYS: frozenset[Display] = frozenset({"diff", "raw_input", "title"})
JUPYTER_AI_NAMES = ("jupyter ai", "jupyter-ai")


@dataclass(frozen=True)
class ClientProfile:
    """What Lily knows of the client: its name, the methods it offers, what it displays,
    and whether it keeps the chat's history itself (then ``session/load`` replays none)."""

    name: str = ""
    version: str = ""
    fs_read: bool = False
    fs_write: bool = False
    terminal: bool = False
    displays: frozenset[Display] = SPEC_DISPLAYS
    keeps_history: bool = False

    @property
    def jupyter_ai(self) -> bool:
        """Whether the client is jupyter-ai's ACP client."""
        return self.name.strip().lower() in JUPYTER_AI_NAMES

    def shows(self, what: Display) -> bool:
        """Whether the client displays ``what`` of a tool call."""
        return what in self.displays


def _get(obj: Any, *names: str) -> Any:
    """``obj.name`` or ``obj["name"]`` (an SDK model or the raw JSON), the first one set."""
    for name in names:
        value = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
        if value is not None:
            return value
    return None


def profile_of(capabilities: Any = None, info: Any = None) -> ClientProfile:
    """The profile of a client from ``initialize``'s ``clientCapabilities`` and
    ``clientInfo`` (either may be missing: a minimal client offers nothing)."""
    name = str(_get(info, "name") or "") if info is not None else ""
    version = str(_get(info, "version") or "") if info is not None else ""
    fs = _get(capabilities, "fs") if capabilities is not None else None
    fs_read = bool(fs is not None and _get(fs, "read_text_file", "readTextFile"))
    fs_write = bool(fs is not None and _get(fs, "write_text_file", "writeTextFile"))
    terminal = bool(capabilities is not None and _get(capabilities, "terminal"))
    jai = name.strip().lower() in JUPYTER_AI_NAMES
    return ClientProfile(name, version, fs_read, fs_write, terminal,
                         JUPYTER_AI_DISPLAYS if jai else SPEC_DISPLAYS, keeps_history=jai)
