"""session/list, session/resume and session/close over ACP with the SDK's client: the same
journal rule as session/load; a resumed session restores the conversation, never a waiting
card nor an --always grant (docs/front-ends.md#sessions)."""
from __future__ import annotations

import json

import pytest
from acp import RequestError
from acp.schema import AgentMessageChunk, UserMessageChunk
from acp_support import Recorder, World, prompt, run, settle

from lily_kernel.session.journal import journal_path
from lily_kernel.testing import ScriptedServer


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


def _write(call: str, content: str) -> dict:
    return {"tool_calls": [{"id": call, "name": "write",
                            "arguments": {"path": "notes.txt", "content": content}}]}


def test_list_names_each_journaled_session_with_its_first_request_and_last_activity(world):
    script = [{"content": "One."}, {"content": "Two."}]

    async def go():
        with ScriptedServer(script) as server:
            async with world.lily(Recorder(), server) as (conn, _):
                caps = conn.init.agent_capabilities.session_capabilities
                a = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                await conn.prompt(session_id=a.session_id, prompt=prompt("first   request\nA"))
                b = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                await conn.prompt(session_id=b.session_id, prompt=prompt("/help"))
            async with world.lily(Recorder(), None) as (conn, _):
                listed = await conn.list_sessions(cwd=str(world.workspace))
                elsewhere = await conn.list_sessions(cwd=str(world.base))
        return caps, a.session_id, b.session_id, listed, elsewhere

    caps, a, b, listed, elsewhere = run(go())
    assert caps.list is not None and caps.resume is not None and caps.close is not None
    by_id = {s.session_id: s for s in listed.sessions}
    assert set(by_id) == {a, b}
    assert by_id[a].title == "first request A" and by_id[b].title == "/help"
    assert by_id[a].cwd == str(world.workspace)
    assert by_id[a].updated_at and by_id[a].updated_at.endswith("Z")
    assert elsewhere.sessions == []


def test_resume_takes_the_conversation_up_without_replay_and_close_journals_the_end(world):
    script = [{"content": "Noted: 42."},
              {"expect": {"contains": "which number"}, "content": "It was 42."}]

    async def go():
        with ScriptedServer(script) as server:
            async with world.lily(Recorder(), server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                await conn.prompt(session_id=new.session_id, prompt=prompt("remember 42"))
            client = Recorder()
            async with world.lily(client, server, "zed") as (conn, _):
                resumed = await conn.resume_session(session_id=new.session_id,
                                                    cwd=str(world.workspace), mcp_servers=[])
                await settle()
                replayed = [u for u in client.updates
                            if isinstance(u, (UserMessageChunk, AgentMessageChunk))]
                await conn.prompt(session_id=new.session_id,
                                  prompt=prompt("which number did I say?"))
                await conn.close_session(session_id=new.session_id)
                with pytest.raises(RequestError) as gone:
                    await conn.prompt(session_id=new.session_id, prompt=prompt("still?"))
                with pytest.raises(RequestError) as forged:
                    await conn.resume_session(session_id="x/../y", cwd=str(world.workspace),
                                              mcp_servers=[])
            sent = server.chat_requests()[1]["messages"]
        return new.session_id, resumed, replayed, client.text(), gone.value, forged.value, sent

    session_id, resumed, replayed, text, gone, forged, sent = run(go(), 180)
    assert resumed.modes.current_mode_id == "ask" and resumed.config_options
    assert replayed == []
    assert "of this chat's conversation" in text and "It was 42." in text
    assert [m["content"] for m in sent if m["role"] != "system"][:2] == ["remember 42",
                                                                          "Noted: 42."]
    assert "no ACP session" in str(gone.data)
    assert "no journal of ACP session" in str(forged.data)
    journal = journal_path(world.workspace, f"acp-{session_id}")
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    assert records[-1]["event"] == "session_ended" and records[-1]["reason"] == "session/close"


def test_an_always_grant_is_not_restored_by_resume_nor_load(world):
    """An attack on the rule: "always" given in one process must not let a write run
    unasked in a session taken up by another."""
    (world.workspace / "notes.txt").write_text("old\n")
    script = [_write("w1", "one\n"), {"content": "Wrote."},  # a denial ends the request
              _write("w2", "two\n"), _write("w3", "three\n")]

    async def go():
        with ScriptedServer(script) as server:
            first = Recorder(["always"])
            async with world.lily(first, server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                await conn.prompt(session_id=new.session_id, prompt=prompt("write one"))
            asked = []
            for how in ("resume", "load"):
                client = Recorder(["deny"])
                async with world.lily(client, server) as (conn, _):
                    method = conn.resume_session if how == "resume" else conn.load_session
                    await method(session_id=new.session_id, cwd=str(world.workspace),
                                 mcp_servers=[])
                    await conn.prompt(session_id=new.session_id, prompt=prompt("write again"))
                asked.append(len(client.asked))
        return asked

    assert run(go()) == [1, 1]
    assert (world.workspace / "notes.txt").read_text() == "one\n"
