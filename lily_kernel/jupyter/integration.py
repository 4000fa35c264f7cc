"""Lily inside an IPython shell: the part the kernel and ``%load_ext lily`` share.

A cleanup input transformer sees each cell before IPython's own rewriting
(which would turn ``/skills`` into ``skills()``). A command cell becomes a
call to :func:`dispatch`; in the Lily kernel, a prose cell becomes a call to
:func:`ask`. Because the cell still runs through ``run_cell``, execution
counts, history, events and "stop on error" stay IPython's own. A failed
command raises :class:`CommandError`, which a custom exception handler shows
as one line (``Error: ...``) with an ``error`` reply and no traceback.

Both faces register the notebook tools (:mod:`lily_kernel.jupyter.notebook`)
in their session; a held tool call (``run_python``) ends the request with a
card, and Confirm (button or ``/confirm``) runs it and continues the request.
"""
from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from lily_kernel.agent.timers import TIMERS
from lily_kernel.commands import router, sanitize
from lily_kernel.commands.results import (
    ActionCard,
    ActionDone,
    Answer,
    ConfirmedRun,
    ProposedCells,
    SkillTable,
)
from lily_kernel.commands.runner import Runner
from lily_kernel.commands.table import BUILTIN_NAMES
from lily_kernel.errors import CommandError, error_line
from lily_kernel.session.session import Session

if TYPE_CHECKING:
    from pathlib import Path

    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import CapturedIO

    from lily_kernel.agent.pending import PendingItem
    from lily_kernel.commands.runner import Live

_ATTR = "_lily"
# Lone words that stay Python in the Lily kernel: IPython's exit/quit, which end
# `jupyter console` (docs/front-ends.md#jupyter-console). Anything else is prose.
EXIT_WORDS = ("exit", "quit", "exit()", "quit()")


def session_label(env: Mapping[str, str]) -> str | None:
    """The journal's name: ``KERNEL_LILY_SESSION`` (a gateway forwards every ``KERNEL_``
    variable), else Jupyter's ``JPY_SESSION_NAME``, else the ``KERNEL_ID`` a gateway's
    launcher sets, so each remote kernel has a journal of its own
    (docs/front-ends.md#remote-kernels)."""
    return (env.get("KERNEL_LILY_SESSION") or env.get("JPY_SESSION_NAME")
            or env.get("KERNEL_ID") or None)


class Integration:
    """Lily in one shell: the face over the core's :class:`~lily_kernel.commands.runner.Runner`
    (which owns the session), and what this face installed in the shell."""

    def __init__(self, shell: InteractiveShell, kernel_mode: bool) -> None:
        self.shell = shell
        self.kernel_mode = kernel_mode
        self._checking = False  # True while is_complete asks IPython about a %%python cell
        self._terminal: _TerminalText | None = None  # this cell's live text, in a console
        self._buttons: list[Any] = []  # the live buttons of cards that may still wait (CardButtons)
        self._saved_custom_exc = (shell.custom_exceptions, shell.CustomTB)
        from lily_kernel.jupyter.notebook import ShellNotebook
        self.notebook = ShellNotebook(shell, "%%python" if kernel_mode else "")
        self.runner = Runner(lambda: self.new_session(label=session_label(os.environ)),
                             variables=self.variable_names)

    def new_session(self, workspace: Path | None = None, *, label: str | None = None,
                    env: Mapping[str, str] | None = None) -> Session:
        """A session for this shell (and for a replay in it): the notebook tools added, and the
        built-in command names reserved, so no skill alias takes one (docs/loader.md#exclusion)."""
        return Session(workspace, label=label, env=env, add_tools=self._add_tools,
                       reserved_commands=BUILTIN_NAMES)

    def variable_names(self) -> list[str]:
        """The notebook's variables, as the notebook tools see them (completion, checks)."""
        from lily_kernel.agent.notebook_tools import variable_names
        return variable_names(self.notebook)

    def _add_tools(self, session: Session) -> None:
        from lily_kernel.agent import notebook_tools
        notebook_tools.register(session.tools, self.notebook, lambda: session.share_values)

    @property
    def session(self) -> Session:
        """The session of this shell (the runner's)."""
        return self.runner.session

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
        self.notebook.install()

    def uninstall(self) -> None:
        """Remove what :meth:`install` put in the shell."""
        self.notebook.uninstall()
        cleanup = self.shell.input_transformers_cleanup
        if self.transform in cleanup:
            cleanup.remove(self.transform)
        exc, handler = self._saved_custom_exc
        self.shell.custom_exceptions, self.shell.CustomTB = exc, handler
        for kind in ("line", "cell"):
            self.shell.magics_manager.magics[kind].pop("lily", None)
        _redact_history(self.shell, install=False)
        if getattr(self.shell, _ATTR, None) is self:
            delattr(self.shell, _ATTR)

    # -- routing ---------------------------------------------------------------
    def transform(self, lines: list[str]) -> list[str]:
        """The input transformer: a command or prose cell becomes a call to Lily."""
        cell = "".join(lines)
        if router.is_command(cell):
            return [f"__import__('lily_kernel.jupyter.integration').jupyter.integration.dispatch({cell!r})\n"]
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
        return [f"__import__('lily_kernel.jupyter.integration').jupyter.integration.ask({cell!r})\n"]

    def check_complete(self, cell: str) -> tuple[str, int | None]:
        """IPython's ``check_complete`` of a cell, as Lily transforms it (for is_complete)."""
        self._checking = True
        try:
            status: tuple[str, int | None] = \
                self.shell.input_transformer_manager.check_complete(cell)
            return status
        finally:
            self._checking = False

    def run_command(self, cell: str) -> None:
        """Run a command cell and show its results."""
        try:
            self._show_all(self.runner.command(cell, live=self._live()))
        finally:
            word = cell.split(maxsplit=1)[0] if cell.split() else cell
            self._settle_cards(f"Decided in another cell ({word}).")

    def run_agent(self, text: str) -> None:
        """Send ``text`` to the agent and show what it answers."""
        try:
            self._show_all(self.runner.ask(text, live=self._live()))
        finally:
            self._settle_cards("Declined: a new request was sent before a decision.")

    def _live(self) -> Callable[[], Live] | None:
        """The factory of this cell's live display: None outside a kernel; tokens on stdout
        for a terminal console (:class:`_TerminalText`), a display updated in place else."""
        self._terminal = None
        if not hasattr(self.shell, "kernel"):
            return None
        if not _from_terminal(self.shell.kernel):
            return _LiveText

        def terminal() -> _TerminalText:
            self._terminal = _TerminalText()
            return self._terminal
        return terminal

    def _show_all(self, results: Iterable[Any]) -> None:
        """Show each result as the core yields it (a held call's output before the answer);
        a card waits for the user's decision only once it is displayed."""
        for result in results:
            if isinstance(result, ActionDone) and result.display is not None:
                cast("CapturedIO", result.display).show()  # run_python: what the code printed and showed
                continue
            if isinstance(result, Answer) and self._terminal is not None:
                from IPython.display import display  # streamed already: the rest, the footer
                display({"text/plain": self._terminal.rest(result)}, raw=True)
                continue
            if isinstance(result, ActionCard):
                self._show_card(result)
                self.runner.shown(result)
            else:
                _display_result(result)

    def _show_card(self, card: ActionCard) -> None:
        """The card, a restorable display the buttons write their outcome into, and its
        buttons as a display of their own under it (none in a terminal console)."""
        from IPython.display import display

        from lily_kernel.jupyter.display import CardButtons, bundle, card_bundle
        if _from_terminal(getattr(self.shell, "kernel", None)):
            display(bundle(card), raw=True)
            return
        try:
            import ipywidgets  # noqa: F401
        except ImportError:  # pragma: no cover - ipywidgets is a dependency
            display(bundle(card), raw=True)
            return
        handle = display(card_bundle(card), raw=True, display_id=True)
        buttons = CardButtons(card, handle, self._confirm, self.runner.shown)
        display(buttons.bundle(), raw=True)
        self._buttons.append(buttons)

    def _settle_cards(self, note: str) -> None:
        """Grey out the buttons of every card no longer waiting, decided another way
        (``/confirm``, ``/cancel``, a new request): ``note`` says how (docs/jupyter-display.md)."""
        if not self._buttons or not self.runner.ready:
            return
        session = self.session
        waiting = {item.id for item in (session.pending, session.offered) if item is not None}
        for buttons in list(self._buttons):
            if buttons.card.action.id not in waiting:
                self._buttons.remove(buttons)
                if not all(b.disabled for b in buttons.buttons):
                    buttons.deactivate(note)

    def _confirm(self, action: PendingItem, ok: bool,
                 always: bool = False) -> ActionDone | ConfirmedRun:
        """A card's button: the same decision as /confirm and /cancel."""
        done = self.runner.decide(action.id, ok, always)
        if done.tool_result is None:
            return done
        # no cell is running after a click: the output and the answer go into the card
        output = ""
        if done.display is not None:
            from lily_kernel.jupyter.notebook import captured_text
            output = captured_text(cast("CapturedIO", done.display))
        answer: Answer | None = None
        proposed: tuple[str, ...] = ()
        card: ActionCard | None = None
        for result in self.runner.resume(done):
            if isinstance(result, Answer):
                answer = result
            elif isinstance(result, ProposedCells):
                proposed = result.cells
            elif isinstance(result, ActionCard):
                card = result
        return ConfirmedRun(done, output, answer, proposed, card)


class _LiveText:
    """Tokens shown as they arrive, in a display that ends empty.

    The final answer is a separate Markdown display. Ending the live display
    empty keeps saved notebooks (and nbval, which ignores display updates)
    equal to what a front end shows after the request. While the model has not
    answered, a waiting line ("waiting for gpt-4o-mini… 12 s") is updated in
    place by the process's one shared timer thread (``agent/timers.py``; no thread per
    model call), and stops on the first token (docs/jupyter-display.md#waiting-indicator).
    """

    INTERVAL = 0.08  # seconds between updates: a front end cannot show faster anyway
    WAIT_AFTER = 1.0  # seconds of silence before the waiting line appears
    TICK = 1.0  # seconds between its updates

    def __init__(self) -> None:
        self.handle: Any = None  # (an IPython DisplayHandle) shown on the first token or event, so a request that fails
        self.parts: list[str] = []  # before reaching the model leaves no empty output
        self.status = ""
        self.last = 0.0
        self.gap = self.INTERVAL  # grows with the cost of rendering a long answer
        self.waiting = ""  # the waiting line, while the timer runs
        self._timer: threading.Event | None = None
        self._wait_key = 0  # this call's entry in the shared timer
        self._lock = threading.Lock()
        self._closed = False

    def write(self, piece: str) -> None:
        if self._timer is not None:
            self._stop_waiting()
        self.parts.append(piece)
        now = time.monotonic()
        if now - self.last >= self.gap:
            self.last = now
            self._show()

    def event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "waiting":
            self._start_waiting(data.get("model") or "the model")
            return
        self._stop_waiting()
        if kind == "skill":
            self.status = f"[using skill {data['name']}]"
        elif kind == "tool":
            self.status = f"[tool {data['name']}{'' if data['ok'] else ' refused'}]"
        self._show()

    # -- the waiting line -----------------------------------------------------------
    def _start_waiting(self, model: str) -> None:
        self._stop_waiting()
        stop = self._timer = threading.Event()
        started = time.monotonic()
        context = contextvars.copy_context()  # the cell's parent header, for the display

        def tick() -> float | None:
            with self._lock:
                if stop.is_set() or self._closed:
                    return None
                self.waiting = f"waiting for {model}… {time.monotonic() - started:.0f} s"
                self._show_locked()
            return self.TICK

        self._wait_key = TIMERS.add(self.WAIT_AFTER, lambda: context.run(tick))

    def _stop_waiting(self) -> None:
        stop, self._timer = self._timer, None
        if stop is not None:
            stop.set()
            TIMERS.cancel(self._wait_key)
            with self._lock:  # a tick in progress finishes before the line goes
                self.waiting = ""

    # -- the display ----------------------------------------------------------------
    def _show(self) -> None:
        with self._lock:
            self._show_locked()

    def _show_locked(self) -> None:
        if self.handle is None:
            from IPython.display import display
            self.handle = display({"text/plain": ""}, raw=True, display_id=True)
        text = "".join(self.parts)
        lines = [line for line in (self.status, text, self.waiting) if line]
        # Markdown as it arrives (a front end wraps it at word boundaries, where a plain
        # text output breaks words), made inert like the final answer; the status and the
        # waiting line carry names from the model and configuration, shown literally
        # (sanitizing is linear in the text: updates of a long answer space out so it
        # costs at most a quarter of the streaming time, never quadratic time)
        began = time.monotonic()
        md = [part for part in (sanitize.md_text(self.status), sanitize.markdown(text),
                                sanitize.md_text(self.waiting)) if part]
        self.gap = max(self.INTERVAL, 4 * (time.monotonic() - began))
        self.handle.update({"text/plain": "\n".join(lines),
                            "text/markdown": "\n\n".join(md)}, raw=True)

    def close(self, interrupted: bool = False) -> None:
        """End the display: empty (the answer comes as a display of its own), or, when the
        user interrupted, the text so far marked "(interrupted)"
        (docs/jupyter-display.md#interrupting)."""
        self._stop_waiting()
        with self._lock:
            self._closed = True
            text = "".join(self.parts).rstrip()
            if interrupted and text:
                self.status = ""
                self.parts = [text + "\n\n(interrupted)"]
                self._show_locked()
            elif self.handle is not None:
                self.handle.update({"text/plain": ""}, raw=True)


class _TerminalText(_LiveText):
    """The live text for a terminal console (``jupyter console``), which ignores display
    updates: tokens go to stdout as they arrive, the waiting line is redrawn in place
    with a carriage return and wiped before the text goes on, and the final answer
    shows only what was not streamed, then its footer (docs/front-ends.md#jupyter-console).
    A notebook never gets this: only a client that asked ``is_complete`` (a console) does.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0  # characters of the text already written
        self.drawn = ""  # the waiting line now on screen
        self.status_shown = ""
        self.at_line_start = True
        self.step_start = 0  # where the text of the current model step begins

    def event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "waiting":
            self.step_start = sum(map(len, self.parts))
        super().event(kind, data)

    def _show_locked(self) -> None:
        import sys
        out = []
        if self.drawn:
            out.append("\r" + " " * len(self.drawn) + "\r")
            self.drawn = ""
        text = "".join(self.parts)
        if self.status and self.status != self.status_shown:
            out.append(("" if self.at_line_start else "\n") + self.status + "\n")
            self.status_shown, self.at_line_start = self.status, True
        if len(text) > self.sent:
            out.append(text[self.sent:])
            self.sent, self.at_line_start = len(text), text.endswith("\n")
        if self.waiting:
            out.append(("" if self.at_line_start else "\n") + self.waiting)
            self.drawn, self.at_line_start = self.waiting, True
        if out:
            sys.stdout.write("".join(out))

    def close(self, interrupted: bool = False) -> None:
        import sys
        self._stop_waiting()
        with self._lock:
            self._closed = True
            self._show_locked()  # the text not written yet, and the waiting line wiped
            if interrupted and self.sent:
                sys.stdout.write(("" if self.at_line_start else " ") + "(interrupted)\n")
            elif not self.at_line_start:
                sys.stdout.write("\n")
            self.at_line_start = True

    def rest(self, answer: Answer) -> str:
        """The answer as the console shows it after streaming: the part of its text the
        last model step did not stream (a note Lily adds), then the footer."""
        streamed = "".join(self.parts)[self.step_start:]
        text = answer.text
        if streamed.strip() and text.startswith(streamed.rstrip()):
            text = text[len(streamed.rstrip()):]
        elif streamed.strip() and streamed.strip() == text.strip():
            text = ""
        text = text.strip()
        return (text + "\n\n" if text else "") + f"[{answer.footer()}]"


def _redact_history(shell: InteractiveShell, install: bool) -> None:
    """IPython keeps every cell in its input history (``history.sqlite``, ``_i``, ``In``):
    while Lily is active, a Lily cell (a command, a prose cell, ``%lily``) is stored with URL
    userinfo masked, and any cell with the live secret values masked, and the values it
    gives secret-looking variables (``%env``, ``%set_env``, ``os.environ[...] =``) too
    (docs/limits-and-secrets.md#secrets). The cell itself runs unchanged."""
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
    from lily_kernel import redaction
    store = history.store_inputs

    def clean(text: object) -> object:
        if not isinstance(text, str):
            return text
        if "lily_kernel.jupyter.integration" in text or text.lstrip().startswith(("/", "%lily", "%%lily")):
            return redaction.redact(text)
        for value in redaction.live_secrets():
            text = text.replace(value, redaction.MASK)
        # `%env OPENAI_API_KEY=...` is stored before it runs: its value is not live yet.
        return redaction.mask_env_assignments(text)

    def store_inputs(line_num: int, source: str, source_raw: str | None = None) -> Any:
        return store(line_num, clean(source), clean(source_raw))
    store_inputs._lily = True  # type: ignore[attr-defined]  # marks our wrapper
    history.store_inputs = store_inputs


def _display_result(result: object) -> None:
    from IPython.display import display

    from lily_kernel.jupyter.display import bundle, filter_bundle, skills_bundle
    if isinstance(result, SkillTable):  # its live filter first, a display of its own
        live = filter_bundle(result)
        with _nothing_to_flush():
            if live is not None:
                display(live[0], raw=True)
            display(skills_bundle(result, live[1] if live is not None else None), raw=True)
        return
    display(bundle(result), raw=True)


class _nothing_to_flush:
    """Skip ipykernel's stream flush before the two displays of /skills.

    Each display first flushes stdout and stderr, a wait on the IO thread each
    (~0.4 ms). /skills prints nothing itself and ipykernel flushed the streams
    when the last cell ended, so there is nothing to flush; /skills is
    benchmarked (bench/README.md). At worst, text a Python cell printed just
    before ``%lily /skills`` shows after the table. Outside ipykernel: a no-op.
    """

    pub: Any  # the shell's display publisher, when it has streams to flush

    def __enter__(self) -> _nothing_to_flush:
        from IPython import get_ipython
        shell = get_ipython()
        self.pub = getattr(shell, "display_pub", None)
        if not hasattr(type(self.pub), "_flush_streams"):
            self.pub = None
        else:
            self.pub._flush_streams = lambda: None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pub is not None:
            self.pub.__dict__.pop("_flush_streams", None)


def _from_terminal(kernel: Any) -> bool:
    """Whether the running cell came from a terminal console: a client that asks
    ``is_complete`` (jupyter console does on every Enter; notebooks, nbclient and papermill
    never do), recorded by the Lily kernel (docs/front-ends.md#jupyter-console)."""
    sessions = getattr(kernel, "terminal_sessions", None)
    if not sessions:
        return False
    parent = kernel.get_parent("shell") or {}
    return parent.get("header", {}).get("session") in sessions


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


def dispatch(cell: str) -> None:
    """Run a command cell (called by the code the transformer writes)."""
    current().run_command(cell)


def ask(cell: str) -> None:
    """Send a prose cell to the agent (called by the code the transformer writes)."""
    current().run_agent(cell)


@magics_class
class LilyMagics(Magics):
    """``%lily`` and ``%%lily``."""
    def __init__(self, shell: InteractiveShell, integration: Integration) -> None:
        super().__init__(shell)
        self.integration = integration

    @line_magic("lily")  # type: ignore[arg-type]  # IPython types the name-less form only
    def lily_line(self, line: str) -> None:
        """%lily <request>: send one line to the Lily agent (a /command runs as a command)."""
        if router.is_command(line):
            self.integration.run_command(line)
        else:
            self.integration.run_agent(line)

    @cell_magic("lily")  # type: ignore[arg-type]
    def lily_cell(self, line: str, cell: str) -> None:
        """%%lily: send the cell to the Lily agent."""
        text = "\n".join(part for part in (line.strip(), cell) if part.strip())
        if router.is_command(text):
            self.integration.run_command(text)
        else:
            self.integration.run_agent(text)
