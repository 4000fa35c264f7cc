"""The loop rules a real 1.5B model was seen to need (issue 30, bench/README.md's "Every
failure in one line"), each replayed against the scripted server in the shape the model
really wrote, with a guard test for what must not trigger (docs/agent.md#loop-hygiene).

Lily's real loop and the real ``openai`` client against the scripted server on 127.0.0.1;
the notebook tools run on a small in-memory notebook (no kernel).
"""
from __future__ import annotations

import pytest
from agent_support import World, assert_consistent, skill_request

from lily_kernel.agent import loop
from lily_kernel.session.session import Session
from lily_kernel.tools import notebook_tools

pytestmark = pytest.mark.usefixtures("no_machine_model")

FIX_SKILL = ("---\nname: fix_error\ndescription: Fix the last error.\ncommand: fix\n"
             "requires_tools:\n  - last_error\n  - propose_cell\n---\nFIX-BODY-MARK\n")


class Book:
    """A notebook without a kernel: a namespace, no failed cell."""

    def __init__(self, ns: dict | None = None) -> None:
        self.ns = ns if ns is not None else {"df": {"x": [1, 2]}, "threshold": 42}

    def namespace(self):
        return self.ns

    def hidden(self):
        return {}

    def last_error(self):
        return None

    def cells(self, last):
        return []


@pytest.fixture
def world(tmp_path) -> World:
    world = World(tmp_path)
    (world.workspace / "notes.txt").write_text("NOTES-MARK\n")
    (world.workspace / "data").mkdir()
    (world.workspace / "data" / "cities.csv").write_text("city,population\nA,1\n")
    folder = world.skills / "fix_error"
    folder.mkdir()
    (folder / "SKILL.md").write_text(FIX_SKILL)
    return world


def notebook_session(world: World, server, book: Book | None = None, **env: str) -> Session:
    nb = book or Book()
    return Session(workspace=world.workspace, env=world.env(server, **env), journal=False,
                   add_tools=lambda s: notebook_tools.register(s.tools, nb, lambda: True))


def call(name: str, args: dict, id: str) -> dict:
    return {"tool_calls": [{"name": name, "arguments": args, "id": id}]}


def results(messages: list[dict]) -> list[str]:
    return [m["content"] for m in messages if m.get("role") == "tool"]


# -- 1. the request's own skill called as a tool ----------------------------------------

def test_the_forced_skill_written_as_a_call_answers_which_tool_to_call(world, server):
    """/fix, and the model writes ``{"name": "fix_error", …}`` as text (the real shape):
    not an unknown tool, not the body again, but the skill's tools and an example."""
    server.add('```json\n{\n  "name": "fix_error",\n  "arguments": {\n    "code": '
               '"print(\'Hello, world!\')"\n  }\n}\n```',
               call("last_error", {}, "e"), "Nothing has failed.")
    session = notebook_session(world, server)
    reply = loop.run(session, "", skill=skill_request(session, "/fix"))
    assert reply.text == "Nothing has failed." and reply.skill == "fix_error"
    assert reply.tools_used == ["last_error"]
    first = results(server.chat_requests()[1]["messages"])[0]
    assert "already loaded" in first and "it is not a tool" in first
    assert "FIX-BODY-MARK" not in first and "Error" not in first
    assert "(last_error, propose_cell), first last_error: " in first
    assert '{"name": "last_error", "arguments": {}}' in first
    assert_consistent(session.conversation)


def test_a_loaded_skill_called_as_a_structured_tool_answers_the_same(world, server):
    server.add(call("load_skill", {"name": "fix_error"}, "l"),
               call("fix_error", {"last": 0}, "f"), "ok")
    session = notebook_session(world, server)
    reply = loop.run(session, "fix my error")
    assert reply.skill == "fix_error" and reply.tools_used == []
    loaded, again = results(session.conversation)
    assert "FIX-BODY-MARK" in loaded
    assert again.startswith("Skill 'fix_error' is already loaded") and "last_error" in again


def test_another_skill_called_as_a_tool_loads_as_load_skill_would(world, server):
    """Guard: the name of a skill that is not the request's is no shortcut around
    load_skill's rules: with no skill yet it loads; under another one it is refused."""
    folder = world.skills / "other"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: other\ndescription: Other.\n---\nOTHER-MARK\n")
    server.add(call("other", {}, "o"), "ok")
    session = notebook_session(world, server)
    assert loop.run(session, "do it").skill == "other"
    assert "OTHER-MARK" in results(session.conversation)[0]
    server.add(call("other", {}, "o2"), "ok")
    loop.run(session, "", skill=skill_request(session, "/fix"))
    refused = results(server.chat_requests()[-1]["messages"])[-1]
    assert refused.startswith("Error:") and "already uses skill 'fix_error'" in refused


def test_a_name_neither_tool_nor_skill_stays_unknown(world, server):
    """Guard: only a skill's name is answered; any other unknown name is an error."""
    server.add(call("fix_everything", {}, "x"), "ok")
    session = notebook_session(world, server)
    loop.run(session, "", skill=skill_request(session, "/fix"))
    [answer] = results(session.conversation)
    assert answer.startswith("Error:") and "already loaded" not in answer


# -- 5. a tool's Python function name --------------------------------------------------

def test_a_tool_called_by_its_function_name_runs_as_the_tool(world, server):
    """The real list_files shape: ``list`` is registered from ``def list_files``."""
    server.add('```json\n{\n  "name": "list_files",\n  "arguments": {\n    "path": "."\n  }\n}'
               '\n```', call("read_file", {"path": "notes.txt"}, "r"), "Two files.")
    session = notebook_session(world, server)
    reply = loop.run(session, "which files are in this folder?")
    assert reply.text == "Two files." and reply.tools_used == ["list", "read"]
    listed, read = results(session.conversation)
    assert "notes.txt" in listed and "data/" in listed and read == "NOTES-MARK\n"
    assert "tool name list_files taken as list" in reply.notes
    assert "tool name read_file taken as read" in reply.notes
    names = [c["function"]["name"] for m in session.conversation
             for c in m.get("tool_calls") or []]
    assert names == ["list", "read"]  # the conversation keeps the tool's own name
    assert_consistent(session.conversation)


def test_a_function_name_is_no_alias_for_a_tool_not_offered(world, server):
    """Guard: the small profile does not offer ``list``, so ``list_files`` stays unknown;
    a tool the policy denies gets no alias either."""
    server.add(call("list_files", {"path": "."}, "l"), "ok")
    session = notebook_session(world, server, LILY_CONTEXT_WINDOW="4096")
    reply = loop.run(session, "files?")
    offered = [t["function"]["name"] for t in server.chat_requests()[0]["tools"]]
    assert "read" in offered and "list" not in offered
    [answer] = results(session.conversation)
    assert answer.startswith("Error:") and reply.tools_used == [] and reply.notes == []
    server.add(call("read_file", {"path": "notes.txt"}, "r"), "ok")
    denied = notebook_session(world, server, LILY_TOOLS_DENY="read")
    loop.run(denied, "read")
    [answer] = results(denied.conversation)
    assert answer.startswith("Error:") and "NOTES-MARK" not in answer


def test_an_ambiguous_function_name_is_no_alias(world, server):
    """Guard: two offered tools from functions of the same name: neither is guessed."""
    session = notebook_session(world, server)

    def make(tag: str):
        def fetch(key: str) -> str:
            """Fetch."""
            return tag
        return fetch

    session.tools.register(make("A"), name="fetch_a", origin="notebook")
    session.tools.register(make("B"), name="fetch_b", origin="notebook")
    server.add(call("fetch", {"key": "k"}, "f"), "ok")
    loop.run(session, "fetch")
    [answer] = results(session.conversation)
    assert answer.startswith("Error:")


# -- 3. a call shown inside prose ---------------------------------------------------------

SHOWN = ('To find the value of the threshold, you can use the `inspect_variable` function to '
         "get the variable's value and then analyze it. Here's an example of how you can do "
         'it:\n\n```json\n{\n  "name": "inspect_variable",\n  "arguments": {\n    "name": '
         '"threshold"\n  }\n}\n```\n\nThis will return a summary of the variable.')


def test_a_call_shown_inside_prose_gets_one_nudge_to_make_it(world, server):
    """The real inspect shape: the right call, shown as an example inside prose."""
    server.add(SHOWN, call("inspect_variable", {"name": "threshold"}, "i"), "It is 42.")
    session = notebook_session(world, server)
    reply = loop.run(session, "what is the value of threshold?")
    assert reply.text == "It is 42." and reply.tools_used == ["inspect_variable"]
    assert reply.notes == ["asked the model to make the call it showed"]
    nudge = server.chat_requests()[1]["messages"][-1]
    assert nudge["role"] == "user" and "showed a call to inspect_variable" in nudge["content"]
    assert '{"name": "threshold"}' in nudge["content"]
    # the one-off message and the shown answer are not kept; nothing ran from the prose
    assert all("showed a call" not in str(m.get("content")) for m in session.conversation)
    assert all("Here's an example" not in str(m.get("content")) for m in session.conversation)
    assert [m["role"] for m in session.conversation] == ["user", "assistant", "tool",
                                                        "assistant"]
    assert_consistent(session.conversation)


def test_the_nudge_comes_once_then_the_answer_is_shown(world, server):
    server.add(SHOWN, SHOWN)
    session = notebook_session(world, server)
    reply = loop.run(session, "what is the value of threshold?")
    assert reply.text == SHOWN and reply.tools_used == []
    assert len(server.chat_requests()) == 2  # nudged once, never twice


@pytest.mark.parametrize("text", [
    # JSON data, not a call
    'The config looks like this:\n```json\n{"a": 1, "b": [1, 2]}\n```\nEdit it as you like.',
    # a call to a tool this request does not offer
    'You could run:\n```json\n{"name": "delete_all", "arguments": {}}\n```\nto clean up.',
    # two fences: an explanation with examples, not one shown call
    'Either\n```json\n{"name": "read", "arguments": {"path": "a"}}\n```\nor\n```json\n'
    '{"name": "list", "arguments": {}}\n```',
    # code for the user to run
    "To get the rows:\n```python\ndf.shape[0]\n```\nThis returns the number of rows.",
    # a call mentioned in a sentence, not fenced
    'Call {"name": "read", "arguments": {"path": "notes.txt"}} to read it.',
])
def test_text_that_only_mentions_json_is_never_nudged(world, server, text):
    server.add(text)
    session = notebook_session(world, server)
    reply = loop.run(session, "how?")
    assert reply.text == text and reply.tools_used == [] and reply.notes == []
    assert len(server.chat_requests()) == 1


# -- 4. a file's name given for a variable's -------------------------------------------------

def files_session(world: World, server, book: Book | None = None) -> Session:
    nb = book or Book()
    return Session(workspace=world.workspace, env=world.env(server), journal=False,
                   add_tools=lambda s: notebook_tools.register(
                       s.tools, nb, lambda: True, lambda path: s.files.list(path)))


def test_inspect_variable_on_a_file_names_the_read_tool(world, server):
    """The real notes_summary shape: inspect_variable("notes.txt"), then (told) read."""
    server.add(call("inspect_variable", {"name": "notes.txt"}, "i1"),
               call("inspect_variable", {"name": "data/cities.csv"}, "i2"),
               call("inspect_variable", {"name": "cities"}, "i3"),
               call("read", {"path": "notes.txt"}, "r"), "The notes say NOTES-MARK.")
    session = files_session(world, server)
    reply = loop.run(session, "read notes.txt and summarise it")
    assert reply.text == "The notes say NOTES-MARK."
    first, second, third, read = results(session.conversation)
    assert first == ("Error: 'notes.txt' is a file in the workspace, not a notebook variable: "
                     'read it with read(path="notes.txt")')
    assert 'read(path="data/cities.csv")' in second
    assert "'cities' is not a variable; cities.csv" not in third  # cities.csv is in data/
    assert read == "NOTES-MARK\n"
    (world.workspace / "cities.csv").write_text("city\n")
    server.add(call("inspect_variable", {"name": "cities"}, "c"), "ok")
    loop.run(session, "largest city?")
    assert ("'cities' is not a variable; cities.csv is a file in the workspace" in
            results(session.conversation)[-1])
    assert_consistent(session.conversation)


def test_a_variable_wins_and_a_missing_file_is_just_no_variable(world, server):
    """Guard: a variable whose name looks like a file is inspected; a name with a suffix
    that is no file, an expression, and a path out of the workspace are not sent to read."""
    outside = world.base / "outside.txt"
    outside.write_text("OUTSIDE")
    book = Book({"df": {"y": [1, 2]}, "notes.txt": "a variable"})
    server.add(*[call("inspect_variable", {"name": n}, f"i{k}") for k, n in enumerate(
        ["notes.txt", "report.pdf", "df['y']", "../outside.txt", "df.y"])], "ok")
    session = files_session(world, server, book)
    loop.run(session, "inspect")
    var, missing, expression, escape, attribute = results(session.conversation)
    assert var.startswith("notes.txt: str")
    assert missing.startswith("Error: no variable named 'report.pdf'") and "read(" not in missing
    assert "is an expression" in expression and 'inspect_variable(name="df")' in expression
    assert escape.startswith("Error: no variable named") and "read(" not in escape
    assert "is an expression" in attribute


# -- 6. an empty final answer after tool steps ------------------------------------------

def test_an_echo_of_the_second_ask_shows_the_useful_result(world, server):
    """The real list_files and /fix shapes: a call, the same call again ("Already
    answered"), an empty answer, then the model repeats Lily's question instead of
    answering. The user sees the first useful result, quoted, with the note."""
    server.add(call("list", {"path": "."}, "l1"), call("list", {"path": "."}, "l2"),
               call("read", {"path": "missing.txt"}, "bad"), "", "Your last answer was empty.")
    session = notebook_session(world, server)
    reply = loop.run(session, "which files are in this folder?")
    assert "from `list`" in reply.text and "notes.txt" in reply.text and "data/" in reply.text
    assert "Already answered" not in reply.text and "Error" not in reply.text
    assert "Your last answer was empty" not in reply.text
    assert reply.notes == ["no final answer: the last tool result is shown"]
    from lily_kernel.commands.results import Answer
    answer = Answer(reply.text, reply.skill, tuple(reply.tools_used), "m", None, (0, 0),
                    tuple(reply.notes))
    assert answer.text.strip() and answer.footer()  # the footer never stands alone
    assert_consistent(session.conversation)


def test_a_skill_body_is_not_what_the_user_is_shown(world, server):
    server.add(call("load_skill", {"name": "fix_error"}, "l"), call("last_error", {}, "e"),
               "", "")
    session = notebook_session(world, server)
    reply = loop.run(session, "fix it")
    assert "No cell has failed" in reply.text and "from `last_error`" in reply.text
    assert "FIX-BODY-MARK" not in reply.text


def test_only_errors_still_show_the_last_one(world, server):
    """Guard: with nothing useful, the last result is still shown rather than nothing."""
    server.add(call("read", {"path": "missing.txt"}, "bad"), "", "")
    reply = loop.run(notebook_session(world, server), "read missing.txt")
    assert "from `read`" in reply.text and "Error:" in reply.text


@pytest.mark.parametrize("answer", ["There are no files in this folder.",
                                    "Your last answer was empty, so here it is: notes.txt.",
                                    "Answer."])
def test_a_real_answer_after_the_second_ask_is_shown_as_it_is(world, server, answer):
    """Guard: only a repetition of Lily's question counts as no answer."""
    server.add(call("list", {"path": "."}, "l"), "", answer)
    reply = loop.run(notebook_session(world, server), "files?")
    assert reply.text == answer and reply.notes == []
