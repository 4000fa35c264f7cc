"""Loop hygiene (docs/agent.md#loop-hygiene), replaying the failure shapes a small local
model showed in a real run (issue 30): an empty answer after a tool step, the same call
seven times, a skill loaded eight times, a rewrite with the same content, arguments a tool
does not take, an expression for a variable name, an answer that echoes itself.

Lily's real loop and the real ``openai`` client against the scripted server on 127.0.0.1.
"""
from __future__ import annotations

import json

import pytest
from agent_support import World, assert_consistent, run_shown

from lily_kernel.agent import hygiene, loop
from lily_kernel.commands.results import Answer
from lily_kernel.tools import notebook_tools

pytestmark = pytest.mark.usefixtures("no_machine_model")


@pytest.fixture
def world(tmp_path) -> World:
    world = World(tmp_path)
    (world.workspace / "notes.txt").write_text("NOTES-MARK\n")
    return world


def call(name: str, args: dict, id: str) -> dict:
    return {"tool_calls": [{"name": name, "arguments": args, "id": id}]}


def results_by_id(messages: list[dict]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in messages if m.get("role") == "tool"}


# -- an empty final answer -------------------------------------------------------------

def test_an_empty_answer_after_a_tool_step_is_asked_for_once_more(world, server):
    server.add(call("read", {"path": "notes.txt"}, "r"), "", "The notes say NOTES-MARK.")
    session = world.session(server)
    reply = loop.run(session, "what do the notes say?")
    assert reply.text == "The notes say NOTES-MARK." and reply.notes == []
    again = server.chat_requests()[2]["messages"]
    assert again[-1] == hygiene.ASK_AGAIN and again[-2]["role"] == "tool"
    # the one-off request and the empty answer are not kept in the conversation
    assert hygiene.ASK_AGAIN not in session.conversation
    assert [m["role"] for m in session.conversation] == ["user", "assistant", "tool",
                                                        "assistant"]
    assert_consistent(session.conversation)


def test_still_empty_the_last_tool_result_is_shown_with_a_note(world, server):
    server.add(call("read", {"path": "notes.txt"}, "r"), "", "  ")
    session = world.session(server)
    reply = loop.run(session, "what do the notes say?")
    assert "NOTES-MARK" in reply.text and "no final answer" in reply.text
    assert "from `read`" in reply.text
    assert reply.notes == ["no final answer: the last tool result is shown"]
    assert len(server.chat_requests()) == 3  # asked once more, not again
    answer = Answer(reply.text, reply.skill, tuple(reply.tools_used), "m", None, (0, 0),
                    tuple(reply.notes))
    assert answer.text.strip() and "no final answer" in answer.footer()  # never a footer alone
    assert_consistent(session.conversation)


def test_the_result_shown_is_the_last_real_one_not_an_already_answered(world, server):
    server.add(call("read", {"path": "notes.txt"}, "r1"), call("read", {"path": "notes.txt"},
                                                              "r2"), "", "")
    reply = loop.run(world.session(server), "notes?")
    assert "NOTES-MARK" in reply.text and "Already answered" not in reply.text


def test_an_empty_answer_without_tool_steps_says_so(world, server):
    server.add("")
    session = world.session(server)
    reply = loop.run(session, "hello")
    assert reply.text == "*(The model's answer was empty.)*"
    assert len(server.chat_requests()) == 1


def test_a_shown_tool_result_cannot_break_out_of_its_fence(world, server):
    (world.workspace / "ticks.txt").write_text("```\n# HEADING-MARK\n````")
    server.add(call("read", {"path": "ticks.txt"}, "r"), "", "")
    reply = loop.run(world.session(server), "read ticks")
    fence = reply.text.split("\n\n", 1)[1].split("text\n", 1)[0]
    assert fence == "`````" and reply.text.endswith("\n`````")


# -- identical calls, a skill loaded again ------------------------------------------------

def test_an_identical_call_is_not_run_again_in_the_same_request(world, server):
    ran: list[int] = []
    session = world.session(server)

    @session.tools.register(name="read_cells", annotations={"readOnlyHint": True})
    def read_cells(last: int = 5) -> str:
        """The last cells."""
        ran.append(last)
        return f"CELLS-{last}"

    server.add(*[call("read_cells", {"last": 1}, f"c{i}") for i in range(3)],
               call("read_cells", {"last": 2}, "other"), "Done.")
    reply = loop.run(session, "look at the last cell")
    assert reply.text == "Done." and ran == [1, 2]
    results = results_by_id(session.conversation)
    assert results["c0"] == "CELLS-1" and results["other"] == "CELLS-2"
    for key in ("c1", "c2"):
        assert results[key].startswith("Already answered: read_cells {\"last\": 1}")
    # the next request runs it again: the notebook may have changed
    server.add(call("read_cells", {"last": 1}, "next"), "Again.")
    loop.run(session, "and now?")
    assert ran == [1, 2, 1]


def test_a_call_that_changes_something_forgets_earlier_answers(world, server):
    session = world.session(server)
    server.add(call("read", {"path": "new.txt"}, "r1"),
               call("write", {"path": "new.txt", "content": "NEW-MARK"}, "w"),
               call("read", {"path": "new.txt"}, "r2"), "ok")
    loop.run(session, "write then read")
    results = results_by_id(session.conversation)
    assert results["r1"].startswith("Error:") and results["r2"] == "NEW-MARK"


def test_loading_the_loaded_skill_again_answers_already_loaded(world, server):
    folder = world.skills / "fix_error"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: fix_error\ndescription: Fix it.\n---\n"
                                     + "FIX-BODY-MARK " * 200 + "\n")
    session = world.session(server)
    server.add(*[call("load_skill", {"name": "fix_error"}, f"l{i}") for i in range(5)], "Fixed.")
    reply = loop.run(session, "fix the error")
    assert reply.text == "Fixed." and reply.skill == "fix_error"
    results = results_by_id(session.conversation)
    assert "FIX-BODY-MARK" in results["l0"]
    for i in range(1, 5):
        assert "FIX-BODY-MARK" not in results[f"l{i}"] and "already loaded" in results[f"l{i}"]
    # the forced skill (/fix_error): its body is in the request already
    server.add(call("load_skill", {"name": "fix_error"}, "forced"), "Done.")
    from agent_support import run_command
    run_command(session, "/skill fix_error now")
    assert "already loaded" in results_by_id(server.chat_requests()[-1]["messages"])["forced"]


# -- a write that changes nothing ----------------------------------------------------

def test_a_write_that_changes_nothing_answers_no_change_without_a_card(world, server):
    session = world.session(server)
    before = (world.workspace / "notes.txt").stat().st_mtime_ns
    server.add(*[call("write", {"path": "notes.txt", "content": "NOTES-MARK\n"}, f"w{i}")
                 for i in range(2)], "Nothing to change.")
    reply = run_shown(session, "save the notes")
    assert reply.proposal is None and session.pending is None  # no card
    results = results_by_id(session.conversation)
    assert results["w0"].startswith("no change: notes.txt already holds exactly this content")
    assert results["w1"].startswith("Already answered")
    assert (world.workspace / "notes.txt").stat().st_mtime_ns == before  # nothing written
    # a real change still asks
    server.add(call("write", {"path": "notes.txt", "content": "CHANGED\n"}, "w2"))
    reply = run_shown(session, "change the notes")
    assert reply.proposal is not None and reply.proposal.tool == "write"


def test_a_write_that_changes_nothing_asks_nothing_even_when_write_is_confirmed(world, server):
    (world.workspace / "lily.toml").write_text('[tools]\nconfirm = ["write"]\n')
    session = world.session(server)
    server.add(call("write", {"path": "notes.txt", "content": "NOTES-MARK\n"}, "w"), "ok")
    assert run_shown(session, "save").proposal is None


# -- arguments ------------------------------------------------------------------------

def test_extra_arguments_to_a_tool_that_takes_none_are_dropped_and_said(world, server):
    session = world.session(server)
    ran: list[str] = []

    @session.tools.register(name="last_error", annotations={"readOnlyHint": True})
    def last_error() -> str:
        """The last failed cell."""
        ran.append("x")
        return "NameError: name 'x' is not defined"

    server.add(call("last_error", {"error": "NameError"}, "e"), "Define x first.")
    reply = loop.run(session, "what was the last error?")
    assert reply.text == "Define x first." and ran == ["x"]
    result = results_by_id(session.conversation)["e"]
    assert result.startswith("(Note: last_error takes no arguments; it ran without error.)")
    assert "NameError: name 'x'" in result


def test_an_argument_error_names_the_signature_and_an_example(world, server):
    session = world.session(server)
    server.add({"tool_calls": [
        {"name": "read", "arguments": {"file": "notes.txt"}, "id": "unknown"},
        {"name": "write", "arguments": {"path": "a.txt"}, "id": "missing"},
        {"name": "list", "arguments": {"path": 3}, "id": "type"},
        {"name": "load_skill", "arguments": {}, "id": "builtin"}]}, "ok")
    loop.run(session, "go")
    results = results_by_id(session.conversation)
    assert results["unknown"] == (
        "Error: read: missing required argument(s): path; the signature is "
        'read(path: string); for example: {"name": "read", "arguments": {"path": "<path>"}}')
    assert "write(path: string, content: string)" in results["missing"]
    assert '{"path": "<path>", "content": "<content>"}' in results["missing"]
    assert 'list(path: string = ".")' in results["type"]
    assert "load_skill(name: string)" in results["builtin"]


def test_an_expression_for_a_variable_name_names_the_variable():
    class Book:
        ns = {"df": {"y": [1, 2]}}

        def namespace(self):
            return self.ns

        def hidden(self):
            return {}

    with pytest.raises(notebook_tools.ToolError) as caught:
        notebook_tools.inspect_variable(Book(), "df['y']")
    assert "is an expression" in str(caught.value)
    assert 'inspect_variable(name="df")' in str(caught.value)
    with pytest.raises(notebook_tools.ToolError) as caught:
        notebook_tools.inspect_variable(Book(), "nothing.here")
    assert "no variable named 'nothing.here'" in str(caught.value)


# -- max_tokens and the repetition guard ----------------------------------------------

def test_a_local_endpoint_gets_a_1024_token_answer_cap_by_default(world, server):
    server.add("hi", "hi")
    loop.run(world.session(server, LILY_CONTEXT_WINDOW="32768"), "hello")
    assert server.chat_requests()[0]["max_tokens"] == 1024
    loop.run(world.session(server, LILY_CONTEXT_WINDOW="32768", LILY_MAX_TOKENS="3000"), "x")
    assert server.chat_requests()[1]["max_tokens"] == 3000


def test_an_answer_that_repeats_itself_is_stopped(world, server):
    sentence = "I will now list the files in the folder. "
    server.add({"content": "Sure. " + sentence * 60, "chunks": 120})
    session = world.session(server)
    shown: list[str] = []
    reply = loop.run(session, "list", on_text=shown.append)
    assert reply.text.startswith("Sure. I will now list the files in the folder")
    assert reply.text.count("I will now") == 1  # one copy is kept
    assert reply.notes == ["answer stopped: it repeated itself"]
    assert len("".join(shown)) < len(sentence) * 20  # stopped early (600 characters), not
    # at the end
    assert_consistent(session.conversation)


def test_an_answer_that_echoes_the_tool_list_is_stopped(world, server):
    from lily_kernel.agent.request import offered_tools
    session = world.session(server)
    names = [t["function"]["name"] for t in offered_tools(session)]
    echo = "".join(f"- {name}: a tool ({i})\n" for i in range(20) for name in names)
    server.add({"content": "My tools:\n" + echo, "chunks": 60})
    reply = loop.run(session, "what can you do?")
    assert reply.notes == ["answer stopped: it repeated the tool list"]
    assert len(reply.text) < len(echo) // 5


@pytest.mark.parametrize("text", [
    "ha " * 300,  # a short chunk repeated: not a runaway
    'print("Hello, world!")\n' * 12,  # a line repeated on purpose
    "-" * 2000,
    "| a | b |\n| --- | --- |\n" + "".join(f"| row {i} | value {i * i} |\n" for i in range(200)),
    "My tools: load_skill, read, write, list, scan_todos and compile_plan. " + "x" * 500,
])
def test_answers_that_are_not_runaways_are_not_stopped(world, server, text):
    server.add({"content": text, "chunks": 50})
    reply = loop.run(world.session(server), "go")
    assert reply.text == text and reply.notes == []


def test_the_repetition_rule():
    chunk = "".join(f"w{i} " for i in range(50))  # 190 characters: 4 copies make a runaway
    assert hygiene.repeated_tail("intro " + chunk * 4) == 190
    assert hygiene.repeated_tail("intro " + chunk * 3) == 0
    line = 'print("Hello, world!")\n'  # 23 characters: 27 copies (600) make one
    assert hygiene.repeated_tail(line * 10) == 0 and hygiene.repeated_tail(line * 27) == 23
    assert hygiene.repeated_tail("ab" * 500) == 0
    assert hygiene.repeated_tail("") == 0


def test_what_the_guard_held_back_is_shown_once_it_is_not_a_call():
    shown: list[str] = []
    guard = hygiene.AnswerGuard(shown.append, ["read"])
    for piece in ["{", '"a": ', "1}"]:
        guard.feed(piece)
    assert shown == []
    guard.release()
    assert shown == ['{"a": 1}']
    shown.clear()
    guard = hygiene.AnswerGuard(shown.append, ["read"])
    for piece in ["```", "python\n", "x = 1\n```"]:
        guard.feed(piece)
    assert "".join(shown) == "```python\nx = 1\n```"  # shown as it streams
    assert json.dumps(hygiene.ASK_AGAIN)  # plain JSON data
