"""The other agents' skill folders (docs/loader.md#roots): `<workspace>/.agents/skills`,
`<workspace>/.claude/skills`, `~/.agents/skills`, `~/.openclaw/skills`, each a source of its
own in the documented precedence, shown with its origin, and loaded deterministically."""
from __future__ import annotations

import shutil

import pytest
from agent_support import run_command

from lily_kernel.commands import render
from lily_kernel.commands.results import SkillTable
from lily_kernel.settings import workspace_trust
from lily_kernel.skills.paths import COMPAT_ROOTS, SOURCES

COMPAT = [source for source, _, _ in COMPAT_ROOTS]


def trusted(env, **extra: str):
    """A session in the workspace once the user trusted it: the workspace's own folders
    (.agents/skills, .claude/skills) load only then (docs/trust-boundary.md#workspace-trust)."""
    workspace_trust.trust(env.workspace, env.session_env(**extra))
    return env.session(journal=False, **extra)


@pytest.mark.parametrize("source", COMPAT)
def test_each_root_loads_its_skills_as_its_own_source(env, source):
    # an anthropics/skills-style folder, as its authors write it, in each root
    env.write_skill(env.root_dir(source), "pdf", "name: pdf\ndescription: Work with PDFs. "
                    "Use when the user has a PDF.\nlicense: Proprietary. LICENSE.txt has "
                    "complete terms", body="# PDF\n\nRead ${CLAUDE_SKILL_DIR}/forms.md.\n")
    session = trusted(env)
    skill = session.snapshot.get("pdf")
    assert skill is not None and skill.source == source
    assert skill.path == str(env.root_dir(source) / "pdf")
    assert [r.source for r in session.snapshot.roots] == list(SOURCES)


def test_precedence_is_the_documented_order(env):
    for source in SOURCES:
        env.write_skill(env.root_dir(source), "shared", f"description: from {source}")
    snap = trusted(env).snapshot
    assert snap.get("shared").source == "workspace"
    assert [d.source for d in snap.diagnostics if d.kind == "shadowed"] == list(SOURCES[1:])
    # take the winners away one by one: the next in SOURCES wins each time
    for i, source in enumerate(SOURCES[:-1]):
        shutil.rmtree(env.root_dir(source) / "shared")
        assert trusted(env).snapshot.get("shared").source == SOURCES[i + 1]


def test_skills_all_shows_each_skill_with_its_origin_and_the_cli_each_root(env):
    env.write_skill(env.compat_skills["workspace-agents"], "from-agents", "description: A.")
    env.write_skill(env.compat_skills["user-openclaw"], "from-openclaw",
                    'description: O.\nmetadata: {"openclaw": {"requires": {"bins": ["nope"]}}}')
    env.write_skill(env.compat_skills["workspace-claude"], "from-claude", "description: C.")
    shutil.rmtree(env.compat_skills["user-agents"])
    table = run_command(env.session(journal=False), "/skills --all")
    assert isinstance(table, SkillTable)
    text = render.text(table)
    assert any(line.split()[:2] == ["from-agents", "workspace-agents"] for line in text.splitlines())
    assert any(line.split()[:2] == ["from-claude", "workspace-claude"] for line in text.splitlines())
    assert any(line.split()[:3] == ["from-openclaw", "user-openclaw", "ineligible"]
               for line in text.splitlines())
    listed = env.cli("skills", "list", "--all", check_rc=0).stdout
    roots = listed.split("Roots, highest precedence first:")[1]
    for source in SOURCES:
        assert source in roots
    row = next(line for line in roots.splitlines() if line.startswith("user-agents "))
    assert row.split() == ["user-agents", str(env.compat_skills["user-agents"]), "default,",
                           "absent"]
    row = next(line for line in roots.splitlines() if line.startswith("workspace-agents "))
    assert row.split() == ["workspace-agents", str(env.compat_skills["workspace-agents"]),
                           "default"]
    assert "| from-agents | workspace-agents |" in render.markdown(table)


def test_the_same_tree_gives_the_same_hash(env):
    for i, source in enumerate(SOURCES):
        env.write_skill(env.root_dir(source), f"skill-{i}", f"description: {source}")
        env.write_skill(env.root_dir(source), "shared", f"description: {source}")
    first = env.session(journal=False).snapshot
    second = env.session(journal=False).snapshot
    assert first.hash == second.hash and first.names() == second.names()
    (env.compat_skills["user-agents"] / "skill-4" / "SKILL.md").write_text(
        "---\ndescription: changed\n---\n")
    assert env.session(journal=False).snapshot.hash != first.hash


def test_compat_roots_can_be_turned_off(env):
    env.write_skill(env.compat_skills["workspace-agents"], "from-agents", "description: A.")
    assert trusted(env).snapshot.get("from-agents") is not None
    off = env.session(journal=False, SKILLS_COMPAT_ROOTS="0").snapshot
    assert off.get("from-agents") is None
    assert [r.source for r in off.roots] == ["workspace", "user", "bundled", "examples"]


def test_a_home_root_that_is_the_workspace_root_is_read_once(env):
    # HOME is the workspace (a user working in ~): ~/.agents/skills is <ws>/.agents/skills
    env.write_skill(env.compat_skills["workspace-agents"], "once", "description: once")
    snap = env.session(journal=False, HOME=str(env.workspace)).snapshot
    assert snap.get("once").source == "user-agents"
    assert [d.kind for d in snap.diagnostics] == ["note"]
