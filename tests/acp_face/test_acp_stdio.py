"""`lily acp` over stdio, driven by the ACP SDK's own client against the scripted model; no
Jupyter anywhere (docs/front-ends.md#acp)."""
from __future__ import annotations

import asyncio

import pytest
from acp.schema import FileEditToolCallContent, McpServerStdio, ToolCallProgress
from acp_support import (
    SYSTEM_NOTE,
    Recorder,
    World,
    acp_session,
    commands_arrive,
    prompt,
    prompt_once,
    run,
    settle,
)

from lily_kernel.testing import ScriptedServer


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


def test_prose_streams_chunks_to_the_same_loop_and_ends_with_the_footer(world):
    script = [{"expect": {"contains": "what is up"},
               "content": "First line.\nSecond line.\nThird line, the last.", "chunks": 9}]
    with ScriptedServer(script) as server:
        client, reply = run(prompt_once(world, f"{SYSTEM_NOTE}\n\nwhat is up", server))
        sent = server.chat_requests()[0]["messages"]
    assert reply.stop_reason == "end_turn"
    assert len(client.chunks()) >= 3, client.chunks()  # streamed, line by line
    text = client.text()
    assert "First line.\nSecond line.\nThird line, the last." in text
    assert "no skill · model: " in text  # the answer's footer
    assert sent[-1]["content"] == "what is up"  # the client's preamble is not the request
    assert "System note" not in str(sent)


def test_commands_are_advertised_and_run_deterministically_never_through_the_model(world):
    folder = world.skills / "plan_compiler"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nsummary: Plans a goal.\ncommand: plan\n"
                                     "argument-hint: <goal>\n---\nWrite a plan.\n")

    async def go():
        client = Recorder()
        with ScriptedServer([]) as server:
            async with world.lily(client, server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                names = await commands_arrive(client)
                client.clear()
                reply = await conn.prompt(session_id=new.session_id,
                                          prompt=prompt(f"{SYSTEM_NOTE}\n\n/skills"))
                await settle()
                skills_text = client.text()
                client.clear()
                await conn.prompt(session_id=new.session_id, prompt=prompt("@Lily /help"))
                await settle()
                help_text = client.text()
            asked = server.chat_requests()
        return names, reply, skills_text, help_text, asked

    names, reply, skills_text, help_text, asked = run(go())
    assert {"skills", "help", "confirm", "plan"} <= set(names)
    assert reply.stop_reason == "end_turn"
    assert "plan_compiler" in skills_text and "snapshot version 1" in skills_text
    assert "/skills" in help_text and "not offered here" in help_text
    assert asked == []  # no command reached the model


def _write_turns(path: str, content: str) -> list[dict]:
    return [{"tool_calls": [{"id": "call_w", "name": "write",
                             "arguments": {"path": path, "content": content}}]},
            {"content": "Done writing."}]


@pytest.mark.parametrize("choice", ["once", "always"])
def test_a_write_asks_permission_with_its_diff_and_runs_when_allowed(world, choice):
    (world.workspace / "notes.txt").write_text("old line\n")

    async def go():
        client = Recorder([choice])
        with ScriptedServer(_write_turns("notes.txt", "new line\n")) as server:
            async with world.lily(client, server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                reply = await conn.prompt(session_id=new.session_id,
                                          prompt=prompt("update the notes"))
            sent = server.chat_requests()
        return client, reply, sent

    client, reply, sent = run(go())
    assert reply.stop_reason == "end_turn"
    (call, options) = client.asked[0]
    assert [o.option_id for o in options] == ["once", "always", "deny"]
    diff = next(c for c in call.content if isinstance(c, FileEditToolCallContent))
    assert (diff.old_text, diff.new_text) == ("old line\n", "new line\n")
    assert diff.path == str(world.workspace / "notes.txt")
    assert (world.workspace / "notes.txt").read_text() == "new line\n"
    statuses = [u.status for u in client.tool_updates("call_w")]
    assert statuses[0] == "pending" and statuses[-1] == "completed"
    assert "Done writing." in client.text()
    assert "wrote 9 characters" in str(sent[-1]["messages"][-1])


def test_a_denied_write_does_not_run_and_the_agent_is_told(world):
    (world.workspace / "notes.txt").write_text("old line\n")

    async def go():
        client = Recorder(["deny"])
        script = _write_turns("notes.txt", "new line\n")[:1] + [{"content": "Understood."}]
        with ScriptedServer(script) as server:
            async with world.lily(client, server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                first = await conn.prompt(session_id=new.session_id,
                                          prompt=prompt("update the notes"))
                await settle()
                denied = client.text()
                second = await conn.prompt(session_id=new.session_id, prompt=prompt("ok?"))
            left = server.remaining()
            told = server.chat_requests()[1]["messages"]
        return client, first, denied, second, left, told

    client, first, denied, second, left, told = run(go())
    assert first.stop_reason == second.stop_reason == "end_turn"
    assert (world.workspace / "notes.txt").read_text() == "old line\n"
    assert "did not run" in denied
    assert client.tool_updates("call_w")[-1].status == "failed"
    assert left == 0 and "Understood." in client.text()
    answer = [m for m in told if m["role"] == "tool" and m["tool_call_id"] == "call_w"]
    assert "declined by the user" in answer[0]["content"]


def test_run_python_style_refusal_of_always_is_kept_for_a_typed_action(world):
    """Only what /confirm --always allows is offered as "always": the card's own rule."""
    from lily_kernel.acp.acp_updates import permission_options
    from lily_kernel.agent.pending import HeldCall, Paused
    from lily_kernel.commands.results import ActionCard
    paused = Paused([], "c1", None, [], 1, None)
    held = HeldCall("ab" * 16, "", "run_python", {"code": "1"}, paused,
                    always_refusal="run_python is confirmed each time")
    assert [o.option_id for o in permission_options(ActionCard(held))] == ["once", "deny"]


def test_cancel_interrupts_a_streaming_answer_and_the_session_goes_on(world):
    slow = {"content": "word " * 200, "chunks": 200, "chunk_delay": 0.05}

    async def go():
        client = Recorder()
        with ScriptedServer([slow, {"content": "Still here."}]) as server:
            async with world.lily(client, server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                turn = asyncio.create_task(conn.prompt(session_id=new.session_id,
                                                       prompt=prompt("talk a lot")))
                while "word" not in client.text():
                    await asyncio.sleep(0.02)
                started = asyncio.get_running_loop().time()
                await conn.cancel(session_id=new.session_id)
                reply = await turn
                took = asyncio.get_running_loop().time() - started
                after = await conn.prompt(session_id=new.session_id, prompt=prompt("there?"))
        return client, reply, took, after

    client, reply, took, after = run(go())
    assert reply.stop_reason == "cancelled"
    assert took < 5  # the stream had 10 s left
    assert after.stop_reason == "end_turn" and "Still here." in client.text()


def test_cancel_while_a_permission_waits_runs_nothing(world):
    (world.workspace / "notes.txt").write_text("old line\n")

    async def go():
        client = Recorder([None])  # the client answers "cancelled", as it does on stop
        with ScriptedServer(_write_turns("notes.txt", "new line\n")[:1]) as server:
            async with world.lily(client, server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                reply = await conn.prompt(session_id=new.session_id,
                                          prompt=prompt("update the notes"))
        return reply

    assert run(go()).stop_reason == "cancelled"
    assert (world.workspace / "notes.txt").read_text() == "old line\n"


def test_session_load_resumes_the_conversation_from_the_journal_in_a_new_process(world):
    """A client reopens a chat after the agent restarted (jupyter-ai after a server restart):
    session/load takes the conversation up from the journal, replays it, and the model sees
    it again (docs/session.md#resume)."""
    from acp.schema import UserMessageChunk
    script = [{"content": "Noted: 42."},
              {"expect": {"contains": "which number"}, "content": "It was 42."}]

    async def go():
        with ScriptedServer(script) as server:
            first = Recorder()
            async with world.lily(first, server) as (conn, _):
                assert conn.init.agent_capabilities.load_session
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                await conn.prompt(session_id=new.session_id,
                                  prompt=prompt("remember the number 42"))
            client = Recorder()
            async with world.lily(client, server) as (conn, _):
                await conn.load_session(cwd=str(world.workspace), session_id=new.session_id,
                                        mcp_servers=[])
                await settle()
                replayed = list(client.updates)
                client.clear()
                reply = await conn.prompt(session_id=new.session_id,
                                          prompt=prompt("which number did I say?"))
            sent = server.chat_requests()[1]["messages"]
        return replayed, client, reply, sent

    replayed, client, reply, sent = run(go())
    users = [u.content.text for u in replayed if isinstance(u, UserMessageChunk)]
    agents = [u.content.text for u in replayed if type(u).__name__ == "AgentMessageChunk"]
    assert users == ["remember the number 42"] and agents == ["Noted: 42."]
    assert [m["content"] for m in sent if m["role"] != "system"][:2] == [
        "remember the number 42", "Noted: 42."]
    assert reply.stop_reason == "end_turn"
    assert "Resumed 1 request" in client.text() and "It was 42." in client.text()


def test_session_load_of_a_session_without_a_journal_is_refused_in_one_line(world):
    from acp import RequestError

    async def go():
        async with world.lily(Recorder(), None) as (conn, _):
            with pytest.raises(RequestError) as caught:
                await conn.load_session(cwd=str(world.workspace), session_id="../../nope",
                                        mcp_servers=[])
            return caught.value

    error = run(go())
    assert "no journal of ACP session '../../nope'" in str(error.data)
    assert not list(world.base.glob("**/nope*"))


def test_mcp_servers_from_session_new_join_as_the_users_own(world):
    import shutil
    exe = shutil.which("mcp-server-time") or str(
        __import__("pathlib").Path(__import__("sys").executable).parent / "mcp-server-time")

    async def go():
        client = Recorder()
        async with world.lily(client, None) as (conn, _):
            server = McpServerStdio(name="clock", command=exe, args=[], env=[])
            new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[server])
            for _ in range(100):  # the server starts in the background
                client.clear()
                await conn.prompt(session_id=new.session_id, prompt=prompt("/mcp"))
                await settle()
                if "get_current_time" in client.text():
                    break
                await asyncio.sleep(0.1)
            return client.text()

    text = run(go())
    assert "clock" in text and "get_current_time" in text
    assert "not trusted" not in text  # the user's layer: no /trust needed


def test_nothing_but_protocol_reaches_stdout_and_errors_are_one_line(world):
    client, reply = run(prompt_once(world, "/nosuch"))
    assert reply.stop_reason == "end_turn"
    assert client.text().startswith("Error: ") and "\n" not in client.text()
    assert not any(isinstance(u, ToolCallProgress) for u in client.updates)


def test_a_secret_in_a_tool_call_never_reaches_the_client(world):
    """An attack: the model puts the API key into a write; the tool call, its diff and the
    permission request show it masked (docs/limits-and-secrets.md#secrets)."""
    key = world.env(None)["OPENAI_API_KEY"]
    (world.workspace / "notes.txt").write_text("old line\n")

    async def go():
        client = Recorder(["deny"])
        script = _write_turns("notes.txt", f"key = {key}\n")[:1]
        with ScriptedServer(script) as server:
            async with world.lily(client, server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                await conn.prompt(session_id=new.session_id, prompt=prompt("save my key"))
        return client

    client = run(go())
    shown = [u.model_dump_json() for u in client.updates]
    shown += [call.model_dump_json() for call, _ in client.asked]
    assert client.asked and any("key = " in s for s in shown)
    assert not any(key in s for s in shown)


def test_each_session_is_journaled_and_a_sigterm_journals_its_end(world):
    """jupyter-ai stops its agent with SIGINT and SIGTERM to the process group; the journal
    (`lily logs`) keeps each session's requests and says how it ended."""
    import json
    import signal

    async def go():
        async with acp_session(world, [{"content": "Noted."}]) as (_, conn, sid, _, proc):
            await conn.prompt(session_id=sid, prompt=prompt("remember this"))
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), 30)
        return sid, code

    session_id, code = run(go())
    assert code == 0
    from lily_kernel.session.journal import journal_path
    journal = journal_path(world.workspace, f"acp-{session_id}")
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    assert any(r["event"] == "prose" and r["text"] == "remember this" for r in records)
    assert records[-1]["event"] == "session_ended" and records[-1]["reason"] == "SIGTERM"


def test_a_cancel_drops_a_prompt_still_waiting_behind_another_sessions_turn(world):
    slow = {"content": "word " * 60, "chunks": 60, "chunk_delay": 0.05}

    async def go():
        client = Recorder()
        with ScriptedServer([slow]) as server:
            async with world.lily(client, server) as (conn, _):
                a = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                b = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                first = asyncio.create_task(conn.prompt(session_id=a.session_id,
                                                        prompt=prompt("talk")))
                while "word" not in client.text():
                    await asyncio.sleep(0.02)
                second = asyncio.create_task(conn.prompt(session_id=b.session_id,
                                                         prompt=prompt("and you")))
                await asyncio.sleep(0.2)
                await conn.cancel(session_id=b.session_id)
                replies = await asyncio.gather(first, second)
            asked = len(server.chat_requests())
        return replies, asked

    (first, second), asked = run(go())
    assert first.stop_reason == "end_turn" and second.stop_reason == "cancelled"
    assert asked == 1  # the cancelled prompt never reached the model


def test_a_tool_call_shows_before_it_runs_then_its_result_and_each_step_is_a_paragraph(world):
    (world.workspace / "data.csv").write_text("a,b\n")
    script = [{"content": "Let me look.", "tool_calls": [{"id": "call_l", "name": "list",
                                                          "arguments": {"path": "."}}]},
              {"expect": {"contains": "data.csv"}, "content": "There is data.csv."}]
    with ScriptedServer(script) as server:
        client, reply = run(prompt_once(world, "what's here?", server))
    assert reply.stop_reason == "end_turn"
    start, done = client.tool_updates("call_l")
    assert (start.status, start.kind, start.title, start.raw_input) == (
        "in_progress", "search", "list .", {"path": "."})
    assert done.status == "completed" and "data.csv" in done.content[0].content.text
    assert client.updates.index(start) < client.updates.index(done)
    assert client.text().startswith("Let me look.\n\nThere is data.csv.\n\n*")
