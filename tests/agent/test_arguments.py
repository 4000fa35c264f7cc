"""Claude Code's ``$ARGUMENTS`` placeholders in a prompt_rewrite body, as the model
receives them (docs/skills-compat.md#claude-code-conventions): the real router, the
real agent loop and a ScriptedServer on 127.0.0.1, whose recorded request is checked."""
from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import World, run_command

from lily_kernel.commands.results import Answer
from lily_kernel.skills.substitution import substitute_arguments

pytestmark = pytest.mark.usefixtures("no_machine_model")


def write_skill(root: Path, name: str, frontmatter: str, body: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "SKILL.md").write_text(f"---\n{frontmatter}\n---\n{body}", encoding="utf-8")


def sent_user_message(world, server, cell: str) -> str:
    session = world.session(server)
    server.add("done")
    answer = run_command(session, cell)  # a skill request: the face's cell asks the model
    assert isinstance(answer, Answer) and answer.text == "done"
    [sent] = server.chat_requests()
    user = sent["messages"][-1]
    assert user["role"] == "user"
    return user["content"]


@pytest.fixture
def world(tmp_path) -> World:
    return World(tmp_path)


def test_arguments_replaced_by_the_whole_input(world, server):
    write_skill(world.skills, "fix-issue", "description: Fix an issue.\ncommand: fix",
                "Fix GitHub issue $ARGUMENTS following our standards.\n")
    content = sent_user_message(world, server, "/fix 1234 quickly")
    assert ("<skill name=\"fix-issue\">\nFix GitHub issue 1234 quickly following our "
            "standards.\n</skill>") in content
    assert "$ARGUMENTS" not in content
    assert content.endswith("</skill>")  # the input is in the body, not repeated after it


def test_positional_arguments_from_zero_with_shell_quoting(world, server):
    write_skill(world.skills, "migrate", "description: Migrate a component.",
                "Move $ARGUMENTS[0] from $1 to $2; all: $ARGUMENTS; missing: [$3].\n")
    content = sent_user_message(world, server, '/skill migrate "Search Bar" React Vue')
    assert ("Move Search Bar from React to Vue; all: \"Search Bar\" React Vue; missing: [].") \
        in content


def test_input_on_the_following_lines_counts(world, server):
    write_skill(world.skills, "review", "description: Review.", "Review this: $ARGUMENTS\n")
    content = sent_user_message(world, server, "/skill review first\nsecond line")
    assert "Review this: first\nsecond line\n</skill>" in content


def test_without_a_placeholder_the_input_is_appended_as_arguments(world, server):
    # Claude Code: a body without $ARGUMENTS gets "ARGUMENTS: <input>" after it
    write_skill(world.skills, "plain", "description: Plain.", "Do the plain thing.\n")
    content = sent_user_message(world, server, "/skill plain PLAIN-INPUT \"two words\"")
    assert content.endswith("<skill name=\"plain\">\nDo the plain thing.\n\n"
                            "ARGUMENTS: PLAIN-INPUT \"two words\"\n</skill>")


def test_without_input_nothing_is_appended(world, server):
    write_skill(world.skills, "plain", "description: Plain.", "Do the plain thing.\n")
    content = sent_user_message(world, server, "/skill plain")
    assert "ARGUMENTS" not in content
    assert "<skill name=\"plain\">\nDo the plain thing.\n</skill>" in content


def test_substitution_is_one_pass():
    assert substitute_arguments("say $ARGUMENTS", "$0 $ARGUMENTS") == "say $0 $ARGUMENTS"
    assert substitute_arguments("$0|$1", "'unbalanced b") == "'unbalanced|b"
