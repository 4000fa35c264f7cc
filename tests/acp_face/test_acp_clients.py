"""What each ACP client is sent of a permission request: the exact code or arguments in a
form it displays, hidden characters made visible, only Deny where it cannot display them
(docs/front-ends.md#what-each-client-is-sent). On a real Session; no model."""
from __future__ import annotations

import pytest
from acp.schema import ContentToolCallContent, FileEditToolCallContent
from acp_support import CLIENTS

from lily_kernel.acp import acp_updates as updates
from lily_kernel.acp.acp_clients import ClientProfile, profile_of
from lily_kernel.agent.pending import HeldCall, Paused
from lily_kernel.commands.runner import Runner
from lily_kernel.session.session import Session

CODE = "import os\nprint(os.getcwd())  # \u202eno-op\n"


@pytest.fixture
def runner(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SKILLS_COMPAT_ROOTS", "0")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {"OPENAI_API_KEY": "sk-acp-secret-0123456789"}
    r = Runner(lambda: Session(workspace, label="acp-test", env=env))
    assert r.ready
    return r


def _held(tool: str, args: dict) -> HeldCall:
    paused = Paused([], "call_1", None, [], 1, None)
    return HeldCall("ab" * 16, "", tool, args, paused,
                    always_refusal="confirmed each time" if tool == "run_python" else None)


def _profile(name: str) -> ClientProfile:
    init = CLIENTS[name]
    return profile_of(init.get("clientCapabilities"), init.get("clientInfo"))


def test_profiles_from_the_recorded_initialize_messages():
    jai, zed, bare = _profile("jupyter-ai"), _profile("zed"), _profile("minimal")
    assert jai.jupyter_ai and jai.keeps_history and not jai.shows("text")
    assert (zed.fs_read, zed.fs_write, zed.terminal, zed.keeps_history) == (True, True, True, False)
    assert zed.shows("text") and zed.shows("diff")
    assert (bare.fs_read, bare.fs_write, bare.terminal, bare.name) == (False, False, False, "")


def test_jupyter_ai_is_sent_run_pythons_code_as_a_diff_it_draws_with_hidden_characters_shown(
        runner):
    """An attack: the code holds a right-to-left override. jupyter-ai draws no text content,
    so the code goes as a new file's diff, whole, the override shown as ⟨U+202E⟩; the title
    warns."""
    card = runner.card(_held("run_python", {"code": CODE}))
    call = updates.card_tool_call(runner.session, card, None, _profile("jupyter-ai"))
    diffs = [c for c in call.content or [] if isinstance(c, FileEditToolCallContent)]
    assert len(diffs) == 1 and diffs[0].old_text is None
    assert diffs[0].new_text == CODE.replace("\u202e", "⟨U+202E⟩")
    assert not any(isinstance(c, ContentToolCallContent) for c in call.content or [])
    assert "\u202e" not in call.model_dump_json()
    assert "⟨U+202E⟩" in (call.title or "")
    assert updates.displayed(_profile("jupyter-ai"), call)
    assert [o.option_id for o in updates.permission_options(card, True)] == ["once", "deny"]


def test_a_spec_client_is_sent_the_code_as_markdown_text_and_no_fake_diff(runner):
    card = runner.card(_held("run_python", {"code": "x = 1\n"}))
    for name in ("zed", "minimal"):
        call = updates.card_tool_call(runner.session, card, None, _profile(name))
        texts = [c.content.text for c in call.content or []
                 if isinstance(c, ContentToolCallContent)]
        assert len(texts) == 1 and "```python\nx = 1\n```" in texts[0]
        assert not any(isinstance(c, FileEditToolCallContent) for c in call.content or [])
        assert call.raw_input == {"code": "x = 1\n"}


def test_an_mcp_calls_arguments_reach_jupyter_ai_as_raw_input_made_visible(runner):
    card = runner.card(_held("mcp__db__drop", {"table": "users\u200b"}))
    profile = _profile("jupyter-ai")
    call = updates.card_tool_call(runner.session, card, None, profile)
    assert call.raw_input == {"table": "users⟨U+200B⟩"}
    assert updates.displayed(profile, call)


def test_a_client_that_cannot_display_the_code_is_told_so_and_offered_only_deny(runner):
    """A client that draws only titles: the request says it cannot show the code, and the
    only choice is Deny (the rule, not a client we know of)."""
    titles_only = ClientProfile(name="titles", displays=frozenset({"title"}))
    card = runner.card(_held("run_python", {"code": "x = 1\n"}))
    call = updates.card_tool_call(runner.session, card, None, titles_only)
    assert not updates.displayed(titles_only, call)
    assert "cannot display" in (updates.unshowable(call).title or "")
    assert [o.option_id for o in updates.permission_options(card, False)] == ["deny"]
    jai_execute = updates.card_tool_call(runner.session, card, None,
                                         ClientProfile(name="Jupyter AI",
                                                       displays=frozenset({"raw_input"})))
    assert not updates.displayed(ClientProfile(name="Jupyter AI",
                                               displays=frozenset({"raw_input"})), jai_execute)


def test_a_secret_in_run_pythons_code_is_masked_in_every_form(runner):
    card = runner.card(_held("run_python", {"code": "key = 'sk-acp-secret-0123456789'\n"}))
    for name in ("jupyter-ai", "zed"):
        call = updates.card_tool_call(runner.session, card, None, _profile(name))
        assert "sk-acp-secret-0123456789" not in call.model_dump_json()


def test_session_load_into_jupyter_ai_replays_nothing_and_the_note_names_a_chat(tmp_path):
    """jupyter-ai keeps the chat in its .chat file: a reopened chat must not grow. A
    client that keeps no history (Zed, a minimal one) is sent the conversation."""
    from acp.schema import AgentMessageChunk, UserMessageChunk
    from acp_support import Recorder, World, prompt, run, settle

    from lily_kernel.testing import ScriptedServer
    world = World(tmp_path)
    script = [{"content": "Noted: 42."}, {"content": "It was 42."},
              {"content": "Still 42."}]

    async def go():
        with ScriptedServer(script) as server:
            async with world.lily(Recorder(), server, "jupyter-ai") as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                await conn.prompt(session_id=new.session_id, prompt=prompt("remember 42"))
            seen = {}
            for name in ("jupyter-ai", "zed"):
                client = Recorder()
                async with world.lily(client, server, name) as (conn, _):
                    await conn.load_session(cwd=str(world.workspace),
                                            session_id=new.session_id, mcp_servers=[])
                    await settle()
                    replayed = [u for u in client.updates
                                if isinstance(u, (UserMessageChunk, AgentMessageChunk))]
                    client.clear()
                    await conn.prompt(session_id=new.session_id, prompt=prompt("which?"))
                    seen[name] = (replayed, client.text())
        return seen

    seen = run(go())
    assert seen["jupyter-ai"][0] == []
    assert [u.content.text for u in seen["zed"][0]][:2] == ["remember 42", "Noted: 42."]
    for _, text in seen.values():
        assert "of this chat's conversation" in text and "notebook" not in text
