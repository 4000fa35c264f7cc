"""Attack: a server added to a trusted workspace's ``.mcp.json`` does not start before
``/trust`` (docs/trust-boundary.md#what-asks-again), and the commands that hold it back say
so with ``/trust``; the workspace's skills keep loading meanwhile. Real server processes."""
from __future__ import annotations

import json
import sys

from agent_support import run_command
from mcp_support import HOSTILE

from lily_kernel.commands import render

PY = sys.executable


def servers(*names: str, pids) -> str:
    return json.dumps({"mcpServers": {
        n: {"command": PY, "args": [HOSTILE, "--pidfile", str(pids / f"{n}.pid")]}
        for n in names}})


def test_a_new_mcp_json_server_waits_for_trust_and_is_named(mcp_world, tmp_path):
    mcp = mcp_world.workspace / ".mcp.json"
    mcp.write_text(servers("first", pids=tmp_path))
    skill = mcp_world.workspace / "skills" / "notes"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: notes\ndescription: Keeps notes.\n---\nNote.\n")
    session = mcp_world.session()
    run_command(session, "/trust")
    run_command(session, "/trust --yes")
    session.mcp.sync(session.tools, wait=10)
    assert (tmp_path / "first.pid").exists()
    mcp.write_text(servers("first", "second", pids=tmp_path))
    shown = render.text(run_command(session, "/mcp"))  # the command that reads it again
    assert "'second' added: waits for /trust" in shown
    session.mcp.sync(session.tools, wait=1)
    assert not (tmp_path / "second.pid").exists()
    # the next kernel: nothing of the changed file starts; the note names it and /trust
    (tmp_path / "first.pid").unlink()
    later = mcp_world.session()
    later.mcp.sync(later.tools, wait=1)
    assert not (tmp_path / "first.pid").exists() and not (tmp_path / "second.pid").exists()
    note = later.untrusted_note or ""
    assert ".mcp.json changed since it was trusted" in note and "/trust" in note
    assert later.snapshot.get("notes") is not None  # its skills did not change: they load
    review = render.text(run_command(later, "/trust"))
    assert "second" in review and ".mcp.json changed since it was trusted" in review
    run_command(later, "/trust --yes")
    later.mcp.sync(later.tools, wait=10)
    assert (tmp_path / "second.pid").exists()
