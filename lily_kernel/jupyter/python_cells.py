"""The journal's record of each ``%%python`` cell in the Lily kernel (docs/logs.md#python-cells).

A ``%%python`` cell is part of the conversation's notebook (the CSV it loads, the plot it
draws), so the journal keeps it: its source, whether it failed (its error line), and a
bounded summary of its outputs: stream and result text (what IPython keeps of them in
``history_manager.outputs``) and each display's text with the SHA-256 and size of its
images (never the images). ``lily logs export --ipynb`` writes them back as cells, and
resume, ``/rewind`` and ``lily logs show`` can name them. The record is redacted like
every record (the journal does that).

A ``%%python`` cell that runs before the first Lily cell (when no session exists yet) is
kept here, at most :data:`WAITING` of them, and journaled when the first Lily cell starts
the session, before that cell's own records.
"""
from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from IPython.core.interactiveshell import ExecutionInfo, ExecutionResult, InteractiveShell

    from lily_kernel.session.session import Session

TEXT_CHARS = 2_000  # characters kept of one output's text
OUTPUTS = 20  # outputs kept of one cell
WAITING = 50  # cells kept before the session exists
IMAGES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml", "image/webp")


def _cut(text: str) -> str:
    if len(text) <= TEXT_CHARS:
        return text
    return text[:TEXT_CHARS] + f"\n… [{len(text) - TEXT_CHARS:,} more characters]\n"


def image_summary(mime: str, value: object) -> dict[str, Any]:
    """An image of a display as its type, size and hash (the data itself is not kept)."""
    if isinstance(value, str):
        try:
            data = base64.b64decode(value, validate=False) if mime != "image/svg+xml" \
                else value.encode("utf-8")
        except (binascii.Error, ValueError):
            data = value.encode("utf-8")
    elif isinstance(value, bytes):
        data = value
    else:
        data = str(value).encode("utf-8")
    return {"mime": mime, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def display_summary(data: dict[str, Any]) -> dict[str, Any]:
    """One display's bundle as the journal keeps it: its text and its images' hashes."""
    text = data.get("text/plain", "")
    return {"type": "display", "text": _cut(text if isinstance(text, str) else "".join(text)),
            "images": [image_summary(mime, data[mime]) for mime in IMAGES if mime in data]}


class PythonCells:
    """Journals the ``%%python`` cells of one shell (installed by the kernel's integration).

    ``session`` gives the session when one exists (None before the first Lily cell) and
    ``start`` starts it (the first Lily cell is about to anyway)."""

    def __init__(self, shell: InteractiveShell, session: Callable[[], Session | None],
                 start: Callable[[], Session | None]) -> None:
        self.shell = shell
        self._session = session
        self._start = start
        self._current: str | None = None  # the running %%python cell's source
        self._count: int | None = None  # its execution count
        self._displays: list[tuple[int, dict[str, Any]]] = []  # (outputs before it, summary)
        self._waiting: list[tuple[str, bool, str | None, list[dict[str, Any]]]] = []
        self._hooked = False

    def install(self) -> None:
        """Listen to the shell's cell events and (in ipykernel) its displays."""
        self.shell.events.register("pre_run_cell", self.before)
        self.shell.events.register("post_run_cell", self.after)
        pub: Any = getattr(self.shell, "display_pub", None)
        if hasattr(pub, "register_hook"):
            pub.register_hook(self._display)
            self._hooked = True

    def uninstall(self) -> None:
        """Stop listening."""
        for name, hook in (("pre_run_cell", self.before), ("post_run_cell", self.after)):
            with contextlib.suppress(ValueError):
                self.shell.events.unregister(name, hook)
        pub: Any = getattr(self.shell, "display_pub", None)
        if self._hooked and hasattr(pub, "unregister_hook"):
            pub.unregister_hook(self._display)
            self._hooked = False

    def before(self, info: ExecutionInfo) -> None:
        """A cell starts: note a ``%%python`` one; a Lily cell first journals the waiting ones."""
        raw = info.raw_cell or ""
        stripped = raw.lstrip()
        self._displays = []
        if stripped.startswith("%%python"):
            # IPython counts the cell before this event: its number is the one before
            count = getattr(self.shell, "execution_count", None)
            self._current, self._count = raw, count - 1 if isinstance(count, int) else None
            return
        self._current = None
        if self._waiting and stripped and stripped[0] not in "%!":
            session = self._start()  # a Lily cell: it starts the session anyway
            if session is not None:
                for cell in self._waiting:
                    session.record_python(*cell)
                self._waiting = []

    def _display(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self._current is not None and len(self._displays) < OUTPUTS:
            content = msg.get("content") or {}
            if msg.get("msg_type") == "display_data" and isinstance(content.get("data"), dict):
                self._displays.append((len(self._kept(self._count)),
                                       display_summary(content["data"])))
        return msg

    def _kept(self, count: int | None) -> list[Any]:
        """What IPython kept of cell ``count``'s outputs (IPython 9; else nothing)."""
        kept = getattr(getattr(self.shell, "history_manager", None), "outputs", None)
        if not kept or count is None or count not in kept:
            return []
        return list(kept[count])

    def after(self, result: ExecutionResult) -> None:
        """A ``%%python`` cell ended: journal its source, outcome and outputs."""
        source, self._current = self._current, None
        if source is None:
            return
        exc = result.error_in_exec or result.error_before_exec
        error = None if exc is None else f"{type(exc).__name__}: {exc}".splitlines()[0]
        outputs = self._outputs(result.execution_count)
        self._displays = []
        cell = (source, exc is None, error, outputs[:OUTPUTS])
        session = self._session()
        if session is not None:
            session.record_python(*cell)
        elif len(self._waiting) < WAITING:
            self._waiting.append(cell)

    def _outputs(self, count: int | None) -> list[dict[str, Any]]:
        """The cell's outputs in the order shown: the stream and result text IPython kept
        (IPython 9), each display placed after the outputs kept before it was shown."""
        out: list[dict[str, Any]] = []
        displays = list(self._displays)
        for index, item in enumerate(self._kept(count)):
            while displays and displays[0][0] <= index:
                out.append(displays.pop(0)[1])
            kind = getattr(item, "output_type", "")
            bundle = getattr(item, "bundle", {}) or {}
            if kind in ("out_stream", "err_stream"):
                out.append({"type": "stream", "name": "stdout" if kind == "out_stream"
                            else "stderr", "text": _cut("".join(bundle.get("stream", [])))})
            elif kind == "execute_result" and isinstance(bundle.get("text/plain"), str):
                out.append({"type": "result", "text": _cut(bundle["text/plain"])})
        return out + [summary for _, summary in displays]
