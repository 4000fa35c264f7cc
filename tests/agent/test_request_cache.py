"""What a request reuses between requests (docs/agent.md#a-lean-prompt): the offered tools, the
system message and the conversation's size are built once while nothing they depend on changed,
and rebuilt the moment something did (issue 18); the body itself is made afresh (issue 31)."""
from __future__ import annotations

import json

from agent_support import World

from lily_kernel.agent import loop, request
from lily_kernel.testing.server import ScriptedServer


def names(specs: list[dict]) -> list[str]:
    return [s["function"]["name"] for s in specs]


def test_offered_tools_are_reused_until_a_tool_or_the_snapshot_changes(tmp_path):
    session = World(tmp_path).session(None)
    first = request.offered_tools(session)
    assert request.offered_tools(session) is first  # nothing changed: the same list

    def probe(n: int) -> str:
        """Probe ``n``.

        Args:
            n: a number.
        """
        return str(n)
    session.tools.register(probe, name="probe_tool")
    after = request.offered_tools(session)
    assert "probe_tool" in names(after) and "probe_tool" not in names(first)
    session.reload_skills()
    reloaded = request.offered_tools(session)
    assert reloaded is not after and names(reloaded) == names(after)


def test_the_system_message_follows_the_snapshot(tmp_path):
    world = World(tmp_path)
    session = world.session(None)
    first = request.system_message(session)
    assert request.system_message(session) is first
    skill = world.base / "ws_skills" / "fresh-skill"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: fresh-skill\ndescription: A skill added "
                                    "later. Use when testing.\n---\nDo it.\n")
    session2 = world.session(None, SKILLS_WORKSPACE_DIR=str(world.base / "ws_skills"))
    assert "fresh-skill" in request.system_message(session2)["content"]
    assert "fresh-skill" not in first["content"]


def test_the_conversation_cap_counts_earlier_requests_from_cached_sizes(tmp_path):
    """The size cap sums per-message sizes remembered across requests: history from earlier
    requests still counts, so a later request stops at the cap as it did when the whole
    history was serialised per request."""
    world = World(tmp_path)
    for i in range(2):  # a file each: identical calls would not run again anyway
        (world.workspace / f"big{i}.txt").write_text("y" * 40_000)
    (world.workspace / "lily.toml").write_text("[limits]\nconversation_chars = 100000\n")
    two = {"tool_calls": [{"name": "read", "arguments": {"path": f"big{i}.txt"}, "id": f"r{i}"}
                          for i in range(2)]}
    with ScriptedServer([two, "first done", two, "second done"]) as server:
        session = world.session(server)
        budget = session.budget
        message = {"role": "user", "content": "x" * 50}
        assert budget.chars(message) == len(json.dumps(message)) == budget.chars(message)
        assert loop.run(session, "read it twice").text == "first done"
        first = [m["content"] for m in session.conversation if m.get("role") == "tool"]
        assert [r[:1] for r in first] == ["y", "y"]  # 80,000 characters: under the cap
        assert loop.run(session, "and twice more").text == "second done"
        second = [m["content"] for m in session.conversation if m.get("role") == "tool"][2:]
        assert second[0].startswith("y")  # history 80,000 + this request: still under
        assert second[1].startswith("Error: not run: too many calls")  # over: not run


def test_the_request_body_is_the_json_of_the_request_arguments():
    """What Lily sends is exactly the chat-completions request ``openai`` would send for the
    same arguments (stream_options, the completion cap, the tools), as JSON."""
    from lily_kernel.agent import model_client
    from lily_kernel.settings.model_settings import ModelConfig
    config = ModelConfig(model="m", temperature=0.5)
    messages = [{"role": "system", "content": "Sé breve ✓"},
                {"role": "user", "content": 'say "hi"\n'},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "t", "arguments": "{\"n\": 1}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    tools = [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}]
    body = model_client.request_body(config, messages, tools, True, 64, "max_tokens")
    assert json.loads(body) == model_client.request_args(config, messages, tools, True, 64, "max_tokens")
    assert "✓".encode() in body  # UTF-8, as openai sends it (not \\u escapes)
    assert json.loads(model_client.request_body(config, messages, [], False))["messages"] == messages
    assert "tools" not in json.loads(model_client.request_body(config, messages, [], False))


def test_a_message_changed_after_it_was_sent_goes_out_as_it_is_now():
    """The body is the JSON of the messages as they are at each request: nothing sent before
    stands in for a message (or a tool list) changed in place since, nor for a new message
    at the address of a freed one (issue 31: no JSON kept by identity)."""
    from lily_kernel.agent import model_client
    from lily_kernel.settings.model_settings import ModelConfig
    config = ModelConfig(model="m")
    history = [{"role": "user", "content": f"turn {i}"} for i in range(5)]
    tools = [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}]
    model_client.request_body(config, history, tools)
    history[2]["content"] = "edited in place"
    tools[0]["function"]["name"] = "renamed"
    body = json.loads(model_client.request_body(config, [*history, {"role": "user",
                                                                    "content": "new"}], tools))
    assert body["messages"][2]["content"] == "edited in place"
    assert body["tools"][0]["function"]["name"] == "renamed"
    for _ in range(50):  # fresh dicts, often at a freed one's address
        message = {"role": "user", "content": f"fresh {_}"}
        assert json.loads(model_client.request_body(config, [message], []))["messages"] == [
            message]
        del message


def test_the_history_is_measured_once_and_afresh_when_it_changes():
    """A request measures only the messages new since the last one; a conversation that was
    cleared or had turns replaced (``/new``, ``/compact``) is measured afresh, and a message
    replaced by a different one counts with its own size."""
    from lily_kernel.agent.budget import Running
    measured: list[str] = []

    def measure(message: dict) -> int:
        measured.append(message["content"])
        return len(message["content"])
    running = Running()
    history = [{"role": "user", "content": "a" * n} for n in range(1, 11)]
    assert running.update(history, measure).total == 55 and len(measured) == 10
    history.append({"role": "user", "content": "b" * 100})
    measured.clear()
    assert running.update(history, measure).total == 155 and measured == ["b" * 100]
    history[0] = {"role": "user", "content": "c" * 7}  # /compact replaced the first turn
    assert running.update(history, measure).total == 161 and len(measured) == 1 + 11
    history.clear()  # /new
    assert running.update(history, measure).total == 0
    assert running.update(history, measure, of="another counter").total == 0


def test_a_body_follows_a_history_that_changed_in_the_middle():
    """The next request usually extends the last one's messages; when a message in the middle
    differs (a withdrawn proposal, a compacted turn, another session), the body is still the
    JSON of exactly the messages given."""
    from lily_kernel.agent import model_client
    from lily_kernel.settings.model_settings import ModelConfig
    config = ModelConfig(model="m")
    history = [{"role": "user", "content": f"turn {i}"} for i in range(20)]
    assert json.loads(model_client.request_body(config, history, []))["messages"] == history
    longer = [*history, {"role": "assistant", "content": "answer"}]
    assert json.loads(model_client.request_body(config, longer, []))["messages"] == longer
    changed = [*longer[:5], {"role": "user", "content": "withdrawn"}, *longer[6:]]
    assert json.loads(model_client.request_body(config, changed, []))["messages"] == changed
    assert json.loads(model_client.request_body(config, history[:3], []))["messages"] == history[:3]
