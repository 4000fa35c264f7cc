"""Claude Code's frontmatter keys (docs/skills-compat.md#claude-code-conventions):
``argument-hint`` in /help, Shift-Tab inspection and the /skills table; the keys Lily
does not act on, listed in /help as declared, not enforced."""
from __future__ import annotations

from agent_support import run_command

from lily_kernel.commands import completion, render
from lily_kernel.commands.results import SkillTable

CC = ("description: Fix a GitHub issue.\ncommand: fix\nargument-hint: '[issue-number]'\n"
      "allowed-tools: Bash(gh:*) Read\nmodel: sonnet\ncontext: fork")


def session_with(env, frontmatter=CC, name="fix-issue"):
    env.write_skill(env.ws_skills, name, frontmatter)
    return env.session(journal=False)


def test_help_shows_the_hint_and_the_usage(env):
    page = run_command(session_with(env), "/help fix-issue").markdown
    assert "| arguments | `[issue-number]` (argument-hint) |" in page
    assert "Run it with `/fix [issue-number]`." in page


def test_a_yaml_list_hint_reads_back_as_written(env):
    # `argument-hint: [issue-number]` unquoted is a YAML list: shown as the author typed it
    session = session_with(env, "description: d\nargument-hint: [pr-number, priority]")
    assert "Run it with `/skill fix-issue [pr-number] [priority]`." in \
        run_command(session, "/help fix-issue").markdown


def test_help_lists_what_lily_does_not_enforce(env):
    page = run_command(session_with(env, CC + "\nuser-invocable: false"), "/help fix-issue").markdown
    assert ("| declared, not enforced by Lily | allowed-tools: `Bash(gh:*)` `Read` (grants "
            "nothing); model: `sonnet`; context: `fork` |") in page
    assert "| user may run it | no (user-invocable: false) |" in page  # enforced, so its own row


def test_no_declared_row_without_such_keys(env):
    page = run_command(session_with(env, "description: d"), "/help fix-issue").markdown
    assert "declared, not enforced" not in page and "| arguments |" not in page


def test_shift_tab_inspect_shows_the_hint(env):
    session = session_with(env)
    for code, cursor in (("/fix", 2), ("/fix 12", 6), ("/skill fix-issue ", 17),
                         ("/skill fix-issue 12", 10), ("/help fix-issue", 10)):
        page = completion.inspect(session, code, cursor)
        assert page is not None and "`[issue-number]` (argument-hint)" in page.markdown, code
    assert completion.inspect(session, "/skill nothing-here 1", 21) is None


def test_skills_table_gets_an_arguments_column_only_when_a_skill_has_a_hint(env):
    session = session_with(env)
    table = run_command(session, "/skills")
    assert isinstance(table, SkillTable)
    text = render.text(table)
    header = text.splitlines()[2].split()
    assert header == ["name", "source", "mode", "alias", "arguments", "summary"]
    assert "[issue-number]" in text
    assert "| name | source | mode | alias | arguments | summary |" in render.markdown(table)
    plain = run_command(session_with(env, "description: d", name="other"), "/skills")
    assert "arguments" in render.text(plain)  # fix-issue is still there
    (env.ws_skills / "fix-issue" / "SKILL.md").unlink()
    (env.ws_skills / "fix-issue").rmdir()
    bare = run_command(env.session(journal=False), "/skills")
    assert render.text(bare).splitlines()[2].split() == ["name", "source", "mode", "alias",
                                                         "summary"]
