"""The file tools through the client's fs/read_text_file and fs/write_text_file where it
offers them (Zed's capability set): the model sees the editor's unsaved buffer, a write goes
to the editor after its diff was shown; the boundary's rules still hold first
(docs/front-ends.md#files-through-the-client)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from acp.schema import FileEditToolCallContent, ReadTextFileResponse, WriteTextFileResponse
from acp_support import Recorder, World, prompt, run

from lily_kernel.testing import ScriptedServer


class Editor(Recorder):
    """A client with buffers: an open file's text may differ from the disk's."""

    def __init__(self, answers: list[str | None] | None = None) -> None:
        super().__init__(answers)
        self.buffers: dict[str, str] = {}
        self.reads: list[str] = []
        self.writes: list[tuple[str, str]] = []

    async def read_text_file(self, path: str, session_id: str, **kwargs: Any
                             ) -> ReadTextFileResponse:
        self.reads.append(path)
        text = self.buffers.get(path)
        return ReadTextFileResponse(content=text if text is not None else
                                    Path(path).read_text())

    async def write_text_file(self, content: str, path: str, session_id: str,
                              **kwargs: Any) -> WriteTextFileResponse:
        self.writes.append((path, content))
        self.buffers[path] = content
        return WriteTextFileResponse()


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


def _read(path: str) -> list[dict]:
    return [{"tool_calls": [{"id": "r1", "name": "read", "arguments": {"path": path}}]},
            {"content": "Read."}]


def _tool_result(server: ScriptedServer, call_id: str) -> str:
    messages = server.chat_requests()[-1]["messages"]
    return next(m["content"] for m in messages if m.get("tool_call_id") == call_id)


def test_zed_the_model_reads_the_editors_unsaved_buffer(world):
    notes = world.workspace / "notes.txt"
    notes.write_text("saved text\n")
    editor = Editor()
    editor.buffers[str(notes)] = "unsaved text\n"

    async def go():
        with ScriptedServer(_read("notes.txt")) as server:
            async with world.lily(editor, server, "zed") as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                await conn.prompt(session_id=new.session_id, prompt=prompt("read notes"))
            return _tool_result(server, "r1")

    result = run(go())
    assert "unsaved text" in result and "saved text" not in result.replace("unsaved", "")
    assert editor.reads == [str(notes)]


def test_zed_a_write_shows_the_buffers_diff_then_goes_to_the_editor(world):
    notes = world.workspace / "notes.txt"
    notes.write_text("saved text\n")
    editor = Editor(["once"])
    editor.buffers[str(notes)] = "unsaved text\n"
    script = [{"tool_calls": [{"id": "w1", "name": "write",
                               "arguments": {"path": "notes.txt", "content": "new text\n"}}]},
              {"content": "Wrote."}]

    async def go():
        with ScriptedServer(script) as server:
            async with world.lily(editor, server, "zed") as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                await conn.prompt(session_id=new.session_id, prompt=prompt("write notes"))

    run(go())
    call, _ = editor.asked[0]
    diff = next(c for c in call.content if isinstance(c, FileEditToolCallContent))
    assert (diff.old_text, diff.new_text) == ("unsaved text\n", "new text\n")
    assert editor.writes == [(str(notes), "new text\n")]
    assert notes.read_text() == "saved text\n"  # the editor saves, not Lily


def test_the_boundary_refuses_before_the_editor_is_asked(world, tmp_path):
    """An attack: a symlink out of the workspace and Lily's own journal. Read through an
    editor, both are refused by the boundary's rules; the editor is never asked."""
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    os.symlink(outside, world.workspace / "link.txt")
    (world.workspace / "lily.toml").write_text("")
    editor = Editor()
    script = [{"tool_calls": [{"id": "r1", "name": "read", "arguments": {"path": "link.txt"}},
                              {"id": "r2", "name": "read",
                               "arguments": {"path": ".lily/journal/x.jsonl"}}]},
              {"content": "Refused."}]

    async def go():
        with ScriptedServer(script) as server:
            async with world.lily(editor, server, "zed") as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                await conn.prompt(session_id=new.session_id, prompt=prompt("read"))
            return _tool_result(server, "r1"), _tool_result(server, "r2")

    first, second = run(go())
    assert first.startswith("Error") and second.startswith("Error")
    assert "secret" not in first + second
    assert editor.reads == []


@pytest.mark.parametrize("client", ["jupyter-ai", "minimal"])
def test_jupyter_ai_and_a_minimal_client_use_lilys_own_reads(world, client):
    notes = world.workspace / "notes.txt"
    notes.write_text("saved text\n")
    editor = Editor()
    editor.buffers[str(notes)] = "unsaved text\n"

    async def go():
        with ScriptedServer(_read("notes.txt")) as server:
            async with world.lily(editor, server, client) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                await conn.prompt(session_id=new.session_id, prompt=prompt("read notes"))
            return _tool_result(server, "r1")

    assert "saved text" in run(go()) and editor.reads == []
