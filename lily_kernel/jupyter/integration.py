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

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from lily_kernel.agent import loop as agent
from lily_kernel.commands import router
from lily_kernel.skills.loader import LoaderError
from lily_kernel.commands.results import (ActionCard, ActionDone, Answer, CommandError,
                                          ConfirmedRun, Notice, SkillRequest, SkillTable)
from lily_kernel.session.session import Session
from lily_kernel.errors import command_error, error_line

_ATTR = "_lily"
# Lone words that stay Python in the Lily kernel: IPython's exit/quit, which end
# `jupyter console` (docs/front-ends.md#jupyter-console). Anything else is prose.
EXIT_WORDS = ("exit", "quit", "exit()", "quit()")


def session_label(env) -> str | None:
    """The journal's name: ``KERNEL_LILY_SESSION`` (a gateway forwards every ``KERNEL_``
    variable), else Jupyter's ``JPY_SESSION_NAME`` (docs/front-ends.md#remote-kernels)."""
    return env.get("KERNEL_LILY_SESSION") or env.get("JPY_SESSION_NAME") or None


class Interrupted(CommandError):
    pass


class Integration:
    """Lily's state in one shell: its session and what it installed."""

    def __init__(self, shell, kernel_mode: bool) -> None:
        self.shell = shell
        self.kernel_mode = kernel_mode
        self.session_error: str | None = None
        self._session: Session | None = None
        self._saved_custom_exc = (shell.custom_exceptions, shell.CustomTB)
        from lily_kernel.jupyter.notebook import ShellNotebook
        self.notebook = ShellNotebook(shell)
        self.new_session()

    # -- session ---------------------------------------------------------------
    def new_session(self) -> None:
        label = session_label(os.environ)
        try:
            self._session = Session(label=label, add_tools=self._add_tools)
            self.session_error = None
        except LoaderError as exc:
            self._session = None
            self.session_error = str(exc)

    def _add_tools(self, session: Session) -> None:
        from lily_kernel.agent import notebook_tools
        notebook_tools.register(session.tools, self.notebook, lambda: session.share_values)

    @property
    def session(self) -> Session:
        if self._session is None:
            raise CommandError(f"Lily could not load its skills: {self.session_error}. "
                               "Fix it, then run /reload_skills.")
        return self._session

    # -- install / uninstall ---------------------------------------------------
    def install(self) -> None:
        setattr(self.shell, _ATTR, self)
        cleanup = self.shell.input_transformers_cleanup
        if self.transform not in cleanup:
            cleanup.insert(0, self.transform)
        self.shell.set_custom_exc((CommandError,), _show_command_error)
        self.shell.register_magics(LilyMagics(self.shell, self))
        _redact_history(self.shell, install=True)
        self.notebook.install()

    def uninstall(self) -> None:
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
            return [] if newline == -1 else cell[newline + 1:].splitlines(keepends=True)
        if stripped[0] in "%!" or stripped.rstrip() in EXIT_WORDS:
            return lines
        return [f"__import__('lily_kernel.jupyter.integration').jupyter.integration.ask({cell!r})\n"]

    def run_command(self, cell: str) -> None:
        name = (router.parse(cell) or router.Command("", "", "", "")).name
        if self._session is None and name in ("reload_skills", "new"):
            self.new_session()
            if self._session is not None:
                _display_result(Notice(
                    f"Skills loaded: snapshot version 1, {len(self._session.snapshot.skills)} skills."))
                return
        session = self.session
        try:
            result = router.run(session, cell)
        except KeyboardInterrupt:
            raise Interrupted("interrupted.") from None
        if isinstance(result, SkillRequest):
            self.run_agent(result.input, skill=result)
            return
        if isinstance(result, ActionDone) and result.tool_result is not None:
            self.continue_agent(result)  # /confirm of a held tool call: show, then go on
            return
        _display_result(result)

    def run_agent(self, text: str, skill: SkillRequest | None = None) -> None:
        self._drive(lambda on_text, on_event: agent.run(self.session, text, skill=skill,
                                                        on_text=on_text, on_event=on_event))

    def continue_agent(self, done: ActionDone) -> None:
        """After /confirm: the tool's output, as a cell shows it, then the request goes on."""
        captured, self.notebook.capture = self.notebook.capture, None
        if captured is not None:
            captured.show()  # run_python: what the code printed and showed
        else:
            _display_result(done)
        self._drive(lambda on_text, on_event: agent.resume(
            self.session, done.action, done.tool_result, on_text=on_text, on_event=on_event))

    def _drive(self, step) -> None:
        live = _LiveText() if hasattr(self.shell, "kernel") else None
        try:
            reply = step(live.write if live else None, live.event if live else None)
        except KeyboardInterrupt:
            raise Interrupted("interrupted; the conversation keeps only completed steps.") from None
        finally:
            if live:
                live.close()
        _display_result(self._answer(reply))
        if reply.proposal is not None:
            self.show_card(reply.proposal)

    def _answer(self, reply) -> Answer:
        text = reply.text
        if not text.strip() and reply.proposal is not None:
            text = "I would like to run the call below; it waits for your confirmation."
        return Answer(text, reply.skill, tuple(reply.tools_used), self.session.model_config.model,
                      reply.usage)

    def show_card(self, action) -> None:
        """The confirmation card of a proposed typed-skill action, with live buttons."""
        from lily_kernel.agent import confirmation
        from lily_kernel.errors import ActionError
        session = self.session
        skill = session.snapshot.get(action.skill)

        def confirm(act, ok: bool):
            try:
                outcome = confirmation.decide(session, act, ok)
            except ActionError as exc:
                raise command_error(exc) from None
            done = ActionDone(outcome.action, outcome.summary, outcome.result)
            if outcome.result is not None:
                return self._continue_in_card(done)
            return done

        if action.kind == "tool":
            tool = session.tools.get(action.tool)
            words = " ".join((tool.description if tool else "").split())
            purpose = words.split(". ")[0].rstrip(".") + "." if words else ""
        else:
            purpose = skill.typed.purpose if skill and skill.typed else ""
        _display_result(ActionCard(action, purpose), confirm=confirm)

    def _continue_in_card(self, done: ActionDone):
        """A button click: no cell is running, so the output and the answer go into the card."""
        captured, self.notebook.capture = self.notebook.capture, None
        output = ""
        if captured is not None:
            from lily_kernel.jupyter.notebook import _captured_text
            output = _captured_text(captured)
        try:
            reply = agent.resume(self.session, done.action, done.tool_result)
        except KeyboardInterrupt:
            raise CommandError("interrupted; the conversation keeps only completed steps.") from None
        proposed, self.notebook.undelivered = self.notebook.undelivered, []
        card = None
        if reply.proposal is not None:
            card = ActionCard(reply.proposal)
        return ConfirmedRun(done, output, self._answer(reply), tuple(proposed), card)


class _LiveText:
    """Tokens shown as they arrive, in a display that ends empty.

    The final answer is a separate Markdown display. Ending the live display
    empty keeps saved notebooks (and nbval, which ignores display updates)
    equal to what a front end shows after the request. While the model has not
    answered, a waiting line ("waiting for gpt-4o-mini… 12 s") is updated in
    place by one timer thread per model call, which stops on the first token
    (docs/jupyter-display.md#waiting-indicator).
    """

    INTERVAL = 0.08  # seconds between updates: a front end cannot show faster anyway
    WAIT_AFTER = 1.0  # seconds of silence before the waiting line appears
    TICK = 1.0  # seconds between its updates

    def __init__(self) -> None:
        self.handle = None  # shown on the first token or event, so a request that fails
        self.parts: list[str] = []  # before reaching the model leaves no empty output
        self.status = ""
        self.last = 0.0
        self.waiting = ""  # the waiting line, while the timer runs
        self._timer: threading.Event | None = None
        self._lock = threading.Lock()
        self._closed = False

    def write(self, piece: str) -> None:
        if self._timer is not None:
            self._stop_waiting()
        self.parts.append(piece)
        now = time.monotonic()
        if now - self.last >= self.INTERVAL:
            self.last = now
            self._show()

    def event(self, kind: str, data: dict) -> None:
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

        def tick() -> None:
            while not stop.wait(self.WAIT_AFTER if not self.waiting else self.TICK):
                with self._lock:
                    if stop.is_set() or self._closed:
                        return
                    self.waiting = f"waiting for {model}… {time.monotonic() - started:.0f} s"
                    self._show_locked()

        threading.Thread(target=context.run, args=(tick,), name="lily-waiting",
                         daemon=True).start()

    def _stop_waiting(self) -> None:
        stop, self._timer = self._timer, None
        if stop is not None:
            stop.set()
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
        lines = [line for line in (self.status, "".join(self.parts), self.waiting) if line]
        self.handle.update({"text/plain": "\n".join(lines)}, raw=True)

    def close(self) -> None:
        self._stop_waiting()
        with self._lock:
            self._closed = True
            if self.handle is not None:
                self.handle.update({"text/plain": ""}, raw=True)


def _redact_history(shell, install: bool) -> None:
    """IPython keeps every cell in its input history (``history.sqlite``, ``_i``, ``In``):
    while Lily is active, a Lily cell (a command, a prose cell, ``%lily``) is stored with URL
    userinfo masked, and any cell with the live secret values masked
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
    from lily_kernel import redaction as secrets
    store = history.store_inputs

    def clean(text):
        if not isinstance(text, str):
            return text
        if "lily_kernel.jupyter.integration" in text or text.lstrip().startswith(("/", "%lily", "%%lily")):
            return secrets.redact(text)
        for value in secrets.live_secrets():
            text = text.replace(value, secrets.MASK)
        return text

    def store_inputs(line_num, source, source_raw=None):
        return store(line_num, clean(source), clean(source_raw))
    store_inputs._lily = True
    history.store_inputs = store_inputs


def _display_result(result, confirm=None) -> None:
    from IPython.display import display
    from lily_kernel.jupyter.display import bundle, filter_bundle
    if isinstance(result, SkillTable):  # its live filter first, a display of its own
        live = filter_bundle(result)
        with _nothing_to_flush():
            if live is not None:
                display(live, raw=True)
            display(bundle(result), raw=True)
        return
    display(bundle(result, confirm=confirm), raw=True)


class _nothing_to_flush:
    """Skip ipykernel's stream flush before the two displays of /skills.

    Each display first flushes stdout and stderr, a wait on the IO thread each
    (~0.4 ms). /skills prints nothing itself and ipykernel flushed the streams
    when the last cell ended, so there is nothing to flush; /skills is
    benchmarked (bench/README.md). At worst, text a Python cell printed just
    before ``%lily /skills`` shows after the table. Outside ipykernel: a no-op.
    """

    def __enter__(self):
        from IPython import get_ipython
        shell = get_ipython()
        self.pub = getattr(shell, "display_pub", None)
        if not hasattr(type(self.pub), "_flush_streams"):
            self.pub = None
        else:
            self.pub._flush_streams = lambda: None
        return self

    def __exit__(self, *exc):
        if self.pub is not None:
            self.pub.__dict__.pop("_flush_streams", None)


def _show_command_error(shell, etype, value, tb, tb_offset=None):
    stb = [error_line(value)]
    shell._showtraceback(etype, value, stb)
    return stb


def current(shell=None) -> Integration:
    if shell is None:
        from IPython import get_ipython
        shell = get_ipython()
    integration = getattr(shell, _ATTR, None) if shell is not None else None
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
    def __init__(self, shell, integration: Integration) -> None:
        super().__init__(shell)
        self.integration = integration

    @line_magic("lily")
    def lily_line(self, line: str) -> None:
        """%lily <request>: send one line to the Lily agent (a /command runs as a command)."""
        if router.is_command(line):
            self.integration.run_command(line)
        else:
            self.integration.run_agent(line)

    @cell_magic("lily")
    def lily_cell(self, line: str, cell: str) -> None:
        """%%lily: send the cell to the Lily agent."""
        text = "\n".join(part for part in (line.strip(), cell) if part.strip())
        if router.is_command(text):
            self.integration.run_command(text)
        else:
            self.integration.run_agent(text)
