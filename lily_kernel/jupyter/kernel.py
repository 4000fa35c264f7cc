"""The Lily Jupyter kernel: IPython's kernel with Lily's routing in front.

``/`` cells go to the command router, ``%``/``!`` cells to IPython,
``%%python`` cells run as Python in the notebook namespace, everything else
goes to the agent (see :mod:`lily_kernel.jupyter.integration`). Completion, inspection and
``is_complete`` answer command cells from the session; other cells get
IPython's answers.
"""
from __future__ import annotations

import inspect

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
    language_info = {
        "name": "markdown",
        "mimetype": "text/markdown",
        "file_extension": ".md",
        "pygments_lexer": "markdown",
        "codemirror_mode": "markdown",
    }
    help_links = [{"text": "Lily commands: run /help", "url": "https://jupyter.org"}]

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.lily = Integration(self.shell, kernel_mode=True)
        self.lily.install()

    @property
    def kernel_info(self):
        info = super().kernel_info
        info["language_info"] = dict(self.language_info)
        return info

    async def do_complete(self, code, cursor_pos):
        cursor_pos = len(code) if cursor_pos is None else cursor_pos
        if router.is_command(code) and self.lily._session is not None:
            found = completion.complete(self.lily.session, code, cursor_pos)
            if found is not None:
                return {"status": "ok", "matches": list(found.matches),
                        "cursor_start": found.start, "cursor_end": found.end,
                        "metadata": {}}
            return {"status": "ok", "matches": [], "cursor_start": cursor_pos,
                    "cursor_end": cursor_pos, "metadata": {}}
        return await _settle(super().do_complete(code, cursor_pos))

    async def do_inspect(self, code, cursor_pos, detail_level=0, omit_sections=()):
        cursor_pos = len(code) if cursor_pos is None else cursor_pos
        if router.is_command(code) and self.lily._session is not None:
            page = completion.inspect(self.lily.session, code, cursor_pos)
            data = ({"text/plain": render.text(page), "text/markdown": render.markdown(page)}
                    if page is not None else {})
            return {"status": "ok", "found": page is not None, "data": data, "metadata": {}}
        return await _settle(super().do_inspect(code, cursor_pos, detail_level, omit_sections))

    async def do_is_complete(self, code):
        if router.is_command(code):
            return {"status": "complete"}
        stripped = code.lstrip()
        if stripped and stripped[0] not in "%!":
            return {"status": "complete"}  # prose for the agent: Enter runs it
        return await _settle(super().do_is_complete(code))


async def _settle(reply):
    """IPythonKernel's do_complete/do_inspect/do_is_complete return a dict, not a coroutine."""
    return await reply if inspect.isawaitable(reply) else reply


def launch() -> None:
    from ipykernel.kernelapp import IPKernelApp
    IPKernelApp.launch_instance(kernel_class=LilyKernel)
