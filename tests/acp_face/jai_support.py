"""jupyter-ai 3.2's own Jupyter server (.venv-jai) with Lily's persona installed as a user
would and made the default: start it, talk in a chat over jupyterlab-chat's WebSocket API
(docs/front-ends.md#jupyter-ai). Shared by test_jupyter_ai.py and test_jupyter_ai_panel.py."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from acp_support import free_port, stop_server

from lily_kernel.acp import persona_install
from lily_kernel.testing import ScriptedServer

REPO = Path(__file__).resolve().parents[2]
JAI_BIN = REPO / ".venv-jai" / "bin"
LILY = Path(sys.executable).parent / "lily"
TOKEN = "lily-acp-" + uuid.uuid4().hex


class Jupyter:
    def __init__(self, base: Path, model: ScriptedServer,
                 env: dict[str, str] | None = None) -> None:
        self.root = base / "root"
        self.root.mkdir(exist_ok=True)  # a second server may serve the same root
        self.port = free_port()
        home = base / "home"
        skills = self.root / "skills"
        for d in (home, skills, base / "user_skills"):
            d.mkdir(parents=True, exist_ok=True)
        self.env = {**{k: v for k, v in os.environ.items()
                       if not k.startswith(("JUPYTER", "OPENAI", "LILY", "SKILLS", "VIRTUAL_ENV"))},
                    "HOME": str(home), "JUPYTER_CONFIG_DIR": str(base / "jcfg"),
                    "JUPYTER_DATA_DIR": str(base / "jdata"),
                    "JUPYTER_RUNTIME_DIR": str(base / "jrt"),
                    "SKILLS_WORKSPACE_DIR": str(skills), "SKILLS_USER_DIR": str(base / "user_skills"),
                    "SKILLS_COMPAT_ROOTS": "0", "OPENAI_BASE_URL": model.url,
                    "OPENAI_API_KEY": "sk-jai-test", "LILY_MAX_RETRIES": "0",
                    "LILY_TIMEOUT": "30", **(env or {})}
        self.log = open(base / "jupyter.log", "ab")  # closed in stop()
        self.proc = subprocess.Popen(
            [str(JAI_BIN / "jupyter"), "server", "--no-browser", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={self.port}", f"--IdentityProvider.token={TOKEN}",
             f"--ServerApp.root_dir={self.root}",
             f"--PersonaManager.default_persona_id={persona_install.PERSONA_ID}",
             # jupyter-ai's MCP server: a free port, not its 3001 (servers run side by side)
             f"--MCPExtensionApp.mcp_port={free_port()}",
             *(["--allow-root"] if os.geteuid() == 0 else [])],
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.root)
        self._wait()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def _wait(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "jupyter server exited"
            try:
                self.get("api/status")
                return
            except OSError:
                time.sleep(0.5)
        raise AssertionError("jupyter server did not start")

    def get(self, path: str) -> Any:
        req = urllib.request.Request(self.url(path), headers={"Authorization": f"token {TOKEN}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def page_config(self) -> dict[str, Any]:
        """JupyterLab's page config, as the panel reads its default persona from it."""
        req = urllib.request.Request(self.url("lab"), headers={"Authorization": f"token {TOKEN}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            page = r.read().decode()
        start = page.index('id="jupyter-config-data"')
        body = page[page.index(">", start) + 1:page.index("</script>", start)]
        config: dict[str, Any] = json.loads(body)
        return config

    def post(self, path: str, body: dict[str, Any]) -> Any:
        req = urllib.request.Request(self.url(path), data=json.dumps(body).encode(),
                                     method="POST",
                                     headers={"Authorization": f"token {TOKEN}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        stop_server(self.proc, self.log)


class Chat:
    """One chat over jupyterlab-chat's WebSocket API: what it sends, what the personas say."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.messages: dict[str, dict[str, Any]] = {}
        self.users: set[str] = set()
        self.id = ""  # the chat's id (the connection frame's)

    async def _read(self, deadline: float) -> None:
        frame = await asyncio.wait_for(self.ws.read_message(), deadline - time.monotonic())
        assert frame is not None, "the chat's WebSocket closed"
        data = json.loads(frame)
        if data.get("action") == "message":
            self.messages[data["message"]["id"]] = data["message"]
        if data.get("action") == "connection":
            self.id = data["id"]
        self.users |= set(data.get("users") or {})

    async def persona_joins(self, persona_id: str, timeout: float = 60) -> None:
        """Wait until the persona manager has put the persona in the chat (messages sent
        before it listens reach no one, as in the panel before it has loaded)."""
        deadline = time.monotonic() + timeout
        while persona_id not in self.users:
            await self._read(deadline)

    async def send(self, body: str, to: str) -> None:
        """Send ``body`` as the panel does: addressed to the persona its picker shows."""
        await self.ws.write_message(json.dumps({"type": "client", "action": "send",
                                                "id": uuid.uuid4().hex, "body": body,
                                                "metadata": {"to_persona": to}}))

    async def until(self, test: Any, timeout: float = 120) -> dict[str, Any]:
        """Read frames until a persona's message passes ``test``; that message."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for message in self.messages.values():
                if message.get("sender", "").startswith("jupyter-ai-personas::") and test(message):
                    return message
            await self._read(deadline)
        raise AssertionError(f"no such message; saw {list(self.messages.values())}")


def install() -> None:
    """As a user would: Lily's persona and Lily's kernelspec into jupyter-ai's environment."""
    out = subprocess.run([str(LILY), "acp", "install-persona", "--python",
                          str(JAI_BIN / "python")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert persona_install.PERSONA_ID in out.stdout
    out = subprocess.run([str(LILY), "kernel", "install", "--prefix", str(JAI_BIN.parent)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


async def open_chat(server: Jupyter) -> tuple[Chat, str]:
    """The chat lily.chat over the WebSocket API, once Lily (the default persona) is in it."""
    from tornado.websocket import websocket_connect
    ws = await websocket_connect(f"ws://127.0.0.1:{server.port}/api/chat/ws/lily.chat"
                                 f"?token={TOKEN}")
    chat = Chat(ws)
    lily = server.page_config()["jupyter_ai_default_persona"]  # what the picker shows
    await chat.persona_joins(lily)
    return chat, lily
