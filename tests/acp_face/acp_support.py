"""Drive `lily acp` as an ACP client would: the SDK's own client over stdio, against the
scripted model (docs/front-ends.md#acp)."""
from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

import agent_support
from acp import PROTOCOL_VERSION, spawn_agent_process
from acp.schema import (
    AgentMessageChunk,
    AllowedOutcome,
    AvailableCommandsUpdate,
    DeniedOutcome,
    RequestPermissionResponse,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
)

from lily_kernel.testing import ScriptedServer

LILY = Path(sys.executable).parent / "lily"
#: jupyter-ai 3.2's first-prompt paragraph (BaseAcpPersona.NOTEBOOK_EDITING_GUIDANCE).
SYSTEM_NOTE = ("System note: When creating or editing Jupyter notebooks (.ipynb), use the "
               "Jupyter notebook MCP tools (for example insert_cell, edit_cell, delete_cell, "
               "read_notebook). Do not write or edit .ipynb files directly with generic "
               "file-write/edit tools — direct writes are blocked to prevent notebook "
               "corruption.")


#: Recorded ``initialize`` params of the clients Lily is tested with (docs/front-ends.md#what-works-where):
#: jupyter-ai 3.2 (jupyter-ai-acp-client 0.3.3, ``default_acp_client._init_connection``),
#: Zed (fs and terminal offered, as its agent panel does) and a minimal client (nothing).
CLIENTS: dict[str, dict[str, Any]] = {
    "jupyter-ai": {"clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True},
                                          "terminal": True},
                   "clientInfo": {"name": "Jupyter AI", "title": "Jupyter AI ACP Client",
                                  "version": "0.1.0"}},
    "zed": {"clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True},
                                   "terminal": True, "_meta": {"terminal_output": True}},
            "clientInfo": {"name": "zed", "title": "Zed", "version": "0.212.4"}},
    "minimal": {},
}


class Recorder:
    """An ACP client that records every update and answers permission requests from a list
    (an option id, or None for a cancelled request)."""

    def __init__(self, answers: list[str | None] | None = None) -> None:
        self.updates: list[Any] = []
        self.asked: list[tuple[Any, list[Any]]] = []
        self.answers = list(answers or [])
        self.first_chunk = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        if isinstance(update, AgentMessageChunk):
            self.first_chunk.set()

    async def request_permission(self, options: list[Any], session_id: str, tool_call: Any,
                                 **kwargs: Any) -> RequestPermissionResponse:
        self.asked.append((tool_call, options))
        answer = self.answers.pop(0)
        if answer is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(option_id=answer,
                                                                outcome="selected"))

    def chunks(self) -> list[str]:
        return [u.content.text for u in self.updates if isinstance(u, AgentMessageChunk)]

    def text(self) -> str:
        return "".join(self.chunks())

    def commands(self) -> list[str]:
        lists = [u.available_commands for u in self.updates
                 if isinstance(u, AvailableCommandsUpdate)]
        return [c.name for c in lists[-1]] if lists else []

    def tool_updates(self, call_id: str) -> list[Any]:
        return [u for u in self.updates if isinstance(u, (ToolCallStart, ToolCallProgress))
                and u.tool_call_id == call_id]

    def clear(self) -> None:
        self.updates.clear()


def prompt(text: str) -> list[TextContentBlock]:
    return [TextContentBlock(type="text", text=text)]


class World(agent_support.World):
    """A workspace, private skill roots and HOME for one `lily acp` process."""

    def __init__(self, base: Path) -> None:
        super().__init__(base)
        self.stderr = base / "stderr.txt"
        self.extra_env: dict[str, str] = {}  # more variables for `lily acp` (a policy file)

    def env(self, server: ScriptedServer | None) -> dict[str, str]:
        env = {"SKILLS_WORKSPACE_DIR": str(self.skills), "SKILLS_USER_DIR": str(self.user),
               "HOME": str(self.base / "home"), "LILY_MAX_RETRIES": "0",
               "LILY_TIMEOUT": "20", "OPENAI_API_KEY": "sk-acp-test", "SKILLS_COMPAT_ROOTS": "0"}
        if server is not None:
            env["OPENAI_BASE_URL"] = server.url
        return {**env, **self.extra_env}

    @contextlib.asynccontextmanager
    async def lily(self, client: Recorder, server: ScriptedServer | None, as_client: str = "minimal",
                   ) -> AsyncIterator[tuple[Any, Any]]:
        """`lily acp` spawned and initialized as the client ``as_client`` of :data:`CLIENTS`
        does; (the connection, the process)."""
        from acp.schema import InitializeRequest
        init = InitializeRequest.model_validate({"protocolVersion": PROTOCOL_VERSION,
                                                 **CLIENTS[as_client]})
        with open(self.stderr, "ab") as err:
            async with spawn_agent_process(client, str(LILY), "acp", env=self.env(server),
                                           cwd=self.workspace,
                                           transport_kwargs={"stderr": err.fileno()},
                                           use_unstable_protocol=True,  # resume, close
                                           ) as (conn, proc):
                conn.init = await conn.initialize(
                    protocol_version=PROTOCOL_VERSION,
                    client_capabilities=init.client_capabilities, client_info=init.client_info)
                yield conn, proc


@contextlib.asynccontextmanager
async def acp_session(world: World, script: list[Any]
                      ) -> AsyncIterator[tuple[Recorder, Any, str, ScriptedServer, Any]]:
    """A new `lily acp` in ``world`` whose model plays ``script``, with one new session:
    (what the client receives, the connection, the session id, the model's server, the
    process)."""
    client = Recorder()
    with ScriptedServer(script) as server:
        async with world.lily(client, server) as (conn, proc):
            new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
            yield client, conn, new.session_id, server, proc


async def help_text(client: Recorder, conn: Any, session_id: str) -> str:
    """What the client has received once ``/help`` in the session has been answered."""
    await conn.prompt(session_id=session_id, prompt=prompt("/help"))
    await settle()
    return client.text()


async def prompt_once(world: World, text: str, server: ScriptedServer | None = None
                      ) -> tuple[Recorder, Any]:
    """``text`` prompted once in a new session of a new `lily acp` whose model is ``server``:
    what the client received, and the prompt's reply."""
    client = Recorder()
    async with world.lily(client, server) as (conn, _):
        new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
        return client, await conn.prompt(session_id=new.session_id, prompt=prompt(text))


async def commands_arrive(client: Recorder, timeout: float = 10) -> list[str]:
    """The commands `lily acp` advertises after session/new (they follow the response)."""
    for _ in range(int(timeout / 0.05)):
        if client.commands():
            return client.commands()
        await asyncio.sleep(0.05)
    raise AssertionError("no available_commands_update arrived")


async def settle() -> None:
    """Let the client's handlers of the updates already received run: the SDK hands each
    notification to a task of its own, so a prompt's response can overtake them."""
    await asyncio.sleep(0.3)


def run(coro: Any, timeout: float = 90) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def execute(port: int, token: str, kernel: str, code: str, **content: Any) -> dict[str, Any]:
    """Run ``code`` in a Jupyter server's kernel as a notebook runs a cell (over the
    kernel's channels); the execute_reply's content. ``content`` overrides the request's."""
    import websocket
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{port}/api/kernels/{kernel}/channels?session_id=test",
        header=[f"Authorization: token {token}"], timeout=60)
    msg_id = uuid.uuid4().hex
    try:
        ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "test",
                       "session": "test", "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": False,
                        **content}}))
        while True:
            reply = json.loads(ws.recv())
            if reply.get("channel") == "shell" and reply["parent_header"].get("msg_id") == msg_id:
                return dict(reply["content"])
    finally:
        ws.close()


def free_port() -> int:
    """A free TCP port of 127.0.0.1, for a server started next."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_server(proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    """Stop a server's process (terminated; killed if it is not gone in 20 s) and close the
    log it wrote to."""
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()
