"""A Lily kernel started through Jupyter Kernel Gateway's REST API, used over its websocket.

The gateway runs on 127.0.0.1 in its own folder; the client asks for a Lily kernel
with ``KERNEL_WORKING_DIR`` (a workspace elsewhere) and ``KERNEL_LILY_SESSION``, as a
remote front-end would. ``/skills`` must list the workspace's own skill, a prose cell
must reach the scripted model, and the journal must land under the workspace's
``.lily/`` (docs/front-ends.md#remote-kernels).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import json
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from kernel_support import make_world
from tornado.websocket import websocket_connect

from lily_kernel.session.journal import journal_path

STARTUP = 60  # seconds for the gateway, then for the kernel (generous: tests share 2 cores)


def run_in_own_loop(coroutine_function):
    """``asyncio.run`` in a thread of its own: in the whole suite the real-browser tests'
    Playwright (sync API) keeps an event loop running in the main thread, where
    ``asyncio.run`` refuses to start."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(coroutine_function())).result()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=STARTUP) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else {}


@pytest.fixture
def gateway(tmp_path, ipython_dir):
    """``jupyter kernelgateway`` on a free port of 127.0.0.1, started in its own folder."""
    world = make_world(tmp_path / "gw", ipython_dir)
    home = world.workspace  # the gateway's folder: kernels start here unless told otherwise
    port = free_port()
    env = dict(world.env,
               # what the gateway passes on from its own environment, and from clients
               KG_ENV_PROCESS_WHITELIST="PYTHONPATH,HOME,IPYTHONDIR,SKILLS_USER_DIR,"
                                        "PYDEVD_DISABLE_FILE_VALIDATION",
               KG_ENV_WHITELIST="OPENAI_BASE_URL,LILY_MODEL,LILY_MAX_RETRIES,LILY_TIMEOUT")
    log = open(tmp_path / "gateway.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "kernel_gateway", "--ip=127.0.0.1",
                             f"--port={port}", "--port_retries=0"],
                            cwd=str(home), env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    wait_until_serving(proc, base + "/api", tmp_path / "gateway.log")
    yield base, home
    stop(proc)
    log.close()


def wait_until_serving(proc: subprocess.Popen, url: str, log: Path) -> None:
    """Poll ``url`` until the gateway answers; fail with its log if it exits or never does."""
    deadline = time.monotonic() + STARTUP
    while True:
        try:
            http("GET", url)
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(log.read_text()) from None
            time.sleep(0.2)


def stop(proc: subprocess.Popen) -> None:
    """Terminate a gateway, killing it if it does not exit in time."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Channels:
    """The kernel's channels over the gateway's websocket, in the Jupyter message protocol."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.session = uuid.uuid4().hex

    async def execute(self, code: str, timeout: float = STARTUP,
                      on_output: Callable[[dict], None] | None = None
                      ) -> tuple[dict, list[dict]]:
        """Run ``code``; its reply and outputs (each also handed to ``on_output``)."""
        msg_id = uuid.uuid4().hex
        await self.ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "session": self.session,
                       "username": "test", "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}))
        reply, outputs, idle = None, [], False
        deadline = time.monotonic() + timeout
        while reply is None or not idle:
            raw = await asyncio.wait_for(self.ws.read_message(), deadline - time.monotonic())
            assert raw is not None, "the gateway closed the websocket"
            msg = json.loads(raw)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "execute_reply":
                reply = msg["content"]
            elif kind == "status":
                idle = msg["content"]["execution_state"] == "idle"
            elif kind in ("display_data", "execute_result", "stream", "error"):
                outputs.append(msg["content"])
                if on_output is not None:
                    on_output(msg["content"])
        return reply, outputs


def team_workspace(workspace: Path) -> Path:
    """A workspace folder holding one skill of its own, ``team_notes``."""
    skill = workspace / "skills" / "team_notes"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: team_notes\ndescription: The team's notes.\n"
                                    "---\nBody.\n")
    return workspace


def scripted_model_env(server) -> dict[str, str]:
    """What a client sends so the kernel's model is the scripted server."""
    return {"OPENAI_BASE_URL": server.url, "LILY_MODEL": "scripted-test-model",
            "LILY_MAX_RETRIES": "0", "LILY_TIMEOUT": "10"}


async def first_cells(channels: Channels) -> list[tuple[dict, list[dict]]]:
    """``/skills``, a prose cell, and a ``%%python`` cell printing the kernel's folder."""
    return [await channels.execute("/skills --all"), await channels.execute("Say hello."),
            await channels.execute("%%python\nimport os\nprint(os.getcwd())")]


def check_first_cells(runs: list[tuple[dict, list[dict]]], greeting: str, workspace: Path,
                      server) -> None:
    """The workspace's skill is listed, the prose reached the model once, the kernel runs
    in the workspace."""
    (s_reply, s_out), (p_reply, p_out), (w_reply, w_out) = runs
    # the workspace's own skill is found there (listed as untrusted until the user trusts it)
    assert s_reply["status"] == "ok" and "team_notes" in json.dumps(s_out)
    assert p_reply["status"] == "ok", p_out
    assert greeting in json.dumps(p_out)
    assert len(server.chat_requests()) == 1
    assert w_reply["status"] == "ok" and w_out[0]["text"].strip() == str(workspace)


def test_a_lily_kernel_through_kernel_gateway(gateway, tmp_path, server, turns):
    base, gateway_home = gateway
    workspace = team_workspace(tmp_path / "team-notebooks")
    turns.append({"content": "Hello through the gateway."})
    kernel = http("POST", base + "/api/kernels", {"name": "lily", "env": {
        "KERNEL_WORKING_DIR": str(workspace), "KERNEL_LILY_SESSION": "remote-analysis",
        **scripted_model_env(server)}})
    try:
        async def session():
            ws = await websocket_connect(f"ws{base[4:]}/api/kernels/{kernel['id']}/channels")
            try:
                return await first_cells(Channels(ws))
            finally:
                ws.close()

        runs = run_in_own_loop(session)
    finally:
        http("DELETE", f"{base}/api/kernels/{kernel['id']}")

    check_first_cells(runs, "Hello through the gateway.", workspace, server)
    journal = journal_path(workspace, "remote-analysis")
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    assert records[0]["event"] == "session_created"
    assert records[0]["workspace"] == str(workspace)
    assert any(r.get("event") == "command" and r.get("command") == "/skills --all" for r in records)
    assert not (gateway_home / ".lily").exists()  # nothing in the gateway's own folder
