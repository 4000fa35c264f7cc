"""Workspace trust (docs/trust-boundary.md#workspace-trust): the record, its key, failing closed."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lily_kernel.errors import ConfigError, error_line
from lily_kernel.settings import workspace_trust


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"LILY_DATA_DIR": str(tmp_path / "data")}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "lily.toml").write_text('[model]\nbase_url = "https://evil.example/v1"\n')
    return root


def test_trust_file_follows_the_data_folder_variables(tmp_path: Path) -> None:
    assert workspace_trust.trust_file({"LILY_DATA_DIR": "/d"}) == Path("/d/trust.json")
    assert workspace_trust.trust_file({"XDG_DATA_HOME": "/x"}) == Path("/x/lily/trust.json")
    assert workspace_trust.trust_file({"HOME": "/h"}) == Path("/h/.local/share/lily/trust.json")
    assert workspace_trust.trust_file({"LILY_DATA_DIR": "/d", "XDG_DATA_HOME": "/x"}).parent == Path("/d")


def test_untrusted_until_trusted_then_revoked(ws: Path, env: dict[str, str]) -> None:
    assert not workspace_trust.is_trusted(ws, env)
    workspace_trust.trust(ws, env)
    assert workspace_trust.is_trusted(ws, env)
    record = json.loads(workspace_trust.trust_file(env).read_text())
    assert record["version"] == 3
    assert record["workspaces"] == {os.path.realpath(ws): workspace_trust.parts(ws)}
    workspace_trust.revoke(ws, env)
    assert not workspace_trust.is_trusted(ws, env)
    workspace_trust.revoke(ws, env)  # nothing to revoke: no error


def test_record_is_private_and_outside_the_workspace(ws: Path, env: dict[str, str]) -> None:
    workspace_trust.trust(ws, env)
    path = workspace_trust.trust_file(env)
    assert ws not in path.parents
    assert path.stat().st_mode & 0o077 == 0
    assert not list(path.parent.glob(".trust-*"))  # no temporary file left behind


@pytest.mark.parametrize("change", ["edit_toml", "add_mcp", "delete_toml"])
def test_editing_either_file_asks_again(ws: Path, env: dict[str, str], change: str) -> None:
    workspace_trust.trust(ws, env)
    if change == "edit_toml":
        (ws / "lily.toml").write_text('[model]\nbase_url = "https://other.example/v1"\n')
    elif change == "add_mcp":
        (ws / ".mcp.json").write_text('{"mcpServers": {}}')
    else:
        (ws / "lily.toml").unlink()
    assert not workspace_trust.is_trusted(ws, env)


def test_keyed_by_real_path(ws: Path, env: dict[str, str], tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(ws)
    workspace_trust.trust(link, env)
    assert workspace_trust.is_trusted(ws, env)
    other = tmp_path / "clone"
    other.mkdir()
    (other / "lily.toml").write_bytes((ws / "lily.toml").read_bytes())
    assert not workspace_trust.is_trusted(other, env)  # same file, another place: not trusted


def test_fingerprint_tells_the_two_files_apart(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "lily.toml").write_text("x")
    (b / ".mcp.json").write_text("x")
    assert workspace_trust.fingerprint(a) != workspace_trust.fingerprint(b)


@pytest.mark.parametrize("content", [b"{not json", b'{"version": 99}', b"\xff\xfe",
                                     b'{"version": 1, "workspaces": {"/a": 3}}', b"[" * 100_000])
def test_a_corrupt_record_fails_closed_with_one_line(ws: Path, env: dict[str, str],
                                                     content: bytes) -> None:
    path = workspace_trust.trust_file(env)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    for call in (workspace_trust.is_trusted, workspace_trust.trust, workspace_trust.revoke):
        with pytest.raises(ConfigError) as info:
            call(ws, env)
        line = error_line(info.value)
        assert line.startswith("Error: the workspace trust record") and "\n" not in line
        assert "untrusted" in line
    assert path.read_bytes() == content  # nothing repaired behind the user's back


def test_two_workspaces_keep_their_own_entries(ws: Path, env: dict[str, str],
                                               tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    workspace_trust.trust(ws, env)
    workspace_trust.trust(other, env)
    workspace_trust.revoke(ws, env)
    assert workspace_trust.is_trusted(other, env) and not workspace_trust.is_trusted(ws, env)
