"""One approval card for every tool call, decided one way (docs/notebook-tools.md#confirmation).

Core tests on the :class:`Runner` every face uses: a real session, the scripted model
over HTTP on 127.0.0.1, the real built-in file tools and the notebook tools bound to a
notebook stand-in whose ``run`` only records the code (the kernel tests run real code).
Each card is displayed the way a face does it: ``Runner.shown`` once it is on screen.
"""
from __future__ import annotations

import json
import re

import pytest
from agent_support import Book, World, assert_consistent

from lily_kernel.agent.pending import HeldCall
from lily_kernel.commands import render
from lily_kernel.commands.results import ActionCard, ActionDone, Answer
from lily_kernel.commands.runner import Runner
from lily_kernel.errors import CommandError
from lily_kernel.session.session import Session
from lily_kernel.testing.server import ScriptedServer
from lily_kernel.tools import notebook_tools
from lily_kernel.tools.tool_registry import Tool

KEY = "sk-live-SECRET-4242-never-shown"


def call(name: str, args: dict, id: str) -> dict:
    return {"tool_calls": [{"name": name, "arguments": args, "id": id}]}


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


def start(world: World, server: ScriptedServer, book: Book | None = None, journal=False,
          extra_tools=None) -> Runner:
    def tools(session: Session) -> None:
        notebook_tools.register(session.tools, book or Book(), lambda: True)
        for tool in extra_tools or ():
            session.tools.add(tool)
    return Runner(lambda: Session(workspace=world.workspace, journal=journal,
                                  env=world.env(server, OPENAI_API_KEY=KEY),
                                  add_tools=tools))


def ask(runner: Runner, text: str, show: bool = True) -> list:
    """A prose cell, displayed as a face does: each card is shown, then reported."""
    out = []
    for result in runner.ask(text):
        out.append(result)
        if isinstance(result, ActionCard) and show:
            runner.shown(result)
    return out


def cards(results: list) -> list[ActionCard]:
    return [r for r in results if isinstance(r, ActionCard)]


def result_of(server: ScriptedServer, call_id: str) -> str:
    for req in reversed(server.chat_requests()):
        for m in req["messages"]:
            if m.get("tool_call_id") == call_id:
                return m["content"]
    raise AssertionError(f"no result for {call_id}")


# -- the card ---------------------------------------------------------------------------

def test_a_write_over_an_existing_file_asks_with_a_diff_and_in_ask_mode_a_new_file_too(world):
    target = world.workspace / "notes.txt"
    target.write_text("keep\nold line\n")
    script = [call("write", {"path": "notes.txt", "content": "keep\nnew line\n"}, "w1"),
              call("write", {"path": "fresh.txt", "content": "hello\n"}, "w2"), "Created."]
    with ScriptedServer(script) as server:
        runner = start(world, server)
        (card,) = cards(ask(runner, "change my notes"))
        assert target.read_text() == "keep\nold line\n"  # nothing written before approval
        assert isinstance(card.action, HeldCall) and card.action.tool == "write"
        assert card.change is not None
        assert "-old line\n+new line" in card.change and " keep" in card.change
        md = render.markdown(card)
        assert "**Approve write** (tool call, card `" + card.action.id[:8] + "`)" in md
        assert "```diff\n--- a/notes.txt\n+++ b/notes.txt" in md
        assert "| `write` | built-in | not read-only, destructive |" in md
        assert json.loads(card.arguments) == {"path": "notes.txt",
                                              "content": "keep\nnew line\n"}
        ref = card.action.id[:8]
        assert f"/confirm {ref} --always" in md and f"/cancel {ref}" in md

        assert "It asks because in ask mode every write asks." in md

        (done, answer, fresh) = runner.command(f"/confirm {card.action.id[:8]}")
        assert isinstance(done, ActionDone) and done.tool_result.startswith("wrote")
        assert target.read_text() == "keep\nnew line\n"
        # the new file asks too (ask mode, docs/permissions.md#modes), with no diff
        assert isinstance(fresh, ActionCard) and fresh.change is None
        assert not (world.workspace / "fresh.txt").exists()
        runner.shown(fresh)
        (done, answer) = runner.command("/confirm")
        assert isinstance(answer, Answer) and answer.text == "Created."
        assert (world.workspace / "fresh.txt").read_text() == "hello\n"
        assert result_of(server, "w2").startswith("wrote")


def test_tools_confirm_listing_write_asks_for_a_new_file_too(world):
    (world.workspace / "lily.toml").write_text('[tools]\nconfirm = ["write"]\n')
    with ScriptedServer([call("write", {"path": "new.txt", "content": "x"}, "w1")]) as server:
        runner = start(world, server)
        (card,) = cards(ask(runner, "make a file"))
        assert card.change is None and not (world.workspace / "new.txt").exists()
        assert "change to the file" not in render.markdown(card)


def test_the_card_shows_origin_server_hints_and_redacted_arguments_in_full(world):
    def lookup(query: str) -> str:
        """Look something up on a remote server."""
        return f"found {query}"
    remote = Tool("lookup", lookup, "Look something up on a remote server.", origin="mcp",
                  server="search-srv", ask=True,
                  annotations={"readOnlyHint": True, "openWorldHint": True})
    long = f"token {KEY} " + "x" * 30_000 + " <script>alert(1)</script>"
    with ScriptedServer([call("lookup", {"query": long}, "q1")]) as server:
        runner = start(world, server, extra_tools=[remote])
        (card,) = cards(ask(runner, "look it up"))
    assert KEY not in card.arguments and "token ***" in card.arguments
    assert json.loads(card.arguments)["query"] == long.replace(KEY, "***")  # all of it
    assert "not shown" not in card.arguments
    md = render.markdown(card)
    assert "| `lookup` | MCP server search-srv | read-only, open world |" in md
    assert "<script>" not in md.split("```json", 1)[0]  # outside the code block: nothing raw
    from lily_kernel.jupyter.display import card_html
    page = card_html(card)
    assert "<script>" not in page and "&lt;script&gt;" in page  # shown, escaped
    assert "MCP server search-srv" in page and KEY not in page


def test_html_in_a_tool_name_or_arguments_is_escaped_on_the_card(world):
    def go(code: str) -> str:
        """Run."""
        return "ran"
    evil = Tool("evil<b>x</b>", go, "Runs <img src=x onerror=alert(1)>.", origin="mcp",
                server="<i>srv</i>", ask=True)
    with ScriptedServer([call("evil<b>x</b>", {"code": "</pre><script>x()</script>"},
                              "e1")]) as server:
        runner = start(world, server, extra_tools=[evil])
        (card,) = cards(ask(runner, "go"))
    from lily_kernel.jupyter.display import card_html
    page = card_html(card)
    for raw in ("<script>", "<img", "<b>x</b>", "<i>srv</i>", "</pre><script>"):
        assert raw not in page
    md = render.markdown(card)
    head = re.sub(r"`[^`\n]*`", "", md.split("```json")[0])  # code spans show text as is
    assert not re.search(r"(?<!\\)<(img|i>|b>)", head), head


# -- deciding -----------------------------------------------------------------------------

def test_always_this_session_skips_the_card_for_that_tool_only_until_new(world):
    target = world.workspace / "a.txt"
    target.write_text("one\n")
    script = [call("write", {"path": "a.txt", "content": "two\n"}, "w1"), "Done once.",
              call("write", {"path": "a.txt", "content": "three\n"}, "w2"), "Done again.",
              call("write", {"path": "a.txt", "content": "four\n"}, "w3"), "Asks again."]
    with ScriptedServer(script) as server:
        runner = start(world, server, journal=True)
        (card,) = cards(ask(runner, "two"))
        assert card.change is not None
        done, answer = runner.command("/confirm --always")
        assert "without a card for the rest of this session" in done.summary
        assert target.read_text() == "two\n" and answer.text == "Done once."
        assert cards(ask(runner, "three")) == [] and target.read_text() == "three\n"
        records = [json.loads(line) for line in
                   runner.session.journal.path.read_text().splitlines()]
        assert {"event": "tool_approved", "tool": "write", "until": "/new"}.items() <= \
            next(r for r in records if r["event"] == "tool_approved").items()
        list(runner.command("/new"))
        assert runner.session.approved == {}
        (again,) = cards(ask(runner, "four"))
        assert again.action.tool == "write" and target.read_text() == "three\n"


def test_run_python_stays_always_asked(world):
    book = Book()
    script = [call("run_python", {"code": "x = 1"}, "r1"), "Fine.",
              call("run_python", {"code": "x = 2"}, "r2")]
    with ScriptedServer(script) as server:
        runner = start(world, server, book)
        (card,) = cards(ask(runner, "run it"))
        assert "--always" not in render.markdown(card)
        with pytest.raises(CommandError) as info:
            list(runner.command("/confirm --always"))
        assert info.value.line() == ("Error: --always is refused: run_python is always asked: "
                                     "it runs code in your namespace (in the sandbox, where "
                                     "one is usable, it runs without a card); /confirm runs "
                                     "this call once.")
        assert book.ran == [] and runner.session.pending is card.action
        _, answer = runner.command("/confirm")
        assert book.ran == ["x = 1"] and answer.text == "Fine."
        (card2,) = cards(ask(runner, "again"))  # still asked
        assert card2.action.args == {"code": "x = 2"} and book.ran == ["x = 1"]


def test_deny_answers_the_model_declined_by_the_user(world):
    book = Book()
    with ScriptedServer([call("run_python", {"code": "boom()"}, "r1"),
                         "Understood."]) as server:
        runner = start(world, server, book)
        (card,) = cards(ask(runner, "run it"))
        (done,) = runner.command(f"/cancel {card.action.id}")
        assert "did not run" in done.summary and book.ran == []
        (answer,) = ask(runner, "next")  # the model reads the answer to its call
        assert answer.text == "Understood."
        assert result_of(server, "r1") == "declined by the user"
        assert_consistent(runner.session.conversation)


def test_buttons_and_commands_take_the_same_path(world, monkeypatch):
    from lily_kernel.commands import router
    seen = []
    decide = router.decide
    monkeypatch.setattr(router, "decide", lambda session, ref, ok, always=False, *route:
                        seen.append((ref, ok, always)) or decide(session, ref, ok, always, *route))
    book = Book()
    with ScriptedServer([call("run_python", {"code": "a"}, "r1"), "Ran a.",
                         call("run_python", {"code": "b"}, "r2")]) as server:
        runner = start(world, server, book)
        (card,) = cards(ask(runner, "a"))
        done = runner.decide(card.action.id, True)  # a button
        assert next(iter(runner.resume(done))).text == "Ran a."
        cards(ask(runner, "b"))
        list(runner.command("/cancel"))
    assert seen == [(card.action.id, True, False), (None, False, False)]


# -- issue 15.6: /confirm carries out only what the user saw ---------------------------------

def test_a_card_never_displayed_leaves_nothing_waiting(world):
    book = Book()
    with ScriptedServer([call("run_python", {"code": "hidden()"}, "r1"),
                         "Next answer."]) as server:
        runner = start(world, server, book)
        (card,) = cards(ask(runner, "run it", show=False))  # the face failed to show it
        with pytest.raises(CommandError, match="nothing is waiting for confirmation"):
            list(runner.command("/confirm"))
        with pytest.raises(CommandError, match="nothing is waiting"):
            runner.decide(card.action.id, True)
        assert book.ran == []
        (answer,) = ask(runner, "something else")  # the next request withdraws it
        assert answer.text == "Next answer."
        assert result_of(server, "r1").startswith("Error: not run: the request ended")
        assert_consistent(runner.session.conversation)


def test_confirm_and_cancel_take_one_id_and_always_only_with_confirm(world):
    book = Book()
    with ScriptedServer([call("run_python", {"code": "z"}, "r1")]) as server:
        runner = start(world, server, book)
        (card,) = cards(ask(runner, "z"))
        ref = card.action.id[:8]
        for cell, line in [
                (f"/confirm {ref} {ref}", f"Error: /confirm takes a card's id and, for /confirm, "
                                          f"--always; not '{ref} {ref}'."),
                ("/confirm -x", "Error: /confirm takes a card's id and, for /confirm, --always; "
                                "not '-x'."),
                (f"/cancel {ref} --always", "Error: --always goes with /confirm, not /cancel."),
                ("/confirm abc", "Error: card abc is no longer waiting (it was cancelled, "
                                 f"declined or done); card {ref} waits: /confirm {ref} or "
                                 f"/cancel {ref}.")]:
            with pytest.raises(CommandError) as info:
                list(runner.command(cell))
            assert info.value.line() == line
        assert book.ran == [] and runner.session.pending is card.action
        list(runner.command(f"/cancel {ref.upper()}"))  # ids are hex: any case
        assert runner.session.pending is None and book.ran == []


def test_hidden_characters_in_a_tool_name_server_or_arguments_are_shown_and_warned(world):
    """docs/permissions.md#cards: what the card draws is what runs."""
    def go(path: str) -> str:
        """Delete a file."""
        return "gone"
    evil = Tool("tidy\u202eyfit", go, "Tidy up\u200b.", origin="mcp", server="notes\u2066x",
                ask=True)
    with ScriptedServer([call("tidy\u202eyfit", {"path": "a\u200bb.txt\u0007"}, "h1")]) as server:
        runner = start(world, server, extra_tools=[evil])
        (card,) = cards(ask(runner, "tidy"))
    md, text = render.markdown(card), render.text(card)
    for shown in (md, text):
        assert shown.splitlines()[0].lstrip("*").startswith("Warning: this call holds")
        for mark in ("⟨U+202E⟩", "⟨U+200B⟩", "⟨U+2066⟩"):
            assert mark in shown, (mark, shown)
        assert "\\u0007" in shown  # JSON already writes a control character as its escape
        assert not set(shown) & {"\u202e", "\u200b", "\u2066", "\u0007"}
    from lily_kernel.jupyter.display import card_html
    page = card_html(card)
    assert "⟨U+202E⟩" in page and "\u202e" not in page and "Warning" in page


def test_a_run_python_card_shows_its_code_once_with_a_hint_that_fits(world):
    """Issue 34 §6: not the code twice (JSON and highlighted), not MCP's default hints."""
    from lily_kernel.jupyter.display import card_bundle
    code = "total = max([3, 9, 4])\nprint(total)"
    with ScriptedServer([call("run_python", {"code": code}, "r1")]) as server:
        runner = start(world, server)
        (card,) = cards(ask(runner, "run it"))
        for shown in (render.markdown(card), render.text(card),
                      card_bundle(card)["text/html"]):
            assert shown.count("print") == 1, shown  # the code once
            assert "Arguments:" not in shown and "destructive" not in shown
            assert "runs code in your kernel" in shown
        assert "Nothing runs until you decide" in render.markdown(card)


def test_a_decided_card_reads_as_decided_when_saved(world):
    """Issue 34 §6: a card decided by a typed /confirm (or a click) no longer says
    "Nothing runs until you decide" in what the notebook saves."""
    from lily_kernel.jupyter.display import card_bundle
    with ScriptedServer([call("run_python", {"code": "x = 1"}, "r1")]) as server:
        runner = start(world, server)
        (card,) = cards(ask(runner, "run it"))
        typed = card_bundle(card, (), "Decided in another cell (/confirm).")
        clicked = card_bundle(card, (("Ran.", "Ran.", "<p>Ran.</p>"),))
        for bundle in (typed, clicked):
            for mime in ("text/plain", "text/markdown", "text/html"):
                assert "Nothing runs until" not in bundle[mime], bundle[mime]
                assert "Decided" in bundle[mime]
        assert "Decided in another cell (/confirm)." in typed["text/markdown"]
    assert "Decided: Decided" not in typed["text/markdown"]
