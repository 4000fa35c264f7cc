"""docs/loader.md: the exclusion rules and the loader contract."""
from __future__ import annotations

import os

import pytest

from lily_kernel.errors import LoaderError
from lily_kernel.skills.eligibility import Host
from lily_kernel.skills.loader import build_snapshot, discover
from lily_kernel.skills.paths import SOURCES, Root, skill_roots
from lily_kernel.skills.snapshot import DIAGNOSTIC_KINDS
from lily_kernel.tools.tool_registry import ToolPolicy, ToolRegistry

# -- docs/loader.md#exclusion: a skill must be excluded if ... ----------------------------------------

def test_skill_md_missing(env):
    (env.ws_skills / "empty_skill").mkdir()
    (env.ws_skills / "empty_skill" / "README.md").write_text("not a skill")
    snap = env.snapshot()
    d = env.diag(snap, "skill_error", "empty_skill")
    assert "SKILL.md is missing" in d.reason
    assert d.source == "workspace" and d.path == str(env.ws_skills / "empty_skill")
    assert snap.get("empty_skill") is None


# (the skill's folder, its frontmatter, words its skill_error's reason holds)
SKILL_ERRORS = {
    "invalid YAML frontmatter": ("broken", "summary: [oops\ncommand: x", ("invalid YAML frontmatter",)),
    "tool_dispatch without command_tool": ("td", "invocation_mode: tool_dispatch",
                                           ("command_tool", "missing")),
    "command_tool naming no tool": ("td", "invocation_mode: tool_dispatch\ncommand_tool: no_such_tool",
                                    ("'no_such_tool'", "not a registered tool")),
    "frontmatter name differing from the folder's": ("dir_name", "name: other", ("'name'", "other")),
    "invalid folder name": ("Bad Name", "summary: s", ("skill name",)),
}


@pytest.mark.parametrize(("folder", "frontmatter", "words"), SKILL_ERRORS.values(),
                         ids=SKILL_ERRORS.keys())
def test_a_skill_error_excludes_the_skill_only(env, folder, frontmatter, words):
    env.write_skill(env.ws_skills, folder, frontmatter)
    env.write_skill(env.ws_skills, "fine", "summary: ok")
    snap = env.snapshot()
    d = env.diag(snap, "skill_error", folder)
    assert all(word in d.reason for word in words), d.reason
    assert snap.get(folder) is None and snap.names() == ["fine"]


def test_command_tool_is_checked_against_the_registry_at_snapshot_time(env):
    env.write_skill(env.ws_skills, "td", "invocation_mode: tool_dispatch\ncommand_tool: late_tool")
    tools = env.tools_for(env.workspace)
    assert env.snapshot(tools=tools).get("td") is None

    @tools.register(name="late_tool")
    def late_tool(input: str = "") -> str:
        return "ran"

    assert env.snapshot(tools=tools).get("td") is not None


@pytest.mark.parametrize("builtin", ["skills", "skill", "help", "agent", "reload_skills",
                                     "reload_persona", "new", "model", "compact", "confirm",
                                     "cancel"])
def test_command_colliding_with_a_builtin(env, builtin):
    env.write_skill(env.ws_skills, "clash", f"command: {builtin}")
    snap = env.snapshot()
    d = env.diag(snap, "skill_error", "clash")
    assert f"/{builtin}" in d.reason and "built-in" in d.reason
    assert snap.get("clash") is None and builtin not in snap.aliases


def test_eligibility_os_fails(env):
    env.write_skill(env.ws_skills, "mac_only", "eligibility:\n  os: [darwin, win32]")
    snap = env.snapshot()  # host is linux
    d = env.diag(snap, "ineligible", "mac_only")
    assert "darwin" in d.reason and "linux" in d.reason
    assert snap.get("mac_only") is None


def test_eligibility_os_passes_for_the_host_platform(env):
    env.write_skill(env.ws_skills, "mac_only", "eligibility:\n  os: [darwin]")
    darwin = Host("darwin", {}, str(env.bin))
    assert env.snapshot(host=darwin).get("mac_only") is not None
    assert env.snapshot().get("mac_only") is None


def test_eligibility_env_unset(env):
    env.write_skill(env.ws_skills, "needs_env", "eligibility:\n  env: [PRESENT_VAR, UNSET_VAR]")
    d = env.diag(env.snapshot(), "ineligible", "needs_env")
    assert "UNSET_VAR" in d.reason and "PRESENT_VAR" not in d.reason


def test_eligibility_env_empty_counts_as_missing(env):
    env.write_skill(env.ws_skills, "needs_env", "eligibility:\n  env: [EMPTY_VAR]")
    snap = env.snapshot()
    d = env.diag(snap, "ineligible", "needs_env")
    assert "EMPTY_VAR" in d.reason and "empty" in d.reason


def test_eligibility_env_set_passes(env):
    env.write_skill(env.ws_skills, "needs_env", "eligibility:\n  env: [PRESENT_VAR]")
    assert env.snapshot().get("needs_env") is not None


def test_eligibility_binaries(env):
    env.write_skill(env.ws_skills, "needs_bin", "eligibility:\n  binaries: [fakebin, nobin-xyz]")
    env.write_skill(env.ws_skills, "has_bin", "eligibility:\n  binaries: [fakebin]")
    snap = env.snapshot()
    d = env.diag(snap, "ineligible", "needs_bin")
    assert "nobin-xyz" in d.reason and "PATH" in d.reason and "fakebin" not in d.reason
    assert snap.get("has_bin") is not None


def test_eligibility_binary_must_be_executable(env):
    (env.bin / "notexec").write_text("data")
    env.write_skill(env.ws_skills, "needs_bin", "eligibility:\n  binaries: [notexec]")
    if os.access(env.bin / "notexec", os.X_OK):
        pytest.skip("this file system marks every file executable")
    assert "notexec" in env.diag(env.snapshot(), "ineligible", "needs_bin").reason


def test_ineligibility_lists_every_failed_condition(env):
    env.write_skill(env.ws_skills, "picky", "eligibility:\n  os: [win32]\n  env: [NOPE]\n"
                                            "  binaries: [nobin-xyz]")
    reason = env.diag(env.snapshot(), "ineligible", "picky").reason
    assert "win32" in reason and "NOPE" in reason and "nobin-xyz" in reason


def test_a_bad_skill_never_fails_the_load(env):
    env.write_skill(env.ws_skills, "good", "summary: good")
    env.write_skill(env.ws_skills, "bad1", raw=b"---\n: : :\n---\n")
    env.write_skill(env.ws_skills, "bad2", raw=b"\x00\xff\xfe garbage")
    env.write_skill(env.ws_skills, "Bad3", "summary: bad name")
    snap = env.snapshot()
    assert snap.names() == ["good"]
    assert {d.skill for d in snap.diagnostics if d.kind == "skill_error"} == {"bad1", "bad2", "Bad3"}


# -- docs/loader.md#discovery ----------------------------------------------------------

def test_only_immediate_children_are_discovered(env):
    env.write_skill(env.ws_skills / "group", "nested_skill", "summary: two levels down")
    env.write_skill(env.ws_skills, "top", "summary: top")
    snap = env.snapshot()
    assert snap.names() == ["top"]
    assert all(d.skill != "nested_skill" for d in snap.diagnostics)
    # the intermediate folder is a candidate without SKILL.md
    assert "SKILL.md is missing" in env.diag(snap, "skill_error", "group").reason


def test_hidden_entries_are_ignored(env):
    env.write_skill(env.ws_skills, ".hidden_skill", "summary: hidden")
    (env.ws_skills / ".git").mkdir()
    (env.ws_skills / ".DS_Store").write_text("x")
    env.write_skill(env.ws_skills, "visible", "summary: v")
    snap = env.snapshot()
    assert snap.names() == ["visible"]
    assert all(not (d.skill or "").startswith(".") for d in snap.diagnostics)


def test_plain_files_in_a_root_are_not_candidates(env):
    (env.ws_skills / "README.md").write_text("# my skills")
    (env.ws_skills / "SKILL.md").write_text("---\nsummary: stray\n---\n")
    env.write_skill(env.ws_skills, "real", "summary: r")
    snap = env.snapshot()
    assert snap.names() == ["real"] and snap.diagnostics == ()


def test_name_is_the_directory_name(env):
    env.write_skill(env.ws_skills, "dir_name", "summary: s")
    skill = env.snapshot().get("dir_name")
    assert skill is not None and skill.name == "dir_name"
    assert skill.path == str(env.ws_skills / "dir_name")


def test_symlinked_skill_inside_its_root_is_followed(env):
    store = env.ws_skills / ".store"
    env.write_skill(store, "real_target", "summary: via link")
    (env.ws_skills / "linked").symlink_to(store / "real_target", target_is_directory=True)
    snap = env.snapshot()
    skill = snap.get("linked")
    assert skill is not None and skill.summary == "via link"
    assert skill.name == "linked"
    assert not [d for d in snap.diagnostics if d.kind != "note"]


def test_symlinked_skill_outside_its_root_is_not_followed(env, tmp_path):
    outside = tmp_path / "elsewhere"
    env.write_skill(outside, "target", "summary: outside")
    (env.ws_skills / "escapee").symlink_to(outside / "target", target_is_directory=True)
    snap = env.snapshot()
    assert snap.get("escapee") is None
    d = env.diag(snap, "skill_error", "escapee")
    assert "outside its root" in d.reason and "not followed" in d.reason


def test_symlink_to_the_root_itself_is_not_followed(env):
    (env.ws_skills / "loop").symlink_to(env.ws_skills, target_is_directory=True)
    snap = env.snapshot()
    assert snap.get("loop") is None
    assert "not followed" in env.diag(snap, "skill_error", "loop").reason


def test_skill_md_symlinked_outside_the_skill_folder_is_refused(env, tmp_path):
    secret = tmp_path / "secret.md"
    secret.write_text("---\nsummary: secret\n---\n")
    folder = env.ws_skills / "sneaky"
    folder.mkdir()
    (folder / "SKILL.md").symlink_to(secret)
    snap = env.snapshot()
    assert snap.get("sneaky") is None
    assert "symlink" in env.diag(snap, "skill_error", "sneaky").reason


def test_each_skill_s_rules_are_checked_whatever_the_others_passed(env):
    """Skills with the same eligibility rule and tools each pass it; one that differs only in
    its other tools, a command_tool or an OpenClaw gate is judged on those."""
    from lily_kernel.tools.tool_registry import ToolPolicy
    same = "eligibility:\n  os: [linux, darwin]\nrequires_tools: [read]"
    env.write_skill(env.ws_skills, "a-passes", same)
    env.write_skill(env.ws_skills, "b-other-tool",
                    "eligibility:\n  os: [linux, darwin]\nrequires_tools: [nosuch]")
    env.write_skill(env.ws_skills, "c-gated",
                    same + "\nmetadata:\n  openclaw: {requires: {env: [MISSING_VAR]}}")
    env.write_skill(env.ws_skills, "d-denied-command-tool", same + "\ncommand_tool: write")
    env.write_skill(env.ws_skills, "e-passes-too", same)
    snap = env.snapshot(policy=ToolPolicy(deny=frozenset({"write"})))
    assert snap.names() == ["a-passes", "e-passes-too"]
    assert "'nosuch'" in env.diag(snap, "ineligible", "b-other-tool").reason
    assert "MISSING_VAR" in env.diag(snap, "ineligible", "c-gated").reason
    assert "command_tool" in env.diag(snap, "ineligible", "d-denied-command-tool").reason


# -- docs/loader.md#snapshot: index -------------------------------------------------------------

def test_index_is_sorted_by_code_point(env):
    for name in ["zeta", "alpha", "mid_dle", "mid-dle", "b2", "b10", "a"]:
        env.write_skill(env.ws_skills, name, f"summary: {name}")
    env.write_skill(env.user_skills, "beta", "summary: user")
    env.write_skill(env.bundled_skills, "aaa", "summary: bundled")
    names = env.snapshot().names()
    assert names == sorted(names)
    assert names == ["a", "aaa", "alpha", "b10", "b2", "beta", "mid-dle", "mid_dle", "zeta"]


def test_index_entry_fields(env):
    env.write_skill(env.ws_skills, "entry", "summary: S\ninvocation_mode: tool_dispatch\n"
                                            "command: ent\ncommand_tool: scan_todos\n"
                                            "requires_tools: [read]\neligibility:\n  os: [linux]",
                    body="BODY TEXT\n")
    skill = env.snapshot().get("entry")
    assert (skill.name, skill.source, skill.path, skill.summary, skill.invocation_mode,
            skill.command, skill.requires_tools, skill.eligibility.os) == (
        "entry", "workspace", str(env.ws_skills / "entry"), "S", "tool_dispatch", "ent",
        ("read",), ("linux",))
    assert skill.body == "BODY TEXT\n" and "command: ent" in skill.text


# -- docs/loader.md#errors: loader errors vs skill errors vs ineligible ------------------------------

def test_three_kinds_of_failure_are_distinguished(env, tmp_path):
    env.write_skill(env.ws_skills, "malformed", "summary: [x")
    env.write_skill(env.ws_skills, "unusable", "eligibility:\n  os: [win32]")
    snap = env.snapshot()
    assert env.diag(snap, "skill_error", "malformed")
    assert env.diag(snap, "ineligible", "unusable")
    assert set(d.kind for d in snap.diagnostics) <= set(DIAGNOSTIC_KINDS)
    missing = Root("workspace", tmp_path / "nope", True)
    with pytest.raises(LoaderError):
        env.snapshot(roots=(missing,))


def test_explicit_root_missing_is_a_loader_error(env, tmp_path):
    missing = tmp_path / "configured_but_missing"
    with pytest.raises(LoaderError) as info:
        env.snapshot(roots=(Root("workspace", missing, True), *env.roots()[1:]))
    assert str(missing) in str(info.value) and "does not exist" in str(info.value)
    assert "workspace" in str(info.value)


def test_explicit_root_that_is_a_file_is_a_loader_error(env, tmp_path):
    a_file = tmp_path / "skills.txt"
    a_file.write_text("not a folder")
    with pytest.raises(LoaderError) as info:
        env.snapshot(roots=(env.roots()[0], Root("user", a_file, True), env.roots()[2]))
    assert str(a_file) in str(info.value) and "not a directory" in str(info.value)
    assert "user" in str(info.value)


def test_explicit_root_unreadable_is_a_loader_error(env, require_permissions):
    locked = env.bundled_skills
    env.write_skill(locked, "x", "summary: x")
    locked.chmod(0)
    try:
        with pytest.raises(LoaderError) as info:
            env.snapshot()
    finally:
        locked.chmod(0o755)
    assert str(locked) in str(info.value) and "cannot be read" in str(info.value)


def test_default_root_that_does_not_exist_is_empty(env, tmp_path):
    roots = (Root("workspace", tmp_path / "no_ws", False),
             Root("user", tmp_path / "no_user", False),
             Root("bundled", env.bundled_skills, True))
    env.write_skill(env.bundled_skills, "only", "summary: bundled")
    snap = env.snapshot(roots=roots)
    assert snap.names() == ["only"] and snap.diagnostics == ()


def test_skill_roots_from_environment_are_explicit_and_defaults_are_not(tmp_path):
    env_vars = {"SKILLS_WORKSPACE_DIR": str(tmp_path / "w"), "HOME": str(tmp_path)}
    roots = skill_roots(env_vars, workspace=tmp_path / "ws")
    by_source = {r.source: r for r in roots}
    assert [r.source for r in roots] == [s for s in SOURCES if s != "examples"]  # off by default
    examples = skill_roots({**env_vars, "SKILLS_EXAMPLES": "1"}, workspace=tmp_path / "ws")[-1]
    assert examples.source == "examples" and not examples.explicit
    assert (examples.path / "send_message" / "SKILL.md").is_file()
    named = skill_roots({**env_vars, "SKILLS_EXAMPLES_DIR": str(tmp_path / "e")})[-1]
    assert named == Root("examples", tmp_path / "e", True)
    assert by_source["workspace"].explicit and by_source["workspace"].path == tmp_path / "w"
    assert not by_source["user"].explicit
    assert not by_source["bundled"].explicit
    # the other agents' folders: under the workspace and HOME, never explicit
    assert by_source["workspace-agents"] == Root("workspace-agents", tmp_path / "ws/.agents/skills", False)
    assert by_source["workspace-claude"] == Root("workspace-claude", tmp_path / "ws/.claude/skills", False)
    assert by_source["user"].path == tmp_path / ".lily/skills"
    assert by_source["user-agents"] == Root("user-agents", tmp_path / ".agents/skills", False)
    assert by_source["user-openclaw"] == Root("user-openclaw", tmp_path / ".openclaw/skills", False)
    roots = skill_roots({"SKILLS_USER_DIR": str(tmp_path / "u"), "HOME": str(tmp_path),
                         "SKILLS_BUNDLED_DIR": str(tmp_path / "b"), "SKILLS_COMPAT_ROOTS": "0"},
                        workspace=tmp_path)
    assert roots == (Root("workspace", tmp_path / "skills", False),
                     Root("user", tmp_path / "u", True), Root("bundled", tmp_path / "b", True))


def test_unreadable_skill_folder_is_a_skill_error_not_a_loader_error(env, require_permissions):
    folder = env.write_skill(env.ws_skills, "locked", "summary: x")
    (folder / "SKILL.md").chmod(0)
    try:
        snap = env.snapshot()
    finally:
        (folder / "SKILL.md").chmod(0o644)
    assert env.diag(snap, "skill_error", "locked")


def test_discover_returns_sorted_candidates(env):
    for name in ["c", "a", "b"]:
        env.write_skill(env.ws_skills, name, "summary: x")
    diags: list = []
    cands = discover(Root("workspace", env.ws_skills, True), diags)
    assert [c.name for c in cands] == ["a", "b", "c"] and diags == []


def test_policy_denied_required_tool_makes_skill_ineligible(env):
    env.write_skill(env.ws_skills, "needs_read", "requires_tools: [read, write]")
    snap = env.snapshot(policy=ToolPolicy(deny=frozenset({"write"})))
    d = env.diag(snap, "ineligible", "needs_read")
    assert "'write'" in d.reason and "denied" in d.reason
    assert env.snapshot().get("needs_read") is not None


def test_unregistered_required_tool_makes_skill_ineligible(env):
    env.write_skill(env.ws_skills, "needs_shell", "requires_tools: [shell]")
    d = env.diag(env.snapshot(), "ineligible", "needs_shell")
    assert "'shell'" in d.reason and "not registered" in d.reason


def test_same_folder_configured_as_two_roots_is_read_once(env):
    env.write_skill(env.bundled_skills, "once", "summary: x")
    roots = (Root("workspace", env.bundled_skills, True), Root("user", env.user_skills, True),
             Root("bundled", env.bundled_skills, True))
    snap = env.snapshot(roots=roots)
    assert snap.get("once").source == "bundled"
    assert not [d for d in snap.diagnostics if d.kind == "shadowed"]


def test_build_snapshot_with_empty_registry(env):
    env.write_skill(env.ws_skills, "plain", "summary: p")
    snap = build_snapshot(env.roots(), ToolRegistry(), ToolPolicy(), host=env.host)
    assert snap.names() == ["plain"]
