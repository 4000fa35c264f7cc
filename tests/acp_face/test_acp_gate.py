"""An ACP client's permission reply passes the gate (tools/gate.py, Route.ACP): what the
permission request showed is decided again when the reply comes (docs/permissions.md#the-gate)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from acp_support import Recorder, World, prompt, run, settle

from lily_kernel.testing import ScriptedServer


class ChangesTheFileFirst(Recorder):
    """Allows once, but the file changes while the permission request waits."""

    def __init__(self, path: Path) -> None:
        super().__init__(["once"])
        self.path = path

    async def request_permission(self, options: list[Any], session_id: str, tool_call: Any,
                                 **kwargs: Any) -> Any:
        self.path.write_text("someone else's work\n")
        return await super().request_permission(options, session_id, tool_call, **kwargs)


def test_an_allowed_write_over_a_file_changed_since_the_request_does_not_run(tmp_path):
    """ATTACK: the client allows the write the permission request showed, but the file
    changed meanwhile. The write does not run, the tool call is reported failed (not
    completed), and the reply says it did not run and why."""
    world = World(tmp_path)
    notes = world.workspace / "notes.txt"
    notes.write_text("old line\n")

    async def go():
        client = ChangesTheFileFirst(notes)
        script = [{"tool_calls": [{"id": "call_w", "name": "write",
                                   "arguments": {"path": "notes.txt", "content": "new\n"}}]},
                  {"content": "It changed; I left it."}]
        with ScriptedServer(script) as server:
            async with world.lily(client, server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                reply = await conn.prompt(session_id=new.session_id,
                                          prompt=prompt("update the notes"))
                await settle()
            told = server.chat_requests()[-1]["messages"]
        return client, reply, told

    client, reply, told = run(go())
    assert reply.stop_reason == "end_turn"
    assert notes.read_text() == "someone else's work\n"
    assert client.tool_updates("call_w")[-1].status == "failed"
    result = next(m for m in told if m.get("tool_call_id") == "call_w")["content"]
    assert result.startswith("Error: not run: the file 'notes.txt' changed since the card")
    assert "ran (confirmed)" not in client.text()
