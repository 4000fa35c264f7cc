"""MCP configuration: [mcp.servers], .mcp.json, ${VAR} expansion and its secrets, the user file."""
from __future__ import annotations

import json
import tomllib

import pytest

from lily_kernel import cli, redaction
from lily_kernel.settings.model_settings import merged
from lily_kernel.tools.mcp import mcp_config


def test_variables_expand_with_defaults_and_become_secrets():
    env = {"NOTES_TOKEN": "tok-0123456789-secret", "HOME": "/home/someone"}
    server = mcp_config.parse_server("notes", {
        "command": "python", "args": ["${HOME}/notes.py"],
        "env": {"API_TOKEN": "${NOTES_TOKEN}", "DB": "${NOTES_DB:-notes.db}"}}, "user", env)
    assert server.error is None
    assert server.args == ("/home/someone/notes.py",)
    assert dict(server.env) == {"API_TOKEN": "tok-0123456789-secret", "DB": "notes.db"}
    # the token is a live secret now, masked everywhere; HOME is not a secret
    assert redaction.redact("sent tok-0123456789-secret") == "sent ***"
    assert "/home/someone" in redaction.redact("/home/someone/notes.py")


def test_an_unset_variable_is_one_error_line_naming_it():
    server = mcp_config.parse_server("remote", {"url": "http://127.0.0.1:9/mcp",
                                            "headers": {"Authorization": "Bearer ${NOPE_TOKEN}"}},
                                 "workspace", {})
    assert server.error == "MCP server 'remote' (workspace): ${NOPE_TOKEN} is not set"
    assert server.from_workspace


@pytest.mark.parametrize("table, why", [
    ({}, "needs either 'command'"),
    ({"command": "x", "url": "http://a"}, "needs either 'command'"),
    ({"command": "x", "args": "a b"}, "'args' must be a list"),
    ({"url": "ftp://a"}, "must start with http"),
    ({"command": "x", "timeout": -1}, "'timeout'"),
    ({"command": "x", "bogus": 1}, "unknown setting 'bogus'"),
])
def test_bad_tables_are_errors_not_crashes(table, why):
    assert why in (mcp_config.parse_server("s", table, "user", {}).error or "")


def test_mcp_json_shapes_and_import_round_trip(tmp_path, capsys):
    claude = {"mcpServers": {
        "notes": {"command": "python", "args": ["notes.py"], "env": {"T": "${TOK}"}},
        "remote": {"type": "http", "url": "http://127.0.0.1:8765/mcp",
                   "headers": {"Authorization": "Bearer ${REMOTE_TOKEN}"}}}}
    jupyter_ai = {"mcp_servers": [{"name": "time", "command": "uvx",
                                   "args": ["mcp-server-time"]}]}
    for data, names in ((claude, ["notes", "remote"]), (jupyter_ai, ["time"])):
        path = tmp_path / "servers.json"
        path.write_text(json.dumps(data))
        assert cli.main(["mcp", "import", str(path)]) == 0
        out = capsys.readouterr().out
        tables = tomllib.loads(out)["mcp"]["servers"]
        assert sorted(tables) == sorted(names)
        for name in names:  # what lily.toml reads back is the same server
            assert mcp_config.parse_server(name, tables[name], "user",
                                       {"TOK": "t" * 9, "REMOTE_TOKEN": "r" * 9}).error is None
    path.write_text("{not json")
    assert cli.main(["mcp", "import", str(path)]) == 2
    assert capsys.readouterr().err.startswith("Error: ")


def test_import_keeps_variables_unexpanded(tmp_path, capsys):
    path = tmp_path / ".mcp.json"
    path.write_text(json.dumps({"mcpServers": {"r": {"url": "http://h/mcp",
                                                     "headers": {"A": "${SECRET_X}"}}}}))
    cli.main(["mcp", "import", str(path)])
    assert 'headers = { A = "${SECRET_X}" }' in capsys.readouterr().out


def test_load_reads_the_user_file_the_workspace_and_mcp_json(tmp_path):
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {"b": {"command": "b"}}}))
    servers = mcp_config.load(tmp_path, {}, {"mcp": {"servers": {"a": {"command": "a"},
                                                            "b": {"command": "user-b"}}}},
                          {"mcp": {"servers": {"c": {"url": "http://x/mcp"}}}})
    by = {s.name: s for s in servers}
    assert by["a"].source == "user" and not by["a"].from_workspace
    assert by["c"].source == "workspace"
    # a workspace server never takes the place of the user's own (it would inherit the
    # user's rules and approvals for mcp__b__*): the user's stays, the workspace's fails
    assert by["b"].source == "user" and by["b"].command == "user-b" and by["b"].error is None
    refused = by["b (.mcp.json)"]
    assert refused.error is not None and "a workspace cannot replace it" in refused.error
    # within the workspace's layer, .mcp.json replaces its lily.toml server of that name
    servers = mcp_config.load(tmp_path, {}, {}, {"mcp": {"servers": {"b": {"command": "ws"}}}})
    assert [(s.name, s.source, s.command) for s in servers] == [("b", ".mcp.json", "b")]


def test_precedence_defaults_user_file_workspace_environment(mcp_world):
    mcp_world.user('[model]\nmodel = "from-user"\ntemperature = 0.5\n')
    assert mcp_world.session().model_config.model == "from-user"
    (mcp_world.workspace / "lily.toml").write_text('[model]\nmodel = "from-workspace"\n')
    session = mcp_world.session()
    assert (session.model_config.model, session.model_config.temperature) == ("from-workspace", 0.5)
    assert mcp_world.session(LILY_MODEL="from-env").model_config.model == "from-env"
    assert merged({"tools": {"deny": ["a"]}}, {"tools": {"allow": ["b"]}}) == \
        {"tools": {"deny": ["a"], "allow": ["b"]}}


def test_no_server_configured_means_no_hub(mcp_world):
    assert mcp_world.session().mcp is None
