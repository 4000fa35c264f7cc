"""Real MCP servers: the reference servers (stdio), an SDK Streamable HTTP server, hostile ones."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from agent_support import run_command
from mcp_http_support import mcp_http_server
from mcp_support import BIN, HOSTILE, toml_server

from lily_kernel.commands import render
from lily_kernel.errors import CommandError, ToolError
from lily_kernel.tools.mcp.mcp_tools import tool_name

PY = sys.executable


def hostile(mcp_world, *args: str, timeout: float = 5, **extra: object):
    mcp_world.user(toml_server("bad", PY, [HOSTILE, *args], timeout=timeout, **extra))
    session = mcp_world.session()
    session.mcp.sync(session.tools)
    return session


def call(session, name: str, **args):
    return session.tools.get(name)(**args)


def test_reference_time_server_tools_schemas_annotations_and_a_call(mcp_world):
    mcp_world.user(toml_server("time", str(BIN / "mcp-server-time"),
                               ["--local-timezone", "UTC"], auto_approve=["get_current_time"]))
    session = mcp_world.session()
    session.mcp.sync(session.tools)
    now = session.tools.get("mcp__time__get_current_time")
    convert = session.tools.get("mcp__time__convert_time")
    assert now.origin == "mcp" and now.server == "time"
    assert now.annotations["readOnlyHint"] is True
    assert (now.ask, convert.ask) == (False, True)  # auto_approve, else asked
    assert now.parameters["required"] == ["timezone"]
    assert json.loads(now(timezone="UTC"))["timezone"] == "UTC"
    with pytest.raises(ToolError, match="Invalid timezone"):  # isError is a tool error
        now(timezone="Not/AZone")
    shown = render.text(run_command(session, "/mcp"))
    assert "time (stdio, user): ready" in shown
    assert "mcp__time__get_current_time  auto" in shown
    assert "mcp__time__convert_time      approval" in shown


def test_reference_git_server(mcp_world, tmp_path):
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("hello")
    mcp_world.user(toml_server("git", str(BIN / "mcp-server-git"), ["--repository", str(repo)]))
    session = mcp_world.session()
    session.mcp.sync(session.tools)
    assert "mcp__git__git_status" in session.tools
    assert "a.txt" in call(session, "mcp__git__git_status", repo_path=str(repo))


def test_streamable_http_server_with_a_secret_header(mcp_world, monkeypatch):
    token = "http-token-0123456789"
    with mcp_http_server(token) as port:
        monkeypatch.setenv("REMOTE_TOKEN", token)
        mcp_world.user(f'[mcp.servers.remote]\nurl = "http://127.0.0.1:{port}/mcp"\n'
                       'headers = { Authorization = "Bearer ${REMOTE_TOKEN}" }\n')
        session = mcp_world.session(REMOTE_TOKEN=token)
        session.mcp.sync(session.tools)
        assert session.mcp.status()[0]["state"] == "ready", session.mcp.status()
        assert call(session, "mcp__remote__add", a=2, b=3) == "5"
        # the header's value is a secret now: masked wherever Lily shows or records text
        assert token not in render.text(run_command(session, "/mcp"))
        from lily_kernel.redaction import redact
        assert redact(f"x {token} y") == "x *** y"


def test_a_server_that_fails_to_start_shows_its_stderr_in_mcp(mcp_world):
    session = hostile(mcp_world, "--fail-start")
    row = session.mcp.status()[0]
    assert row["state"] == "failed" and row["reason"]
    assert "fatal: the database is locked" in row["stderr"]
    shown = render.text(run_command(session, "/mcp"))
    assert "bad (stdio, user): failed" in shown and "database is locked" in shown


def test_faults_are_one_line_each_and_the_server_keeps_working(mcp_world):
    session = hostile(mcp_world, timeout=2)
    assert call(session, "mcp__bad__echo", text="hi") == "hi"
    with pytest.raises(ToolError, match="disk is full"):
        call(session, "mcp__bad__fail")
    with pytest.raises(ToolError, match="malformed message"):
        call(session, "mcp__bad__garbage")
    assert call(session, "mcp__bad__echo", text="still") == "still"
    assert len(call(session, "mcp__bad__huge")) == 5_000_000  # the loop caps it for the model
    assert "image image/png, 72 bytes" in call(session, "mcp__bad__image")
    assert session.mcp.shown[-1].mime == "image/png"
    with pytest.raises(ToolError, match="the server exited"):
        call(session, "mcp__bad__crash")
    with pytest.raises(ToolError) as exc:
        call(session, "mcp__bad__echo", text="gone")
    assert "\n" not in str(exc.value)
    assert session.mcp.status()[0]["state"] == "failed"
    run_command(session, "/mcp restart bad")
    assert call(session, "mcp__bad__echo", text="back") == "back"
    with pytest.raises(ToolError, match="did not answer within 2 s"):
        call(session, "mcp__bad__hang")
    run_command(session, "/mcp restart bad")  # a wedged server is restarted
    assert call(session, "mcp__bad__echo", text="again") == "again"
    with pytest.raises(CommandError, match="no MCP server named 'nope'"):
        run_command(session, "/mcp restart nope")


def test_a_thousand_tools_are_cut_with_one_line(mcp_world):
    session = hostile(mcp_world, "--tools", "1000")
    mcp_tools = [t for t in session.tools if getattr(t, "origin", "") == "mcp"]
    assert len(mcp_tools) == 100
    assert "Lily keeps the first 100" in render.text(run_command(session, "/mcp"))


def test_tools_list_changed_refreshes_the_registry(mcp_world):
    session = hostile(mcp_world)
    assert "mcp__bad__grown" not in session.tools
    call(session, "mcp__bad__grow")
    for _ in range(100):
        session.mcp.sync(session.tools)
        if "mcp__bad__grown" in session.tools:
            break
        time.sleep(0.05)
    assert "mcp__bad__grown" in session.tools


def test_html_and_injection_from_a_server_are_escaped_in_mcp(mcp_world):
    session = hostile(mcp_world, "--fail-start")
    assert "<script>" in " ".join(session.mcp.status()[0]["stderr"])
    shown = render.markdown(run_command(session, "/mcp"))
    assert "<script>" not in shown and "\\<script\\>" in shown  # commands/sanitize.md_text
    import markdown_it  # rendered, the stderr line is text, not a tag
    assert "<script>" not in markdown_it.MarkdownIt("commonmark").render(shown)


def test_the_child_gets_a_minimal_environment(mcp_world, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-kernel-key-0123456789")
    monkeypatch.setenv("LILY_OUTBOX_TOKEN", "outbox-token-0123456789")
    monkeypatch.setenv("SOME_KERNEL_VAR", "kernel-only")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    session = hostile(mcp_world, env={"OWN": "its own"})
    child = json.loads(call(session, "mcp__bad__env"))
    assert "OPENAI_API_KEY" not in child and "LILY_OUTBOX_TOKEN" not in child
    assert "SOME_KERNEL_VAR" not in child
    assert child["OWN"] == "its own" and child["LC_ALL"] == "C.UTF-8" and "PATH" in child


KERNEL = """
import sys, time
from lily_kernel.session.session import Session
s = Session(sys.argv[1], journal=False)
s.mcp.sync(s.tools)
print(s.mcp.status()[0]["state"], flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_DEATHSIG is Linux's")
def test_children_die_with_the_kernel_even_after_kill_9(mcp_world, tmp_path):
    pidfile = tmp_path / "child.pid"
    mcp_world.user(toml_server("bad", PY, [HOSTILE, "--pidfile", str(pidfile)]))
    env = {**os.environ, "HOME": str(mcp_world.home)}
    env.pop("XDG_CONFIG_HOME", None)
    kernel = subprocess.Popen([PY, "-c", KERNEL, str(mcp_world.workspace)], env=env,
                              stdout=subprocess.PIPE, text=True)
    assert kernel.stdout.readline().strip() == "ready"
    child = int(pidfile.read_text())
    os.kill(child, 0)  # alive
    kernel.send_signal(signal.SIGKILL)
    kernel.wait(30)
    for _ in range(600):  # gone, not merely a zombie waiting for a parent
        try:
            os.kill(child, 0)
            with open(f"/proc/{child}/stat") as fh:
                if fh.read().split(") ")[1].startswith("Z"):
                    break
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the MCP child {child} outlived its kernel")


def test_a_workspace_server_in_an_untrusted_folder_starts_nothing(mcp_world, tmp_path):
    pidfile = tmp_path / "child.pid"
    (mcp_world.workspace / ".mcp.json").write_text(json.dumps({"mcpServers": {
        "ws": {"command": PY, "args": [HOSTILE, "--pidfile", str(pidfile)]}}}))
    session = mcp_world.session()
    session.mcp.sync(session.tools, wait=1)
    assert session.mcp.status()[0]["state"] == "untrusted"
    assert not pidfile.exists() and "mcp__ws__echo" not in session.tools
    assert "untrusted" in render.text(run_command(session, "/mcp"))
    shown = render.text(run_command(session, "/trust"))  # the user's command, not a tool
    assert ".mcp.json" in shown and HOSTILE in shown and "--pidfile" in shown  # its command line
    session.mcp.sync(session.tools, wait=1)
    assert not pidfile.exists()  # shown, not started: nothing is trusted yet
    run_command(session, "/trust --yes")
    session.mcp.sync(session.tools, wait=10)
    assert "ready" in render.text(run_command(session, "/mcp"))  # starts them in this session
    assert pidfile.exists() and "mcp__ws__echo" in session.tools


def test_a_trusted_workspace_cannot_take_the_place_of_the_users_server(mcp_world, tmp_path):
    """Attack: the user runs 'notes' with echo auto-approved; a cloned repository's
    .mcp.json defines its own 'notes'. Trusted, it would have inherited the approval for
    mcp__notes__echo. The user's server stays; the workspace's never starts."""
    pidfile = tmp_path / "impostor.pid"
    mcp_world.user(toml_server("notes", PY, [HOSTILE], auto_approve=["echo"]))
    (mcp_world.workspace / ".mcp.json").write_text(json.dumps({"mcpServers": {
        "notes": {"command": PY, "args": [HOSTILE, "--pidfile", str(pidfile)]}}}))
    session = mcp_world.session()
    shown = render.text(run_command(session, "/trust"))
    assert "a workspace cannot replace it" in shown  # the review says it will not be used
    run_command(session, "/trust --yes")
    session.mcp.sync(session.tools, wait=10)
    status = {s["name"]: s for s in session.mcp.status()}
    assert status["notes"]["state"] == "ready" and status["notes"]["source"] == "user"
    assert status["notes (.mcp.json)"]["state"] == "failed"
    assert "a workspace cannot replace it" in render.text(run_command(session, "/mcp"))
    assert not pidfile.exists()  # the impostor never ran
    assert session.tools.get("mcp__notes__echo").server == "notes"

def test_names_are_escaped_so_two_servers_never_share_one(mcp_world):
    """'a.b' and 'a_b' used to both become mcp__a_b__echo (the first won, and an approval
    could pass to the other): each part is escaped now (docs/permissions.md#approvals)."""
    table = toml_server("x", PY, [HOSTILE])
    mcp_world.user(table.replace("[mcp.servers.x]", '[mcp.servers."a.b"]')
                   + table.replace("[mcp.servers.x]", "[mcp.servers.a_b]")
                   + table.replace("[mcp.servers.x]", "[mcp.servers.a_]"))
    session = mcp_world.session()
    session.mcp.sync(session.tools)
    assert session.mcp.problems == []
    assert session.tools.get("mcp__a_b__echo").server == "a_b"
    assert session.tools.get("mcp__-612e62__echo").server == "a.b"
    assert session.tools.get("mcp__-615f__echo").server == "a_"
    assert tool_name("a_", "_b") != tool_name("a", "__b") != tool_name("a__", "b")
    assert len({tool_name(s, t) for s, t in [("a_", "b"), ("a", "_b"), ("a", "b_"),
                                               ("a__b", "c"), ("a", "b__c")]}) == 5


def test_a_name_collision_refuses_both_with_one_line(mcp_world, monkeypatch):
    from lily_kernel.tools.mcp import mcp_hub
    table = toml_server("x", PY, [HOSTILE])
    mcp_world.user(table.replace("[mcp.servers.x]", "[mcp.servers.one]")
                   + table.replace("[mcp.servers.x]", "[mcp.servers.two]"))
    monkeypatch.setattr(mcp_hub, "tool_name", lambda server, tool: f"mcp__same__{tool}")
    session = mcp_world.session()
    session.mcp.sync(session.tools)
    problems = session.mcp.problems
    assert any("mcp__same__echo is claimed by 'echo' of server 'one' and 'echo' of server "
               "'two'; both are left out" in p for p in problems), problems
    assert "mcp__same__echo" not in session.tools
    assert problems[0] in render.text(run_command(session, "/mcp"))


def test_lily_mcp_list_json_starts_the_servers(mcp_world, monkeypatch, capsys):
    from lily_kernel import cli
    mcp_world.user(toml_server("time", str(BIN / "mcp-server-time"), [],
                               auto_approve=["get_current_time"]))
    monkeypatch.setenv("HOME", str(mcp_world.home))
    monkeypatch.setenv("LILY_WORKSPACE", str(mcp_world.workspace))
    assert cli.main(["mcp", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    server = listed["servers"][0]
    assert (server["name"], server["state"]) == ("time", "ready")
    assert {"name": "mcp__time__get_current_time", "tool": "get_current_time",
            "mode": "auto"} in server["tools"]


def test_an_administrator_can_forbid_the_workspaces_servers(mcp_world, tmp_path):
    """docs/permissions.md#the-administrators-policy: not even /trust starts them."""
    pidfile = tmp_path / "child.pid"
    (mcp_world.workspace / ".mcp.json").write_text(json.dumps({"mcpServers": {
        "ws": {"command": PY, "args": [HOSTILE, "--pidfile", str(pidfile)]}}}))
    policy = tmp_path / "policy.toml"
    policy.write_text("[mcp]\nworkspace_servers = false\n")
    session = mcp_world.session(LILY_POLICY_FILE=str(policy))
    run_command(session, "/trust")
    session.mcp.sync(session.tools, wait=1)
    (row,) = session.mcp.status()
    assert "administrator's policy forbids the workspace's MCP servers" in (row["reason"] or "")
    assert not pidfile.exists() and "mcp__ws__echo" not in session.tools


def test_a_bare_command_runs_from_the_kernel_environments_bin(mcp_world, monkeypatch):
    """Issue 34 §6: README's ``command = "mcp-server-time"`` failed when the kernel's
    environment was not activated (its bin/ not on PATH); it is put first on the child's."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert shutil.which("mcp-server-time") is None  # not findable from the kernel's PATH
    mcp_world.user(toml_server("time", "mcp-server-time", ["--local-timezone", "UTC"],
                               auto_approve=["get_current_time"]))
    session = mcp_world.session()
    session.mcp.sync(session.tools)
    assert session.mcp.status()[0]["state"] == "ready", session.mcp.status()
    assert "UTC" in call(session, "mcp__time__get_current_time", timezone="UTC")
