"""A server whose chat template has no tools drops them; the footer says so (issue 30).

The ScriptedServer on 127.0.0.1 replays what such a server answers: a reported prompt far
below what Lily sent (the tools' share missing), and llama.cpp's ``GET /props`` with a
template that has no tools (or one that has them). docs/agent.md#tools-dropped.
"""
from __future__ import annotations

import pytest
from agent_support import World

from lily_kernel.agent import tools_dropped
from lily_kernel.commands.results import Answer
from lily_kernel.commands.runner import Runner
from lily_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.usefixtures("no_machine_model")

# SmolLM2-style: the messages only; Qwen2.5-style: the tools rendered in the system turn.
NO_TOOLS_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
                     "{{ message['content'] }}<|im_end|>\n{% endfor %}")
TOOLS_TEMPLATE = ("{%- if tools %}<|im_start|>system\n# Tools\n{%- for tool in tools %}"
                  "{{ tool | tojson }}{%- endfor %}{%- endif %}" + NO_TOOLS_TEMPLATE)
DROPPED_USAGE = {"prompt_tokens": 40, "completion_tokens": 3}  # "Say hello." without tools


def answer(server: ScriptedServer, world: World, *texts: str) -> list[Answer]:
    session = world.session(server)
    runner = Runner(lambda: session)
    out = []
    for text in texts:
        [one] = [r for r in runner.ask(text) if isinstance(r, Answer)]
        out.append(one)
    return out


def props_asked(server: ScriptedServer) -> int:
    return sum(1 for r in server.requests if r["path"].split("?")[0].endswith("/props"))


def test_a_template_without_tools_in_props_gives_one_footer_line(tmp_path):
    turns = [{"content": "Hello!", "usage": DROPPED_USAGE}] * 2
    with ScriptedServer(turns, props={"chat_template": NO_TOOLS_TEMPLATE}) as server:
        first, second = answer(server, World(tmp_path), "Say hello.", "Again.")
        assert props_asked(server) == 1  # once per endpoint (with its window)
    assert first.text == "Hello!"
    assert tools_dropped.TEMPLATE_NO_TOOLS in first.footer()
    assert first.footer().count(tools_dropped.TEMPLATE_NO_TOOLS) == 1
    assert "\n" not in first.footer()
    assert tools_dropped.TEMPLATE_NO_TOOLS in second.footer()


def test_props_that_say_the_template_cannot_take_tools(tmp_path):
    props = {"chat_template": "{{ tools }}", "chat_template_caps": {"supports_tools": False}}
    with ScriptedServer([{"content": "Hi", "usage": DROPPED_USAGE}], props=props) as server:
        [only] = answer(server, World(tmp_path), "Say hello.")
    assert tools_dropped.TEMPLATE_NO_TOOLS in only.footer()


def test_without_props_the_reported_count_alone_says_it(tmp_path):
    with ScriptedServer([{"content": "Hi", "usage": DROPPED_USAGE}]) as server:  # /props: 404
        [only] = answer(server, World(tmp_path), "Say hello.")
        assert props_asked(server) == 1
    assert "the server counted 40 prompt tokens for about" in only.footer()
    assert "seems to drop the tools" in only.footer()


def test_a_template_with_tools_in_props_overrules_a_low_count(tmp_path):
    with ScriptedServer([{"content": "Hi", "usage": DROPPED_USAGE}],
                        props={"chat_template": TOOLS_TEMPLATE}) as server:
        [only] = answer(server, World(tmp_path), "Say hello.")
    assert "tools" not in only.footer()


def test_a_server_that_counts_the_tools_gets_no_line(tmp_path):
    # usage True: the scripted server reports its own count of the whole request; its
    # /props says no tools, but the count shows they were rendered: the count decides first
    with ScriptedServer([{"content": "Hi", "usage": True}],
                        props={"chat_template": NO_TOOLS_TEMPLATE}) as server:
        [only] = answer(server, World(tmp_path), "Say hello.")
    assert "tools" not in only.footer() and "tokens:" in only.footer()


@pytest.mark.parametrize("reported, counted, tool_tokens, n_tools, expected", [
    (40, 900, 600, 8, True),      # the system prompt alone: the tools are missing
    (700, 900, 600, 8, False),    # a real tokenizer counting ~25% fewer than Lily's estimate
    (560, 900, 600, 8, False),    # 62%: a tokenizer of about 5 bytes a token, tools counted
    (6000, 9000, 600, 8, False),  # a long conversation: the tools are a small share
    (400, 900, 600, 8, False),    # tools rendered compactly (OpenAI): more than no tools
    (40, 900, 600, 0, False),     # no tools offered: nothing to drop
])
def test_the_rule_on_the_reported_count(reported, counted, tool_tokens, n_tools, expected):
    line = tools_dropped.tools_dropped({"prompt_tokens": reported}, counted, tool_tokens,
                                       n_tools, lambda: None)
    assert (line is not None) == expected
    assert tools_dropped.tools_dropped(None, counted, tool_tokens, n_tools, lambda: None) is None
