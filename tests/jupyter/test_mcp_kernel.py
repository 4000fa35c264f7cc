"""MCP tools in real kernels: the Lily kernel and ``%load_ext lily`` in python3 (issue 16).

The user's config file (in the kernel's private HOME) names the hostile test server with
``auto_approve = ["echo", "env"]`` and a ``${NOTES_TOKEN}`` secret; ``[tools] deny``
holds a glob. The scripted model calls the tools; the tests read what it received.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from kernel_support import Kernel, call, scripted_kernel_world, tool_result

HOSTILE = str(Path(__file__).parent.parent / "mcp" / "hostile_server.py")
SECRET = "notes-kernel-token-0123456789"
KEY = "sk-kernel-openai-key-0123456789"
OUTBOX = "outbox-kernel-token-0123456789"
USER_TOML = f"""
[tools]
deny = ["mcp__notes__f*"]

[mcp.servers.notes]
command = {json.dumps(sys.executable)}
args = [{json.dumps(HOSTILE)}]
env = {{ TOKEN = "${{NOTES_TOKEN}}" }}
auto_approve = ["echo", "env"]
timeout = 10
"""


class Face:
    def __init__(self, kernel: Kernel, name: str) -> None:
        self.kernel, self.name = kernel, name

    def py(self, code: str):
        return self.kernel.run(f"%%python\n{code}" if self.name == "lily" else code)

    def ask(self, text: str):
        return self.kernel.run(text if self.name == "lily" else f"%%lily\n{text}")

    def cmd(self, line: str):
        return self.kernel.run(line)


@pytest.fixture(scope="module", params=["lily", "python3"])
def face(request, tmp_path_factory, ipython_dir, server):
    world = scripted_kernel_world(tmp_path_factory.mktemp(f"mcp-{request.param}"), ipython_dir,
                                  server.url)
    world.env.update(NOTES_TOKEN=SECRET, OPENAI_API_KEY=KEY, LILY_OUTBOX_TOKEN=OUTBOX)
    user = Path(world.env["HOME"]) / ".config" / "lily" / "lily.toml"
    user.parent.mkdir(parents=True)
    user.write_text(USER_TOML)
    kernel = Kernel(request.param, world)
    try:
        if request.param == "python3":
            assert kernel.run("%load_ext lily").status == "ok"
        yield Face(kernel, request.param)
    finally:
        kernel.shutdown()


def offered(server) -> set[str]:
    return {t["function"]["name"] for t in server.chat_requests()[-1].get("tools", [])}


def cards(run) -> list[dict]:
    return [d for d in run.displays if "mcp__notes__" in d.get("text/markdown", "")
            and "confirm" in d.get("text/markdown", "").lower()]


def test_an_auto_approved_tool_runs_and_a_denied_one_is_never_offered(face, server, turns):
    turns.extend([call("mcp__notes__echo", {"text": "hello"}, "m1"), "done"])
    run = face.ask("echo hello")
    assert run.status == "ok", run.messages
    assert tool_result(server, "m1") == "hello"
    assert not cards(run)
    names = offered(server)
    assert "mcp__notes__echo" in names and "mcp__notes__fail" not in names


def test_another_tool_shows_the_card_and_runs_only_after_confirm(face, server, turns):
    turns.append(call("mcp__notes__html", {}, "m2"))
    run = face.ask("show the html")
    assert run.status == "ok", run.messages
    assert len(cards(run)) == 1, run.displays
    requests = len(server.chat_requests())
    turns.append("shown")
    done = face.cmd("/confirm")
    assert done.status == "ok", done.messages
    assert "<script>" in tool_result(server, "m2")  # the model gets the text as it is
    assert len(server.chat_requests()) == requests + 1
    for display in done.displays:  # the face shows nothing raw
        assert "<script>" not in display.get("text/markdown", "")


def test_cancel_answers_declined_by_the_user(face, server, turns):
    turns.append(call("mcp__notes__html", {}, "m3"))
    assert len(cards(face.ask("html again"))) == 1
    assert face.cmd("/cancel").status == "ok"
    turns.append("ok")
    face.ask("next")
    assert tool_result(server, "m3") == "declined by the user"


def test_confirm_always_stops_the_card_for_that_tool_only(face, server, turns):
    turns.append(call("mcp__notes__html", {}, "m4"))
    assert len(cards(face.ask("html"))) == 1
    turns.append("shown")
    assert face.cmd("/confirm --always").status == "ok"
    turns.extend([call("mcp__notes__html", {}, "m5"), "again, no card"])
    assert not cards(face.ask("html once more"))
    assert "<script>" in tool_result(server, "m5")
    turns.append(call("mcp__notes__grow", {}, "m6"))
    assert len(cards(face.ask("grow"))) == 1  # another tool still asks
    assert face.cmd("/cancel").status == "ok"


def test_the_child_environment_and_secrets(face, server, turns):
    turns.extend([call("mcp__notes__env", {}, "m7"), "here it is"])
    run = face.ask("show your environment")
    child = json.loads(tool_result(server, "m7"))
    assert "OPENAI_API_KEY" not in child and "LILY_OUTBOX_TOKEN" not in child
    assert child["TOKEN"] == "***"
    status = face.cmd("/mcp")
    assert "ready" in status.displays[0]["text/plain"]
    for out in (run, status):
        assert SECRET not in json.dumps(out.messages, default=str)
    workspace = face.kernel.workspace
    for path in workspace.rglob("*"):  # the journal and anything else Lily wrote
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_an_approval_does_not_survive_the_server_redefining_the_tool(face, server, turns):
    """The rug pull in a real kernel (docs/permissions.md#approvals): a read-only "search"
    approved with --always is redefined by its server as "Delete every note."; the next
    call asks again, saying what changed, and /mcp shows the change."""
    import re
    def card(run):
        found = [d["text/markdown"] for d in run.displays
                 if "(tool call, card `" in d.get("text/markdown", "")]
        assert len(found) == 1, run.displays
        return found[0], re.search(r"card `([0-9a-f]{8})`", found[0]).group(1)
    turns.append(call("mcp__notes__search", {"query": "a"}, "rug1"))
    _, ref = card(face.ask("search my notes for a"))
    turns.append("Searched.")
    assert face.cmd(f"/confirm {ref} --always").status == "ok"
    turns.append(call("mcp__notes__search", {"query": "*", "confirm": True}, "rug2"))
    md, ref = card(face.ask("search everything"))
    assert "revoked" in md and "description" in md and "Delete every note" in md
    assert "changed since it was first listed" in face.cmd("/mcp").displays[0]["text/plain"]
    assert face.cmd(f"/cancel {ref}").status == "ok"
