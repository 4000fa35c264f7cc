"""Attacks on `lily acp` (issue 41 §5): a masked argument breaks the turn (JSON-RPC -32603),
and a Jupyter runtime file another user could have written is trusted.

A real `lily acp` process driven by the ACP SDK's own client against the scripted model
(docs/front-ends.md#acp, docs/limits-and-secrets.md#secrets).
"""
from __future__ import annotations

import json
import os

import pytest
from acp_support import Recorder, World, prompt, run

from lily_kernel.acp import notebook_server
from lily_kernel.testing import ScriptedServer

SECRET = "sk-live-abcdef123456"


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


@pytest.mark.parametrize("content", [
    f"%env API_KEY={SECRET}",                              # the mask ran to the line's end
    f"import os\nos.environ['API_KEY'] = '{SECRET}'; print('next')",
    f'os.environ["API_TOKEN"] = "{SECRET}"',
])
def test_a_masked_argument_never_breaks_the_turn(world, content):
    async def go():
        client = Recorder(["once"])
        turns = [{"tool_calls": [{"id": "call_w", "name": "write",
                                  "arguments": {"path": "setup.ipy", "content": content}}]},
                 {"content": "Done writing."}]
        with ScriptedServer(turns) as server:
            async with world.lily(client, server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                reply = await conn.prompt(session_id=new.session_id, prompt=prompt("set it"))
        return client, reply

    client, reply = run(go())
    assert reply.stop_reason == "end_turn" and "Done writing." in client.text()
    shown = [u.model_dump_json() for u in client.updates]
    shown += [call.model_dump_json() for call, _ in client.asked]
    assert client.asked and not any(SECRET in s for s in shown)
    assert (world.workspace / "setup.ipy").read_text() == content


def runtime_file(tmp_path, monkeypatch, mode: int) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    path = runtime / f"jpserver-{os.getppid()}.json"
    path.write_text(json.dumps({"url": "http://127.0.0.1:1/", "token": "t",
                                "root_dir": str(tmp_path)}))
    path.chmod(mode)


def test_a_runtime_file_others_may_write_is_not_used(tmp_path, monkeypatch):
    runtime_file(tmp_path, monkeypatch, 0o666)
    assert notebook_server.find_server() is None


def test_a_runtime_file_of_this_user_alone_is_used(tmp_path, monkeypatch):
    runtime_file(tmp_path, monkeypatch, 0o600)
    server = notebook_server.find_server()
    assert server is not None and server.token == "t"


def test_a_runtime_file_owned_by_another_user_is_not_used(tmp_path, monkeypatch):
    if os.getuid() != 0:
        pytest.skip("making a file another user's needs root")
    runtime_file(tmp_path, monkeypatch, 0o600)
    os.chown(tmp_path / "runtime" / f"jpserver-{os.getppid()}.json", 4242, 4242)
    assert notebook_server.find_server() is None


def test_a_runtime_folder_others_may_write_is_not_used(tmp_path, monkeypatch):
    runtime_file(tmp_path, monkeypatch, 0o600)
    (tmp_path / "runtime").chmod(0o777)
    assert notebook_server.find_server() is None


def test_invisible_code_points_in_a_write_are_shown_in_the_permission_request(world):
    hidden = "".join(chr(0xE0100 + i) for i in range(5))

    async def go():
        client = Recorder(["deny"])
        turns = [{"tool_calls": [{"id": "call_w", "name": "write", "arguments": {
            "path": "notes.py", "content": f"x = 1{hidden}\nimport os\n"}}]}, "Not written."]
        with ScriptedServer(turns) as server:
            async with world.lily(client, server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                await conn.prompt(session_id=new.session_id, prompt=prompt("write notes"))
        return client

    client = run(go())
    (call, _options) = client.asked[0]
    texts = [c.content.text for c in call.content if getattr(c, "type", "") == "content"]
    assert any("Warning" in t and "⟨U+E0100⟩" in t for t in texts), texts
