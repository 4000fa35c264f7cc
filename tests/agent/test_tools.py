"""docs/agent.md#tools: registry, policy, and path confinement of the workspace tools."""
from __future__ import annotations

import pytest
from agent_support import run_command

from lily_kernel.commands.results import ToolOutput
from lily_kernel.errors import CommandError, ToolError
from lily_kernel.session.session import Session
from lily_kernel.tools.tool_registry import ToolPolicy, ToolRegistry, schema_for
from lily_kernel.tools.workspace_fs import split


@pytest.fixture
def reg():
    r = ToolRegistry()

    @r.register
    def read(path: str) -> str:
        return "r"

    @r.register(name="write")
    def _write(path: str, content: str) -> str:
        return "w"

    @r.register(owner_only=True)
    def admin(input: str = "") -> str:
        """Owner-only admin tool."""
        return f"admin:{input}"

    return r


# -- policy ---------------------------------------------------------------------------

def test_default_policy_allows_every_registered_tool(reg):
    p = ToolPolicy()
    assert p.unavailable_reason(reg, "read") is None
    assert p.model_refusal(reg, "read") is None


def test_unregistered_tool_is_unavailable(reg):
    assert "not registered" in ToolPolicy().unavailable_reason(reg, "shell")
    assert "not registered" in ToolPolicy().model_refusal(reg, "shell")


def test_deny_wins_over_allow(reg):
    p = ToolPolicy(allow=frozenset({"read", "write"}), deny=frozenset({"write"}))
    assert p.unavailable_reason(reg, "read") is None
    reason = p.unavailable_reason(reg, "write")
    assert reason and "denied" in reason
    assert "denied" in p.model_refusal(reg, "write")


def test_allow_list_limits_tools(reg):
    p = ToolPolicy(allow=frozenset({"read"}))
    assert p.unavailable_reason(reg, "read") is None
    assert "allow list" in p.unavailable_reason(reg, "write")
    assert ToolPolicy(allow=frozenset()).unavailable_reason(reg, "read")  # empty allow: nothing


def test_policy_from_env():
    p = ToolPolicy.from_env({"LILY_TOOLS_ALLOW": "read, write list", "LILY_TOOLS_DENY": "write"})
    assert p.allow == frozenset({"read", "write", "list"}) and p.deny == frozenset({"write"})
    p = ToolPolicy.from_env({})
    assert p.allow is None and p.deny == frozenset()


def test_owner_only_tool_is_refused_to_the_model_but_usable(reg):
    p = ToolPolicy()
    refusal = p.model_refusal(reg, "admin")
    assert refusal and "owner-only" in refusal
    assert p.unavailable_reason(reg, "admin") is None
    assert reg.get("admin").owner_only and not reg.get("read").owner_only


def test_owner_only_tool_runs_through_tool_dispatch(env):
    tools = env.tools_for(env.workspace)

    @tools.register(name="admin", owner_only=True)
    def admin(input: str = "") -> str:
        return f"admin ran with {input!r}"

    env.write_skill(env.ws_skills, "adm", "invocation_mode: tool_dispatch\ncommand_tool: admin\n"
                                          "command: adm")
    session = Session(workspace=env.workspace, env=env.session_env(), tools=tools,
                      host=env.host, journal=False)
    out = run_command(session, "/adm hello")
    assert isinstance(out, ToolOutput) and out.value == "admin ran with 'hello'"
    assert session.policy.model_refusal(session.tools, "admin")


def test_denied_command_tool_makes_the_skill_ineligible(env):
    env.write_skill(env.ws_skills, "todo", "invocation_mode: tool_dispatch\ncommand_tool: scan_todos")
    snap = env.snapshot(policy=ToolPolicy(deny=frozenset({"scan_todos"})))
    d = env.diag(snap, "ineligible", "todo")
    assert "scan_todos" in d.reason and "denied" in d.reason


def test_requires_tools_unavailable_makes_the_skill_ineligible(env):
    env.write_skill(env.ws_skills, "needs", "requires_tools: [read, write]")
    allow_read = ToolPolicy(allow=frozenset({"read"}))
    snap = env.snapshot(policy=allow_read)
    d = env.diag(snap, "ineligible", "needs")
    assert "'write'" in d.reason and "allow list" in d.reason
    assert snap.get("needs") is None
    # through the session's environment as well
    session = env.session(LILY_TOOLS_DENY="read")
    assert session.snapshot.get("needs") is None
    assert "'read'" in session.snapshot.exclusion("needs").reason
    with pytest.raises(CommandError) as info:
        run_command(session, "/skill needs")
    assert "excluded" in str(info.value)


def test_policy_change_between_sessions_is_not_shared(env):
    env.write_skill(env.ws_skills, "needs", "requires_tools: [write]")
    denied = env.session(LILY_TOOLS_DENY="write")
    free = env.session()
    assert denied.snapshot.get("needs") is None and free.snapshot.get("needs") is not None


# -- registry -------------------------------------------------------------------------

def test_registry_schema_and_description(reg):
    tool = reg.get("admin")
    assert tool.description == "Owner-only admin tool."
    assert tool.parameters == {"type": "object",
                               "properties": {"input": {"type": "string", "default": ""}},
                               "required": []}
    assert reg.get("write").parameters["required"] == ["path", "content"]
    assert reg.names() == ["admin", "read", "write"]
    assert [t.name for t in reg] == ["admin", "read", "write"]


def test_schema_types():
    def f(a: int, b: float = 1.0, c: bool = False, d: list = None, e: dict = None, *args, **kw):  # noqa: RUF013 (implicit Optional, as users write it)
        pass
    s = schema_for(f)
    assert s["required"] == ["a"]
    assert {k: v.get("type") for k, v in s["properties"].items()} == {
        "a": "integer", "b": "number", "c": "boolean", "d": "array", "e": "object"}


def test_registry_copy_is_independent(reg):
    other = reg.copy()

    @other.register
    def extra() -> str:
        return "x"

    assert "extra" in other and "extra" not in reg


def test_builtin_tools_are_registered(env):
    names = env.tools_for(env.workspace).names()
    for name in ("read", "write", "list", "scan_todos"):
        assert name in names


# -- path confinement -------------------------------------------------------------------

@pytest.fixture
def ws_tools(env):
    (env.workspace / "docs").mkdir()
    (env.workspace / "docs" / "a.txt").write_text("inside")
    outside = env.base / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET")
    (env.workspace / "escape").symlink_to(outside, target_is_directory=True)
    (env.workspace / "escape_file").symlink_to(outside / "secret.txt")
    (env.workspace / "inner_link").symlink_to(env.workspace / "docs", target_is_directory=True)
    return env.tools_for(env.workspace)


def test_file_tools_work_inside_the_workspace(env, ws_tools):
    assert ws_tools.get("read")("docs/a.txt") == "inside"
    assert ws_tools.get("read")("./docs/a.txt") == "inside"
    with pytest.raises(ToolError, match="symlink"):  # no symlink is followed, even inside
        ws_tools.get("read")("inner_link/a.txt")
    assert "wrote" in ws_tools.get("write")("new/dir/b.txt", "hello")
    assert (env.workspace / "new" / "dir" / "b.txt").read_text() == "hello"
    listing = ws_tools.get("list")("docs").splitlines()
    assert listing == ["a.txt"]
    assert "docs/" in ws_tools.get("list")().splitlines()


@pytest.mark.parametrize("tool, args, why", [
    ("read", ("../outside/secret.txt",), ".."),
    ("read", ("docs/../../outside/secret.txt",), ".."),
    ("write", ("../evil.txt", "x"), ".."),
    ("list", ("..",), ".."),
    ("read", ("/etc/passwd",), "absolute"),
    ("write", ("/tmp/evil.txt", "x"), "absolute"),
    ("list", ("/",), "absolute"),
    ("read", ("~/secret",), "absolute"),
    ("read", ("escape/secret.txt",), "outside the workspace"),  # symlinks out
    ("read", ("escape_file",), "outside the workspace"),
    ("write", ("escape/new.txt", "x"), "outside the workspace"),
    ("list", ("escape",), "outside the workspace"),
])
def test_paths_out_of_the_workspace_are_refused(env, ws_tools, tool, args, why):
    with pytest.raises(ToolError) as info:
        ws_tools.get(tool)(*args)
    assert why in str(info.value)
    assert sorted(p.name for p in (env.base / "outside").iterdir()) == ["secret.txt"]
    assert not (env.base / "evil.txt").exists()


def test_scan_todos_refuses_escapes(ws_tools):
    for bad in ("..", "/etc", "escape"):
        with pytest.raises(ToolError):
            ws_tools.get("scan_todos")(bad)


def test_scan_todos_does_not_follow_symlinked_files_out(env, ws_tools):
    (env.base / "outside" / "todo.py").write_text("# TODO: outside marker\n")
    (env.workspace / "docs" / "link.py").symlink_to(env.base / "outside" / "todo.py")
    out = ws_tools.get("scan_todos")("")
    assert "outside marker" not in out


def test_split_gives_the_components_inside():
    assert split("a/b.txt") == ("a", "b.txt")
    assert split("./a//b.txt/") == ("a", "b.txt")
    assert split("") == () and split(".") == ()
    with pytest.raises(ToolError):
        split(3)  # type: ignore[arg-type]


def test_write_refuses_the_workspace_itself(ws_tools):
    with pytest.raises(ToolError):
        ws_tools.get("write")(".", "x")


def test_read_errors_are_tool_errors(ws_tools):
    with pytest.raises(ToolError) as info:
        ws_tools.get("read")("missing.txt")
    assert "cannot read" in str(info.value)
    with pytest.raises(ToolError) as info:
        ws_tools.get("read")("docs")
    assert "folder" in str(info.value)
