"""Tool calls written as text (docs/agent.md#tool-calls-written-as-text).

The fixture tables are the shapes the open models write, as llama.cpp's and vLLM's tool
parsers describe them (Hermes 2 Pro / Qwen 2.5 tags, Llama 3.x JSON and ``<function=…>``,
Mistral ``[TOOL_CALLS]``), and the shapes a small model printed in a real run (issue 30: a
fenced object, ``<tools>``, doubled braces, ``{"function": "last_error"}``). Each runs
through the parser alone, then end to end: Lily's real loop against the scripted server,
where a call read from text runs exactly as a structured call (policy, cards, caps).
"""
from __future__ import annotations

import json

import pytest
from agent_support import World, assert_consistent, prose_results, run_shown

from lily_kernel.agent import loop
from lily_kernel.agent.text_calls import loads_lenient, read, repair_arguments, shown_call
from lily_kernel.commands.results import ActionCard, Answer

pytestmark = pytest.mark.usefixtures("no_machine_model")

OFFERED = ["load_skill", "read", "write", "list", "last_error", "read_cells",
           "inspect_variable", "run_python"]
SKILLS = {"plan", "fix_error"}
READ = ("read", {"path": "notes.txt"})
LIST = ("list", {"path": "."})

# (id, the answer's text, the calls it is)
FORMATS = [
    ("bare-object", '{"name": "read", "arguments": {"path": "notes.txt"}}', [READ]),
    ("bare-object-spaced", '\n\n  {"name": "list", "arguments": {"path": "."}}  \n', [LIST]),
    ("fenced-json", '```json\n{"name": "list", "arguments": {"path": "."}}\n```', [LIST]),
    ("fenced-plain", '```\n{"name": "read", "arguments": {"path": "notes.txt"}}\n```', [READ]),
    ("fence-unclosed-at-end", '```json\n{"name": "list", "arguments": {"path": "."}}', [LIST]),
    ("hermes-tool_call", '<tool_call>\n{"name": "read", "arguments": {"path": "notes.txt"}}\n'
                         '</tool_call>', [READ]),
    ("hermes-two-calls", '<tool_call>\n{"name": "read", "arguments": {"path": "notes.txt"}}\n'
                         '</tool_call>\n<tool_call>\n{"name": "list", "arguments": {"path": '
                         '"."}}\n</tool_call>', [READ, LIST]),
    ("hermes-unclosed-at-end", '<tool_call>\n{"name": "read", "arguments": {"path": '
                               '"notes.txt"}}', [READ]),
    ("qwen-tools-tag", '<tools>\n{"name": "read_cells", "arguments": {"last": 1}}\n</tools>',
     [("read_cells", {"last": 1})]),
    ("hermes-fenced-xml", '```xml\n<tool_call>\n{"name": "list", "arguments": {"path": "."}}\n'
                          '</tool_call>\n```', [LIST]),
    ("function_call-tag", '<function_call>{"name": "list", "arguments": {"path": "."}}'
                          '</function_call>', [LIST]),
    ("arguments-as-json-text", '{"name": "read", "arguments": "{\\"path\\": \\"notes.txt\\"}"}',
     [READ]),
    ("llama3-parameters", '{"type": "function", "name": "read", "parameters": {"path": '
                          '"notes.txt"}}', [READ]),
    ("llama3-python-tag", '<|python_tag|>{"name": "list", "parameters": {"path": "."}}', [LIST]),
    ("llama3-semicolons", '{"name": "read", "parameters": {"path": "notes.txt"}}; '
                          '{"name": "list", "parameters": {"path": "."}}', [READ, LIST]),
    ("llama31-function-eq", '<function=read>{"path": "notes.txt"}</function>', [READ]),
    ("function-name-attr", '<function name="list">{"path": "."}</function>', [LIST]),
    ("mistral-array", '[TOOL_CALLS] [{"name": "read", "arguments": {"path": "notes.txt"}, '
                      '"id": "a1b2c3d4e"}]', [READ]),
    ("mistral-array-eos", '[TOOL_CALLS][{"name": "list", "arguments": {"path": "."}}]</s>',
     [LIST]),
    ("mistral-named-args", '[TOOL_CALLS]read[ARGS]{"path": "notes.txt"}', [READ]),
    ("json-array", '[{"name": "read", "arguments": {"path": "notes.txt"}}, '
                   '{"name": "list", "arguments": {"path": "."}}]', [READ, LIST]),
    ("openai-shape", '{"type": "function", "function": {"name": "read", "arguments": '
                     '"{\\"path\\": \\"notes.txt\\"}"}}', [READ]),
    ("doubled-braces", '{{"name": "list", "arguments": {{"path": "."}}}}', [LIST]),
    # the call as Qwen2.5's chat template shows it, {{...}}, with unbalanced closers
    ("doubled-braces-unbalanced", '{{"name": "list", "arguments": {"path": "."}}}}', [LIST]),
    ("doubled-braces-in-tag", '<tool_call>\n{{"name": "read", "arguments": {"path": '
                              '"notes.txt"}}}}\n</tool_call>', [READ]),
    ("doubled-braces-nested", '{{"name": "read", "arguments": {"path": "notes.txt"}}}',
     [READ]),
    ("function-key", '{"function": "last_error", "arguments": {}}', [("last_error", {})]),
    ("function-key-no-arguments", '```json\n{"function": "last_error"}\n```',
     [("last_error", {})]),
    ("short-form", '{"name": "read", "path": "notes.txt"}', [READ]),
    ("trailing-comma", '{"name": "list", "arguments": {"path": ".",},}', [LIST]),
    ("python-literal", "{'name': 'read', 'arguments': {'path': 'notes.txt'}}", [READ]),
    ("skill-name", '{"name": "fix_error", "arguments": {"error": "NameError"}}',
     [("load_skill", {"name": "fix_error"})]),
    # issue 30's real run (Qwen2.5-Coder-1.5B, plan_skill): <tools> around an XML function
    ("tools-xml-function-skill", '<tools>\n  <function name="plan">\n    <arguments>\n'
                                 '      <plan>\n        <step>Identify the main parts.</step>\n'
                                 '        <step>Choose a test framework.</step>\n      </plan>\n'
                                 '    </arguments>\n  </function>\n</tools>',
     [("load_skill", {"name": "plan"})]),
    ("tools-xml-function-arguments", '<tools><function name="read"><arguments><path>notes.txt'
                                     '</path></arguments></function></tools>', [READ]),
    ("function-name-arguments-json", '<function name="read"><arguments>{"path": "notes.txt"}'
                                     '</arguments></function>', [READ]),
    ("function-name-single-quotes", "<function name='list'>{\"path\": \".\"}</function>", [LIST]),
    ("function-eq-parameter", '<function=read>\n<parameter=path>\nnotes.txt\n</parameter>\n'
                              '</function>', [READ]),
    ("function-xml-number", '<function name="read_cells"><arguments><last>2</last>'
                            '</arguments></function>', [("read_cells", {"last": 2})]),
]

# (id, text): answers that mention JSON or a call and must never run
MENTIONS = [
    ("prose-before", 'Here is the call:\n```json\n{"name": "list", "arguments": {"path": "."}}'
                     '\n```'),
    ("prose-after", '{"name": "list", "arguments": {"path": "."}}\nThis lists the folder.'),
    ("json-in-the-middle", 'You could call {"name": "read", "arguments": {"path": "a"}} to '
                           'read it.'),
    ("fence-then-sentence", '```json\n{"name": "list", "arguments": {}}\n```\nThat would list.'),
    ("not-offered", '{"name": "delete_everything", "arguments": {}}'),
    ("one-of-two-not-offered", '[{"name": "read", "arguments": {"path": "a"}}, '
                               '{"name": "rm", "arguments": {}}]'),
    ("data-not-a-call", '{"a": 1, "b": [1, 2]}'),
    ("python-fence", '```python\nread("notes.txt")\n```'),
    ("pythonic-call", 'read(path="notes.txt")'),
    ("markdown-link", '[the docs](https://example.com) say {"name": "read"}'),
    ("unknown-extra-key", '{"name": "read", "arguments": {"path": "a"}, "why": "because"}'),
    ("both-argument-keys", '{"name": "read", "arguments": {}, "parameters": {}}'),
    ("arguments-not-an-object", '{"name": "read", "arguments": [1, 2]}'),
    ("broken-json", '{"name": "read", "arguments": {"path": '),
    ("doubled-braces-then-prose", '{{"name": "list", "arguments": {"path": "."}}}} lists it'),
    ("tag-with-prose", '<tool_call>I would read the file.</tool_call>'),
    ("two-fences", '```json\n{"name": "list"}\n```\n```json\n{"name": "list"}\n```'),
    ("function-with-prose", '<function=read>I would read the file.</function>'),
    ("tools-echoing-schemas", '<tools>\n{"type": "function", "function": {"name": "read", '
                              '"description": "Read a file.", "parameters": {"type": "object"'
                              ', "properties": {"path": {"type": "string"}}}}}\n</tools>'),
    ("tools-xml-unknown-name", '<tools><function name="delete_all"><arguments><path>.</path>'
                               '</arguments></function></tools>'),
    ("tools-xml-then-prose", '<tools><function name="read"><arguments><path>a</path>'
                             '</arguments></function></tools> and then I summarise it.'),
    ("empty", "   "),
    ("plain", "The file has three lines."),
]


@pytest.mark.parametrize("text, expected", [f[1:] for f in FORMATS], ids=[f[0] for f in FORMATS])
def test_each_format_is_read_as_its_calls(text, expected):
    found = read(text, OFFERED, SKILLS)
    assert [(c.name, json.loads(c.arguments)) for c in found] == expected


@pytest.mark.parametrize("text", [m[1] for m in MENTIONS], ids=[m[0] for m in MENTIONS])
def test_text_that_mentions_a_call_is_never_read_as_one(text):
    assert read(text, OFFERED, SKILLS) == []


def test_a_skill_name_becomes_load_skill_only_when_load_skill_is_offered():
    text = '{"name": "plan", "arguments": {}}'
    assert [c.name for c in read(text, OFFERED, SKILLS)] == ["load_skill"]
    assert read(text, [n for n in OFFERED if n != "load_skill"], SKILLS) == []


@pytest.mark.parametrize("raw, value", [
    ('{"path": "."}', {"path": "."}),
    ('```json\n{"path": "."}\n```', {"path": "."}),
    ('{{"path": "."}}', {"path": "."}),
    ('{"path": ".",}', {"path": "."}),
    ('{"paths": ["a", "b",],}', {"paths": ["a", "b"]}),
    ("{'path': '.', 'all': True, 'n': None}", {"path": ".", "all": True, "n": None}),
    ('"{\\"path\\": \\".\\"}"', {"path": "."}),
    ('{"text": "a, }"}', {"text": "a, }"}),  # a comma inside a string is kept
    ("", {}),
])
def test_arguments_are_repaired_by_the_documented_rules(raw, value):
    assert repair_arguments(raw) == value


@pytest.mark.parametrize("raw", ['{"path": ', "{path: '.'}", "[1, 2]", "{'a': {1, 2}}",
                                 "__import__('os')", "'x' * 10", "{" * 200 + "}" * 200])
def test_what_the_repairs_do_not_read(raw):
    assert repair_arguments(raw) is None


def test_the_lenient_reader_keeps_safejson_bounds():
    with pytest.raises(ValueError):
        loads_lenient("[" * 500 + "]" * 500)  # too deep, strictly and as a literal


# -- end to end: Lily's loop against the scripted server -------------------------------

@pytest.fixture
def world(tmp_path) -> World:
    world = World(tmp_path)
    (world.workspace / "notes.txt").write_text("NOTES-MARK\n")
    return world


def tool_results(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m.get("role") == "tool"]


@pytest.mark.parametrize("fmt", ["fenced-json", "hermes-tool_call", "qwen-tools-tag",
                                 "llama31-function-eq", "mistral-array", "doubled-braces",
                                 "doubled-braces-unbalanced", "doubled-braces-in-tag",
                                 "llama3-parameters", "short-form", "python-literal"])
def test_a_call_written_as_text_runs_as_a_call(world, server, fmt):
    text = next(f[1] for f in FORMATS if f[0] == fmt)
    text = text.replace('"read_cells", "arguments": {"last": 1}',
                        '"read", "arguments": {"path": "notes.txt"}')
    server.add(text, "The notes say NOTES-MARK.")
    session = world.session(server)
    shown: list[str] = []
    reply = loop.run(session, "read notes.txt", on_text=shown.append)
    assert reply.text == "The notes say NOTES-MARK."
    assert reply.tools_used in (["read"], ["list"])
    assert any(n.endswith("read from text") for n in reply.notes)
    second = server.chat_requests()[1]
    assert any("NOTES-MARK" in r or "notes.txt" in r for r in tool_results(second))
    call = next(m for m in second["messages"] if m.get("tool_calls"))
    assert call["content"] is None  # kept as a structured call, not as the text
    for c in call["tool_calls"]:  # 9 letters or digits: Mistral's templates refuse others
        assert len(c["id"]) == 9 and c["id"].isalnum()
    assert "".join(shown) == "The notes say NOTES-MARK."  # the call's text never showed
    assert_consistent(session.conversation)


def test_the_footer_says_the_call_was_read_from_text(world, server):
    server.add('<tool_call>\n{"name": "list", "arguments": {"path": "."}}\n</tool_call>\n'
               '<tool_call>\n{"name": "read", "arguments": {"path": "notes.txt"}}\n'
               '</tool_call>', "Done.")
    session = world.session(server)
    [answer] = prose_results(session, "what is here?")
    assert isinstance(answer, Answer) and answer.text == "Done."
    assert "2 tool calls read from text" in answer.footer()
    assert answer.tools == ("list", "read")


# prose around one fenced call to an offered tool is never run either, but the model is
# asked once to make the call: tests/agent/test_small_model_rules.py
NUDGED = ("prose-before", "fence-then-sentence")
SHOWN_ONLY = [m for m in MENTIONS if m[1].strip() and m[0] not in NUDGED]


def test_prose_around_one_fenced_call_is_the_shown_call_rule():
    for name in NUDGED:
        text = dict(MENTIONS)[name]
        assert read(text, OFFERED) == [] and shown_call(text, OFFERED) is not None
    assert all(shown_call(t, OFFERED, SKILLS) is None for _, t in SHOWN_ONLY)


@pytest.mark.parametrize("text", [m[1] for m in SHOWN_ONLY], ids=[m[0] for m in SHOWN_ONLY])
def test_an_answer_that_mentions_a_call_is_shown_and_nothing_runs(world, server, text):
    server.add(text)
    session = world.session(server)
    shown: list[str] = []
    reply = loop.run(session, "how would you read it?", on_text=shown.append)
    assert reply.text == text and reply.tools_used == [] and reply.notes == []
    assert len(server.chat_requests()) == 1  # answered, no step after it
    assert "".join(shown) == text  # what was held back while it looked like a call is shown


def test_a_skill_named_as_a_tool_loads_the_skill(world, server):
    folder = world.skills / "fix_error"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: fix_error\ndescription: Fix the last "
                                     "error.\n---\nFIX-BODY-MARK\n")
    server.add('```json\n{"name": "fix_error", "arguments": {}}\n```', "Fixed.")
    session = world.session(server)
    reply = loop.run(session, "use fix_error")
    assert reply.skill == "fix_error" and reply.text == "Fixed."
    assert any("FIX-BODY-MARK" in r for r in tool_results(server.chat_requests()[1]))


def test_the_xml_function_form_naming_a_skill_loads_it(world, server):
    """The real plan_skill answer (issue 30): ``<tools><function name="plan_compiler">``
    with XML arguments, naming a skill, becomes ``load_skill(plan_compiler)``."""
    folder = world.skills / "plan_compiler"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: plan_compiler\ndescription: Plan.\n---\n"
                                     "PLAN-BODY-MARK\n")
    server.add('<tools>\n  <function name="plan_compiler">\n    <arguments>\n      <plan>\n'
               "        <step>Identify the project's main components.</step>\n"
               '      </plan>\n    </arguments>\n  </function>\n</tools>', "Planned.")
    session = world.session(server)
    reply = loop.run(session, "use the plan skill to plan adding unit tests")
    assert reply.skill == "plan_compiler" and reply.text == "Planned."
    assert reply.notes == ["1 tool call read from text"]
    assert any("PLAN-BODY-MARK" in r for r in tool_results(server.chat_requests()[1]))
    assert_consistent(session.conversation)


def test_a_write_read_from_text_still_needs_the_card(world, server):
    """Attack: a call written as text gets no shortcut around approval. A write over an
    existing file waits for the card, as a structured one does."""
    server.add('<tool_call>\n{"name": "write", "arguments": {"path": "notes.txt", '
               '"content": "OVERWRITTEN"}}\n</tool_call>')
    session = world.session(server)
    reply = run_shown(session, "overwrite the notes")
    assert reply.proposal is not None and reply.proposal.tool == "write"
    assert (world.workspace / "notes.txt").read_text() == "NOTES-MARK\n"  # nothing written
    assert "NOTES-MARK" in (reply.proposal.change or "")  # the card shows the diff


def test_a_tool_the_policy_denies_is_not_run_from_text(world, server):
    """Attack: a denied tool named in text is not offered, so the text is only text."""
    server.add('{"name": "read", "arguments": {"path": "notes.txt"}}')
    session = world.session(server, LILY_TOOLS_DENY="read")
    reply = loop.run(session, "read it")
    assert reply.tools_used == [] and reply.text.startswith('{"name": "read"')
    assert "NOTES-MARK" not in json.dumps(server.chat_requests())


def test_calls_read_from_text_keep_the_per_step_cap(world, server):
    (world.workspace / "lily.toml").write_text("[limits]\ntool_calls_per_step = 2\n")
    for i in range(4):
        (world.workspace / f"f{i}.txt").write_text(f"F{i}\n")
    calls = [{"name": "read", "arguments": {"path": f"f{i}.txt"}} for i in range(4)]
    server.add(json.dumps(calls), "ok")
    session = world.session(server)
    assert loop.run(session, "read all").text == "ok"
    results = tool_results(server.chat_requests()[1])
    assert results[:2] == ["F0\n", "F1\n"]
    assert all(r.startswith("Error: not run: too many calls") for r in results[2:])


def test_structured_arguments_are_repaired_once(world, server):
    server.add({"tool_calls": [{"name": "read", "arguments": "{'path': 'notes.txt',}",
                                "id": "c1"}]}, "NOTES-MARK it is.")
    session = world.session(server)
    reply = loop.run(session, "read it")
    assert reply.tools_used == ["read"] and "arguments of 1 tool call repaired" in reply.notes
    sent = server.chat_requests()[1]["messages"]
    call = next(m for m in sent if m.get("tool_calls"))["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"path": "notes.txt"}
    assert tool_results(server.chat_requests()[1]) == ["NOTES-MARK\n"]


def test_unrepairable_arguments_are_answered_with_the_signature(world, server):
    server.add({"tool_calls": [{"name": "read", "arguments": "{path: notes.txt",
                                "id": "c1"}]}, "Sorry.")
    session = world.session(server)
    reply = loop.run(session, "read it")
    assert reply.tools_used == [] and reply.text == "Sorry."
    [result] = tool_results(server.chat_requests()[1])
    assert result.startswith("Error: not run: invalid JSON arguments for tool 'read'")
    assert "read(path: string)" in result and '{"name": "read", "arguments": {"path": ' in result


def test_a_structured_call_is_never_also_read_from_its_text(world, server):
    server.add({"content": '{"name": "list", "arguments": {}}',
                "tool_calls": [{"name": "read", "arguments": {"path": "notes.txt"}}]}, "ok")
    session = world.session(server)
    assert loop.run(session, "x").tools_used == ["read"]


def test_a_card_waits_for_a_text_call_in_the_face(world, server):
    server.add('```json\n{"name": "write", "arguments": {"path": "notes.txt", "content": '
               '"NEW"}}\n```')
    session = world.session(server)
    results = prose_results(session, "change the notes")
    assert isinstance(results[-1], ActionCard) and results[-1].action.tool == "write"
    assert session.pending is results[-1].action
