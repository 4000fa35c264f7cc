"""Lily inside an IPython shell: the part the kernel and ``%load_ext lily`` share.

A cleanup input transformer sees each cell before IPython's own rewriting (which would
turn ``/skills`` into ``skills()``). A command cell, and in the Lily kernel a prose cell,
becomes what IPython itself makes of a ``%%lily`` cell: one call of the ``%%lily`` magic,
``get_ipython().run_cell_magic('lily', '', cell)``, whose bound instance carries this
:class:`Integration`. Because the cell still runs through ``run_cell``, execution
counts, history, events and "stop on error" stay IPython's own. A failed command raises
:class:`CommandError`, which a custom exception handler shows as one line
(``Error: ...``) with an ``error`` reply and no traceback.

This module is what the kernel and ``%load_ext lily`` import at start: it installs Lily
and imports nothing of the core beyond the command table and the errors. The core (the
runner, the session, rendering) loads with :mod:`lily_kernel.jupyter.cells` on the first
cell that needs it, in :attr:`Integration.cells`, the one place that decides it
(docs/architecture.md#import-rules).
"""
from __future__ import annotations

import contextlib
from functools import cached_property
from types import TracebackType
from typing import TYPE_CHECKING, Any

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class, no_var_expand

from lily_kernel import redaction
from lily_kernel.commands.table import is_command
from lily_kernel.errors import CommandError, error_line
from lily_kernel.jupyter import plots
from lily_kernel.jupyter.cell_events import CellEvents
from lily_kernel.jupyter.python_cells import PythonCells

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from lily_kernel.jupyter.cells import Cells
    from lily_kernel.session.session import Session

_ATTR = "_lily"
# Lone words that stay Python in the Lily kernel: IPython's exit/quit, which end
# `jupyter console` (docs/front-ends.md#jupyter-console). Anything else is prose.
EXIT_WORDS = ("exit", "quit", "exit()", "quit()")
_CALL = "get_ipython().run_cell_magic('lily', '', "  # what IPython makes of a %%lily cell


def lily_call(cell: str) -> str:
    """The Python a Lily cell becomes: IPython's own form of a ``%%lily`` cell."""
    return f"{_CALL}{cell!r})\n"


class Integration:
    """Lily in one shell: what this face installed there, and (from the first cell that
    needs it) :attr:`cells`, the core's runner with the displays that show its results."""

    def __init__(self, shell: InteractiveShell, kernel_mode: bool) -> None:
        self.shell = shell
        self.kernel_mode = kernel_mode
        self._checking = False  # True while is_complete asks IPython about a %%python cell
        self._saved_custom_exc = (shell.custom_exceptions, shell.CustomTB)
        self.events = CellEvents(shell)
        self.python_cells = PythonCells(shell, lambda: self._session(start=False),
                                        lambda: self._session(start=True))

    def _session(self, start: bool) -> Session | None:
        """The running session, or None: before the first Lily cell (unless ``start``),
        or when none could start."""
        if not start and not self.started:
            return None
        runner = self.cells.runner
        return runner.session if runner.ready else None

    @cached_property
    def cells(self) -> Cells:
        """Lily's cells in this shell: the runner, its session and the displays.

        The one place the face loads the core: on the first cell, completion or
        inspection that needs it, not at start (docs/architecture.md#import-rules).
        """
        from lily_kernel.jupyter.cells import Cells
        from lily_kernel.jupyter.notebook import ShellNotebook
        notebook = ShellNotebook(self.shell, self.events, "%%python" if self.kernel_mode else "")
        return Cells(self.shell, notebook)

    @property
    def started(self) -> bool:
        """Whether a cell (or completion) has loaded :attr:`cells` yet; nothing else does."""
        return "cells" in self.__dict__

    @property
    def session(self) -> Session:
        """The session of this shell (the runner's); loads :attr:`cells` on first use."""
        return self.cells.session

    # -- install / uninstall ---------------------------------------------------
    def install(self) -> None:
        """Install Lily in the shell: the input transformer, the error display and the magics."""
        setattr(self.shell, _ATTR, self)
        cleanup = self.shell.input_transformers_cleanup
        if self.transform not in cleanup:
            cleanup.insert(0, self.transform)
        self.shell.set_custom_exc((CommandError,), _show_command_error)
        self.shell.register_magics(LilyMagics(self.shell, self))
        _redact_history(self.shell, install=True)
        _describe_figures(self.shell, install=True)
        self.events.install()
        if self.kernel_mode:  # the journal keeps each %%python cell (docs/logs.md#python-cells)
            self.python_cells.install()
        completer = getattr(self.shell, "Completer", None)
        if not self.kernel_mode and completer is not None:  # the kernel has do_complete
            completer.custom_matchers.append(self.complete_command)

    def uninstall(self) -> None:
        """Remove what :meth:`install` put in the shell."""
        self.events.uninstall()
        completer = getattr(self.shell, "Completer", None)
        if completer is not None and self.complete_command in completer.custom_matchers:
            completer.custom_matchers.remove(self.complete_command)
        self.python_cells.uninstall()
        cleanup = self.shell.input_transformers_cleanup
        if self.transform in cleanup:
            cleanup.remove(self.transform)
        exc, handler = self._saved_custom_exc
        self.shell.custom_exceptions, self.shell.CustomTB = exc, handler
        for kind in ("line", "cell"):
            self.shell.magics_manager.magics[kind].pop("lily", None)
        _redact_history(self.shell, install=False)
        _describe_figures(self.shell, install=False)
        if getattr(self.shell, _ATTR, None) is self:
            delattr(self.shell, _ATTR)

    @cached_property
    def complete_command(self) -> Any:
        """IPython's matcher (API v2) for a command cell under ``%load_ext lily``: the
        Lily kernel's completions (names, skills, variables), the others suppressed; in a
        ``%%lily`` cell, an ``@`` mention's (variables, files, cells), else Python's."""
        from IPython.core.completer import SimpleCompletion, context_matcher

        @context_matcher()  # type: ignore[untyped-decorator]
        def matcher(context: Any) -> dict[str, Any]:
            text = context.full_text
            request = text.lstrip().startswith("%%lily") and "@" in text
            if not is_command(text) and not request:
                return {"completions": [], "suppress": False}
            lines = text.split("\n")
            offset = sum(len(line) + 1 for line in lines[:context.cursor_line])
            offset += context.cursor_position
            found = self.cells.complete(text, offset)
            if found is None and request:  # not after an @: Python's completions
                return {"completions": [], "suppress": False}
            if found is None:
                return {"completions": [], "suppress": True, "matched_fragment": ""}
            return {"completions": [SimpleCompletion(m, type="lily") for m in found.matches],
                    "suppress": True, "matched_fragment": text[found.start:offset]}
        return matcher

    # -- routing ---------------------------------------------------------------
    def transform(self, lines: list[str]) -> list[str]:
        """The input transformer: a command or prose cell becomes a call to Lily."""
        cell = "".join(lines)
        if is_command(cell):
            return [lily_call(cell)]
        head, _, request = cell.strip().partition(" ")
        if head == "%lily" and request.strip() and "\n" not in request:
            # IPython would read a trailing "?" ("%lily what is a skill?") as a help request
            return [f"get_ipython().run_line_magic('lily', {request.strip()!r})\n"]
        if not self.kernel_mode:
            return lines
        stripped = cell.lstrip()
        if not stripped:
            return lines
        if stripped.startswith("%%python"):
            first = cell.index("%%python")
            newline = cell.find("\n", first)
            if newline == -1:
                return []
            body = cell[newline + 1:].splitlines(keepends=True)
            if self._checking:  # IPython's check_complete misreads a comment line first
                return body
            # the header becomes a comment line, not nothing: line N of a traceback is
            # line N of the cell the user sees (docs/jupyter-display.md#python-cells)
            return ["# %%python" + "\n" * cell[:newline + 1].count("\n"), *body]
        if stripped[0] in "%!" or stripped.rstrip() in EXIT_WORDS:
            return lines
        return [lily_call(cell)]

    def check_complete(self, cell: str) -> tuple[str, int | None]:
        """IPython's ``check_complete`` of a cell, as Lily transforms it (for is_complete)."""
        self._checking = True
        try:
            status: tuple[str, int | None] = \
                self.shell.input_transformer_manager.check_complete(cell)
            return status
        finally:
            self._checking = False

    def run(self, text: str) -> None:
        """Run a Lily cell: a command (first line ``/...``) or a request to the agent."""
        if is_command(text):
            self.cells.run_command(text)
        else:
            self.cells.run_agent(text)


def _describe_figures(shell: InteractiveShell, install: bool) -> None:
    """Make a figure's text its description, so the notebook tools read what a plot shows
    instead of ``<Figure size 640x480 with 1 Axes>`` (docs/notebook-tools.md#figures). The
    image itself is untouched; only the text form a notebook keeps beside it changes.
    Choosing a backend (``import matplotlib.pyplot`` in a kernel) pops every formatter of
    ``Figure``, so :func:`describe_figures` puts it back before figures are shown."""
    if shell.display_formatter is None:
        return
    formatter = shell.display_formatter.formatters["text/plain"]
    if install:
        plots.describe_figures(shell)
    else:
        with contextlib.suppress(KeyError):
            if formatter.lookup_by_type("matplotlib.figure.Figure") is plots.figure_text:
                formatter.pop("matplotlib.figure.Figure")


def _redact_history(shell: InteractiveShell, install: bool) -> None:
    """IPython keeps every cell in its input history (``history.sqlite``, ``_i``, ``In``):
    while Lily is active, a Lily cell (a command, a prose cell, ``%lily``) is stored with URL
    userinfo masked, and any cell with the live secret values masked, and the values it
    gives secret-looking variables (``%env``, ``%set_env``, ``os.environ[...] =``) too
    (docs/limits-and-secrets.md#secrets). The cell itself runs unchanged.

    A Lily cell is redacted once, here where it is stored: its Python form is rebuilt from
    the redacted cell (:func:`lily_call`) rather than redacted a second time."""
    history = getattr(shell, "history_manager", None)
    if history is None:
        return
    current = history.__dict__.get("store_inputs")
    if not install:
        if getattr(current, "_lily", False):
            del history.store_inputs
        return
    if getattr(current, "_lily", False):
        return
    store = history.store_inputs

    def clean(text: object, lily: bool) -> object:
        if not isinstance(text, str):
            return text
        if lily:
            return redaction.redact(text)
        for value in redaction.live_secrets():
            text = text.replace(value, redaction.MASK)
        # `%env OPENAI_API_KEY=...` is stored before it runs: its value is not live yet.
        return redaction.mask_env_assignments(text)

    def store_inputs(line_num: int, source: str, source_raw: str | None = None) -> Any:
        if isinstance(source_raw, str) and source.startswith(_CALL):
            # IPython transformed the cell with a final newline added
            cell = source_raw if source_raw.endswith("\n") else source_raw + "\n"
            if source == lily_call(cell):  # a command or prose cell: redacted once for both
                raw = redaction.redact(source_raw)
                return store(line_num, lily_call(raw if raw.endswith("\n") else raw + "\n"), raw)
        lily = isinstance(source_raw, str) and source_raw.lstrip().startswith(("%lily", "%%lily"))
        return store(line_num, clean(source, lily), clean(source_raw, lily))
    store_inputs._lily = True  # type: ignore[attr-defined]  # marks our wrapper
    history.store_inputs = store_inputs


def _show_command_error(shell: InteractiveShell, etype: type[BaseException], value: BaseException,
                        tb: TracebackType | None, tb_offset: int | None = None) -> list[str]:
    stb = [error_line(value)]
    shell._showtraceback(etype, value, stb)
    return stb


def current(shell: InteractiveShell | None = None) -> Integration:
    """The Integration active in ``shell`` (default: the running IPython)."""
    if shell is None:
        from IPython import get_ipython
        shell = get_ipython()
    integration: Integration | None = getattr(shell, _ATTR, None) if shell is not None else None
    if integration is None:
        raise RuntimeError("Lily is not active in this shell: run %load_ext lily "
                           "or use the Lily kernel.")
    return integration


@magics_class
class LilyMagics(Magics):
    """``%lily`` and ``%%lily``."""
    def __init__(self, shell: InteractiveShell, integration: Integration) -> None:
        super().__init__(shell)
        self.integration = integration

    # IPython expands ``$name`` and ``{expr}`` in a magic's line by copying the whole user
    # namespace first, for every call: a cost that grows with the session (each cell adds
    # ``_iN``). Every Lily cell calls ``%%lily`` with an empty line, where there is nothing
    # to expand, so the magics opt out and expand a line themselves only when it has one
    # of those characters: what reaches Lily is what IPython would have passed.
    @line_magic("lily")  # type: ignore[arg-type]  # IPython types the name-less form only
    @no_var_expand
    def lily_line(self, line: str) -> None:
        """%lily <request>: send one line to the Lily agent (a /command runs as a command)."""
        self.integration.run(self._expand(line))

    @cell_magic("lily")  # type: ignore[arg-type]
    @no_var_expand
    def lily_cell(self, line: str, cell: str) -> None:
        """%%lily: send the cell to the Lily agent."""
        line = self._expand(line)
        self.integration.run("\n".join(part for part in (line.strip(), cell) if part.strip()))

    def _expand(self, line: str) -> str:
        """``line`` as IPython's ``var_expand`` makes it, in the frame of the cell that called
        the magic (this method's caller's caller's caller); unchanged when it has no
        ``$``, ``{`` or ``}``, which is all the expansion reads."""
        if "$" not in line and "{" not in line and "}" not in line:
            return line
        assert self.shell is not None  # (Magics: set by the constructor)
        expanded: str = self.shell.var_expand(line, 3)
        return expanded
