"""A journal whose every text field carries the sanitizer's payloads (a hostile model, tool,
skill or journal), for the export tests: Markdown, notebook, ``lily logs show``, ``/logs``,
nbconvert's HTML and the browser (docs/logs.md#export)."""
from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

from lily_kernel.session.journal import Journal
from tests.commands.sanitize_payloads import PAYLOADS

SID = "f" * 32
ALL = "\n\n".join(f"{name}: {payload}" for name, payload in PAYLOADS)
ONE_LINE = " ".join(p.replace("\n", " ") for _, p in PAYLOADS)


def hostile_journal(workspace: Path) -> str:
    """Write the hostile session's journal into ``workspace``; its id."""
    journal = Journal(workspace / ".lily" / "journal" / "hostile.jsonl")

    def rec(event: str, **fields: object) -> None:
        journal.append({"event": event, "session_id": SID, **fields})

    rec("session_created", label=ONE_LINE, agent=ONE_LINE,
        model_config={"model": ONE_LINE})
    rec("python", source="%%python\n" + ALL, ok=False, error="ValueError: " + ONE_LINE,
        outputs=[{"type": "stream", "name": "stdout", "text": ALL},
                 {"type": "result", "text": ALL},
                 {"type": "display", "text": ALL,
                  "images": [{"mime": "image/png", "bytes": 3, "sha256": ONE_LINE}]}])
    rec("prose", text=ALL)
    rec("message", message={"role": "user", "content": ALL})
    rec("message", message={"role": "assistant", "content": ALL, "tool_calls": [
        {"id": "t1", "type": "function",
         "function": {"name": ONE_LINE, "arguments": json.dumps({"x": ALL})}}]})
    rec("message", message={"role": "tool", "tool_call_id": "t1", "content": ALL})
    rec("model_call", model=ONE_LINE, usage={"prompt_tokens": 1, "completion_tokens": 1})
    rec("action_proposed", action={"tool": ONE_LINE})
    rec("action_executed", skill=ONE_LINE)
    rec("error", error=ONE_LINE)
    rec("interrupted")
    rec("command", command="/help " + ONE_LINE, ok=False, error="Error: " + ONE_LINE)
    rec("journal_gap", reason=ONE_LINE, late=1, lost=0)
    rec(ONE_LINE)  # an event of a name nobody knows
    journal.close()
    return SID


class Danger(HTMLParser):
    """What in an HTML document would run, or take the page elsewhere, because of a payload:
    an element or attribute carrying one (every payload names ``pwned`` or a ``javascript:``
    or ``data:`` URL), an event handler, or a dangerous element nobody put there."""

    DANGEROUS = {"iframe", "object", "embed", "base", "form", "frame"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.bad: list[str] = []
        self._in: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in.append(tag)
        for name, value in attrs:
            v = (value or "").replace(" ", "").lower()
            if name.startswith("on") or "pwned" in v or v.startswith(("javascript:", "vbscript:")):
                self.bad.append(f"<{tag} {name}={value!r}>")
            if name in ("href", "src") and v.startswith("data:") and tag != "img":
                self.bad.append(f"<{tag} {name}={value!r}>")
        if tag in self.DANGEROUS or (tag == "img" and dict(attrs).get("src") == "x") or (
                tag == "meta" and "http-equiv" in dict(attrs)):
            self.bad.append(f"<{tag} {attrs}>")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._in:
            while self._in and self._in.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        if self._in and self._in[-1] in ("script", "style") and (
                "pwned" in data or "body{display:none}" in data):
            self.bad.append(f"<{self._in[-1]}> {data[:80]!r}")


def danger(html_text: str) -> list[str]:
    """The dangerous parts of ``html_text`` (:class:`Danger`), empty when it is inert."""
    parser = Danger()
    parser.feed(html_text)
    parser.close()
    return parser.bad
