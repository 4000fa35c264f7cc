"""The permission model (docs/permissions.md): each mode's table, the layers, the
administrator's file, files that run by themselves, and a hostile model against a real
session's agent loop on the scripted server."""
from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import World, run_command

from lily_kernel.agent import loop
from lily_kernel.errors import ConfigError
from lily_kernel.settings import admin_policy, autorun, policy_layers
from lily_kernel.settings.permissions import (
    ADMIN,
    USER,
    WORKSPACE,
    Call,
    Layer,
    Mode,
    Permissions,
)
from lily_kernel.testing.server import ScriptedServer
from lily_kernel.tools import gate

pytestmark = pytest.mark.usefixtures("no_machine_model")

# -- each mode's table (docs/permissions.md#the-table) --------------------------------------

CALLS = {
    "read": Call("read", "read", read_only=True),
    "propose": Call("propose_cell", "propose"),
    "write": Call("write", "write"),
    "write that changes nothing": Call("write", "write", changes_nothing=True),
    "write that runs by itself": Call("write", "write", runs_by_itself="'conftest.py' runs"),
    "run_python": Call("run_python", "run"),
    "MCP read-only": Call("mcp__s__get", "mcp", read_only=True, asks=True),
    "MCP": Call("mcp__s__del", "mcp", asks=True),
    "MCP auto_approve'd": Call("mcp__s__del", "mcp"),
    "a @lily.tool function": Call("mine", "other"),
}
TABLE = {  # plan, ask, edits, auto
    "read": ("run", "run", "run", "run"),
    "propose": ("run", "run", "run", "run"),
    "write": ("refuse", "ask", "run", "run"),
    "write that changes nothing": ("refuse", "run", "run", "run"),
    "write that runs by itself": ("refuse", "ask", "ask", "ask"),
    # a real run (the model's own call runs in the sandbox first, where one is: tools/gate.py)
    "run_python": ("refuse", "ask", "ask", "ask"),
    "MCP read-only": ("ask", "ask", "ask", "run"),
    "MCP": ("refuse", "ask", "ask", "run"),
    "MCP auto_approve'd": ("refuse", "run", "run", "run"),
    "a @lily.tool function": ("refuse", "run", "run", "run"),
}


def action(outcome: gate.Outcome) -> str:
    """The table's word for an outcome."""
    return {gate.Runs: "run", gate.Asks: "ask", gate.Refused: "refuse"}[type(outcome)]


@pytest.mark.parametrize("what", sorted(TABLE))
def test_each_mode_runs_asks_or_refuses_as_its_table_says(what):
    got = tuple(action(gate.table(Permissions(mode=mode), CALLS[what])) for mode in Mode)
    assert got == TABLE[what]


def test_the_administrators_confirm_and_a_file_that_runs_ask_in_auto_and_refuse_always():
    perms = Permissions(mode=Mode.AUTO, confirm=frozenset({"list"}), forced=frozenset({"list"}))
    said = gate.table(perms, Call("list", "read", read_only=True, approved=True))
    assert isinstance(said, gate.Asks) and said.no_always and "administrator" in said.reason
    runs = gate.table(perms, Call("write", "write", approved=True, runs_by_itself="'x.py' runs"))
    assert isinstance(runs, gate.Asks) and runs.no_always


def test_a_users_confirm_list_asks_in_every_mode_until_always():
    for mode in (Mode.ASK, Mode.EDITS, Mode.AUTO):
        perms = Permissions(mode=mode, confirm=frozenset({"mcp__notes__*"}))
        assert action(gate.table(perms, Call("mcp__notes__get", "mcp", read_only=True))) == "ask"
        assert action(gate.table(perms, Call("mcp__notes__get", "mcp", approved=True))) == "run"


# -- layers (docs/permissions.md#layers) ----------------------------------------------------

def layers(admin=None, user=None, workspace=None, trusted=False) -> list[Layer]:
    out = [Layer(ADMIN, "/etc/lily/policy.toml", admin)] if admin is not None else []
    return [*out, Layer(USER, "~/.config/lily/lily.toml", user or {}),
            Layer(WORKSPACE, "lily.toml", workspace or {}, trusted=trusted)]


def test_an_untrusted_workspace_cannot_empty_the_users_lists_or_raise_anything():
    user = {"tools": {"deny": ["write"], "confirm": ["list"], "allow": ["read", "list", "write"]},
            "limits": {"read_bytes": 1000}, "notebook": {"share_values": False},
            "permissions": {"mode": "ask"}}
    hostile = {"tools": {"deny": [], "confirm": [], "allow": ["read", "list", "write", "x"]},
               "limits": {"read_bytes": 50_000_000}, "notebook": {"share_values": True},
               "permissions": {"mode": "auto"}, "journal": {"capture_reads": True}}
    for trusted in (False, True):
        perms = policy_layers.build(layers(user=user, workspace=hostile, trusted=trusted))
        assert perms.deny == {"write"} and perms.confirm == {"list"}
        assert perms.allow == {"read", "list", "write"}
        assert perms.limits.read_bytes == 1000 and perms.share_values is False
        assert perms.mode is Mode.ASK
    untrusted = policy_layers.build(layers(workspace=hostile))
    assert untrusted.mode is Mode.ASK
    assert untrusted.capture_reads is True  # the journal holds what tools read anyway
    assert untrusted.limits.read_bytes == 256 * 1024  # the default: it may only lower it
    assert any("untrusted workspace may only restrict" in n for n in untrusted.notes)


def test_a_workspace_restricts_and_a_trusted_one_fills_what_the_user_left_open():
    narrow = {"tools": {"deny": ["list"]}, "permissions": {"mode": "plan"},
              "limits": {"read_bytes": 10}}
    perms = policy_layers.build(layers(user={"tools": {"deny": ["write"]}}, workspace=narrow))
    assert perms.deny == {"write", "list"} and perms.mode is Mode.PLAN
    assert perms.limits.read_bytes == 10
    assert "workspace" in perms.provenance["tools.deny"] and "user" in perms.provenance["tools.deny"]
    open_ = {"permissions": {"mode": "edits"}, "journal": {"capture_reads": True}}
    assert policy_layers.build(layers(workspace=open_, trusted=True)).mode is Mode.EDITS
    assert policy_layers.build(layers(workspace=open_, trusted=False)).mode is Mode.ASK
    assert policy_layers.build(layers(workspace=open_, trusted=True)).capture_reads is True
    off = {"journal": {"capture_reads": False}}
    assert policy_layers.build(layers(user={"journal": {"capture_reads": True}},
                                      workspace=off)).capture_reads is False


def test_no_layer_loosens_the_administrator():
    admin = {"permissions": {"max_mode": "ask"}, "tools": {"deny": ["run_python"],
             "confirm": ["list"]}, "notebook": {"share_values": False},
             "journal": {"capture_reads": False}, "limits": {"read_bytes": 4096},
             "mcp": {"workspace_servers": False}, "model": {"base_urls": ["http://127.0.0.1:*"]}}
    loose = {"permissions": {"mode": "auto"}, "tools": {"deny": [], "confirm": []},
             "notebook": {"share_values": True}, "journal": {"capture_reads": True},
             "limits": {"read_bytes": 60_000_000}}
    perms = policy_layers.build(layers(admin=admin, user=loose, workspace=loose, trusted=True))
    assert perms.mode is Mode.ASK and perms.max_mode is Mode.ASK
    assert perms.deny == {"run_python"} and perms.forced == {"list"}
    assert perms.share_values is False and perms.capture_reads is False
    assert perms.limits.read_bytes == 4096 and perms.workspace_mcp is False
    assert perms.provenance["mode"].startswith("administrator")
    with pytest.raises(ConfigError, match="mode auto is not available: administrator"):
        policy_layers.with_mode(perms, Mode.AUTO)
    assert policy_layers.with_mode(perms, Mode.PLAN).mode is Mode.PLAN
    assert perms.endpoint_refusal("https://evil.example/v1")
    assert perms.endpoint_refusal(None)  # the default endpoint is not local either
    assert perms.endpoint_refusal("http://127.0.0.1:8080/v1") is None


def test_policy_check_names_every_problem(tmp_path):
    bad = tmp_path / "policy.toml"
    bad.write_text('[permissions]\nmax_mode = "yolo"\n[notebook]\nshare_values = true\n'
                   '[limits]\nread_bytes = 0\n[tools]\ndeny = "write"\n[shell]\nx = 1\n')
    found = admin_policy.check(bad)
    assert len(found) == 5, found
    assert any("max_mode must be one of plan, ask, edits, auto" in f for f in found)
    assert any("share_values can only be set to false" in f for f in found)
    good = tmp_path / "good.toml"
    good.write_text('[permissions]\nmax_mode = "edits"\n[tools]\ndeny = ["mcp__*"]\n')
    assert admin_policy.check(good) == []
    assert admin_policy.check(tmp_path / "missing.toml")[0].startswith("the administrator's")


def test_a_users_layer_may_not_set_max_mode(tmp_path):
    with pytest.raises(ConfigError, match="max_mode is set only in the administrator's policy"):
        policy_layers.build(layers(user={"permissions": {"max_mode": "auto"}}))


# -- files that run by themselves (docs/permissions.md#files-that-run-by-themselves) --------

@pytest.mark.parametrize("path", [
    "conftest.py", "tests/conftest.py", "json.py", "os.py", "pytest.py", "numpy/__init__.py",
    "lily_kernel.py", "setup.py", "noxfile.py", "Makefile", "sub/GNUmakefile",
    ".github/workflows/ci.yml", ".gitlab-ci.yml", ".envrc", ".bashrc", "x/.zshrc",
    ".pre-commit-config.yaml", "jupyter_server_config.py", "ipython_config.py",
    "profile_default/startup/00.py", "x.pth", "Sitecustomize.py", ".vscode/tasks.json",
    "ＪＳＯＮ.py",  # fullwidth: folded as NFKC, on the safe side (one card too many)
    "_strptime.py", "pytest.ini", "pyproject.toml", ".pdbrc", "MAKEFILE", "Makefile.",
])
def test_files_that_something_runs_by_itself_are_named(path):
    reason = autorun.reason(path)
    assert reason and "runs by itself" in reason, path


@pytest.mark.parametrize("path", ["notes.txt", "analysis.py", "src/json.py", "README.md",
                                  "data/report.csv", "workflows/ci.yml"])
def test_ordinary_files_are_not(path):
    assert autorun.reason(path) is None


# -- a hostile model against a real session --------------------------------------------------

def call(name: str, args: dict, id: str) -> dict:
    return {"tool_calls": [{"name": name, "arguments": args, "id": id}]}


def results(server: ScriptedServer) -> dict[str, str]:
    last = server.chat_requests()[-1]["messages"]
    return {m["tool_call_id"]: m["content"] for m in last if m.get("role") == "tool"}


def run_once(world: World, mode: str | None, script: list, prompt: str
             ) -> tuple[loop.Reply, ScriptedServer]:
    """``prompt`` in a new session of ``mode`` (None: the default) whose model plays
    ``script``: the reply, and the server (stopped), which keeps the requests it was sent."""
    with ScriptedServer(script) as server:
        session = world.session(server, **({"LILY_MODE": mode} if mode else {}))
        return loop.run(session, prompt), server


@pytest.mark.parametrize("mode", ["ask", "edits", "auto"])
def test_a_new_file_that_runs_later_waits_for_a_card_in_every_mode(tmp_path, mode):
    world = World(tmp_path)
    script = [call("write", {"path": "conftest.py", "content": "import os; os.system('id')\n"},
                   "c1")]
    proposal = run_once(world, mode, script, "set up tests")[0].proposal
    assert proposal is not None and proposal.tool == "write"
    assert "pytest imports it" in proposal.reason
    assert proposal.always_refusal  # --always never covers it
    assert not (world.workspace / "conftest.py").exists()


def test_plan_mode_offers_and_runs_nothing_that_writes(tmp_path):
    world = World(tmp_path)
    script = [call("write", {"path": "a.txt", "content": "x"}, "w1"), "Planned."]
    reply, server = run_once(world, "plan", script, "plan it")
    assert reply.text == "Planned."
    offered = [t["function"]["name"] for t in server.chat_requests()[0]["tools"]]
    assert "read" in offered and "write" not in offered
    assert "not available in plan mode" in results(server)["w1"]
    assert not (world.workspace / "a.txt").exists()


def test_edits_mode_writes_an_ordinary_file_without_a_card(tmp_path):
    world = World(tmp_path)
    script = [call("write", {"path": "notes.md", "content": "hello\n"}, "w1"), "Done."]
    assert run_once(world, "edits", script, "note it")[0].text == "Done."
    assert (world.workspace / "notes.md").read_text() == "hello\n"


def test_a_binary_file_is_never_overwritten_and_no_card_says_no_change(tmp_path):
    world = World(tmp_path)
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe"
    (world.workspace / "img.png").write_bytes(png)
    (world.workspace / "latin.txt").write_bytes("café\n".encode("latin-1"))
    script = [{"tool_calls": [
        {"name": "write", "arguments": {"path": "img.png", "content": "\ufffdPNG\r\n"}, "id": "b1"},
        {"name": "write", "arguments": {"path": "latin.txt", "content": "caf\ufffd\n"}, "id": "b2"},
    ]}, "Done."]
    for mode in ("ask", "auto"):
        reply, server = run_once(world, mode, script, "fix the files")
        assert reply.proposal is None and reply.text == "Done."
        got = results(server)
        for key in ("b1", "b2"):
            assert got[key].startswith("Error: '") and "is not UTF-8 text" in got[key], got
            assert "sha256" in got[key] and "no change" not in got[key]
        assert (world.workspace / "img.png").read_bytes() == png
        assert (world.workspace / "latin.txt").read_bytes() == "café\n".encode("latin-1")


def test_an_argument_too_long_to_show_whole_is_refused_not_half_shown(tmp_path):
    from lily_kernel.agent.pending import CARD_CHARS
    world = World(tmp_path)
    user = Path(tmp_path) / "home" / ".config" / "lily"
    user.mkdir(parents=True)
    (user / "lily.toml").write_text("[limits]\nanswer_chars = 1000000\n")
    long = "x" * (CARD_CHARS + 10)
    script = [call("write", {"path": "big.txt", "content": long}, "l1"), "Stopped."]
    reply, server = run_once(world, None, script, "write it")
    assert reply.proposal is None and reply.text == "Stopped."
    assert results(server)["l1"].startswith("Error: not run: a card shows a call's "
                                            "arguments in full")
    assert not (world.workspace / "big.txt").exists()


def test_an_administrators_file_that_cannot_be_used_fails_closed(tmp_path):
    world = World(tmp_path)
    bad = tmp_path / "policy.toml"
    bad.write_text('[permissions]\nmax_mode = "yolo"\n')
    session = world.session(None, LILY_POLICY_FILE=str(bad))
    assert "max_mode must be one of plan, ask, edits, auto" in (session.config_error or "")
    assert session.permissions.mode is Mode.PLAN and session.share_values is False
    with pytest.raises(ConfigError, match="the mode cannot change while the policy"):
        session.set_mode(Mode.AUTO)
    from lily_kernel.errors import CommandError
    for cell in ("/policy", "/mode auto"):
        with pytest.raises(CommandError) as info:
            run_command(session, cell)
        assert "max_mode must be one of" in info.value.line()


def test_the_administrators_endpoint_allowlist_holds_for_the_environment_and_model(tmp_path):
    world = World(tmp_path)
    policy = tmp_path / "policy.toml"
    policy.write_text('[model]\nbase_urls = ["http://127.0.0.1:*"]\n')
    local = world.session(None, LILY_POLICY_FILE=str(policy),
                          OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    assert local.config_error is None
    with pytest.raises(ConfigError, match="not in the administrator's allowlist"):
        local.set_model(base_url="https://collector.example/v1")
    assert local.model_config.base_url == "http://127.0.0.1:9/v1"
    remote = world.session(None, LILY_POLICY_FILE=str(policy),
                           OPENAI_BASE_URL="https://collector.example/v1")
    assert "https://collector.example/v1 is not in the administrator's allowlist" in (
        remote.config_error or "")
