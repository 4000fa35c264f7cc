"""The workspace's AGENTS.md / CLAUDE.md in the system prompt (docs/agent.md#workspace-rules):
after the persona, bounded, only once the workspace is trusted; /agent says which apply.
Attack tests: an untrusted folder's rules never reach the model, nor a symlink out of it."""
from __future__ import annotations

from pathlib import Path

from agent_support import run_command

from lily_kernel.agent import workspace_rules
from lily_kernel.agent.request import system_message
from lily_kernel.commands import render
from lily_kernel.settings import workspace_trust

RULE = "Use polars, never pandas, in this project."


def session_with(env, tmp_path: Path, **files: str):
    for name, text in files.items():
        (env.workspace / name).write_text(text)
    return env.session(journal=False, LILY_DATA_DIR=str(tmp_path / "data"))


def test_untrusted_workspace_rules_never_reach_the_model(env, tmp_path):
    session = session_with(env, tmp_path, **{"AGENTS.md": RULE})
    assert RULE not in system_message(session)["content"]
    shown = render.text(run_command(session, "/agent"))
    assert "AGENTS.md: not read: the workspace is not trusted (/trust)" in shown


def test_trusted_rules_follow_the_persona_and_precede_the_skills(env, tmp_path):
    session = session_with(env, tmp_path, **{"AGENTS.md": RULE, "CLAUDE.md": "Be brief."})
    workspace_trust.trust(env.workspace, session.environ)
    system = system_message(session)["content"]
    persona = session.persona.system_text().strip()
    at = system.index("## The workspace's rules")
    assert system.index(persona[:200]) < at  # after Lily's instructions and the persona
    assert system.index(RULE) > at and system.index("Be brief.") > at
    assert at < system.index("## Skills")
    shown = render.text(run_command(session, "/agent"))
    assert "AGENTS.md: applies (" in shown and "CLAUDE.md: applies (" in shown


def test_a_long_file_is_cut_and_a_symlink_out_is_not_read(env, tmp_path):
    secret = tmp_path / "outside.md"
    secret.write_text("OUTSIDE SECRET")
    session = session_with(env, tmp_path, **{"AGENTS.md": "x" * 20_000})
    (env.workspace / "CLAUDE.md").symlink_to(secret)
    workspace_trust.trust(env.workspace, session.environ)
    system = system_message(session)["content"]
    assert "OUTSIDE SECRET" not in system
    assert f"[… cut at {workspace_rules.MAX_CHARS:,} characters]" in system
    assert system.count("x" * 100) <= workspace_rules.MAX_CHARS // 100
    shown = render.text(run_command(session, "/agent"))
    assert "CLAUDE.md: not read: not a file inside the workspace" in shown
    assert ", cut)" in shown


def test_no_rules_files_says_so(env, tmp_path):
    session = session_with(env, tmp_path)
    assert "Workspace rules files: none" in render.text(run_command(session, "/agent"))
    assert "The workspace's rules" not in system_message(session)["content"]
