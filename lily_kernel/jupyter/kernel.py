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

from ipykernel.ipkernel import IPythonKernel

from lily_kernel import __version__
from lily_kernel.commands import completion
from lily_kernel.commands import render
from lily_kernel.commands import router
from lily_kernel.jupyter.integration import Integration


class LilyKernel(IPythonKernel):
    implementation = "lily"
    implementation_version = __version__
    banner = ("Lily: a skill-driven agent in Jupyter. /help lists the commands, "
              "/skills the skills; %%python runs Python.")
    # Python, not Markdown: a front end picks one editor mode for every code cell from
    # this, and %%python cells must highlight as Python (Markdown mode drew `[1, 2]` as a
    # link). Prose cells still go to the agent: routing is Lily's, never the front end's
    # (docs/jupyter-display.md#python-cells).
    language_info = {
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
    help_links = [{"text": "Lily help", "url": "/kernelspecs/lily/help.html"}]

    def __init__(self, **kwargs) -> None:
        _enter_working_dir()
        super().__init__(**kwargs)
        self.lily = Integration(self.shell, kernel_mode=True)
        self.lily.install()

    def pre_handler_hook(self):
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
    def kernel_info(self):
        info = super().kernel_info
        info["language_info"] = dict(self.language_info)
        return info

    async def do_complete(self, code, cursor_pos):
        cursor_pos = len(code) if cursor_pos is None else cursor_pos
        if router.is_command(code) and self.lily.runner.ready:
            found = completion.complete(self.lily.session, code, cursor_pos,
                                        self.lily.variable_names)
            if found is not None:
                return {"status": "ok", "matches": list(found.matches),
                        "cursor_start": found.start, "cursor_end": found.end,
                        "metadata": {}}
            return {"status": "ok", "matches": [], "cursor_start": cursor_pos,
                    "cursor_end": cursor_pos, "metadata": {}}
        return await _settle(super().do_complete(code, cursor_pos))

    async def do_inspect(self, code, cursor_pos, detail_level=0, omit_sections=()):
        cursor_pos = len(code) if cursor_pos is None else cursor_pos
        if router.is_command(code) and self.lily.runner.ready:
            page = completion.inspect(self.lily.session, code, cursor_pos)
            data = ({"text/plain": render.text(page), "text/markdown": render.markdown(page)}
                    if page is not None else {})
            return {"status": "ok", "found": page is not None, "data": data, "metadata": {}}
        return await _settle(super().do_inspect(code, cursor_pos, detail_level, omit_sections))

    async def do_is_complete(self, code):
        if router.is_command(code):
            return {"status": "complete"}
        stripped = code.lstrip()
        if stripped.startswith("%%python"):
            return python_cell_status(code, self.lily.check_complete)
        if stripped and stripped[0] not in "%!":
            return {"status": "complete"}  # prose for the agent: Enter runs it
        return await _settle(super().do_is_complete(code))


def python_cell_status(code: str, check_python) -> dict:
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


async def _settle(reply):
    """IPythonKernel's do_complete/do_inspect/do_is_complete return a dict, not a coroutine."""
    return await reply if inspect.isawaitable(reply) else reply


def _enter_working_dir() -> None:
    """Start in ``KERNEL_WORKING_DIR``, as Enterprise Gateway's kernels do, when it names a
    folder here; the workspace follows it (docs/front-ends.md#remote-kernels)."""
    target = os.environ.get("KERNEL_WORKING_DIR")
    if not target:
        return
    try:
        os.chdir(os.path.expanduser(target))
    except OSError as exc:
        print(f"Lily: KERNEL_WORKING_DIR is not a folder here ({exc.strerror}: {target}); "
              f"the workspace is {os.getcwd()}", file=sys.stderr)


def launch() -> None:
    from ipykernel.kernelapp import IPKernelApp
    IPKernelApp.launch_instance(kernel_class=LilyKernel)
