"""Helpers for the kernel tests: private worlds for real kernels, and a client wrapper.

Every kernel started here runs in a temporary workspace (its cwd) with its
own user skill root (empty), its own HOME and IPython directory, and no
OpenAI, Lily or skill-root variables inherited from the machine: nothing reads
``~/.lily``, ``~/.ipython`` or a real model endpoint.
"""
from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.manager import start_new_kernel

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
NO_MODEL_PREFIX = "Error: no model is configured"  # what the agent says without a model
STARTUP_TIMEOUT = 60
_INHERITED_PREFIXES = ("OPENAI_", "SKILLS_", "LILY_", "JPY_")


@dataclass
class World:
    """A temporary workspace plus the environment a kernel runs in."""
    base: Path
    workspace: Path
    ws_skills: Path
    user_skills: Path
    env: dict[str, str]


def make_world(base: Path, ipython_dir: Path | None = None, **extra: str) -> World:
    base = Path(base)
    workspace = base / "ws"
    ws_skills = workspace / "skills"
    user_skills = base / "user_skills"
    ipython_dir = ipython_dir or base / "ipython"
    home = base / "home"
    for d in (ws_skills, user_skills, ipython_dir, home):
        d.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(_INHERITED_PREFIXES)}
    env.update({
        "SKILLS_USER_DIR": str(user_skills),
        "SKILLS_WORKSPACE_DIR": str(ws_skills),
        "IPYTHONDIR": str(ipython_dir),
        "HOME": str(home),
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        # The model's run_python asks with a card, as where no sandbox is (the path these
        # tests cover); LILY_SANDBOX="on" gives a kernel its sandbox (test_gate_kernel.py).
        "LILY_SANDBOX": "off",
    })
    env.update(extra)
    return World(base, workspace, ws_skills, user_skills, env)


def write_skill(root: Path, name: str, frontmatter: str | None, body: str = "# Body\n\nDo it.\n") -> Path:
    folder = Path(root) / name
    folder.mkdir(parents=True, exist_ok=True)
    text = body if frontmatter is None else f"---\n{frontmatter.strip()}\n---\n{body}"
    (folder / "SKILL.md").write_text(text, encoding="utf-8")
    return folder


@dataclass
class Run:
    """One executed cell: its reply content and the iopub messages it caused."""
    code: str
    reply: dict[str, Any]
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return self.reply["status"]

    def of_type(self, *types: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["msg_type"] in types]

    @property
    def outputs(self) -> list[dict[str, Any]]:
        """What a notebook would show (no status/execute_input/comm traffic)."""
        return self.of_type("stream", "display_data", "execute_result", "error", "update_display_data")

    @property
    def displays(self) -> list[dict[str, Any]]:
        return [m["content"]["data"] for m in self.of_type("display_data")]

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [m["content"] for m in self.of_type("error")]

    @property
    def stdout(self) -> str:
        return "".join(m["content"]["text"] for m in self.of_type("stream")
                       if m["content"]["name"] == "stdout")

    @property
    def result(self) -> dict[str, Any] | None:
        found = self.of_type("execute_result")
        return found[0]["content"]["data"] if found else None

    def error_line(self) -> str:
        """The single error line of a failed cell (asserting the one-line shape)."""
        assert self.status == "error", (self.code, self.reply, self.messages)
        errors = self.errors
        assert len(errors) == 1, errors
        tb = errors[0]["traceback"]
        assert len(tb) == 1, tb
        line = tb[0]
        assert "\n" not in line.strip(), line
        assert not ANSI.search(line), repr(line)
        assert "Traceback" not in line, line
        assert line.startswith("Error: "), line
        return line


class Kernel:
    """A started kernel, its blocking client and its world."""

    def __init__(self, kernel_name: str, world: World) -> None:
        self.name, self.world = kernel_name, world
        self.km, self.kc = start_new_kernel(kernel_name=kernel_name, cwd=str(world.workspace),
                                            env=world.env, startup_timeout=STARTUP_TIMEOUT)

    @property
    def workspace(self) -> Path:
        return self.world.workspace

    def run(self, code: str, timeout: float = 30, **kwargs: Any) -> Run:
        messages: list[dict[str, Any]] = []
        reply = self.kc.execute_interactive(code, output_hook=messages.append, timeout=timeout,
                                            allow_stdin=False, **kwargs)
        return Run(code, reply["content"],
                   [m for m in messages if m["msg_type"] not in ("status", "execute_input")])

    def ok(self, code: str, **kwargs: Any) -> Run:
        run = self.run(code, **kwargs)
        assert run.status == "ok", (code, run.reply, run.messages)
        return run

    def reply(self, msg_id: str, timeout: float = 30) -> dict[str, Any]:
        """The shell reply to ``msg_id`` (skipping replies to other requests)."""
        deadline = time.monotonic() + timeout
        while True:
            msg = self.kc.get_shell_msg(timeout=max(deadline - time.monotonic(), 0.01))
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    def iopub_until_idle(self, msg_id: str, timeout: float = 10) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        found: list[dict[str, Any]] = []
        while True:
            msg = self.kc.get_iopub_msg(timeout=max(deadline - time.monotonic(), 0.01))
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return found
            if msg["msg_type"] not in ("status", "execute_input"):
                found.append(msg)

    def complete(self, code: str, cursor_pos: int | None = None) -> dict[str, Any]:
        return self.reply(self.kc.complete(code, cursor_pos))["content"]

    def inspect(self, code: str, cursor_pos: int | None = None) -> dict[str, Any]:
        return self.reply(self.kc.inspect(code, cursor_pos))["content"]

    def is_complete(self, code: str) -> dict[str, Any]:
        return self.reply(self.kc.is_complete(code))["content"]

    def shutdown(self) -> None:
        try:
            self.kc.stop_channels()
        finally:
            self.km.shutdown_kernel(now=True)


def run_cells(world: World, cells: Iterable[str], timeout: float = 60) -> list[Run]:
    """Run ``cells`` in order, each to success, in a new Lily kernel in ``world``, which is
    shut down after."""
    kernel = Kernel("lily", world)
    try:
        return [kernel.ok(cell, timeout=timeout) for cell in cells]
    finally:
        kernel.shutdown()


class ConnectionRecorder:
    """A TCP server on 127.0.0.1 that records every connection made to it (and answers nothing)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.connections: list[tuple[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, addr = self.sock.accept()
            except OSError:  # timeout, or closed
                continue
            self.connections.append(addr)
            conn.close()

    def wait_for(self, count: int, timeout: float = 5) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.connections) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return len(self.connections) >= count

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


def scripted_kernel_world(base: Path, ipython_dir: Path | None, server_url: str) -> World:
    """A kernel world whose model is the scripted server at ``server_url``."""
    return make_world(base, ipython_dir, OPENAI_BASE_URL=server_url, LILY_MAX_RETRIES="0",
                      LILY_TIMEOUT="5", LILY_MODEL="scripted-test-model")


@contextmanager
def scripted_kernel(base: Path, ipython_dir: Path | None, server_url: str,
                    kernel_name: str = "lily", files: dict[str, str] | None = None,
                    **env: str) -> Iterator[Kernel]:
    """A kernel whose model is the scripted server at ``server_url``, shut down on exit.

    ``files`` are written into its workspace before it starts; a python3 kernel loads
    ``%load_ext lily`` first, so both faces of Lily start ready the same way. ``env``: more
    of the kernel's environment (``SKILLS_EXAMPLES="1"``: Lily's example skills).
    """
    world = scripted_kernel_world(base, ipython_dir, server_url)
    world.env.update(env)
    for name, text in (files or {}).items():
        (world.workspace / name).write_text(text, encoding="utf-8")
    kernel = Kernel(kernel_name, world)
    try:
        if kernel_name == "python3":
            assert kernel.run("%load_ext lily").status == "ok"
        yield kernel
    finally:
        kernel.shutdown()


def call(name: str, args: dict, id: str) -> dict:
    """A scripted model turn that calls one tool."""
    return {"tool_calls": [{"name": name, "arguments": args, "id": id}]}


def tool_result(server: Any, call_id: str) -> str:
    """The result of ``call_id`` as the model received it (in the latest request holding it)."""
    for req in reversed(server.chat_requests()):
        for m in req["messages"]:
            if m.get("role") == "tool" and m.get("tool_call_id") == call_id:
                return m["content"]
    raise AssertionError(f"no request carried a result for {call_id}")


def conversation(kernel: Kernel) -> list[dict]:
    """The kernel session's conversation, as the agent loop keeps it."""
    run = kernel.ok("%%python\nimport json, lily\nprint(json.dumps(lily.session().conversation))")
    return json.loads(run.stdout)
