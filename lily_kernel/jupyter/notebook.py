"""The notebook as the agent's tools see it: IPython's namespace, history, errors and payloads.

:class:`ShellNotebook` is the Jupyter side of :mod:`lily_kernel.tools.notebook_tools`
(the kernel and ``%load_ext lily`` both use it), made with the core on the first cell
that needs it. The only per-cell work is two O(1) event hooks, installed at start with
Lily (``cell_events.CellEvents``): ``pre_run_cell`` notes that a cell runs,
``post_run_cell`` keeps a reference to a failed cell's exception (formatted only when
``last_error`` is called). Sources and outputs come from IPython's history.
``run`` executes code like a cell — IPython's transforms (magics), the last
expression displayed — with its output captured, so the face shows it where
the user confirmed (the cell, or the card). ``run_sandboxed`` runs it the same way in
the sandbox (tools/sandbox.py: a confined fork of the kernel, which changes nothing here)
and returns the same shape. Contracts: docs/notebook-tools.md, docs/sandbox.md.
"""
from __future__ import annotations

import base64
import io
import sys
import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from lily_kernel.errors import ToolError
from lily_kernel.jupyter import plots, proposals
from lily_kernel.tools import images, notebook_tools
from lily_kernel.tools.notebook_tools import Cell, ErrorInfo, RunResult, exec_cell

if TYPE_CHECKING:
    from IPython.core.history import HistoryManager
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import CapturedIO

    from lily_kernel.jupyter.cell_events import CellEvents
    from lily_kernel.tools.sandbox import Limits


class ShellNotebook:
    """The notebook of one IPython shell, as the notebook tools see and act on it.

    ``python_cell`` is the first line a proposed Python cell needs to run as Python in
    this face: ``%%python`` in the Lily kernel (where plain text goes to the agent),
    nothing under ``%load_ext lily`` in a Python kernel (docs/notebook-tools.md#acting).
    """

    def __init__(self, shell: InteractiveShell, events: CellEvents,
                 python_cell: str = "") -> None:
        self.shell = shell
        self.events = events
        self.python_cell = python_cell
        self._placer: tuple[int, Any] | None = None  # this cell's placer (its count, the widget)

    # -- what the tools read ------------------------------------------------------------
    def namespace(self) -> Mapping[str, Any]:
        """The user's namespace (the variables a cell made)."""
        names: Mapping[str, Any] = self.shell.user_ns
        return names

    def hidden(self) -> Mapping[str, Any]:
        """The names IPython put in the namespace itself (not the user's)."""
        names: Mapping[str, Any] = self.shell.user_ns_hidden
        return names

    def cells(self, last: int) -> list[Cell]:
        """The last ``last`` executed cells, from IPython's history."""
        hm = self.shell.history_manager
        if hm is None:
            return []
        current = self.shell.execution_count - (1 if self.events.running else 0)  # not the asking cell
        raw = hm.input_hist_raw
        first = max(1, current - last)
        out = []
        for n in range(first, current):
            text, kept = _output_text(hm, n)
            figures = self.events.figures.get(n, ())
            out.append(Cell(n, raw[n] if n < len(raw) else "", _with_figures(text, figures),
                            len(figures), tuple(dict.fromkeys(
                                [*kept, *self.events.images.get(n, ())]))))
        return out

    def last_error(self) -> ErrorInfo | None:
        """The last failed cell (or run_python code), if any."""
        if self.events.error is None:
            return None
        count, source, exc = self.events.error
        return _error_info(count, source, exc)

    # -- what the tools do --------------------------------------------------------------
    def propose(self, code: str) -> bool:
        """Put ``code`` in a cell below this one; False when no cell runs (a button click:
        the card's placer puts it below the card, jupyter/proposals.py). A notebook front
        end that names the running cell (JupyterLab, Notebook 7) gets a placer, which skips
        a proposal already below (Run All); others a ``set_next_input`` payload. In the Lily
        kernel the cell starts with ``%%python`` (docs/notebook-tools.md#acting)."""
        code = self.cell_code(code)
        if not self.events.running:
            return False
        self.events.proposals.append(code.rstrip("\n"))
        if self._front_end_places():
            self._place(self.events.proposals)
            return True
        # One set_next_input payload per reply (ipykernel keeps the last): join the proposals.
        self.shell.set_next_input("\n\n".join(self.events.proposals), replace=False)
        return True

    def cell_code(self, code: str) -> str:
        """A proposal as the cell it becomes: ``%%python`` first in the Lily kernel."""
        if self.python_cell and not code.lstrip().startswith("%%"):
            return f"{self.python_cell}\n{code}"  # a cell magic (%%bash, ...) stays as written
        return code

    def _front_end_places(self) -> bool:
        """Whether the cell's front end is a notebook that places cells itself (its execute
        request names the cell, as JupyterLab and Notebook 7 do) and the placer can show."""
        kernel = getattr(self.shell, "kernel", None)
        try:
            metadata = kernel.get_parent("shell").get("metadata") or {} if kernel else {}
        except Exception:  # an old ipykernel without get_parent
            return False
        return bool(metadata.get("cellId")) and proposals.available()

    def _place(self, codes: list[str]) -> None:
        """The cell's proposals, placed below it by the front end (jupyter/proposals.py),
        one placer per cell; once placed, its display becomes the line saying where."""
        from IPython.display import display, update_display
        count = self.shell.execution_count
        if self._placer is not None and self._placer[0] == count:
            self._placer[1].proposals = list(codes)
            return
        display_id = f"lily-placer-{count}-{id(self)}"

        def placed(notes: list[str]) -> None:
            line = proposals.where(notes)
            update_display({"text/plain": line, "text/markdown": line}, raw=True,
                           display_id=display_id)

        widget = proposals.placer("", codes, placed)
        self._placer = (count, widget)
        display({"text/plain": "\n\n".join(["Proposed cell:", *codes]), proposals.WIDGET_MIME: {
            "version_major": 2, "version_minor": 1, "model_id": widget.model_id}},
            raw=True, display_id=display_id)

    def run(self, code: str) -> RunResult:
        """Run ``code`` in the user's namespace, capturing what it prints and shows."""
        from IPython.core.inputtransformer2 import TransformerManager
        from IPython.display import display
        from IPython.utils.capture import capture_output
        shell = self.shell
        error = None
        figures = _open_figures()
        filename = None
        with capture_output(display=True) as captured:
            try:
                source = TransformerManager().transform_cell(code)  # magics; not Lily's routing
                filename = shell.compile.cache(source)
                exec_cell(shell, source, filename, display)
            except Exception as exc:
                self.events.error = (None, code, exc)
                error = _error_info(None, code, exc, filename, shell.user_ns)
                print(_one_line(exc, filename))  # the user's line; the model has the traceback
            _show_new_figures(shell, figures, display)
        for out in captured.outputs:  # for a model that sees images (tools/images.py)
            images.offer_bundle(out.data)
        text = captured_text(captured)
        if error is not None:
            text = "\n".join(p for p in (text, error.traceback.rstrip()) if p)
        return RunResult(text, error, captured)

    def run_sandboxed(self, code: str, limits: Limits | None = None,
                      replay: Sequence[str] = ()) -> RunResult:
        """Run ``code`` like :meth:`run`, in the sandbox, against the namespace as it is now:
        it reads and computes, and nothing it does reaches the kernel (docs/sandbox.md).
        ``replay``: the request's earlier runs, run first and silently in the child.
        The display is IPython's captured output rebuilt from what the child sent back."""
        from IPython.core.inputtransformer2 import TransformerManager
        from IPython.display import display
        from IPython.utils.capture import CapturedIO, RichOutput

        from lily_kernel.tools import sandbox, sandboxed_code  # ctypes: on the first run
        reason = sandbox.unavailable()
        if reason is not None:
            raise ToolError(f"the sandbox is unavailable here ({reason}); nothing ran")
        plots.describe_figures(self.shell)  # a figure displayed in the child: its description
        done = sandboxed_code.run_code(
            code, self.shell.user_ns, transform=TransformerManager().transform_cell,
            display=display, displays=_ipython_displays, limits=limits or sandbox.DEFAULT_LIMITS,
            replay=replay)
        bundles = [*done.displays, *({"text/plain": f.text} | (
            {"image/png": base64.b64encode(f.png).decode()} if f.png else {})
            for f in done.figures)]
        for bundle in bundles:  # for a model that sees images (tools/images.py)
            images.offer_bundle(bundle)
        error = None
        text, printed = done.output, done.printed
        if done.status is not sandbox.Status.DONE:
            name = "TimeoutError" if done.status is sandbox.Status.TIMEOUT else "SandboxError"
            error = ErrorInfo(None, code, name, done.detail, f"{name}: {done.detail}")
            text = printed = f"The sandbox stopped the code: {done.detail}."
        elif done.error is not None:
            e = done.error
            error = ErrorInfo(None, code, e.ename, e.evalue, e.traceback, e.hint)
            # the exception and the line that raised head run_python's result (raised());
            # the traceback's frames inside libraries are not the model's code to fix
            trace = e.traceback.rstrip() if not e.line_text else ""
            text = "\n".join(p for p in (text, trace) if p)
            where = f" (line {e.line})" if e.line else ""
            what = f"{e.ename}: {e.evalue}" if e.evalue else e.ename
            printed = "\n".join(p for p in (printed, f"The code raised {what}{where}.") if p)
        shown = CapturedIO(io.StringIO(printed), io.StringIO(""),
                           [RichOutput(data=b) for b in bundles])
        return RunResult(text, error, shown)


@contextmanager
def _ipython_displays() -> Iterator[list[dict[str, Any]]]:
    """In the sandboxed child: what the code displays, captured as MIME bundles (IPython's
    publisher would write to the kernel's sockets, which the child has closed)."""
    from IPython.utils.capture import capture_output
    bundles: list[dict[str, Any]] = []
    with capture_output(stdout=False, stderr=False, display=True) as captured:
        yield bundles
    bundles.extend(dict(out.data) for out in captured.outputs)


def _open_figures() -> set[int]:
    """The numbers of pyplot's open figures (none when pyplot is not imported)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    return set(pyplot.get_fignums()) if pyplot is not None else set()


def _show_new_figures(shell: InteractiveShell, before: set[int], display: Any) -> None:
    """Show, inside the capture, each figure the code opened, then close it: the card shows
    the plot where the user decided, and its text (its description, tools/figures.py)
    reaches the model with the output. The inline backend would show it only after the
    cell, outside run_python's output."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    plots.describe_figures(shell)
    for number in pyplot.get_fignums():
        if number not in before:
            figure = pyplot.figure(number)
            display(figure)
            pyplot.close(figure)


#: What run_python's code is called in its traceback: IPython's cache file of the code is a
#: temporary path of this machine, which a saved notebook would carry.
CODE_FILE = "<run_python code>"


def _error_info(count: int | None, source: str, exc: BaseException,
                filename: str | None = None,
                namespace: Mapping[str, Any] | None = None) -> ErrorInfo:
    tb = exc.__traceback__
    ours = (__file__, notebook_tools.__file__)  # run() and exec_cell
    while tb is not None and (tb.tb_frame.f_code.co_filename in ours or "IPython" in
                              tb.tb_frame.f_code.co_filename.replace("\\", "/").split("/")):
        tb = tb.tb_next  # IPython's frames (run_code) and Lily's own are not the user's
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    hint = ""
    if filename:
        text = text.replace(f'File "{filename}"', f'File "{CODE_FILE}"')
        if namespace is not None:  # run_python's code: what a KeyError's frame has instead
            from lily_kernel.tools import sandboxed_code  # ctypes: not at the kernel's start
            lines = [f.line or "" for f in traceback.extract_tb(exc.__traceback__)
                     if f.filename == filename]
            hint = sandboxed_code.missing_columns(exc, lines[-1] if lines else "", namespace)
    return ErrorInfo(count, source, type(exc).__name__, str(exc), text, hint)


def _one_line(exc: BaseException, filename: str | None) -> str:
    """run_python's error as the user sees it: one line with the line of the code that
    raised, not a traceback (the model gets that, and ``last_error`` for /fix)."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    where = f" (line {lines[-1]})" if lines and lines[-1] else ""
    if isinstance(exc, SyntaxError) and exc.lineno:
        where = f" (line {exc.lineno})"
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return f"The code raised {what}{where}."


def _with_figures(text: str, figures: Iterable[str]) -> str:
    """A cell's text output and what its plots showed (shown after the cell, so not in
    IPython's history): the ``<Figure size …>`` line gives way to the description."""
    described = "\n".join(figures)
    if not described:
        return text
    kept = [line for line in text.splitlines() if not line.startswith("<Figure size ")]
    return "\n".join([*kept, described])


def _output_text(hm: HistoryManager, n: int) -> tuple[str, list[str]]:
    """Cell ``n``'s text output, and the hashes of the images IPython's history kept of it."""
    outputs = getattr(hm, "outputs", None)
    parts: list[str] = []
    kept: list[str] = []
    if outputs is not None:  # IPython 9 keeps every cell's streams and results
        for out in outputs.get(n, ()):
            bundle = out.bundle
            digest = images.keep_bundle(bundle)  # offered when a tool returns the cell
            if digest is not None:
                kept.append(digest)
            if out.output_type in ("out_stream", "err_stream"):
                parts.append("".join(bundle.get("stream", [])))
            else:
                text = bundle.get("text/plain")
                parts.append("".join(text) if isinstance(text, list) else str(text or ""))
    else:
        parts.append(hm.output_hist_reprs.get(n, ""))
    exc = getattr(hm, "exceptions", {}).get(n)
    if exc:
        parts.append(f"{exc.get('ename')}: {exc.get('evalue')}")
    return "\n".join(p.rstrip("\n") for p in parts if p), kept


def captured_text(captured: CapturedIO) -> str:
    """What captured output printed and showed, as text (for the model and a card)."""
    parts = [captured.stdout, captured.stderr]
    for out in captured.outputs:
        parts.append(str(out.data.get("text/plain", "")))
    return "\n".join(p.rstrip("\n") for p in parts if p)
