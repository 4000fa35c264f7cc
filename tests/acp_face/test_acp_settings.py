"""Modes, config options and usage over ACP, driven by the SDK's client against the scripted
model: the mode selector and model picker change what /mode and /model change, with the same
refusals; a /mode typed in the chat moves the client's selector; each model step reports its
tokens (docs/front-ends.md#modes-settings-and-usage)."""
from __future__ import annotations

import json

import pytest
from acp import RequestError
from acp.schema import ConfigOptionUpdate, CurrentModeUpdate, UsageUpdate
from acp_support import Recorder, World, prompt, run, settle

from lily_kernel.session.journal import journal_path
from lily_kernel.testing import ScriptedServer


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


def _journal(world: World, session_id: str) -> list[dict]:
    path = journal_path(world.workspace, f"acp-{session_id}")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_modes_are_offered_set_as_mode_would_and_a_typed_mode_moves_the_selector(world):
    async def go():
        client = Recorder()
        with ScriptedServer([]) as server:
            async with world.lily(client, server, "jupyter-ai") as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                await conn.set_session_mode(session_id=new.session_id, mode_id="plan")
                await conn.prompt(session_id=new.session_id, prompt=prompt("/mode"))
                await settle()
                shown = client.text()
                client.clear()
                await conn.prompt(session_id=new.session_id, prompt=prompt("/mode edits"))
                await settle()
                moved = [u for u in client.updates if isinstance(u, CurrentModeUpdate)]
                client.clear()
                await conn.prompt(session_id=new.session_id, prompt=prompt("/mode"))
                await settle()
                unmoved = [u for u in client.updates if isinstance(u, CurrentModeUpdate)]
        return new, shown, moved, unmoved

    new, shown, moved, unmoved = run(go())
    modes = new.modes
    assert modes.current_mode_id == "ask"
    assert [m.id for m in modes.available_modes] == ["plan", "ask", "edits", "auto"]
    assert all(m.name and m.description for m in modes.available_modes)
    assert "plan" in shown and "read-only" in shown
    assert [u.current_mode_id for u in moved] == ["edits"] and unmoved == []
    records = _journal(world, new.session_id)
    assert [r["mode"] for r in records if r["event"] == "mode_changed"] == ["plan", "edits"]


@pytest.mark.parametrize("as_client", ["jupyter-ai", "zed"])
def test_a_typed_mode_after_jupyter_ais_control_chose_one_says_the_control_sets_it_back(
        world, as_client):
    """jupyter-ai 3.2's panel keeps the user's choice and sends it again with each message
    (measured in its panel: test_jupyter_ai_panel.py): a typed /mode or /model that moves what
    its control set says so, once; other clients' selectors follow current_mode_update."""
    async def go():
        client = Recorder()
        with ScriptedServer([]) as server:
            async with world.lily(client, server, as_client) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                sid = new.session_id

                async def say(text: str) -> str:
                    client.clear()
                    await conn.prompt(session_id=sid, prompt=prompt(text))
                    await settle()
                    return client.text()

                said = [await say("/mode edits")]  # no control has chosen yet
                await conn.set_session_mode(session_id=sid, mode_id="ask")  # the control
                said.append(await say("/mode"))  # changes nothing
                await conn.set_config_option(session_id=sid, config_id="temperature", value="0.5")
                said.append(await say("/mode plan"))
                said.append(await say("/model temperature=1"))
        return said

    said = run(go())
    note = "control keeps the choice made there"
    assert note not in said[0] and note not in said[1]
    if as_client == "zed":
        assert not any(note in s for s in said)
        return
    assert "**Mode** control keeps the choice made there" in said[2]
    assert "choose **Plan** there too" in said[2]
    assert "**Temperature** control" in said[3] and "choose **1** there too" in said[3]
    assert "**Mode**" not in said[3]


def test_the_administrators_cap_refuses_a_mode_above_it_with_the_reason_and_it_stays(world):
    policy = world.base / "policy.toml"
    policy.write_text('[permissions]\nmax_mode = "ask"\n')
    world.extra_env["LILY_POLICY_FILE"] = str(policy)

    async def go():
        client = Recorder()
        async with world.lily(client, None) as (conn, _):
            new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
            with pytest.raises(RequestError) as caught:
                await conn.set_session_mode(session_id=new.session_id, mode_id="auto")
            await conn.prompt(session_id=new.session_id, prompt=prompt("/mode"))
            await settle()
            with pytest.raises(RequestError) as unknown:
                await conn.set_session_mode(session_id=new.session_id, mode_id="yolo")
            return caught.value, client.text(), unknown.value

    refused, shown, unknown = run(go())
    assert "administrator" in str(refused.data) and "ask" in str(refused.data)
    assert "ask" in shown.split("\n")[0]
    assert "no mode 'yolo'" in str(unknown.data)


def test_config_options_list_the_endpoints_models_and_a_change_is_a_journaled_model_command(
        world):
    world.extra_env["LILY_MODEL"] = "local-a"

    async def go():
        client = Recorder()
        with ScriptedServer([{"content": "Hi."}], model="local-a",
                            models=["local-b"]) as server:
            async with world.lily(client, server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                picked = await conn.set_config_option(session_id=new.session_id,
                                                      config_id="model", value="local-b")
                warm = await conn.set_config_option(session_id=new.session_id,
                                                    config_id="temperature", value="0.7")
                with pytest.raises(RequestError) as bad:
                    await conn.set_config_option(session_id=new.session_id,
                                                 config_id="model", value="nope")
                client.clear()
                await conn.prompt(session_id=new.session_id,
                                  prompt=prompt("/model temperature=0.2"))
                await settle()
                typed = [u for u in client.updates if isinstance(u, ConfigOptionUpdate)]
                await conn.prompt(session_id=new.session_id, prompt=prompt("hello"))
            sent = server.chat_requests()[-1]
        return new, picked, warm, bad.value, typed, sent

    new, picked, warm, bad, typed, sent = run(go())
    options = {o.id: o for o in new.config_options}
    assert options["model"].category == "model"
    assert [o.value for o in options["model"].options] == ["local-a", "local-b"]
    assert options["model"].current_value == "local-a"
    assert {o.id: o.current_value for o in picked.config_options}["model"] == "local-b"
    assert {o.id: o.current_value for o in warm.config_options}["temperature"] == "0.7"
    assert "no value 'nope'" in str(bad.data)
    assert {o.id: o.current_value for o in typed[-1].config_options}["temperature"] == "0.2"
    assert sent["model"] == "local-b" and sent["temperature"] == 0.2
    changed = [r["set"] for r in _journal(world, new.session_id)
               if r["event"] == "model_changed"]
    assert changed == [{"model": "local-b"}, {"temperature": "0.7"}, {"temperature": "0.2"}]


def test_an_endpoint_that_lists_no_models_gives_one_entry(world):
    async def go():
        async with world.lily(Recorder(), None) as (conn, _):
            return await conn.new_session(cwd=str(world.workspace), mcp_servers=[])

    new = run(go())
    model = next(o for o in new.config_options if o.id == "model")
    assert [o.value for o in model.options] == [model.current_value]


def test_each_model_step_reports_its_tokens_and_the_window(world):
    (world.workspace / "a.txt").write_text("x\n")
    world.extra_env["LILY_CONTEXT_WINDOW"] = "32768"
    script = [{"tool_calls": [{"id": "c1", "name": "list", "arguments": {"path": "."}}],
               "usage": {"prompt_tokens": 100, "completion_tokens": 10}},
              {"content": "Done.", "usage": {"prompt_tokens": 150, "completion_tokens": 5}}]

    async def go():
        client = Recorder()
        with ScriptedServer(script) as server:
            async with world.lily(client, server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                done = await conn.prompt(session_id=new.session_id, prompt=prompt("look"))
                await settle()
        return [u for u in client.updates if isinstance(u, UsageUpdate)], done.usage

    usage, totals = run(go())
    assert (totals.input_tokens, totals.output_tokens, totals.total_tokens) == (250, 15, 265)
    assert [u.used for u in usage] == [110, 155]
    assert all(u.size == 32_768 for u in usage)
    assert usage[-1].field_meta["lily"]["turnsNotSent"] == 0


def test_a_models_reasoning_arrives_as_thought_chunks_redacted_and_not_in_the_answer(world):
    from acp.schema import AgentThoughtChunk
    key = world.env(None)["OPENAI_API_KEY"]
    script = [{"reasoning": f"First I weigh it.\nThe key is {key}, no matter.",
               "content": "Answer."}]

    async def go():
        client = Recorder()
        with ScriptedServer(script) as server:
            async with world.lily(client, server, "zed") as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                await conn.prompt(session_id=new.session_id, prompt=prompt("think"))
                await settle()
        return client

    client = run(go())
    thoughts = "".join(u.content.text for u in client.updates
                       if isinstance(u, AgentThoughtChunk))
    assert "First I weigh it" in thoughts and "no matter" in thoughts
    assert key not in thoughts
    assert "weigh" not in client.text() and client.text().startswith("Answer.")
