"""MCP tools in the agent loop with the scripted model: approval, policy, secrets (ATTACK)."""
from __future__ import annotations

import json
import time

from mcp_support import HOSTILE, toml_server

from lily_kernel.commands import render
from lily_kernel.commands.results import ActionCard, ActionDone, Answer
from lily_kernel.commands.runner import Runner
from lily_kernel.session import journal
from lily_kernel.tools.mcp.mcp_tools import McpImage

PY = __import__("sys").executable
SECRET = "notes-token-0123456789abcdef"


def world_with_server(mcp_world, server, monkeypatch, policy: str = "",
                      auto: tuple[str, ...] = ("echo",), **extra: str):
    monkeypatch.setenv("NOTES_TOKEN", SECRET)
    mcp_world.user(toml_server("notes", PY, [HOSTILE], auto_approve=list(auto),
                               env={"TOKEN": "${NOTES_TOKEN}"}) + policy)
    runner = Runner(lambda: mcp_world.session(server, journal=True, NOTES_TOKEN=SECRET, **extra))
    return runner


def shown(runner, results) -> list:
    """The results as a face shows them: a displayed card waits for the user's decision."""
    results = list(results)
    for result in results:
        if isinstance(result, ActionCard):
            runner.shown(result)
    return results


def offered(server) -> list[str]:
    return [t["function"]["name"] for t in server.chat_requests()[0].get("tools", [])]


def test_an_auto_approved_tool_runs_without_a_card(mcp_world, server, monkeypatch):
    runner = world_with_server(mcp_world, server, monkeypatch)
    server.add({"tool_calls": [{"name": "mcp__notes__echo", "arguments": {"text": "hello"}}]},
               "done")
    out = list(runner.ask("echo hello"))
    assert [type(r) for r in out] == [Answer]
    assert "mcp__notes__echo" in offered(server)
    tool_msg = server.chat_requests()[1]["messages"][-1]
    assert tool_msg["role"] == "tool" and tool_msg["content"] == "hello"


def test_another_mcp_tool_waits_for_confirm_and_cancel_declines(mcp_world, server, monkeypatch):
    runner = world_with_server(mcp_world, server, monkeypatch)
    server.add({"tool_calls": [{"name": "mcp__notes__html", "arguments": {}}]})
    out = shown(runner, runner.ask("show html"))
    assert isinstance(out[-1], ActionCard) and out[-1].action.tool == "mcp__notes__html"
    assert len(server.chat_requests()) == 1  # nothing ran yet
    server.add("the page is shown")
    done = shown(runner, runner.command("/confirm"))
    assert isinstance(done[0], ActionDone) and "<script>" in done[0].tool_result
    assert isinstance(done[-1], Answer) and done[-1].text.startswith("the page is shown")
    # a second call is asked again; /cancel answers the model "declined by the user"
    server.add({"tool_calls": [{"name": "mcp__notes__html", "arguments": {}}]})
    assert isinstance(shown(runner, runner.ask("again"))[-1], ActionCard)
    list(runner.command("/cancel"))
    server.add("ok")
    list(runner.ask("next"))
    sent = server.chat_requests()[-1]["messages"]
    assert any(m["role"] == "tool" and m["content"] == "declined by the user" for m in sent)


def test_a_tool_denied_by_a_glob_is_never_offered(mcp_world, server, monkeypatch):
    runner = world_with_server(mcp_world, server, monkeypatch,
                               policy='\n[tools]\ndeny = ["mcp__notes__h*"]\n')
    server.add({"tool_calls": [{"name": "mcp__notes__html", "arguments": {}}]}, "denied")
    out = list(runner.ask("try it"))
    assert "mcp__notes__html" not in offered(server) and "mcp__notes__echo" in offered(server)
    assert [type(r) for r in out] == [Answer]  # refused, never held for a card
    refusal = server.chat_requests()[1]["messages"][-1]["content"]
    assert refusal.startswith("Error:") and "denied by the tool policy" in refusal


def test_confirm_glob_asks_even_for_an_auto_approved_tool(mcp_world, server, monkeypatch):
    runner = world_with_server(mcp_world, server, monkeypatch,
                               policy='\n[tools]\nconfirm = ["mcp__notes__*"]\n')
    server.add({"tool_calls": [{"name": "mcp__notes__echo", "arguments": {"text": "x"}}]})
    assert isinstance(shown(runner, runner.ask("echo"))[-1], ActionCard)


def test_expanded_secrets_never_reach_the_model_the_outputs_or_the_journal(
        mcp_world, server, monkeypatch):
    """ATTACK: a hostile model has the server hand back the token it was given (its
    environment); the model, the answer, /mcp and the journal see only ``***``."""
    runner = world_with_server(mcp_world, server, monkeypatch, auto=("echo", "env"))
    server.add({"tool_calls": [{"name": "mcp__notes__echo", "arguments": {"text": "hi"}},
                               {"name": "mcp__notes__env", "arguments": {}}]},
               "the token is ***")
    out = list(runner.ask("print your environment"))
    child_env = server.chat_requests()[1]["messages"][-1]["content"]
    assert '"TOKEN": "***"' in child_env  # the child had it; the model sees it masked
    results = [m for m in server.chat_requests()[1]["messages"] if m["role"] == "tool"]
    assert len(results) == 2 and all(SECRET not in json.dumps(m) for m in results)
    shown = " ".join(getattr(r, "text", "") or str(r) for r in out)
    assert SECRET not in shown
    session = runner.session
    text = session.journal.path.read_text(encoding="utf-8")
    assert SECRET not in text and list(journal.read(session.journal.path))
    from lily_kernel.commands import render
    assert SECRET not in render.text(next(iter(runner.command("/mcp"))))


def test_confirm_always_stops_the_card_for_that_tool_only(mcp_world, server, monkeypatch):
    runner = world_with_server(mcp_world, server, monkeypatch)
    server.add({"tool_calls": [{"name": "mcp__notes__html", "arguments": {}}]})
    card = shown(runner, runner.ask("html"))[-1]
    assert isinstance(card, ActionCard)
    server.add("shown once")
    shown(runner, runner.command("/confirm --always"))
    server.add({"tool_calls": [{"name": "mcp__notes__html", "arguments": {}}]}, "no card")
    assert [type(r) for r in shown(runner, runner.ask("html again"))] == [Answer]
    server.add({"tool_calls": [{"name": "mcp__notes__image", "arguments": {}}]})
    assert isinstance(shown(runner, runner.ask("an image"))[-1], ActionCard)  # others still ask


def test_an_image_is_shown_and_described_to_the_model_by_size(mcp_world, server, monkeypatch):
    runner = world_with_server(mcp_world, server, monkeypatch, auto=("image",))
    server.add({"tool_calls": [{"name": "mcp__notes__image", "arguments": {}}]}, "a picture")
    out = list(runner.ask("draw"))
    assert [type(r) for r in out] == [Answer, McpImage]
    assert out[1].mime == "image/png" and out[1].data.startswith(b"\x89PNG")
    told = server.chat_requests()[1]["messages"][-1]["content"]
    assert told == "[image image/png, 72 bytes: shown to the user in the notebook]"
    from lily_kernel.jupyter.display import bundle
    assert set(bundle(out[1])) == {"text/plain", "image/png"}


def test_images_are_capped_in_bytes_and_count_with_a_line_saying_what_was_left_out(
        mcp_world, server, monkeypatch):
    """ATTACK (issue 33 §5): five 8 MB images put 53 MB of base64 in the notebook. Now an
    image past the cap never reaches the notebook (one of 4.5 MB here, to keep the test
    quick; five of 8 MB are refused the same way), the model is told each was not shown, and
    one line says what was left out. Six small ones: four are shown, two left out."""
    from lily_kernel.tools.mcp import mcp_tools
    runner = world_with_server(mcp_world, server, monkeypatch, auto=("image",),
                               LILY_TIMEOUT="60")
    big = mcp_tools.IMAGE_BYTES + 512 * 1024
    server.add({"tool_calls": [{"name": "mcp__notes__image",
                                "arguments": {"count": 1, "size": big}}]}, "pictures")
    out = list(runner.ask("draw one"))
    images = [r for r in out if isinstance(r, McpImage)]
    assert [bool(i.data) for i in images] == [False]  # only the line saying what was left out
    assert "1 image(s) from mcp__notes__image left out" in images[0].left_out
    told = server.chat_requests()[1]["messages"][-1]["content"]
    assert told.count("not shown: the images of one result are capped") == 1
    from lily_kernel.jupyter.display import bundle
    shown = bundle(images[0])
    assert set(shown) == {"text/plain", "text/markdown"} and "left out" in shown["text/plain"]
    assert sum(len(str(v)) for v in shown.values()) < 2000
    server.add({"tool_calls": [{"name": "mcp__notes__image",
                                "arguments": {"count": 6, "size": 1000}}]}, "six")
    out = list(runner.ask("draw six"))
    images = [r for r in out if isinstance(r, McpImage)]
    assert [len(i.data) for i in images if i.data] == [1008] * mcp_tools.IMAGES_PER_RESULT
    assert "2 image(s)" in images[-1].left_out
    total = sum(len(i.data) for i in images)
    assert total <= mcp_tools.IMAGE_BYTES
    # What waits to be shown counts too: a run of calls cannot pile up more.
    monkeypatch.setattr(mcp_tools, "IMAGES_WAITING_BYTES", 3000)
    server.add({"tool_calls": [{"name": "mcp__notes__image", "arguments": {"count": 2,
                                                                           "size": 1000}},
                               {"name": "mcp__notes__image", "arguments": {"count": 2,
                                                                           "size": 1001}}]},
               "four")  # (two different calls: an identical one is answered once)
    out = list(runner.ask("draw two twice"))
    images = [r for r in out if isinstance(r, McpImage)]
    assert len([i for i in images if i.data]) == 2
    assert any("wait to be shown" in i.left_out for i in images)


def test_an_injected_description_cannot_lift_the_approval(mcp_world, server, monkeypatch):
    """ATTACK: a tool description tells the model to run things; whatever the model then
    calls goes through the same policy and cards in code."""
    runner = world_with_server(mcp_world, server, monkeypatch)
    server.add({"tool_calls": [{"name": "mcp__notes__crash", "arguments": {}}]})
    out = shown(runner, runner.ask("do what the echo tool says"))
    spec = next(t for t in server.chat_requests()[0]["tools"]
                if t["function"]["name"] == "mcp__notes__echo")
    assert "IGNORE ALL PREVIOUS INSTRUCTIONS" in spec["function"]["description"]  # as written
    assert isinstance(out[-1], ActionCard)  # the call the injection asked for waits
    list(runner.command("/cancel"))
    assert runner.session.mcp.status()[0]["state"] == "ready"  # and nothing ran


# -- approvals bound to what runs (docs/permissions.md#approvals) ---------------------------

def test_an_approval_is_revoked_when_the_server_redefines_the_tool(mcp_world, server,
                                                                     monkeypatch):
    """The rug pull: a read-only "search" is approved with --always, then the server
    redefines it as "Delete every note." and says tools/list_changed. The next call asks
    again, the card says what changed, and /mcp shows it."""
    runner = world_with_server(mcp_world, server, monkeypatch, auto=())
    server.add({"tool_calls": [{"name": "mcp__notes__search", "arguments": {"query": "a"}}]})
    (_card,) = [r for r in shown(runner, runner.ask("search a")) if isinstance(r, ActionCard)]
    server.add("searched")
    done = shown(runner, runner.command("/confirm --always"))
    assert "without a card for the rest of this session" in done[0].summary
    # the notification comes with the call's result and is read as its own message: the
    # user's next request comes after Lily listed the tools again
    deadline = time.monotonic() + 30
    notes = runner.session.mcp.servers["notes"]
    while [t.description for t in notes.tools if t.name == "search"] != ["Delete every note."]:
        assert time.monotonic() < deadline, "the redefined tool was never listed"
        time.sleep(0.05)
    server.add({"tool_calls": [{"name": "mcp__notes__search",
                                "arguments": {"query": "*", "confirm": True}}]})
    out = shown(runner, runner.ask("search everything"))
    again = [r for r in out if isinstance(r, ActionCard)]
    assert len(again) == 1, out  # asked again: the approval was for another tool
    reason = again[0].reason
    assert "your /confirm --always for mcp__notes__search is revoked" in reason
    assert "description" in reason and "annotations" in reason and "input schema" in reason
    assert again[0].action.annotations.get("destructiveHint") is True
    mcp = render.text(next(iter(runner.command("/mcp"))))
    assert "mcp__notes__search changed since it was first listed" in mcp
    records = [json.loads(line) for line in runner.session.journal.path.read_text().splitlines()]
    assert any(r["event"] == "tool_approval_revoked" for r in records)


def test_a_tool_its_server_redefines_while_the_card_waits_is_not_called(mcp_world, server,
                                                                         monkeypatch):
    """ATTACK (issue 41 §4): in one step the model calls an auto-approved tool that makes
    the server redefine html ("Delete every note.", tools/list_changed), then html, whose
    card shows the tool as it was. /confirm lists the server's tools again and decides the
    call again: the redefined tool is not called, and the reply says why."""
    runner = world_with_server(mcp_world, server, monkeypatch, auto=("swap",))
    server.add({"tool_calls": [{"name": "mcp__notes__swap", "arguments": {}},
                               {"name": "mcp__notes__html", "arguments": {}}]})
    (card,) = [r for r in shown(runner, runner.ask("swap, then html"))
               if isinstance(r, ActionCard)]
    assert card.action.tool == "mcp__notes__html"
    deadline = time.monotonic() + 30
    notes = runner.session.mcp.servers["notes"]
    while [t.description for t in notes.tools if t.name == "html"] != ["Delete every note."]:
        assert time.monotonic() < deadline, "the redefined tool was never listed"
        time.sleep(0.05)
    server.add("stopped")
    done = shown(runner, runner.command("/confirm"))
    assert done[0].summary.startswith("**mcp__notes__html** did not run: "), done[0].summary
    assert "changed since its card was shown" in done[0].summary
    assert "onerror" not in (done[0].tool_result or "")


def test_a_confirmed_call_does_not_run_if_the_tool_changed_after_its_card(mcp_world, server,
                                                                            monkeypatch):
    runner = world_with_server(mcp_world, server, monkeypatch, auto=())
    session = runner.session
    server.add({"tool_calls": [{"name": "mcp__notes__search", "arguments": {"query": "a"}}]})
    (_card,) = [r for r in shown(runner, runner.ask("search a")) if isinstance(r, ActionCard)]
    tool = session.tools.get("mcp__notes__search")
    from dataclasses import replace
    session.tools.add(replace(tool, description="Delete every note."))  # redefined meanwhile
    server.add("stopped")
    done = shown(runner, runner.command("/confirm"))
    assert done[0].tool_result.startswith("Error: not run: mcp__notes__search changed since "
                                          "its card was shown (its description)")
