"""What a request offers the model: every row of the table in docs/agent.md#what-a-request-offers.

Real sessions with the bundled skills (and skills written for a row), the real loop against
the ScriptedServer on 127.0.0.1: what the server received is what was offered. The notebook
row's kernel side is tests/jupyter/test_notebook_tools_kernel.py.
"""
from __future__ import annotations

import pytest
from agent_support import World, skill_request

from lily_kernel.agent import budget, loop, prompt, request
from lily_kernel.agent.request import Request
from lily_kernel.settings.model_settings import ModelConfig
from lily_kernel.testing.server import ScriptedServer
from lily_kernel.tools import offering

NOTEBOOK_TOOLS = {"list_variables", "inspect_variable", "read_cells", "last_error",
                  "propose_cell", "run_python"}


def names(specs: list[dict]) -> list[str]:
    return [s["function"]["name"] for s in specs]


def offered_under(session, skill: str | None) -> list[str]:
    return names(Request(session, skill).tool_specs())


def sent(request: dict) -> list[str]:
    return names(request.get("tools") or [])


def call(name: str, args: dict, id: str = "c1") -> dict:
    return {"tool_calls": [{"id": id, "name": name, "arguments": args}]}


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


# -- load_skill ------------------------------------------------------------------------------

def test_load_skill_is_offered_only_while_the_request_has_no_skill(world):
    with ScriptedServer([call("load_skill", {"name": "research_assistant"}), "done"]) as server:
        session = world.session(server)
        reply = loop.run(session, "research this")
        assert reply.skill == "research_assistant"
        first, second = server.chat_requests()
    assert "load_skill" in sent(first)
    assert "load_skill" not in sent(second)  # its body is in the request now


def test_a_forced_skill_is_not_offered_load_skill(world):
    with ScriptedServer(["fixed"]) as server:
        session = world.session(server)
        loop.run(session, "", skill=skill_request(session, "/plan launch the site"))
        [only] = server.chat_requests()
    assert "load_skill" not in sent(only)
    assert "Plan Compiler" in only["messages"][-1]["content"]  # the body is there instead


def test_the_small_profile_offers_load_skill_only_when_the_request_says_what_a_skill_says(world):
    """A small model calls what it is offered: "Thanks" loaded plan_compiler (the answer
    suite). A request that shares no word with the skills index is offered no load_skill; one
    that names a skill, or a word of a summary in another form, is; the full profile always."""
    with ScriptedServer([{"content": '{"name": "answer", "arguments": {"text": "Glad to help."}}'}]
                        ) as server:
        session = world.session(server, LILY_PROFILE="small")
        reply = loop.run(session, "Thanks, that was helpful.")
        [only] = server.chat_requests()
    assert "load_skill" not in sent(only) and "load_skill" not in str(only["response_format"])
    assert reply.text.startswith("Glad to help.")
    for text in ("Use the plan skill to plan adding unit tests.",  # a name's word
                 "I am planning a release.",                         # "plan", another form
                 "Tidy up my repositories, please.",                 # "repository", another form
                 "Research the options and compare them."):
        assert "load_skill" in names(Request(session, None, text).tool_specs()), text
    for text in ("Thanks, that was helpful.", "What is 17 * 23?", "Good morning!",
                 "Which of these would have been there?"):  # function words tie to nothing
        assert "load_skill" not in names(Request(session, None, text).tool_specs()), text
    full = world.session(None, LILY_PROFILE="full")
    assert "load_skill" in names(Request(full, None, "Thanks, that was helpful.").tool_specs())
    assert "load_skill" in names(request.offered_tools(session))  # /model: any request


def test_a_skill_the_index_leaves_out_is_still_found_by_its_name(world):
    folder = world.skills / "zz_git_helper"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: zz_git_helper\ndescription: "
                                     + "Tidy branches. " * 700 + "\n---\nDo it.\n",
                                     encoding="utf-8")
    session = world.session(None, LILY_PROFILE="small")
    assert "zz_git_helper" in prompt.index_plan(session.snapshot)[1]  # omitted for the budget
    assert "load_skill" in names(Request(session, None, "Ask git for help.").tool_specs())
    assert "load_skill" not in names(Request(session, None, "Prune the branches.").tool_specs())


# -- the skill tools ---------------------------------------------------------------------------

def test_read_skill_file_only_under_a_skill_with_references(world):
    for name in ("with_refs", "without"):
        folder = world.skills / name
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: D.\n---\nDo it.\n",
                                         encoding="utf-8")
    (world.skills / "with_refs" / "references").mkdir()
    session = world.session(None)
    assert "read_skill_file" not in offered_under(session, None)
    assert "read_skill_file" in offered_under(session, "with_refs")
    assert "read_skill_file" not in offered_under(session, "without")


def test_propose_action_only_once_a_typed_skill_is_in_the_request(world):
    script = [call("load_skill", {"name": "send_message"}), "which contact?"]
    with ScriptedServer(script) as server:
        session = world.session(server, SKILLS_EXAMPLES="1")  # the typed examples, turned on
        loop.run(session, "tell Ana I am late")
        first, second = server.chat_requests()
    for typed_tool in ("propose_action", "read_config"):
        assert typed_tool not in sent(first)  # the bundled typed skills are not in the request
    assert "propose_action" in sent(second)
    assert "read_config" not in sent(second)  # send_message reads no settings


def test_read_config_only_under_an_internal_typed_skill_that_reads_settings(world):
    session = world.session(None, SKILLS_EXAMPLES="1")
    assert {"propose_action", "read_config"} <= set(offered_under(session, "read_receipts"))
    for skill in (None, "research_assistant", "send_message"):
        assert "read_config" not in offered_under(session, skill)


@pytest.mark.parametrize("tool, skill", [("scan_todos", "todo_scan"),
                                         ("compile_plan", "plan_compiler")])
def test_a_tool_that_backs_a_skill_only_under_that_skill(world, tool, skill):
    session = world.session(None)
    assert tool not in offered_under(session, None)
    assert tool not in offered_under(session, "research_assistant")
    assert tool in offered_under(session, skill)


def test_a_skill_whose_command_tool_names_a_backing_tool_is_offered_it(world):
    folder = world.skills / "my_todos"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: my_todos\ndescription: D.\ninvocation_mode: "
                                     "tool_dispatch\ncommand_tool: scan_todos\n---\nScan.\n",
                                     encoding="utf-8")
    session = world.session(None)
    assert "scan_todos" in offered_under(session, "my_todos")
    assert "compile_plan" not in offered_under(session, "my_todos")


def test_a_todo_request_is_offered_scan_todos_once_it_loads_the_skill(world):
    script = [call("load_skill", {"name": "todo_scan"}), call("scan_todos", {}, "c2"), "none"]
    with ScriptedServer(script) as server:
        loop.run(world.session(server), "what is left to do?")
        first, second, _ = server.chat_requests()
    assert "scan_todos" not in sent(first) and "scan_todos" in sent(second)


# -- the notebook tools, the registered tools ------------------------------------------------

def test_no_notebook_tools_outside_a_notebook_and_the_file_tools_always(world):
    session = world.session(None)
    for skill in (None, "fix_error", "explore_data"):
        offered = offered_under(session, skill)
        assert not NOTEBOOK_TOOLS & set(offered), skill
        assert {"read", "write", "list"} <= set(offered)


def test_a_registered_tool_is_offered_and_tools_offer_still_narrows(world):
    session = world.session(None)

    @session.tools.register(name="mine")
    def mine() -> str:
        """Mine."""
        return "x"

    assert "mine" in offered_under(session, None)
    assert "mine" in offered_under(session, "research_assistant")
    narrowed = world.session(None, LILY_TOOLS_OFFER="read")
    assert offered_under(narrowed, None) == ["load_skill", "read"]


# -- the small-model profile -------------------------------------------------------------------

def test_the_profile_follows_a_known_window_or_the_setting():
    assert budget.profile_of(ModelConfig()) == "full"  # gpt-4o-mini: 128,000
    assert budget.profile_of(ModelConfig(model="some-local-model")) == "full"  # unknown
    assert budget.profile_of(ModelConfig(model="SmolLM2-135M-Instruct")) == "small"  # table
    assert budget.profile_of(ModelConfig(model="qwen2.5-coder-7b-instruct")) == "full"  # 32,768
    assert budget.profile_of(ModelConfig(model="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")) \
        == "small"  # its name says 1.5B parameters
    assert budget.profile_of(ModelConfig(model="org/gemma-2-2b-it")) == "small"
    assert budget.profile_of(ModelConfig(model="llama-3.1-8b-instruct")) == "full"
    assert budget.profile_of(ModelConfig(model="o3-mini")) == "full"
    assert budget.params_of("SmolLM2-135M-Instruct") == 135e6
    assert budget.params_of("gpt-4o-mini") is None and budget.params_of("phi-3-mini-4k") is None
    assert budget.profile_of(ModelConfig(model="x", context_window=8192)) == "small"
    assert budget.profile_of(ModelConfig(model="x", context_window=8193)) == "full"
    assert budget.profile_of(ModelConfig(profile="small")) == "small"
    assert budget.profile_of(ModelConfig(model="SmolLM2", profile="full")) == "full"


def test_the_small_profile_offers_fewer_tools_with_shorter_schemas(world):
    full = world.session(None)
    small = world.session(None, LILY_PROFILE="small")

    @small.tools.register(name="run_python", origin="notebook")
    def run_python(code: str) -> str:
        """Run Python code. Returns its output.

        Details."""
        return code

    plain = offered_under(small, None)
    for left_out in offering.SMALL_LEAVES_OUT:
        assert left_out not in plain
    assert sorted(plain) == ["answer", "load_skill", "read"]  # answer: small_steps.py
    assert sorted(offered_under(full, None)) == ["edit", "list", "load_skill", "read", "write"]
    # under a skill that names its tools: only those (plan_compiler: read, write)
    assert sorted(offered_under(small, "plan_compiler")) == ["compile_plan", "read", "write"]
    # shorter: the first sentence, only required parameters, no defaults
    spec = offering.spec("t", "Does one thing. Then more.", {
        "type": "object", "required": ["a"],
        "properties": {"a": {"type": "string", "description": "A.", "default": "x"},
                       "b": {"type": "integer", "default": 5}}}, small=True)
    assert spec["function"]["description"] == "Does one thing."
    assert spec["function"]["parameters"]["properties"] == {"a": {"type": "string"}}
    assert offering.first_sentence("Read a file, e.g. references/a.md. More.") == \
        "Read a file, e.g. references/a.md."


def test_a_small_model_still_calls_a_tool_it_was_not_offered_under_the_policy(world):
    (world.workspace / "notes.txt").write_text("x\n", encoding="utf-8")
    script = [call("list", {"path": "."}), "listed"]
    with ScriptedServer(script) as server:
        session = world.session(server, LILY_PROFILE="small")
        reply = loop.run(session, "what is there?")
        assert "list" not in sent(server.chat_requests()[0])
    assert reply.tools_used == ["list"]  # fewer offered, nothing refused that the policy allows


def test_a_data_files_name_may_hold_spaces_and_dots_and_is_looked_up_in_the_workspace(tmp_path):
    # DABench's tables "veracruz 2016.csv" and "…Qrob_Chr05.tree_table.csv": before this,
    # neither was seen as the request's data file, and the small model answered from nothing
    from lily_kernel.tools import offering
    for name in ("veracruz 2016.csv", "ts-sc4.Qrob_Chr05.tree_table.csv", "titanic.csv",
                 "sub/Sales Q1.xlsx"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("a\n1\n", encoding="utf-8")
    (tmp_path.parent / "outside.csv").write_text("a\n1\n", encoding="utf-8")
    ask = ("Use the file veracruz 2016.csv, then ts-sc4.Qrob_Chr05.tree_table.csv and "
           "(titanic.csv), data=titanic.csv, 'sub/Sales Q1.xlsx', 2016.csv, ../outside.csv, "
           f"{tmp_path.parent / 'outside.csv'} and nothere.csv")
    assert offering.data_files(ask, tmp_path) == [
        "veracruz 2016.csv", "ts-sc4.Qrob_Chr05.tree_table.csv", "titanic.csv",
        "sub/Sales Q1.xlsx"]


def test_another_file_named_is_found_only_in_the_workspace_and_never_a_data_file(tmp_path):
    from lily_kernel.tools import offering
    for name in ("app.py", "notes/todo.md", "titanic.csv", "README"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n", encoding="utf-8")
    (tmp_path.parent / "outside.py").write_text("x\n", encoding="utf-8")
    ask = ("Is there a TODO in app.py? And in notes/todo.md, (app.py), titanic.csv, README, "
           f"e.g. new.py, ../outside.py or {tmp_path.parent / 'outside.py'}.")
    assert offering.other_files(ask, tmp_path) == ["app.py", "notes/todo.md"]
