"""Lily's notebook tools through the Jupyter server that started ``lily acp``
(docs/front-ends.md#notebook-tools-through-a-jupyter-server).

jupyter-ai launches ``lily acp`` as a child of the Jupyter server. :func:`find_server`
walks up the parent processes to the one whose runtime file (``jpserver-<pid>.json`` in
``jupyter_core.paths.jupyter_runtime_dir()``) names the server's URL, token and root;
none is found under Zed or JetBrains, and the tools are not offered there. A
:class:`NotebookLink` answers the notebook tools (``tools/notebook_tools.register_answer``):
at each call it finds the notebook the chat is about — the notebook attached to the
message, else the one running in the chat's folder (``GET /api/sessions``) — and sends
the call into that notebook's kernel as one silent ``execute_request`` over
``/api/kernels/<id>/channels``, whose ``user_expressions`` entry runs
``notebook_tools.answer`` there (acp/kernel_probe.py): the same rules and bounds as in
the Lily kernel, no execution count, no history. ``run_python`` is asked first like any
held call (``session/request_permission``); a cancelled turn interrupts the kernel.

The one module of the ACP face that touches Jupyter, and only when a server started it:
``jupyter_core`` for the runtime folder and tornado's WebSocket client for the channels
(both already dependencies of Lily's), imported inside the functions that need them; the
REST calls use httpx2, Lily's one HTTP library.
"""
from __future__ import annotations

import ast
import asyncio
import json
import os
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlparse

import httpx2

from lily_kernel.acp import kernel_probe
from lily_kernel.errors import ToolError
from lily_kernel.redaction import SECRET_NAME
from lily_kernel.tools import bounded, notebook_tools
from lily_kernel.tools.notebook_tools import ProposedCell
from lily_kernel.tools.tool_registry import NOTEBOOK_TOOLS, Shown

if TYPE_CHECKING:
    from lily_kernel.session.session import Session

#: The notebook tools offered through a server (propose_cell shows its cell in the chat).
TOOLS = ("list_variables", "inspect_variable", "read_cells", "last_error", "read_cell",
         "propose_cell", "run_python")
PROPOSED = ("Shown to the user in the chat as a cell to copy into the notebook; nothing ran. "
            "The user reads, edits and runs it.")
READ_SECONDS = 20.0    # a read tool's whole round trip (the kernel bounds each inspect to 1 s)
RUN_SECONDS = 600.0    # run_python's, once the user allowed it
ANCESTORS = 16         # parent processes looked at for the server's runtime file
BUSY_CHECKS = 4        # looks at a busy kernel, half a second apart, before saying so
LISTED = 2_000         # a workspace folder's entries sent with an inspect_variable call


@dataclass(frozen=True)
class Server:
    """A Jupyter server: its URL (with its base URL, ending in ``/``), token and root."""

    url: str
    token: str
    root: Path

    def headers(self) -> dict[str, str]:
        """The token, as the server's API takes it."""
        return {"Authorization": f"token {self.token}"} if self.token else {}


def _parent(pid: int) -> int | None:
    """The parent of process ``pid`` (Linux's /proc, else ``ps``), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        pass
    try:
        out = subprocess.run(["ps", "-o", "ppid=", "-p", str(pid)], capture_output=True,
                             text=True, timeout=5, check=False).stdout
        return int(out.strip())
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def _ancestors() -> Iterator[int]:
    pid: int | None = os.getppid()
    for _ in range(ANCESTORS):
        if pid is None or pid <= 1:
            return
        yield pid
        pid = _parent(pid)


def _private(path: Path, folder: bool = False, st: os.stat_result | None = None) -> bool:
    """Whether ``path`` (or its ``st``) is this user's alone: owned by this user and not
    writable by anyone else. A runtime file names the server whose token Lily sends and
    whose kernels it runs code in: another user's, or one others could have written, is
    not used (docs/front-ends.md#acp)."""
    try:
        st = st or os.stat(path)
    except OSError:
        return False
    kind = stat.S_ISDIR(st.st_mode) if folder else stat.S_ISREG(st.st_mode)
    return kind and st.st_uid == os.getuid() and not st.st_mode & 0o022


def _private_text(path: Path) -> str:
    """The text of the runtime file ``path``, when it is this user's alone (opened without
    following a symlink, checked on what was opened); OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        if not _private(path, st=os.fstat(f.fileno())):
            raise PermissionError(f"{path} is not this user's alone")
        return f.read(1 << 20).decode("utf-8")


def find_server() -> Server | None:
    """The Jupyter server among this process's ancestors (its runtime file), or None."""
    try:
        from jupyter_core.paths import jupyter_runtime_dir
    except ImportError:  # no Jupyter here at all
        return None
    runtime = Path(jupyter_runtime_dir())
    if not _private(runtime, folder=True):
        return None
    for pid in _ancestors():
        try:
            info = json.loads(_private_text(runtime / f"jpserver-{pid}.json"))
        except (OSError, ValueError):
            continue
        url, root = info.get("url"), info.get("root_dir") or info.get("notebook_dir")
        if isinstance(url, str) and url.startswith(("http://", "https://")) \
                and isinstance(root, str):  # a server on a UNIX socket is not reached
            return Server(url if url.endswith("/") else url + "/", str(info.get("token") or ""),
                          Path(root))
    return None


@cache
def _sources() -> tuple[str, dict[str, str]]:
    """The probe's source and the modules it builds in the kernel."""
    def text(module: Any) -> str:
        return Path(module.__file__).read_text(encoding="utf-8")
    return text(kernel_probe), {"notebook_tools": text(notebook_tools),
                                "bounded": text(bounded)}


def probe_expression(tool: str, args: Mapping[str, Any], share: bool,
                     listing: Mapping[str, list[Any]] | None = None) -> str:
    """The ``user_expressions`` entry that answers ``tool`` inside the kernel: the probe
    built in a private namespace, called with the kernel's shell (acp/kernel_probe.py);
    ``listing``: workspace folders' entries, for inspect_variable's file rule."""
    probe, sources = _sources()
    request = json.dumps({"tool": tool, "args": dict(args), "share": share,
                          "listing": dict(listing or {}),
                          "secret_pattern": SECRET_NAME.pattern,
                          "secret_flags": int(SECRET_NAME.flags),
                          "notebook_tools": list(NOTEBOOK_TOOLS)})
    return (f"(lambda g: (exec(compile({probe!r}, '<lily acp: kernel_probe>', 'exec'), g), "
            f"g['probe'](__import__('IPython').get_ipython(), {request!r}, {sources!r}))[1])"
            "({'__name__': '_lily_acp_probe'})")


@dataclass
class Notebook:
    """The notebook a call goes to: its path (from the server's root) and kernel."""

    path: str
    kernel: str
    state: str  # the kernel's execution_state
    activity: str  # its last_activity (ISO 8601, so later sorts later)
    note: str = ""  # how it was chosen, when the choice was not obvious


@dataclass
class NotebookLink:
    """One ACP session's way to its notebook: the server, the chat's folder, and what the
    current message attached. It answers the notebook tools (an ``Answer``)."""

    server: Server
    workspace: Path
    attachments: Sequence[str] = field(default_factory=tuple)
    list_dir: notebook_tools.ListDir | None = None  # the session's files.list

    def add_tools(self, session: Session) -> None:
        """Register the notebook tools in ``session``, answered through the server."""
        self.list_dir = lambda path: session.files.list(path)
        notebook_tools.register_answer(session.tools, self, lambda: session.share_values,
                                       names=TOOLS)

    def __call__(self, tool: str, args: Mapping[str, Any], share: bool) -> str | Shown:
        """``tool`` answered inside the notebook's kernel (notebook_tools.Answer); a
        proposed cell is shown in the chat (no cell of the notebook runs to place it)."""
        if tool == "propose_cell":
            code = str(args.get("code", ""))
            if not code.strip():
                raise ToolError("code is empty")
            return Shown(PROPOSED, ProposedCell(code))
        notebook = self.notebook()
        for _ in range(BUSY_CHECKS):  # a moment's work (a completion) is waited for
            if notebook.state != "busy":
                break
            time.sleep(0.5)
            notebook = self.notebook()
        if notebook.state == "busy":
            raise ToolError(f"the kernel of {notebook.path} is busy running a cell; ask "
                            "again when it is done")
        run = tool == "run_python"
        content = {"code": "", "silent": True, "store_history": False, "allow_stdin": False,
                   "stop_on_error": False,
                   "user_expressions": {"lily": probe_expression(tool, args, share,
                                                                 self._listing(tool, args))}}
        try:
            reply = asyncio.run(self._execute(notebook.kernel, content,
                                              RUN_SECONDS if run else READ_SECONDS))
        except KeyboardInterrupt:  # session/cancel: the code stops too, like ■ in a notebook
            if run:
                self._rest("POST", f"api/kernels/{quote(notebook.kernel)}/interrupt")
            raise
        text = notebook.note + _answer(reply, share)
        return Shown(text) if run else text

    def _listing(self, tool: str, args: Mapping[str, Any]) -> dict[str, list[Any]]:
        """The workspace folders inspect_variable may look in to tell a file's name from a
        variable's (notebook_tools._workspace_file), listed here: the kernel cannot."""
        name = str(args.get("name", "")).strip().removeprefix("./")
        if tool != "inspect_variable" or self.list_dir is None or not name:
            return {}
        listing: dict[str, list[Any]] = {}
        for folder in {".", name.rpartition("/")[0] or "."}:
            try:
                listing[folder] = self.list_dir(folder)[:LISTED]
            except (ToolError, OSError):
                continue
        return listing

    # -- which notebook ---------------------------------------------------------------
    def notebook(self) -> Notebook:
        """The attached notebook, else the one running in the chat's folder."""
        running = [Notebook(str(s["path"]), str(s["kernel"]["id"]),
                            str(s["kernel"].get("execution_state", "")),
                            str(s["kernel"].get("last_activity", "")))
                   for s in self._rest("GET", "api/sessions")
                   if isinstance(s, dict) and isinstance(s.get("kernel"), dict)
                   and str(s.get("path", "")).endswith(".ipynb")]
        attached = [self._relative(uri) for uri in self.attachments
                    if unquote(urlparse(uri).path).endswith(".ipynb")]
        for path in attached:
            for notebook in running:
                if notebook.path == path:
                    return notebook
        if attached:
            raise ToolError(f"the attached notebook {attached[0]} has no running kernel: open "
                            "it in JupyterLab (or start its kernel) and ask again")
        folder = PurePosixPath(self._relative(self.workspace.as_uri()))
        here = sorted((n for n in running if PurePosixPath(n.path).parent == folder),
                      key=lambda n: n.activity, reverse=True)
        if not here:
            raise ToolError(f"no notebook with a running kernel in {folder.as_posix()} (this "
                            "chat's folder): open one there, or attach the notebook to the "
                            "message")
        chosen = here[0]
        chosen.note = (f"(from {chosen.path}: the most recently active of {len(here)} "
                       "notebooks running in this folder; attach one to choose)\n"
                       if len(here) > 1 else "")
        return chosen

    def _relative(self, uri: str) -> str:
        """A ``file://`` URI as a path from the server's root (the API's paths)."""
        path = Path(unquote(urlparse(uri).path)) if uri.startswith("file:") else Path(uri)
        try:
            relative = path.resolve().relative_to(self.server.root.resolve())
        except ValueError:
            raise ToolError(f"{path} is outside the Jupyter server's root "
                            f"({self.server.root})") from None
        return relative.as_posix()

    # -- the server -------------------------------------------------------------------
    def _rest(self, method: str, path: str) -> Any:
        try:
            with httpx2.Client(trust_env=False, timeout=10) as client:  # loopback: no proxy
                response = client.request(method, self.server.url + path,
                                          headers=self.server.headers())
        except httpx2.HTTPError as exc:
            raise ToolError(f"the Jupyter server at {self.server.url} does not answer "
                            f"({type(exc).__name__})") from None
        if response.status_code >= 400:
            raise ToolError(f"the Jupyter server refused {method} /{path} "
                            f"(HTTP {response.status_code})")
        return response.json() if response.content else None

    async def _execute(self, kernel: str, content: dict[str, Any],
                       seconds: float) -> dict[str, Any]:
        """One silent execute_request on the kernel's channels; its reply's content."""
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect
        session, msg_id = uuid.uuid4().hex, uuid.uuid4().hex
        base = "ws" + self.server.url[len("http"):]
        request = HTTPRequest(f"{base}api/kernels/{quote(kernel)}/channels?session_id={session}",
                              headers=self.server.headers(), connect_timeout=10)
        message = {"header": {"msg_id": msg_id, "msg_type": "execute_request",
                              "username": "lily", "session": session, "version": "5.3",
                              "date": datetime.now(UTC).isoformat()},
                   "parent_header": {}, "metadata": {}, "content": content, "buffers": [],
                   "channel": "shell"}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        try:
            channel = await asyncio.wait_for(websocket_connect(request), 15)
        except Exception as exc:  # refused, unreachable, timed out
            raise ToolError(f"could not reach the notebook's kernel through the Jupyter "
                            f"server ({type(exc).__name__})") from None
        try:
            await channel.write_message(json.dumps(message))
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    raise TimeoutError
                raw = await asyncio.wait_for(channel.read_message(), left)
                if raw is None:
                    raise ToolError("the Jupyter server closed the kernel's channel")
                if not isinstance(raw, str):
                    continue
                reply = json.loads(raw)
                if (reply.get("channel") == "shell"
                        and reply.get("parent_header", {}).get("msg_id") == msg_id):
                    found: dict[str, Any] = reply.get("content") or {}
                    return found
        except TimeoutError:
            raise ToolError(f"the notebook's kernel did not answer within {seconds:g} s "
                            "(is a cell running?)") from None
        finally:
            channel.close()


def _answer(reply: Mapping[str, Any], share: bool) -> str:
    """The tool's text from an execute_reply; the probe's refusal as a ToolError."""
    entry = (reply.get("user_expressions") or {}).get("lily") or {}
    if entry.get("status") != "ok":
        why = str(entry.get("ename") or reply.get("ename") or "no answer")
        if why == "KeyboardInterrupt":
            why = "interrupted"
        raise ToolError(f"the notebook's kernel could not run Lily's tool ({why}); a Python "
                        "kernel (ipykernel) is needed")
    try:
        data = json.loads(ast.literal_eval(entry["data"]["text/plain"]))
    except (KeyError, ValueError, SyntaxError, TypeError):
        raise ToolError("the notebook's kernel answered in a form Lily does not read") from None
    if "refused" in data:
        raise ToolError(str(data["refused"]))
    if "failed" in data:
        message = f": {data['message']}" if data.get("message") else ""
        suffix = "" if share else f" {notebook_tools.NOT_SHARED}"
        raise ToolError(f"the tool failed in the notebook's kernel ({data['failed']}{message})"
                        + suffix)
    return str(data["text"])
