"""Notes the user can see (docs/skills-compat.md#notes): a skill without a summary or
description, or with a description over the Agent Skills limit, loads with a note;
the model's index never lists a skill without a description."""
from __future__ import annotations

from agent_support import run_command

from lily_kernel.agent.prompt import skills_index
from lily_kernel.commands import render
from lily_kernel.commands.results import SkillTable
from lily_kernel.skills.skill import body_summary

NO_DESC_NOTE = ("no summary or description: the model's skills index shows the first "
                "paragraph of the body instead")


def notes(snap, name):
    return [d.reason for d in snap.diagnostics if d.skill == name and d.kind == "note"]


def test_no_frontmatter_gets_a_note_and_an_index_entry_from_the_body(env):
    env.write_skill(env.ws_skills, "bare", None, body="# Bare skill\n\nTidies the imports of a "
                                                    "module.\nKeeps their order.\n\nMore.\n")
    snap = env.snapshot()
    assert snap.get("bare") is not None
    assert notes(snap, "bare") == [NO_DESC_NOTE]
    assert "- bare: Tidies the imports of a module. Keeps their order.\n" in skills_index(snap)


def test_frontmatter_without_description_gets_the_note(env):
    env.write_skill(env.ws_skills, "nodesc", "command: nodesc", body="Plain first paragraph.\n")
    snap = env.snapshot()
    assert notes(snap, "nodesc") == [NO_DESC_NOTE]
    assert "- nodesc: Plain first paragraph.\n" in skills_index(snap)


def test_no_entry_without_a_description_ever(env):
    env.write_skill(env.ws_skills, "empty", None, body="")
    env.write_skill(env.ws_skills, "headings", None, body="# Only a heading\n")
    snap = env.snapshot()
    assert notes(snap, "empty") == ["no summary or description, and no body text: the skill is "
                                    "left out of the model's skills index (it still runs with "
                                    "/skill)"]
    index = skills_index(snap)
    assert "- empty" not in index
    assert "- headings: Only a heading\n" in index
    for line in index.splitlines():
        if line.startswith("- "):
            assert ": " in line and line.split(": ", 1)[1].strip(), line


def test_the_stand_in_is_bounded():
    text = body_summary("```\ncode first\n```\n\n<!-- c -->\n\n" + "word " * 100)
    assert len(text) == 200 and text.endswith("…") and text.startswith("word word")
    assert body_summary("") == ""


def test_description_over_1024_characters_gets_a_note(env):
    env.write_skill(env.ws_skills, "wordy", f"description: {'d' * 1025}")
    env.write_skill(env.ws_skills, "just-right", f"description: {'d' * 1024}")
    snap = env.snapshot()
    assert snap.get("wordy") is not None
    assert notes(snap, "wordy") == ["description is 1025 characters; the Agent Skills limit is "
                                    "1024 (other agents may refuse the skill)"]
    assert notes(snap, "just-right") == []


def test_skills_all_shows_the_notes(env):
    env.write_skill(env.ws_skills, "bare", None, body="Body.\n")
    session = env.session(journal=False)
    table = run_command(session, "/skills --all")
    assert isinstance(table, SkillTable)
    assert NO_DESC_NOTE in render.text(table) and NO_DESC_NOTE in render.markdown(table)


def test_check_prints_notes_and_they_do_not_change_the_exit_code(env):
    env.write_skill(env.ws_skills, "bare", None, body="Body.\n")
    env.write_skill(env.ws_skills, "wordy", f"description: {'d' * 1100}")
    proc = env.cli("skills", "check", check_rc=0)
    assert f"note: bare (workspace): {NO_DESC_NOTE}" in proc.stdout
    assert "note: wordy (workspace): description is 1100 characters" in proc.stdout
    env.write_skill(env.ws_skills, "broken", "summary: [x")
    assert env.cli("skills", "check").returncode == 1  # errors still fail it


def test_claude_code_keys_are_not_unknown(env):
    env.write_skill(env.ws_skills, "cc", "description: d\nargument-hint: '[file]'\n"
                                         "allowed-tools: Read\ndisable-model-invocation: true\n"
                                         "user-invocable: false\nmodel: sonnet\ncontext: fork")
    env.write_skill(env.ws_skills, "odd", "description: d\nhomepage: https://x")
    snap = env.snapshot()
    assert notes(snap, "cc") == []
    assert notes(snap, "odd") == ["unknown frontmatter key(s) ignored: homepage"]
