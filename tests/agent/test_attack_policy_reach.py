"""Attack: the model rewrites the policy that binds it (issue 41 §5).

The administrator's policy file and the user's configuration are out of the model's reach
wherever they lie: a policy kept in the workspace (read-only bits are no protection against
a write that renames over it), one named through a symlink, the user's ``lily.toml`` under
an ``XDG_CONFIG_HOME`` inside the workspace. Lily's real loop and file tools against the
scripted server on 127.0.0.1 (docs/permissions.md#the-administrators-policy).
"""
from __future__ import annotations

import os

import pytest
from agent_support import World

from lily_kernel.agent import loop
from lily_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.usefixtures("no_machine_model")

POLICY = '[permissions]\nmax_mode = "auto"\n[tools]\ndeny = ["run_python"]\n'
OPEN = '[permissions]\nmax_mode = "auto"\n[tools]\ndeny = []\n'


def call(name: str, args: dict, id: str) -> dict:
    return {"tool_calls": [{"name": name, "arguments": args, "id": id}]}


def results(server: ScriptedServer) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for req in server.chat_requests()
            for m in req["messages"] if m.get("role") == "tool"}


@pytest.fixture
def world(tmp_path) -> World:
    return World(tmp_path)


def attack(world: World, tool: str, path: str, **env: str) -> str:
    args = ({"path": path, "content": OPEN} if tool == "write"
            else {"path": path, "old": 'deny = ["run_python"]', "new": "deny = []"})
    with ScriptedServer([call(tool, args, "a1"), "Done."]) as server:
        loop.run(world.session(server, LILY_MODE="auto", **env), "loosen the policy")
        return results(server)["a1"]


@pytest.mark.parametrize("tool", ["write", "edit"])
def test_the_administrators_policy_in_the_workspace_is_out_of_reach(world, tool):
    policy = world.workspace / "admin" / "policy.toml"
    policy.parent.mkdir()
    policy.write_text(POLICY)
    policy.chmod(0o444)
    got = attack(world, tool, "admin/policy.toml", LILY_POLICY_FILE=str(policy))
    assert got.startswith("Error:") and "policy" in got, got
    assert policy.read_text() == POLICY


def test_the_policy_named_through_a_symlink_is_protected_by_what_it_resolves_to(world, tmp_path):
    policy = world.workspace / "conf" / "site.toml"
    policy.parent.mkdir()
    policy.write_text(POLICY)
    os.symlink(policy, tmp_path / "named.toml")
    got = attack(world, "write", "conf/site.toml", LILY_POLICY_FILE=str(tmp_path / "named.toml"))
    assert got.startswith("Error:"), got
    assert policy.read_text() == POLICY


def test_the_policy_under_another_name_is_protected_by_identity(world, tmp_path):
    """A bind mount or another alias of the policy's folder: the same (device, inode)."""
    outside = tmp_path / "etc-lily"
    outside.mkdir()
    (outside / "policy.toml").write_text(POLICY)
    # The workspace's folder is the policy's folder under another name (what a bind mount
    # makes; a symlinked workspace root is opened as the root, so it shows the same inode).
    alias = world.workspace / "site"
    os.symlink(outside, alias)
    got = attack(world, "write", "site/policy.toml", LILY_POLICY_FILE=str(outside / "policy.toml"))
    assert got.startswith("Error:"), got
    assert (outside / "policy.toml").read_text() == POLICY


@pytest.mark.parametrize("tool", ["write", "edit"])
def test_the_users_configuration_in_the_workspace_is_out_of_reach(world, tool):
    config = world.workspace / "cfg" / "lily" / "lily.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[tools]\ndeny = ["run_python"]\n')
    got = attack(world, tool, "cfg/lily/lily.toml", XDG_CONFIG_HOME=str(world.workspace / "cfg"))
    assert got.startswith("Error:") and "configuration" in got, got
    assert "run_python" in config.read_text()


def test_a_new_file_in_the_users_configuration_folder_is_refused(world):
    got = attack(world, "write", "cfg/lily/lily.toml",
                 XDG_CONFIG_HOME=str(world.workspace / "cfg"))
    assert got.startswith("Error:"), got
    assert not (world.workspace / "cfg" / "lily" / "lily.toml").exists()


@pytest.mark.parametrize("path", ["lily.toml.", "lily.toml ", "LILY.TOML", "ｌｉｌｙ.toml",
                                  "./lily.toml", "persona./SOUL.md"])
def test_every_spelling_of_lilys_configuration_is_refused(world, path):
    got = attack(world, "write", path)
    assert got.startswith("Error:"), (path, got)
    assert not (world.workspace / path).exists()
