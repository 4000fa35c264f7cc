"""Who may run a skill, and what it sees (docs/skills-compat.md#claude-code-conventions),
and the model's index budget (docs/agent.md#skills-index): the real router, the real
agent loop and a hostile or plain ScriptedServer on 127.0.0.1."""
from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import World, run_command

from lily_kernel.agent import loop
from lily_kernel.agent.prompt import INDEX_BUDGET, INDEX_HEADER, index_plan, skills_index
from lily_kernel.commands import completion, render
from lily_kernel.commands.results import Answer, SkillTable
from lily_kernel.errors import CommandError
from lily_kernel.skills.substitution import substitute_arguments, with_arguments

pytestmark = pytest.mark.usefixtures("no_machine_model")


@pytest.fixture
def world(tmp_path) -> World:
    return World(tmp_path)


def write_skill(root: Path, name: str, frontmatter: str, body: str = "Do it.\n") -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\n{frontmatter}\n---\n{body}", encoding="utf-8")
    return folder


def turn(server, session, *tool_calls: dict, cell: str | None = None) -> tuple[dict, dict[str, str]]:
    """One model turn making ``tool_calls``, then "done": the first request sent and the
    tool results by call id. ``cell``: the turn is that skill cell's request, as a face runs it."""
    server.add({"tool_calls": list(tool_calls)}, "done")
    if cell is None:
        loop.run(session, "go")
    else:
        answer = run_command(session, cell)
        assert isinstance(answer, Answer) and answer.text == "done", answer
    sent = server.chat_requests()
    results = {m["tool_call_id"]: m["content"] for m in sent[-1]["messages"]
               if m.get("role") == "tool"}
    return sent[0], results


def load(name: str, id: str) -> dict:
    return {"name": "load_skill", "arguments": {"name": name}, "id": id}


# -- disable-model-invocation: true -----------------------------------------------------

def test_user_only_skill_is_not_indexed_and_load_skill_refuses_it(world, server):
    write_skill(world.skills, "deploy", "description: Deploy to production.\n"
                "disable-model-invocation: true", "DEPLOY-BODY\n")
    write_skill(world.skills, "lint", "description: Lint the code.", "LINT-BODY\n")
    session = world.session(server)
    first, results = turn(server, session, load("deploy", "a"))
    system = first["messages"][0]["content"]
    assert "- lint: Lint the code." in system and "deploy" not in system
    assert results["a"] == "Error: skill 'deploy' can only be run by the user, with /skill deploy"
    assert "DEPLOY-BODY" not in str(server.chat_requests())


def test_user_only_skill_runs_when_the_user_forces_it(world, server):
    write_skill(world.skills, "deploy", "description: Deploy.\ndisable-model-invocation: true",
                "DEPLOY-BODY $0\n")
    session = world.session(server)
    first, results = turn(server, session, load("deploy", "a"), cell="/skill deploy staging")
    assert "DEPLOY-BODY staging" in first["messages"][-1]["content"]  # the forced request
    # the forced skill is not refused in its request; its body is there already, so loading
    # it again answers "already loaded" (docs/agent.md#loop-hygiene)
    assert not results["a"].startswith("Error") and "already loaded" in results["a"]


# -- user-invocable: false --------------------------------------------------------------

def test_model_only_skill_is_refused_by_skill_and_by_its_alias(world, server):
    write_skill(world.skills, "legacy-context", "description: How the legacy system works.\n"
                "user-invocable: false\ncommand: legacy", "LEGACY-BODY\n")
    session = world.session(server)
    for cell in ("/skill legacy-context why", "/legacy why"):
        with pytest.raises(CommandError) as caught:
            run_command(session, cell)
        assert "is not for running by hand (user-invocable: false)" in str(caught.value), cell
    # the model still sees it and may load it
    first, results = turn(server, session, load("legacy-context", "a"))
    assert "- legacy-context: How the legacy system works." in first["messages"][0]["content"]
    assert "LEGACY-BODY" in results["a"]
    page = run_command(session, "/help legacy-context").markdown
    assert "| user may run it | no (user-invocable: false) |" in page
    # and, as in Claude Code's / menu, completion does not offer it
    assert completion.complete(session, "/leg", 4).matches == ()
    assert completion.complete(session, "/skill leg", 10).matches == ()
    assert completion.complete(session, "/help leg", 9).matches == ("legacy-context",)


# -- placeholders -----------------------------------------------------------------------

def test_skill_dir_placeholders_become_the_skill_folder(world, server):
    folder = write_skill(world.skills, "forms", "description: Fill forms.",
                         "Read ${CLAUDE_SKILL_DIR}/reference.md and run {baseDir}/check.py.\n")
    session = world.session(server)
    _, results = turn(server, session, load("forms", "a"))
    assert f"Read {folder}/reference.md and run {folder}/check.py." in results["a"]
    server.add("done")
    assert run_command(session, "/skill forms now").skill == "forms"
    prompt = server.chat_requests()[-1]["messages"][-1]["content"]
    assert f"Read {folder}/reference.md and run {folder}/check.py." in prompt
    assert "ARGUMENTS: now" in prompt  # no $ARGUMENTS in the body: appended


@pytest.mark.parametrize(("body", "arguments", "expected"), [
    ("$ARGUMENTS", 'a "b c" d', 'a "b c" d'),  # as typed, quotes included
    ("$0|$1|$2|$3", 'a "b c" d', "a|b c|d|"),  # from 0, shell-style, empty past the end
    ("$ARGUMENTS[1]", "x y", "y"),
    ("$1abc $1", "x y", "$1abc y"),  # a word character after the digits: not a placeholder
    ("$10", " ".join("abcdefghijk"), "k"),
    ("no placeholder", "x y", "no placeholder\n\nARGUMENTS: x y"),
    ("no placeholder", "", "no placeholder"),
    ("only $0", "x y", "only x"),  # a positional counts as a placeholder: nothing appended
])
def test_claude_code_argument_rules(body, arguments, expected):
    assert with_arguments(body, arguments) == expected


def test_input_is_never_scanned_again():
    assert substitute_arguments("$0 / $ARGUMENTS", "$ARGUMENTS ${CLAUDE_SKILL_DIR}") == \
        "$ARGUMENTS / $ARGUMENTS ${CLAUDE_SKILL_DIR}"


# -- the index budget -------------------------------------------------------------------

def hundred_skills(world: World) -> list[str]:
    names = []
    for i in range(100):
        name = f"skill-{i:03d}"
        write_skill(world.skills, name, f"description: Skill number {i:03d} handles one kind of "
                    "routine notebook chore, described in about one line of ordinary prose.")
        names.append(name)
    return names


def test_with_100_skills_the_index_names_what_it_omits(world, server):
    names = hundred_skills(world)
    (world.base / "none").mkdir()
    session = world.session(server, SKILLS_BUNDLED_DIR=str(world.base / "none"))
    listed, omitted = index_plan(session.snapshot)
    assert 0 < len(listed) < 100 and [n for n, _ in listed] + omitted == names
    index = skills_index(session.snapshot)
    assert f"(+{len(omitted)} more skills not listed" in index
    assert "Not listed: " + ", ".join(omitted) + "." in index
    assert len(index.split("(+")[0]) <= INDEX_BUDGET
    # /skills says the same
    table = run_command(session, "/skills")
    assert isinstance(table, SkillTable)
    line = f"{len(omitted)} skill(s) not in the model's index (capped at 8,000 characters): " \
           + ", ".join(omitted)
    assert line in render.text(table) and line in render.markdown(table)


def test_an_omitted_skill_loads_by_name_and_nothing_else_does(world, server):
    hundred_skills(world)
    write_skill(world.skills, "zz-user-only", "description: d\ndisable-model-invocation: true")
    session = world.session(server)
    _, omitted = index_plan(session.snapshot)
    assert "zz-user-only" not in omitted  # not eligible for the model: not in the note either
    last = omitted[-1]
    _, results = turn(server, session, load(last, "a"))
    assert results["a"].startswith(f"# Skill: {last}")
    for name in ("zz-user-only", "skill-999", "../skills/skill-000"):
        session = world.session(server)
        _, results = turn(server, session, load(name, "b"))
        assert results["b"].startswith("Error:"), name


def test_the_index_is_the_same_for_the_same_tree(world):
    hundred_skills(world)
    first = skills_index(world.session(None).snapshot)
    assert skills_index(world.session(None).snapshot) == first


def test_a_long_line_is_skipped_and_shorter_ones_after_it_still_fit(world):
    write_skill(world.skills, "a-long", "description: " + "x" * 500)
    write_skill(world.skills, "b-short", "description: short")
    snap = world.session(None).snapshot
    budget = len(INDEX_HEADER) + 40  # "- b-short: short" fits, the bundled ones do not
    listed, omitted = index_plan(snap, budget)
    assert [n for n, _ in listed] == ["b-short"] and omitted[0] == "a-long"
