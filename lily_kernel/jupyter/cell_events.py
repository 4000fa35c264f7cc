"""What the notebook tools need to know of the cells that ran, recorded from start
(docs/notebook-tools.md): whether a cell runs now, the last failed cell, the cells proposed
during this one, and the figures and images each cell showed. Installed with Lily
(jupyter/integration.py) for the kernel and ``%load_ext lily`` alike; it imports nothing of
the core at start (the images module loads on a cell's first image).
"""
from __future__ import annotations

import contextlib
import re
import sys
from typing import TYPE_CHECKING, Any

from lily_kernel.errors import CommandError
from lily_kernel.jupyter import plots

if TYPE_CHECKING:
    from IPython.core.interactiveshell import ExecutionInfo, ExecutionResult, InteractiveShell

MAX_FIGURES = 4  # figures (descriptions and images) a cell keeps for read_cells
_DESCRIBED = re.compile(r"Figure \([\d.e+]+x[\d.e+]+ in, \d+ axes\)")  # tools/figures.py
MAX_FIGURE_CELLS = 100  # cells whose figures are kept


class CellEvents:
    """What the notebook tools need to know of the cells that ran, recorded from start
    (docs/notebook-tools.md): whether a cell runs now, the last failed cell (a reference
    to its exception, formatted only when a tool asks), the cells proposed during this
    one, the figures and images it showed. O(1) hooks on the shell's ``pre_run_cell``,
    ``post_execute`` and ``post_run_cell`` events, and a watch on its display formatter
    that does work only for a bundle with an image."""

    def __init__(self, shell: InteractiveShell) -> None:
        self.shell = shell
        self.running = False  # a cell is executing (so a set_next_input payload reaches a reply)
        self.error: tuple[int | None, str, BaseException] | None = None
        self.proposals: list[str] = []
        self.figures: dict[int, list[str]] = {}  # a cell's count -> what its plots showed
        self.images: dict[int, list[str]] = {}  # a cell's count -> its images' hashes
        self._drawn: list[str] = []  # the figures this cell showed, described
        self._shown: list[str] = []  # the images this cell showed, kept by hash

    def install(self) -> None:
        """Listen to the shell's cell events and to the images it shows."""
        self.shell.events.register("pre_run_cell", self._before)
        self.shell.events.register("post_execute", self._drawing)
        self.shell.events.register("post_run_cell", self._after)
        self._watch_images(install=True)

    def _watch_images(self, install: bool) -> None:
        """What a cell shows with an image (the inline backend's plot too) is kept for
        read_cells: the image by hash, for a model with vision (tools/images.py), and a
        figure's description (jupyter/plots.py), which it also becomes the text of when
        choosing a backend in this cell removed that form. The kernel keeps no history of
        displays, so this watches the shell's display formatter, which sees the object."""
        formatter = getattr(self.shell, "display_formatter", None)
        if formatter is None:
            return
        ours = getattr(formatter.__dict__.get("format"), "_lily", False)
        if not install:
            if ours:
                del formatter.format
            return
        if ours:
            return
        format_ = formatter.format

        def watched(obj: Any, *args: Any, **kwargs: Any) -> Any:
            shown = format_(obj, *args, **kwargs)
            bundle = shown[0] if isinstance(shown, tuple) and shown else None
            if self.running and isinstance(bundle, dict) \
                    and ("image/png" in bundle or "image/jpeg" in bundle):
                if plots.is_figure(obj) and not _DESCRIBED.match(str(bundle.get("text/plain"))):
                    bundle["text/plain"] = plots.description(obj)
                self._image_shown(bundle)
            return shown
        watched._lily = True  # type: ignore[attr-defined]  # marks our wrapper
        formatter.format = watched

    def _image_shown(self, data: dict[str, Any]) -> None:
        """An image this cell shows: kept by hash, and a figure's description (its text
        form, jupyter/plots.py) kept for read_cells; at most :data:`MAX_FIGURES` of each."""
        text = data.get("text/plain")
        if isinstance(text, str) and _DESCRIBED.match(text) and len(self._drawn) < MAX_FIGURES:
            self._drawn.append(text)
        if len(self._shown) < MAX_FIGURES:
            from lily_kernel.tools import images  # on the first image, not at start
            digest = images.keep_bundle(data)
            if digest is not None:
                self._shown.append(digest)

    def uninstall(self) -> None:
        """Stop listening to the shell's cell events."""
        self._watch_images(install=False)
        for name, hook in (("pre_run_cell", self._before), ("post_execute", self._drawing),
                           ("post_run_cell", self._after)):
            with contextlib.suppress(ValueError):
                self.shell.events.unregister(name, hook)

    def _before(self, info: ExecutionInfo) -> None:
        self.running = True
        self.proposals = []
        self._shown = []
        self._drawn = []

    def _drawing(self) -> None:
        """Before the inline backend shows and closes the cell's open figures (its hook
        comes after this one): make sure the figures it shows carry their description as
        text, which :meth:`_image_shown` keeps for read_cells."""
        if "matplotlib.pyplot" in sys.modules:
            plots.describe_figures(self.shell)

    def _after(self, result: ExecutionResult) -> None:
        self.running = False
        if self._drawn and result.execution_count is not None:
            self.figures[result.execution_count] = self._drawn
            while len(self.figures) > MAX_FIGURE_CELLS:
                del self.figures[min(self.figures)]
        self._drawn = []
        if self._shown and result.execution_count is not None:
            self.images[result.execution_count] = self._shown
            while len(self.images) > MAX_FIGURE_CELLS:
                del self.images[min(self.images)]
        self._shown = []
        exc = result.error_in_exec or result.error_before_exec
        if exc is not None and not isinstance(exc, CommandError):
            raw = result.info.raw_cell if result.info is not None else None
            self.error = (result.execution_count, raw or "", exc)
