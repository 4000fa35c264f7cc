"""Lily's work in one IPython shell: the runner, and how its results are shown.

The half of the face that needs the core. :mod:`lily_kernel.jupyter.integration` installs
Lily in the shell at start and loads this module on the first cell that needs it
(``Integration.cells``, the one place that decides it), so the kernel starts with
IPython's own imports and little of Lily's (docs/architecture.md#import-rules).

A command cell goes to the core's :class:`~lily_kernel.commands.runner.Runner` (which owns
the session), and what it yields is shown in order: results as MIME bundles
(:mod:`lily_kernel.jupyter.display`), an agent's text streamed into a live display, cards
with their buttons. Both faces register the notebook tools
(:mod:`lily_kernel.jupyter.notebook`) in their session; a held tool call (``run_python``)
ends the request with a card, and Confirm (button or ``/confirm``) runs it and continues
the request.
"""
from __future__ import annotations

import contextvars
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

from lily_kernel.agent.timers import TIMERS
from lily_kernel.commands import completion, render, sanitize
from lily_kernel.commands.results import (
    ActionCard,
    ActionDone,
    Answer,
    ConfirmedRun,
    ProposedCells,
    SkillTable,
    TrustReview,
)
from lily_kernel.commands.runner import Runner
from lily_kernel.commands.table import BUILTIN_NAMES
from lily_kernel.jupyter.notebook import ShellNotebook, captured_text
from lily_kernel.session.session import Session
from lily_kernel.tools import notebook_tools

if TYPE_CHECKING:
    from pathlib import Path

    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import CapturedIO

    from lily_kernel.agent.pending import PendingItem
    from lily_kernel.commands.runner import Live


def session_label(env: Mapping[str, str]) -> str | None:
    """The journal's name: ``KERNEL_LILY_SESSION`` (a gateway forwards every ``KERNEL_``
    variable), else Jupyter's ``JPY_SESSION_NAME``, else the ``KERNEL_ID`` a gateway's
    launcher sets, so each remote kernel has a journal of its own
    (docs/front-ends.md#remote-kernels)."""
    return (env.get("KERNEL_LILY_SESSION") or env.get("JPY_SESSION_NAME")
            or env.get("KERNEL_ID") or None)


class Cells:
    """Lily's cells in one shell: the core's runner (which owns the session), and the
    displays, live text and card buttons that show what it yields."""

    def __init__(self, shell: InteractiveShell, notebook: ShellNotebook) -> None:
        self.shell = shell
        self.notebook = notebook
        self._terminal: _TerminalText | None = None  # this cell's live text, in a console
        self._buttons: list[Any] = []  # the live buttons of cards that may still wait (CardButtons)
        self.runner = Runner(lambda: self.new_session(label=session_label(os.environ),
                                                      resume=True),
                             variables=self.variable_names)

    def new_session(self, workspace: Path | None = None, *, label: str | None = None,
                    env: Mapping[str, str] | None = None, resume: bool = False) -> Session:
        """A session for this shell (and for a replay in it): the notebook tools added, and the
        built-in command names reserved, so no skill alias takes one (docs/loader.md#exclusion)."""
        return Session(workspace, label=label, env=env, add_tools=self.add_tools,
                       reserved_commands=BUILTIN_NAMES, resume=resume)

    @property
    def session(self) -> Session:
        """The session of this shell (the runner's)."""
        return self.runner.session

    def variable_names(self) -> list[str]:
        """The notebook's variables, as the notebook tools see them (completion, checks)."""
        return notebook_tools.variable_names(self.notebook)

    def add_tools(self, session: Session) -> None:
        """Register the notebook tools in ``session`` (each session this shell starts)."""
        notebook_tools.register(session.tools, self.notebook, lambda: session.share_values,
                                lambda path: session.files.list(path))

    # -- completion and inspection (the kernel's) ----------------------------------------
    def complete(self, code: str, cursor_pos: int) -> completion.Completion | None:
        """Completions of a command cell (names, skills, variables), or None."""
        return completion.complete(self.session, code, cursor_pos, self.variable_names)

    def inspect(self, code: str, cursor_pos: int) -> dict[str, str] | None:
        """The help bundle for the command or skill under the cursor, or None."""
        page = completion.inspect(self.session, code, cursor_pos)
        if page is None:
            return None
        return {"text/plain": render.text(page), "text/markdown": render.markdown(page)}

    # -- the cells ------------------------------------------------------------------------
    def run_command(self, cell: str) -> None:
        """Run a command cell and show its results."""
        try:
            self._show_all(self.runner.command(cell, live=self._live()))
        finally:
            word = cell.split(maxsplit=1)[0] if cell.split() else cell
            self._settle_cards(f"Decided in another cell ({word}).")
            self._journal_notice()

    def run_agent(self, text: str) -> None:
        """Send ``text`` to the agent and show what it answers."""
        try:
            self._show_all(self.runner.ask(text, live=self._live()))
        finally:
            self._settle_cards("Declined: a new request was sent before a decision.")
            self._journal_notice()

    def _journal_notice(self) -> None:
        """One line in the cell when the journal could not write this cell's records (or
        writes again): Lily never loses a record silently (docs/logs.md#fail-loud)."""
        if not self.runner.ready:
            return
        notice = self.session.journal.take_notice()
        if notice:
            print(notice, file=sys.stderr, flush=True)

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
            elif isinstance(result, TrustReview) and hasattr(self.shell, "kernel") \
                    and not _from_terminal(self.shell.kernel):
                self._show_review(result)
            else:
                _display_result(result)

    def _show_card(self, card: ActionCard) -> None:
        """The card, a restorable display the buttons write their outcome into, and its
        buttons as a display of their own under it (none in a terminal console)."""
        from IPython.display import display

        from lily_kernel.jupyter.card_buttons import CardButtons
        from lily_kernel.jupyter.display import bundle, card_bundle
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

    def _show_review(self, review: TrustReview) -> None:
        """``/trust``'s review and, under it, its **Trust** button (docs/trust-boundary.md)."""
        from IPython.display import display

        from lily_kernel.commands import trust
        from lily_kernel.jupyter.display import TrustButton, bundle
        display(bundle(review), raw=True)

        def accept(fingerprint: str) -> object:
            notice = trust.accept(self.session, fingerprint)
            self.session.record_command("/trust --yes (the Trust button)", True)
            return notice
        display(TrustButton(review.fingerprint, accept).bundle(), raw=True)

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
            output = captured_text(cast("CapturedIO", done.display))
        answer: Answer | None = None
        proposed: tuple[str, ...] = ()
        card: ActionCard | None = None
        for result in self.runner.resume(done):
            if isinstance(result, Answer):
                answer = result
            elif isinstance(result, ProposedCells):
                proposed = tuple(self.notebook.cell_code(c) for c in result.cells)
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


