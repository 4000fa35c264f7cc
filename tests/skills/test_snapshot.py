"""docs/loader.md#snapshot: what a snapshot holds, its stability within a session,
explicit /reload_skills, and the alias rules."""
from __future__ import annotations

import shutil

import pytest
from agent_support import run_command, skill_request

from lily_kernel.commands import render
from lily_kernel.commands.results import HelpPage, SkillRequest, SkillTable
from lily_kernel.errors import CommandError


def error_line(session, cell) -> str:
    with pytest.raises(CommandError) as info:
        run_command(session, cell)
    return info.value.line()


# -- contents --------------------------------------------------------------------------

def test_snapshot_contents(env):
    env.write_skill(env.ws_skills, "alpha", "summary: A\ncommand: al\nrequires_tools: [read]\n"
                                            "eligibility:\n  env: [PRESENT_VAR]", body="ALPHA BODY\n")
    env.write_skill(env.bundled_skills, "alpha", "summary: shadowed copy")
    env.write_skill(env.user_skills, "beta", "description: B desc\nx_extra: 1")
    env.write_skill(env.user_skills, "gamma", "eligibility:\n  os: [win32]")
    env.write_skill(env.user_skills, "delta", "summary: [bad")
    snap = env.snapshot(version=7)

    assert snap.version == 7
    assert isinstance(snap.hash, str) and len(snap.hash) == 64
    assert snap.names() == ["alpha", "beta"]
    alpha = snap.get("alpha")
    assert alpha.text == "---\nsummary: A\ncommand: al\nrequires_tools: [read]\n" \
                         "eligibility:\n  env: [PRESENT_VAR]\n---\nALPHA BODY\n"
    assert alpha.body == "ALPHA BODY\n"
    assert dict(snap.aliases) == {"al": "alpha"}
    kinds = sorted((d.kind, d.skill) for d in snap.diagnostics)
    assert kinds == [("ineligible", "gamma"), ("note", "beta"), ("shadowed", "alpha"),
                     ("skill_error", "delta")]
    note = env.diag(snap, "note", "beta")
    assert "x_extra" in note.reason
    for d in snap.diagnostics:
        assert d.source in ("workspace", "user", "bundled") and d.path and d.reason

    data = snap.as_dict()
    assert data["snapshot_version"] == 7 and data["snapshot_hash"] == snap.hash
    assert [s["name"] for s in data["skills"]] == ["alpha", "beta"]
    first = data["skills"][0]
    for key in ("name", "source", "path", "summary", "invocation_mode", "command",
                "requires_tools", "eligibility"):
        assert key in first
    assert first["eligibility"] == {"os": None, "env": ["PRESENT_VAR"], "binaries": [],
                                   "any_binaries": []}
    assert {tuple(sorted(d)) for d in data["diagnostics"]} == {
        ("kind", "path", "reason", "skill", "source")}


def test_snapshot_is_immutable(env):
    env.write_skill(env.ws_skills, "alpha", "command: al")
    snap = env.snapshot()
    with pytest.raises(AttributeError):
        snap.version = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        snap.aliases["x"] = "alpha"  # type: ignore[index]
    assert isinstance(snap.skills, tuple) and isinstance(snap.diagnostics, tuple)


def test_unknown_keys_are_listed_as_a_note_and_the_skill_loads(env):
    env.write_skill(env.ws_skills, "odd", "summary: s\nauthor: me\nversion: 2")
    snap = env.snapshot()
    assert snap.get("odd") is not None
    d = env.diag(snap, "note", "odd")
    assert "author" in d.reason and "version" in d.reason and "ignored" in d.reason


# -- stability ----------------------------------------------------------------------------

def _answers(session):
    """Everything a user can ask about skills, rendered and as objects."""
    table = run_command(session, "/skills")
    table_all = run_command(session, "/skills --all")
    help_a = run_command(session, "/help alpha")
    help_b = run_command(session, "/help beta")
    skill_a = skill_request(session, "/skill alpha the input")
    alias = skill_request(session, "/al via alias")
    commands = run_command(session, "/help")
    return {
        "rendered": [render.text(r) for r in (table, table_all, help_a, help_b, skill_a, alias,
                                              commands)],
        "markdown": [render.markdown(r) for r in (table, table_all, help_a, commands)],
        "objects": (table.snapshot, table_all.snapshot, help_a, help_b, skill_a.skill,
                    skill_a.input, alias.skill),
        "missing": error_line(session, "/skill gamma"),
    }


def test_disk_changes_do_not_reach_the_session_until_reload(env):
    env.write_skill(env.ws_skills, "alpha", "summary: first alpha\ncommand: al", body="ALPHA v1\n")
    env.write_skill(env.ws_skills, "beta", "summary: first beta", body="BETA v1\n")
    session = env.session()
    before = _answers(session)
    snap_before = session.snapshot

    # edit, add, delete, and break things on disk
    env.write_skill(env.ws_skills, "alpha", "summary: EDITED alpha\ncommand: al", body="ALPHA v2\n")
    shutil.rmtree(env.ws_skills / "beta")
    env.write_skill(env.user_skills, "beta", "summary: user beta now")
    env.write_skill(env.ws_skills, "gamma", "summary: brand new")
    env.write_skill(env.bundled_skills, "zeta", "summary: [broken")

    after = _answers(session)
    assert after == before
    assert session.snapshot is snap_before
    assert "EDITED" not in "".join(after["rendered"])
    assert "ALPHA v1" in render.text(skill_request(session, "/skill alpha"))
    assert after["missing"] == ("Error: no skill named 'gamma' in this session's snapshot "
                                "(version 1).")

    notice = run_command(session, "/reload_skills")
    assert "version 2" in render.text(notice)
    assert session.snapshot.version == 2 and session.reload_count == 1
    assert session.snapshot.hash != snap_before.hash
    table = render.text(run_command(session, "/skills"))
    assert "EDITED alpha" in table and "brand new" in table and "user beta now" in table
    assert "first beta" not in table
    req = skill_request(session, "/skill alpha")
    assert isinstance(req, SkillRequest) and "ALPHA v2" in req.prompt
    assert skill_request(session, "/skill gamma").skill.summary == "brand new"
    assert run_command(session, "/help beta").markdown.count("user beta now") >= 1
    assert "zeta" in render.text(run_command(session, "/skills --all"))


def test_deleting_a_whole_root_changes_nothing_until_reload(env):
    env.write_skill(env.ws_skills, "alpha", "summary: a")
    session = env.session()
    shutil.rmtree(env.ws_skills)
    assert render.text(skill_request(session, "/skill alpha")).count("alpha") >= 1
    # The configured root is now missing: reload fails with a loader error and the old
    # snapshot stays in use.
    line = error_line(session, "/reload_skills")
    assert str(env.ws_skills) in line and "version 1" in line
    assert session.snapshot.version == 1 and session.snapshot.get("alpha") is not None


def test_reload_bumps_version_even_without_changes_and_keeps_everything_else(env):
    env.write_skill(env.ws_skills, "alpha", "summary: a")
    session = env.session()
    session.add_message({"role": "user", "content": "hi"})
    run_command(session, "/agent reviewer")
    run_command(session, "/model other-model temperature=0.5")
    state = session.state()
    persona = session.persona
    sid = session.session_id
    for expected in (2, 3, 4):
        run_command(session, "/reload_skills")
        assert session.snapshot.version == expected
    assert session.reload_count == 3
    assert session.snapshot.hash == state["snapshot_hash"]
    assert session.session_id == sid
    assert session.conversation == [{"role": "user", "content": "hi"}]
    assert session.active_agent == "reviewer" and session.persona == persona
    assert session.model_config.model == "other-model"
    assert session.model_config.temperature == 0.5


def test_version_appears_in_the_not_found_error(env):
    session = env.session()
    run_command(session, "/reload_skills")
    run_command(session, "/reload_skills")
    assert error_line(session, "/skill x") == \
        "Error: no skill named 'x' in this session's snapshot (version 3)."


def test_help_for_a_skill_reads_no_files(env):
    env.write_skill(env.ws_skills, "alpha", "summary: s\nlicense: MIT")
    session = env.session()
    shutil.rmtree(env.ws_skills / "alpha")
    page = run_command(session, "/help alpha")
    assert isinstance(page, HelpPage) and "MIT" in page.markdown


def test_skills_table_lists_name_source_summary_mode_alias(env):
    env.write_skill(env.ws_skills, "alpha", "summary: Alpha summary\ncommand: al")
    env.write_skill(env.bundled_skills, "todo", "summary: T\ninvocation_mode: tool_dispatch\n"
                                                "command_tool: scan_todos")
    env.write_skill(env.user_skills, "excluded_one", "eligibility:\n  os: [win32]")
    session = env.session()
    table = run_command(session, "/skills")
    assert isinstance(table, SkillTable) and table.snapshot is session.snapshot
    text = render.text(table)
    for part in ("alpha", "workspace", "Alpha summary", "prompt_rewrite", "/al",
                 "todo", "bundled", "tool_dispatch"):
        assert part in text
    assert "win32" not in text and "1 skill(s) excluded" in text
    full = render.text(run_command(session, "/skills --all"))
    assert "excluded_one" in full and "ineligible" in full and "win32" in full
    assert "Error: /skills takes no arguments but --all" in error_line(session, "/skills --bogus")


# -- aliases --------------------------------------------------------------------------

def test_two_skills_claiming_one_alias(env):
    env.write_skill(env.ws_skills, "first", "summary: one\ncommand: go", body="FIRST\n")
    env.write_skill(env.ws_skills, "second", "summary: two\ncommand: go", body="SECOND\n")
    session = env.session()
    snap = session.snapshot
    assert "go" not in snap.aliases and snap.alias_clashes["go"] == ("first", "second")
    # both stay reachable by name
    assert "FIRST" in skill_request(session, "/skill first").prompt
    assert "SECOND" in skill_request(session, "/skill second").prompt
    # the alias fails, naming both
    line = error_line(session, "/go something")
    assert line.startswith("Error: /go ")
    assert "first" in line and "second" in line
    # both carry a note that names the other
    assert "second" in env.diag(snap, "note", "first").reason
    assert "first" in env.diag(snap, "note", "second").reason
    assert "disabled" in run_command(session, "/help first").markdown


@pytest.mark.parametrize("alias", ["go", "g-o"])
def test_a_workspace_skill_cannot_take_the_users_alias(env, alias):
    """docs/loader.md#aliases: the user's (or a bundled) skill keeps its alias; the
    workspace skill's is not bound, and /skills --all and /help say why."""
    env.write_skill(env.user_skills, "mine", "summary: mine\ncommand: g_o" if alias == "g-o"
                    else "summary: mine\ncommand: go", body="MINE\n")
    env.write_skill(env.ws_skills, "theirs", f"summary: theirs\ncommand: {alias}", body="X\n")
    session = env.session()
    snap = session.snapshot
    assert snap.aliases.get("g_o" if alias == "g-o" else "go") == "mine"
    assert alias not in snap.aliases or snap.aliases[alias] == "mine"
    note = env.diag(snap, "note", "theirs").reason
    assert "not bound" in note and "mine" in note
    assert "not bound" in run_command(session, "/help theirs").markdown
    assert "/skill theirs" in run_command(session, "/help theirs").markdown


def test_alias_clash_needs_two_included_skills(env):
    env.write_skill(env.ws_skills, "first", "command: go")
    env.write_skill(env.ws_skills, "second", "command: go\neligibility:\n  os: [win32]")
    snap = env.snapshot()
    assert dict(snap.aliases) == {"go": "first"} and not snap.alias_clashes


def test_alias_colliding_with_a_builtin_excludes_the_skill(env):
    env.write_skill(env.ws_skills, "sneaky", "summary: s\ncommand: skills")
    session = env.session()
    assert session.snapshot.get("sneaky") is None
    # the built-in still answers
    assert isinstance(run_command(session, "/skills"), SkillTable)
    line = error_line(session, "/skill sneaky")
    assert "excluded" in line and "built-in" in line


def test_alias_runs_the_skill_with_args_and_body(env):
    env.write_skill(env.ws_skills, "alpha", "command: al", body="ALPHA\n")
    session = env.session()
    req = skill_request(session, "/al first line args\nsecond line\nthird")
    assert isinstance(req, SkillRequest) and req.skill.name == "alpha"
    assert req.input == "first line args\nsecond line\nthird"
