"""The Lily Jupyter kernel: IPython's kernel with Lily's routing in front.

``/`` cells go to the command router, ``%``/``!`` cells to IPython,
``%%python`` cells run as Python in the notebook namespace, everything else
goes to the agent (see :mod:`lily_kernel.jupyter.integration`). Completion, inspection and
``is_complete`` answer command cells from the session; other cells get
IPython's answers.
"""
from __future__ import annotations

import inspect
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from ipykernel.ipkernel import IPythonKernel

from lily_kernel import __version__
from lily_kernel.commands.table import is_command
from lily_kernel.jupyter.integration import Integration
from lily_kernel.skills.paths import workspace_dir


class LilyKernel(IPythonKernel):
    """The Lily kernel: IPython, with commands and prose cells routed to Lily."""
    implementation = "lily"
    implementation_version = __version__
    banner = ("Lily: a skill-driven agent in Jupyter. /help lists the commands, "
              "/skills the skills; %%python runs Python.")
    # Python, not Markdown: a front end picks one editor mode for every code cell from
    # this, and %%python cells must highlight as Python (Markdown mode drew `[1, 2]` as a
    # link). Prose cells still go to the agent: routing is Lily's, never the front end's
    # (docs/jupyter-display.md#python-cells).
    language_info = {  # noqa: RUF012 (an instance attribute of IPythonKernel)
        "name": "python",
        "version": sys.version.split()[0],
        "mimetype": "text/x-python",
        "file_extension": ".py",
        "pygments_lexer": "ipython3",
        "codemirror_mode": {"name": "ipython", "version": 3},
        "nbconvert_exporter": "python",
    }
    # The kernelspec folder ships help.html; Jupyter Server serves a kernelspec's files at
    # /kernelspecs/<name>/ (as it serves the logos). docs/front-ends.md#help-menu
    help_links = [  # noqa: RUF012 (an instance attribute of IPythonKernel)
        {"text": "Lily help", "url": "/kernelspecs/lily/help.html"}]

    def __init__(self, **kwargs: Any) -> None:
        self._notice = _enter_working_dir()
        super().__init__(**kwargs)
        assert self.shell is not None  # IPythonKernel made it in __init__
        # the client sessions that asked is_complete: terminal consoles, which ignore display
        # updates, so Lily streams to stdout for them (docs/front-ends.md#jupyter-console)
        self.terminal_sessions: set[str] = set()
        self.lily = Integration(self.shell, kernel_mode=True)
        self.lily.install()
        _stop_cleanly_on_sigterm(self)

    async def do_execute(self, code: str, silent: bool, store_history: bool = True,
                         user_expressions: dict[str, Any] | None = None, allow_stdin: bool = False,
                         **kwargs: Any) -> dict[str, Any]:
        """Run the cell; the first cell also shows a start-up notice (a missing
        ``KERNEL_WORKING_DIR``, docs/front-ends.md#remote-kernels) so it is never silent."""
        if self._notice and not silent:
            notice, self._notice = self._notice, None
            self.send_response(self.iopub_socket, "stream",
                               {"name": "stderr", "text": notice + "\n"})
        reply: dict[str, Any] = await super().do_execute(code, silent, store_history,
                                                         user_expressions, allow_stdin, **kwargs)
        return reply

    async def do_shutdown(self, restart: bool) -> dict[str, Any]:
        """Journal the session's end (a gateway's shutdown or restart), then IPython's."""
        self.end_session("restart" if restart else "shutdown")
        return await _settle(super().do_shutdown(restart))

    def end_session(self, reason: str) -> None:
        """Write the journal's ``session_ended`` record once, if a session is running."""
        if self.lily.started and self.lily.cells.runner.ready:
            self.lily.session.end(reason)

    def pre_handler_hook(self) -> None:
        """Let a kernel_info request ignore SIGINT, as the idle kernel does.

        jupyter_client interrupts a kernel before every shutdown, and papermill asks
        kernel_info just before shutting down: a SIGINT landing while that reply's
        handler unwinds made ipykernel log "KeyboardInterrupt caught in kernel".
        kernel_info runs no user code, so there is nothing to interrupt.
        """
        if self.get_parent("shell").get("header", {}).get("msg_type") == "kernel_info_request":
            self.saved_sigint_handler = signal.getsignal(signal.SIGINT)
            return
        super().pre_handler_hook()

    @property
    def kernel_info(self) -> dict[str, Any]:
        """IPython's kernel_info with Lily's language_info."""
        info: dict[str, Any] = super().kernel_info
        info["language_info"] = dict(self.language_info)
        return info

    async def do_complete(self, code: str, cursor_pos: int | None) -> dict[str, Any]:
        """Complete a command cell (names, skills, variables) and an ``@`` mention in a prose
        cell (variables, files, cells); IPython completes the rest."""
        cursor_pos = len(code) if cursor_pos is None else cursor_pos
        stripped = code.lstrip()
        prose = bool(stripped) and stripped[0] not in "%!/"
        if (is_command(code) or prose) and self.lily.cells.runner.ready:
            found = self.lily.cells.complete(code, cursor_pos)
            if found is not None:
                return {"status": "ok", "matches": list(found.matches),
                        "cursor_start": found.start, "cursor_end": found.end,
                        "metadata": {}}
            if not prose:
                return {"status": "ok", "matches": [], "cursor_start": cursor_pos,
                        "cursor_end": cursor_pos, "metadata": {}}
        return await _settle(super().do_complete(code, cursor_pos))

    async def do_inspect(self, code: str, cursor_pos: int | None, detail_level: int = 0,
                         omit_sections: tuple[str, ...] = ()) -> dict[str, Any]:
        """Help for the command or skill under the cursor; IPython inspects the rest."""
        cursor_pos = len(code) if cursor_pos is None else cursor_pos
        if is_command(code) and self.lily.cells.runner.ready:
            data = self.lily.cells.inspect(code, cursor_pos)
            return {"status": "ok", "found": data is not None, "data": data or {},
                    "metadata": {}}
        return await _settle(super().do_inspect(code, cursor_pos, detail_level, omit_sections))

    async def do_is_complete(self, code: str) -> dict[str, Any]:
        """Whether Enter runs the cell: commands and prose at once, ``%%python`` as Python."""
        session = (self.get_parent("shell") or {}).get("header", {}).get("session")
        if session:
            self.terminal_sessions.add(session)
        if is_command(code):
            return {"status": "complete"}
        stripped = code.lstrip()
        if stripped.startswith("%%python"):
            return python_cell_status(code, self.lily.check_complete)
        if stripped and stripped[0] not in "%!":
            return {"status": "complete"}  # prose for the agent: Enter runs it
        return await _settle(super().do_is_complete(code))


def python_cell_status(code: str,
                       check_python: Callable[[str], tuple[str, int | None]]) -> dict[str, Any]:
    """is_complete for a ``%%python`` cell (docs/front-ends.md#jupyter-console).

    Like an IPython cell magic, the cell is complete only at a blank line, and
    then only if the Python so far is complete too (a blank line inside a
    bracket or a string goes on). Invalid Python is "invalid" at once, so a
    console runs it and shows the error. ``check_python`` is IPython's
    ``check_complete``; it sees the whole cell, whose ``%%python`` line Lily's
    input transformer removes.
    """
    header_end = code.find("\n", code.index("%%python"))
    if header_end == -1:
        return {"status": "incomplete", "indent": ""}
    if code[header_end + 1:].strip():
        status, indent = check_python(code)
    else:
        status, indent = "complete", None
    if status == "invalid":
        return {"status": "invalid"}
    last = code.rsplit("\n", 1)[-1]
    if status == "complete" and not last.strip():
        return {"status": "complete"}
    if status == "incomplete" and indent is not None:
        return {"status": "incomplete", "indent": " " * indent}
    return {"status": "incomplete", "indent": last[:len(last) - len(last.lstrip())]}


async def _settle(reply: Any) -> dict[str, Any]:
    """IPythonKernel's do_complete/do_inspect/do_is_complete return a dict, not a coroutine."""
    settled: dict[str, Any] = await reply if inspect.isawaitable(reply) else reply
    return settled


def _enter_working_dir() -> str | None:
    """Start in ``KERNEL_WORKING_DIR``, as Enterprise Gateway's kernels do, when it names a
    folder here; the workspace follows it (docs/front-ends.md#remote-kernels).

    When it names no folder here, the kernel stays where it was started and says so: in
    its log now, and (the returned notice) in the first cell's output.
    """
    target = os.environ.get("KERNEL_WORKING_DIR")
    if not target:
        return None
    try:
        os.chdir(os.path.expanduser(target))
    except OSError as exc:
        notice = (f"Lily: KERNEL_WORKING_DIR is not a folder on the kernel's host "
                  f"({exc.strerror}: {target}); the kernel stays in {os.getcwd()}, where it "
                  f"was started, and the workspace is {workspace_dir()}. Mount the folder "
                  "there, or set LILY_WORKSPACE.")
        print(notice, file=sys.stderr, flush=True)
        return notice
    return None


def _stop_cleanly_on_sigterm(kernel: LilyKernel) -> None:
    """On SIGTERM (a gateway's or a pod's stop), end the session in the journal and stop the
    kernel's loops as a shutdown request does, so the process exits 0 instead of dying of
    the signal (docs/deploy.md#signals). SIGINT stays IPython's interrupt."""
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread

    def stop(signum: int, frame: FrameType | None) -> None:
        kernel.end_session("SIGTERM")
        loop = kernel.io_loop
        loop.asyncio_loop.call_soon_threadsafe(loop.stop)  # type: ignore[attr-defined]
        control = getattr(kernel, "control_stream", None)
        if control is not None and control.io_loop is not loop:
            control.io_loop.asyncio_loop.call_soon_threadsafe(control.io_loop.stop)

    signal.signal(signal.SIGTERM, stop)


def launch() -> None:
    """Start the Lily kernel (the kernelspec's entry point)."""
    from ipykernel.kernelapp import IPKernelApp
    IPKernelApp.launch_instance(kernel_class=LilyKernel)
