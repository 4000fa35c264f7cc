"""Lily in jupyter-ai's chat: a Jupyter server from jupyter-ai's own environment (.venv-jai)
with Lily's persona installed as a user would and made the default, driven over the chat's
WebSocket API and jupyter-ai's permission endpoint, Lily answering from the scripted model
(docs/front-ends.md#jupyter-ai)."""
from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from acp_support import execute
from jai_support import JAI_BIN, TOKEN, Jupyter, install, open_chat

from lily_kernel.acp import persona_install
from lily_kernel.testing import ScriptedServer

pytestmark = pytest.mark.skipif(not (JAI_BIN / "jupyter").exists(),
                                reason="jupyter-ai's own environment .venv-jai is not built "
                                       "here: `make jai-venv` builds it (make test does)")
WRITE = [{"tool_calls": [{"id": "call_w", "name": "write",
                          "arguments": {"path": "notes.txt", "content": "new line\n"}}]},
         {"content": "Done writing the notes."}]
SLOW = {"content": "word " * 300, "chunks": 300, "chunk_delay": 0.05}


@pytest.fixture
def jupyter(tmp_path):
    install()
    with ScriptedServer([*WRITE, SLOW, {"content": "Still here."}]) as model:
        server = Jupyter(tmp_path, model)
        (server.root / "notes.txt").write_text("old line\n")
        try:
            yield server, model
        finally:
            server.stop()


def test_lily_is_the_default_persona_in_jupyter_ais_chat(jupyter):
    server, model = jupyter

    async def go() -> tuple[str, str, str, str, Path]:
        chat, lily = await open_chat(server)
        assert lily == persona_install.PERSONA_ID
        ws = chat.ws
        await chat.send("/skills", to=lily)
        skills = await chat.until(lambda m: "snapshot version" in m.get("body", ""))
        await chat.send("/mcp", to=lily)  # jupyter-ai's own notebook server, over HTTP
        mcp = await chat.until(lambda m: "Jupyter MCP Server" in m.get("body", ""))
        await chat.send("update the notes", to=lily)
        pending = await chat.until(lambda m: any(
            tc.get("permission_status") == "pending"
            for tc in (m.get("metadata") or {}).get("tool_calls", [])))
        call = next(tc for tc in pending["metadata"]["tool_calls"]
                    if tc.get("permission_status") == "pending")
        assert [o["option_id"] for o in call["permission_options"]] == ["once", "always", "deny"]
        assert call["diffs"][0]["new_text"] == "new line\n"
        server.post("ai/acp/permissions", {"session_id": call["session_id"],
                                           "tool_call_id": call["tool_call_id"],
                                           "option_id": "once"})
        done = await chat.until(lambda m: "Done writing the notes." in m.get("body", ""))
        await chat.send("talk a lot", to=lily)  # then the panel's stop button
        await chat.until(lambda m: "word word" in m.get("body", ""))
        server.post(f"api/ai/personas/cancel?chat_id={chat.id}", {})
        await asyncio.sleep(3)
        stopped = max((m for m in chat.messages.values() if "word" in m.get("body", "")),
                      key=lambda m: len(m["body"]))["body"]
        await chat.send("there?", to=lily)
        await chat.until(lambda m: "Still here." in m.get("body", ""))
        ws.close()
        return skills["body"], mcp["body"], done["body"], stopped, server.root / "lily.chat"

    skills, mcp, done, stopped, chat_file = asyncio.run(asyncio.wait_for(go(), 300))
    assert stopped.count("word") < 150  # the stream had 15 s to go when stop was pressed
    assert "lily" in server.get("api/kernelspecs")["kernelspecs"]
    assert "**Jupyter MCP Server** (http, client): ready" in mcp  # the user's layer: no /trust
    assert "read_notebook" in mcp and "approval" in mcp
    assert "snapshot version 1" in skills
    assert "Done writing the notes." in done
    assert (server.root / "notes.txt").read_text() == "new line\n"
    assert model.remaining() == 0
    for _ in range(40):  # the chat file is saved shortly after a change
        if chat_file.exists() and "Done writing the notes." in chat_file.read_text():
            break
        time.sleep(0.5)
    assert "Done writing the notes." in chat_file.read_text()


def _no_browser() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed"
    if not Path("/usr/bin/chromium").exists():
        return "Chromium not found at /usr/bin/chromium: apt-get install chromium"
    return None


def test_the_panel_in_chromium_type_allow_reply(jupyter, tmp_path):
    """A smoke test of jupyter-ai's panel as a user sees it: Lily preselected, the write's
    diff and Lily's buttons under the tool call, Run once, the reply (the rest of the panel:
    test_jupyter_ai_panel.py)."""
    if (why := _no_browser()) is not None:
        if os.environ.get("LILY_REQUIRE_BROWSER") == "1":
            pytest.fail(f"LILY_REQUIRE_BROWSER=1, but jupyter-ai's panel cannot be run: {why}")
        pytest.skip(why)
    from playwright.sync_api import sync_playwright
    server, model = jupyter
    (server.root / "lily.chat").write_text("")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            page.goto(server.url(f"lab/tree/lily.chat?token={TOKEN}"))
            box = page.get_by_placeholder("Type a chat message")
            box.wait_for(timeout=90_000)
            page.get_by_text("Lily", exact=True).first.wait_for(timeout=30_000)  # the picker
            box.fill("update the notes")
            box.press("Enter")
            run_once = page.get_by_role("button", name="Run once")
            run_once.wait_for(timeout=90_000)
            assert page.get_by_role("button", name="Always this session").is_visible()
            assert page.get_by_role("button", name="Deny").is_visible()
            assert page.get_by_text("+ new line").is_visible()  # the diff, before deciding
            run_once.click()
            page.get_by_text("Done writing the notes.").wait_for(timeout=90_000)
        finally:
            page.screenshot(path=str(tmp_path / "panel.png"))
            browser.close()
    assert (server.root / "notes.txt").read_text() == "new line\n"
    assert len(model.chat_requests()) == 2  # the write, then the answer after it


def test_a_reopened_chat_after_a_server_restart_takes_lilys_conversation_up(tmp_path):
    """jupyter-ai keeps the ACP session id in the .chat file and, since Lily advertises
    loadSession, calls session/load after a restart: Lily resumes from its journal."""
    install()
    script = [{"content": "Noted: 42."},
              {"expect": {"contains": "which number"}, "content": "It was 42."}]

    seen: list[list[str]] = []

    async def talk(server: Jupyter, text: str, answer: str) -> None:
        chat, lily = await open_chat(server)
        await chat.send(text, to=lily)
        await chat.until(lambda m: answer in m.get("body", ""))
        await asyncio.sleep(2)  # a late replay would land now
        seen.append([str(m.get("body", "")) for m in chat.messages.values()])
        chat.ws.close()

    with ScriptedServer(script) as model:
        first = Jupyter(tmp_path, model)
        try:
            asyncio.run(asyncio.wait_for(talk(first, "remember the number 42", "Noted: 42."), 300))
            chat_file = first.root / "lily.chat"
            for _ in range(60):  # the chat (and its ACP session id) is saved after a change
                if chat_file.exists() and "acp_session_ids" in chat_file.read_text():
                    break
                time.sleep(0.5)
        finally:
            first.stop()
        second = Jupyter(tmp_path, model)
        try:
            asyncio.run(asyncio.wait_for(talk(second, "which number did I say?", "It was 42."),
                                         300))
        finally:
            second.stop()
        sent = model.chat_requests()[1]["messages"]
    assert [m["content"] for m in sent if m["role"] != "system"][:2] == [
        "remember the number 42", "Noted: 42."]
    # the reopened chat did not grow: session/load replayed nothing into jupyter-ai's chat,
    # which it saves in the .chat file (issue 42); the note names a chat
    saved = [str(m.get("body", "")) for m in json.loads(chat_file.read_text())["messages"]]
    assert sum("Noted: 42." in body for body in saved) == 1, saved
    assert any("this chat's conversation" in body for body in seen[1] + saved), seen[1]


def test_a_notebook_kernels_variable_is_read_through_the_notebook_tools(tmp_path):
    """jupyter-ai launches `lily acp` from the server: Lily finds that server (its runtime
    file), the notebook running in the chat's folder and its kernel, and the model's
    inspect_variable and list_variables read that kernel's variables
    (docs/front-ends.md#notebook-tools-through-a-jupyter-server)."""
    install()
    script = [{"tool_calls": [
                  {"id": "call_i", "name": "inspect_variable", "arguments": {"name": "prices"}},
                  {"id": "call_l", "name": "list_variables", "arguments": {}}]},
              {"content": "Your notebook holds prices."}]

    async def talk(server: Jupyter) -> None:
        chat, lily = await open_chat(server)
        await chat.send("what is in my notebook?", to=lily)
        await chat.until(lambda m: "Your notebook holds prices." in m.get("body", ""))
        chat.ws.close()

    with ScriptedServer(script) as model:
        server = Jupyter(tmp_path, model)
        try:
            session = server.post("api/sessions", {"path": "analysis.ipynb", "type": "notebook",
                                                   "name": "analysis.ipynb",
                                                   "kernel": {"name": "python3"}})
            kernel = session["kernel"]["id"]
            execute(server.port, TOKEN, kernel, "prices = {'apple': 1.5, 'pear': 2.25}")
            asyncio.run(asyncio.wait_for(talk(server), 300))
            count = execute(server.port, TOKEN, kernel, "1")["execution_count"]
        finally:
            server.stop()
        sent = model.chat_requests()[1]["messages"]
    answers = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
    assert "'apple': 1.5" in answers["call_i"] and "dict of length 2" in answers["call_i"]
    assert "prices: dict[2]" in answers["call_l"]
    assert count == 2  # Lily's reads were silent: the notebook's count did not move


def test_run_pythons_code_reaches_jupyter_ais_tool_call_as_the_diff_its_panel_draws(tmp_path):
    """Issue 42, through jupyter-ai's own server: the pending run_python call jupyter-ai
    stores for its panel carries the exact code as a diff (the form its ToolCall component
    draws before the buttons), a hidden character shown as ⟨U+202E⟩; Deny runs nothing."""
    install()
    code = "marker = 6 * 7 # \u202eok\nprint(marker)\n"
    script = [{"tool_calls": [{"id": "call_p", "name": "run_python",
                               "arguments": {"code": code}}]}]

    async def talk(server: Jupyter) -> dict[str, Any]:
        chat, lily = await open_chat(server)
        await chat.send("compute the marker", to=lily)
        pending = await chat.until(lambda m: any(
            tc.get("permission_status") == "pending"
            for tc in (m.get("metadata") or {}).get("tool_calls", [])))
        call: dict[str, Any] = next(tc for tc in pending["metadata"]["tool_calls"]
                                    if tc.get("permission_status") == "pending")
        server.post("ai/acp/permissions", {"session_id": call["session_id"],
                                           "tool_call_id": call["tool_call_id"],
                                           "option_id": "deny"})
        await chat.until(lambda m: "did not run" in m.get("body", ""))
        chat.ws.close()
        return call

    with ScriptedServer(script) as model:
        server = Jupyter(tmp_path, model)
        try:
            session = server.post("api/sessions", {"path": "analysis.ipynb", "type": "notebook",
                                                   "name": "analysis.ipynb",
                                                   "kernel": {"name": "python3"}})
            kernel = session["kernel"]["id"]
            call = asyncio.run(asyncio.wait_for(talk(server), 300))
            ran = execute(server.port, TOKEN, kernel, "", user_expressions={
                "ran": "'marker' in globals()"})
        finally:
            server.stop()
    assert [o["option_id"] for o in call["permission_options"]] == ["once", "deny"]
    assert call["diffs"][0]["new_text"] == code.replace("\u202e", "⟨U+202E⟩")
    assert call["diffs"][0].get("old_text") is None
    assert "⟨U+202E⟩" in call["title"]
    assert ran["user_expressions"]["ran"]["data"]["text/plain"] == "False"
    assert len(model.chat_requests()) == 1
