"""``lily skills list`` (and ``check``, ``info``) show the MCP servers' skill roots
(``mcp:<server>``) as ``/skills`` does: the servers configured here are started, their skills
listed and checked, then stopped (docs/loader.md#mcp-roots). A real stdio server."""
from __future__ import annotations

import json
import sys

from mcp_support import HERE, toml_server

SERVER = str(HERE / "skills_server.py")
GREET = "---\nname: greet\ndescription: Greet people.\n---\n\nSay hi.\n"


def test_lily_skills_list_shows_an_mcp_servers_skills_and_why_one_is_left_out(env, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"skills": [
        {"name": "greet", "files": {"SKILL.md": GREET}},
        {"name": "liar", "files": {"SKILL.md": GREET.replace("greet", "liar")},
         "big": 50_000_000}]}))
    config = env.home / ".config" / "lily" / "lily.toml"
    config.parent.mkdir(parents=True)
    config.write_text(toml_server("acme", sys.executable, [SERVER, str(spec)]))
    listed = env.cli("skills", "list", XDG_CONFIG_HOME=None, check_rc=0).stdout
    assert "greet" in listed and "mcp:acme" in listed and "Greet people." in listed
    shown = env.cli("skills", "list", "--all", XDG_CONFIG_HOME=None, check_rc=0).stdout
    assert "liar" in shown and "the limit is 262,144 (not read)" in shown
    assert "MCP server 'acme'" in shown  # its root, in the roots table
    data = json.loads(env.cli("skills", "list", "--json", XDG_CONFIG_HOME=None,
                              check_rc=0).stdout)
    greet = next(s for s in data["skills"] if s["name"] == "greet")
    assert greet["source"] == "mcp:acme"
    info = env.cli("skills", "info", "greet", XDG_CONFIG_HOME=None, check_rc=0).stdout
    assert "mcp:acme" in info


def test_lily_skills_list_leaves_an_untrusted_workspaces_server_stopped(env, tmp_path):
    marker = tmp_path / "started"  # ATTACK: listing skills must not run a workspace's command
    (env.workspace / ".mcp.json").write_text(json.dumps({"mcpServers": {"ws": {
        "command": sys.executable, "args": ["-c", f"open({str(marker)!r}, 'w')"]}}}))
    shown = env.cli("skills", "list", "--all", XDG_CONFIG_HOME=None, check_rc=0).stdout
    assert not marker.exists()
    assert "not trusted" in shown
