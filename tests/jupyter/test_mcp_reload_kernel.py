"""``/mcp`` and ``/mcp restart`` read the MCP configuration again (issue 34 §6): a server
added to the user's lily.toml starts, a removed one stops, a changed one starts again as
configured now, an unchanged one keeps running, a server a workspace's new .mcp.json adds
waits for /trust; the model is offered the tools of the servers as configured now. Real
kernels (jupyter_client), real stdio MCP servers (tests/mcp/hostile_server.py)."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from kernel_support import Kernel, scripted_kernel_world

HOSTILE = str(Path(__file__).parent.parent / "mcp" / "hostile_server.py")


def server_table(name: str, *extra: str, timeout: int = 10) -> str:
    args = ", ".join(json.dumps(a) for a in (HOSTILE, *extra))
    return (f"[mcp.servers.{name}]\ncommand = {json.dumps(sys.executable)}\n"
            f"args = [{args}]\ntimeout = {timeout}\n")


def status(kernel: Kernel, line: str = "/mcp") -> str:
    run = kernel.run(line)
    assert run.status == "ok", run.messages
    return "\n".join(d.get("text/plain", "") for d in run.displays)


def gone_soon(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def offered(server) -> set[str]:
    return {t["function"]["name"] for t in server.chat_requests()[-1].get("tools", [])}


def test_mcp_follows_the_edited_configuration(tmp_path, ipython_dir, server, turns):
    world = scripted_kernel_world(tmp_path, ipython_dir, server.url)
    user = Path(world.env["HOME"]) / ".config" / "lily" / "lily.toml"
    user.parent.mkdir(parents=True)
    user.write_text(server_table("notes"))
    kernel = Kernel("lily", world)
    try:
        first = status(kernel)
        assert "notes (stdio, user): ready" in first and "changed" not in first, first
        pid = tmp_path / "notes.pid"

        # added: 'extra' starts at the next /mcp; 'notes' unchanged keeps running
        user.write_text(server_table("notes") + server_table("extra", "--pidfile", str(pid)))
        shown = status(kernel)
        assert "The MCP configuration changed since it was read: 'extra' added: started." \
            in shown, shown
        assert "extra (stdio, user): ready" in shown and "mcp__extra__echo" in shown
        assert "notes (stdio, user): ready" in shown
        extra_pid = pid.read_text()

        # changed: 'extra' with another timeout starts again (a new process)
        user.write_text(server_table("notes") + server_table("extra", "--pidfile", str(pid),
                                                              timeout=20))
        shown = status(kernel)
        assert "'extra' changed (timeout): started" in shown, shown
        assert pid.read_text() != extra_pid
        assert gone_soon(int(extra_pid)), "the old 'extra' process still runs"

        # removed, through /mcp restart: 'notes' stops and is gone; restarting it says so
        user.write_text(server_table("extra", "--pidfile", str(pid), timeout=20))
        shown = status(kernel, "/mcp restart extra")
        assert "'notes' is no longer configured: stopped" in shown, shown
        assert "Restarted MCP server extra." in shown and "notes (" not in shown
        gone = kernel.run("/mcp restart notes")
        assert "no MCP server named 'notes'" in gone.error_line()

        # the model is offered the servers as configured now
        turns.append("done")
        assert kernel.run("which tools?").status == "ok"
        names = offered(server)
        assert "mcp__extra__echo" in names and not any(n.startswith("mcp__notes__")
                                                        for n in names), names

        # nothing changed: no change line
        assert "changed since it was read" not in status(kernel)
    finally:
        kernel.shutdown()


def test_a_new_mcp_json_in_an_untrusted_workspace_waits_for_trust(tmp_path, ipython_dir,
                                                                 server):
    world = scripted_kernel_world(tmp_path, ipython_dir, server.url)
    world.workspace.mkdir(parents=True, exist_ok=True)
    kernel = Kernel("lily", world)
    try:
        assert "No MCP server is configured" in status(kernel)
        (world.workspace / ".mcp.json").write_text(json.dumps({"mcpServers": {"ws": {
            "command": sys.executable, "args": [HOSTILE]}}}))
        shown = status(kernel)
        assert "'ws' added: waits for /trust" in shown, shown
        assert "ws (stdio, .mcp.json): untrusted: the workspace is not trusted" in shown
        # a broken file is one line, and the running configuration stays
        (world.workspace / ".mcp.json").write_text("{not json")
        shown = status(kernel)
        assert "the MCP configuration cannot be read" not in shown  # .mcp.json: a row
        assert "(.mcp.json)" in shown, shown
    finally:
        kernel.shutdown()
