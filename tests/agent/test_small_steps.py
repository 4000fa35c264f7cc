"""The small-model profile's step rules (docs/agent.md#small-model-profile), against the
ScriptedServer on 127.0.0.1, replaying what Qwen2.5-Coder-1.5B did (bench/README.md, issue 30):

- the first step requires a call: ``response_format`` admits only one call to an offered
  tool; the model's JSON answer runs as that call; later steps are free; an endpoint that
  refuses the parameter is asked again without it, and from then on;
- after a tool result the request is restated in what is sent, never in what is kept;
- ``write``, ``list``, ``run_python`` and ``read_cells`` come back when the request asks for
  what they do; "Say hello." stays lean.
"""
from __future__ import annotations

import pytest
from agent_support import World, run_shown

from lily_kernel.agent import loop, pending, small_steps
from lily_kernel.agent.request import Request
from lily_kernel.testing.server import ScriptedServer
from lily_kernel.tools import offering


def names(tools: list[dict]) -> list[str]:
    return [t["function"]["name"] for t in tools or []]


def admitted(request: dict) -> list[str]:
    """The tool names the request's response_format admits."""
    schema = request["response_format"]["json_schema"]["schema"]
    return [alt["properties"]["name"]["const"] for alt in schema["anyOf"]]


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    (w.workspace / "notes.txt").write_text("The launch moved to Thursday.\n", encoding="utf-8")
    return w


def test_the_first_small_step_requires_one_call_to_an_offered_tool_and_runs_it(world):
    # what the 1.5B model answered under the grammar: the call as bare JSON
    script = ['{\n  "name": "read",\n  "arguments": {\n    "path": "notes.txt"\n  }\n}',
              "The launch moved to Thursday."]
    with ScriptedServer(script) as server:
        session = world.session(server, LILY_PROFILE="small")
        reply = loop.run(session, "What do the files here say?")  # names none it holds
        first, second = server.chat_requests()
    assert reply.text == "The launch moved to Thursday." and reply.tools_used == ["read"]
    assert first["response_format"]["type"] == "json_schema"
    assert admitted(first) == names(first["tools"])  # exactly the offered tools
    alt = first["response_format"]["json_schema"]["schema"]["anyOf"][names(first["tools"]).index("read")]
    assert alt["properties"]["arguments"] == {"type": "object", "required": ["path"],
                                              "properties": {"path": {"type": "string"}}}
    assert alt["required"] == ["name", "arguments"] and alt["additionalProperties"] is False
    assert "response_format" not in second  # later steps are free
    assert reply.notes == []  # the required call is the answer asked for, not a text call


def test_the_full_profile_and_a_step_without_tools_require_nothing(world):
    with ScriptedServer(["Hello!"]) as server:
        loop.run(world.session(server, LILY_PROFILE="full"), "Say hello.")
        full = server.chat_requests()[0]
    assert "response_format" not in full
    read = [offering.spec("read", "Read.", {"type": "object"})]
    assert small_steps.required_call(1, True, []) is None  # nothing offered
    assert small_steps.required_call(2, True, read) is None  # a later step
    assert small_steps.required_call(1, False, read) is None  # the full profile


def test_an_endpoint_that_refuses_response_format_is_asked_without_it_from_then_on(world):
    with ScriptedServer(["Hello!", "Hi again!"], reject_params=["response_format"]) as server:
        session = world.session(server, LILY_PROFILE="small")
        assert loop.run(session, "Say hello.").text == "Hello!"
        assert loop.run(session, "Say hello again.").text == "Hi again!"
        sent = server.chat_requests()
    assert "response_format" in sent[0]  # refused: HTTP 400 naming it
    assert all("response_format" not in s for s in sent[1:]) and len(sent) == 3


def test_a_call_written_as_text_where_the_format_was_refused_says_so_in_the_footer(world):
    script = ['{"name": "read", "arguments": {"path": "notes.txt"}}', "Thursday."]
    with ScriptedServer(script, reject_params=["response_format"]) as server:
        reply = loop.run(world.session(server, LILY_PROFILE="small"), "When is the launch?")
    assert reply.text == "Thursday." and reply.notes == ["1 tool call read from text"]


def test_after_a_tool_result_the_request_is_restated_only_in_what_is_sent(world):
    script = ['{"name": "read", "arguments": {"path": "notes.txt"}}', "Thursday."]
    with ScriptedServer(script) as server:
        session = world.session(server, LILY_PROFILE="small")
        loop.run(session, "When is the launch? See notes.txt.")
        second = server.chat_requests()[1]
    sent = second["messages"][-1]
    assert sent["role"] == "tool"
    assert sent["content"].endswith("\n\n(The user asked: When is the launch? See notes.txt. "
                                    "Answer now from this result, in the form the request asks for.)")
    kept = [m for m in session.conversation if m.get("role") == "tool"]
    assert kept and "The user asked" not in kept[0]["content"]  # never in the conversation


def test_the_full_profile_sends_the_tool_result_as_it_is(world):
    script = [{"tool_calls": [{"id": "c1", "name": "read", "arguments": {"path": "notes.txt"}}]},
              "Thursday."]
    with ScriptedServer(script) as server:
        loop.run(world.session(server, LILY_PROFILE="full"), "When is the launch? notes.txt")
        second = server.chat_requests()[1]
    assert second["messages"][-1]["content"] == "The launch moved to Thursday.\n"


def test_a_forced_skill_is_restated_by_its_first_line_only(world):
    body = "Use the skill 'fix_error' for this request.\n\n<skill name=\"fix_error\">\n...long"
    messages = [{"role": "user", "content": body}, {"role": "tool", "content": "r"}]
    assert small_steps.request_of(messages) == "Use the skill 'fix_error' for this request."
    given = [{"role": "user", "content": body + "\n\nARGUMENTS: add a dark mode\n</skill>"}]
    assert small_steps.request_of(given) == \
        "Use the skill 'fix_error' for this request: add a dark mode"
    assert small_steps.restated(messages, False) is messages
    long = [{"role": "user", "content": "x" * 2000}, {"role": "tool", "content": "r"}]
    assert len(small_steps.request_of(long)) == small_steps.REQUEST_CHARS
    assert small_steps.restated([{"role": "user", "content": "hi"}], True)[-1]["content"] == "hi"


@pytest.mark.parametrize(("text", "asked"), [
    ("Say hello.", set()),
    ("What columns does df have?", set()),
    ("Read notes.txt and write a one-line summary of it to summary.txt.", {"read", "write", "list"}),
    ("What files are in this folder?", {"read", "write", "list"}),
    ("Create a file hello.txt containing exactly: hello from lily", {"read", "write", "list"}),
    ("Run print(6*7) in the notebook for me.", {"run_python"}),
    ("What did my last cell compute?", {"read_cells", "run_python"}),
    ("Is this e.g. fine?", set()),  # "e.g." is not a file name
])
def test_the_small_profile_offers_a_left_out_tool_when_the_request_asks_for_it(text, asked):
    assert offering.asked_for(text) == asked


def test_what_the_small_profile_offers_follows_the_request(world):
    session = world.session(None, LILY_PROFILE="small")
    assert sorted(names(Request(session, None, "Say hello.").tool_specs())) == \
        ["answer", "read"]  # no skill says "hello"
    assert sorted(names(Request(session, None, "List the files here.").tool_specs())) == \
        ["answer", "list", "load_skill", "read", "write"]
    full = world.session(None, LILY_PROFILE="full")
    assert "write" in names(Request(full, None, "Say hello.").tool_specs())


def test_a_resumed_request_keeps_the_tools_its_text_asked_for(world):
    # write asks for a card under the default mode; after Confirm, the request goes on
    script = ['{"name": "write", "arguments": {"path": "out.txt", "content": "hi"}}', "Done."]
    with ScriptedServer(script) as server:
        session = world.session(server, LILY_PROFILE="small")
        reply = run_shown(session, "Write hi to out.txt.")
        assert reply.proposal is not None  # a card: the user confirms
        outcome = pending.decide(session, None, ok=True)
        final = loop.resume(session, outcome.item, outcome.result)
        sent = server.chat_requests()
    assert final.text == "Done." and len(sent) == 2
    assert "write" in names(sent[1]["tools"]) and "response_format" not in sent[1]
    assert sent[1]["messages"][-1]["content"].endswith(
        "(The user asked: Write hi to out.txt. Answer now from this result, in the form the "
        "request asks for.)")
    assert (world.workspace / "out.txt").read_text(encoding="utf-8") == "hi"


def test_when_every_first_call_failed_the_second_step_requires_another_tool(world):
    # the 1.5B model's first call: inspect_variable on a file name, which does not exist
    # here (no notebook), so it fails as an unknown tool would; then read under the format
    script = ['{"name": "load_skill", "arguments": {"name": "identity"}}',
              '{"name": "read", "arguments": {"path": "notes.txt"}}',
              "Thursday."]
    with ScriptedServer(script) as server:
        session = world.session(server, LILY_PROFILE="small")
        reply = loop.run(session, "Research when the launch is.")  # a skill's word
        first, second, third = server.chat_requests()
    assert reply.text == "Thursday." and reply.tools_used == ["read"]
    assert "load_skill" in admitted(first)
    assert "load_skill" not in admitted(second) and "read" in admitted(second)
    assert "response_format" not in third  # free again


def test_a_first_call_that_worked_leaves_the_second_step_free(world):
    script = ['{"name": "read", "arguments": {"path": "notes.txt"}}', "Thursday."]
    with ScriptedServer(script) as server:
        loop.run(world.session(server, LILY_PROFILE="small"), "When is the launch?")
        assert "response_format" not in server.chat_requests()[1]
    step = [{"role": "assistant", "tool_calls": [{"function": {"name": "a"}}]},
            {"role": "tool", "content": "Error: x"}, {"role": "tool", "content": "fine"}]
    assert small_steps.failed_tools(step) == set()  # one of two worked
    assert small_steps.failed_tools(step[:2]) == {"a"}
    assert small_steps.failed_tools([{"role": "assistant", "content": "hi"}]) == set()


def test_the_tools_a_request_asks_for_come_first_in_the_small_profile(world):
    session = world.session(None, LILY_PROFILE="small")
    offered = names(Request(session, None, "Read cities.csv and plan.").tool_specs())
    assert offered[:3] == ["list", "read", "write"] and offered[3:] == ["load_skill", "answer"]
    # a request that asks for no tool's work may be answered at once: the answer leads
    assert names(Request(session, None, "Say hello and plan.").tool_specs()) == \
        ["answer", "load_skill", "read"]


def test_a_tool_that_backs_the_request_skill_keeps_its_whole_schema(world):
    # compile_plan's notes are optional: bare, the required call could only send {}
    session = world.session(None, LILY_PROFILE="small")
    specs = {s["function"]["name"]: s for s in Request(session, "plan_compiler").tool_specs()}
    assert "input" in specs["compile_plan"]["function"]["parameters"]["properties"]
    # list's path is optional too, and stays out: the 1.5B model filled in "/path/to/folder"
    specs = {s["function"]["name"]: s for s in Request(session, None, "files?").tool_specs()}
    assert specs["list"]["function"]["parameters"] == {"type": "object", "properties": {}}
