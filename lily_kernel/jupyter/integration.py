"""Lily inside an IPython shell: the part the kernel and ``%load_ext lily`` share.

A cleanup input transformer sees each cell before IPython's own rewriting
(which would turn ``/skills`` into ``skills()``). A command cell becomes a
call to :func:`dispatch`; in the Lily kernel, a prose cell becomes a call to
:func:`ask`. Because the cell still runs through ``run_cell``, execution
counts, history, events and "stop on error" stay IPython's own. A failed
command raises :class:`CommandError`, which a custom exception handler shows
as one line (``Error: ...``) with an ``error`` reply and no traceback.
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
from lily_kernel.commands.results import ActionCard, ActionDone, Answer, CommandError, Notice, SkillRequest, SkillTable
from lily_kernel.session.session import Session

_ATTR = "_lily"


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
        self.new_session()

    # -- session ---------------------------------------------------------------
    def new_session(self) -> None:
        label = os.environ.get("JPY_SESSION_NAME") or None
        try:
            self._session = Session(label=label)
            self.session_error = None
        except LoaderError as exc:
            self._session = None
            self.session_error = str(exc)

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

    def uninstall(self) -> None:
        cleanup = self.shell.input_transformers_cleanup
        if self.transform in cleanup:
            cleanup.remove(self.transform)
        exc, handler = self._saved_custom_exc
        self.shell.custom_exceptions, self.shell.CustomTB = exc, handler
        for kind in ("line", "cell"):
            self.shell.magics_manager.magics[kind].pop("lily", None)
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
        if stripped[0] in "%!":
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
        _display_result(result)

    def run_agent(self, text: str, skill: SkillRequest | None = None) -> None:
        session = self.session
        live = _LiveText() if hasattr(self.shell, "kernel") else None
        try:
            reply = agent.run(session, text, skill=skill,
                              on_text=live.write if live else None,
                              on_event=live.event if live else None)
        except KeyboardInterrupt:
            raise Interrupted("interrupted; the conversation keeps only completed steps.") from None
        finally:
            if live:
                live.close()
        _display_result(Answer(reply.text, reply.skill, tuple(reply.tools_used),
                               session.model_config.model))
        if reply.proposal is not None:
            self.show_card(reply.proposal)

    def show_card(self, action) -> None:
        """The confirmation card of a proposed typed-skill action, with live buttons."""
        from lily_kernel.typed import actions
        session = self.session
        skill = session.snapshot.get(action.skill)

        def confirm(act, ok: bool):
            try:
                outcome = actions.decide(session, act, ok)
            except actions.ActionError as exc:
                raise CommandError(f"{exc}.") from None
            return ActionDone(outcome.action, outcome.summary)

        _display_result(ActionCard(action, skill.typed.purpose if skill and skill.typed else ""),
                        confirm=confirm)


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
    stb = [value.line() if isinstance(value, CommandError) else f"Error: {value}"]
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
