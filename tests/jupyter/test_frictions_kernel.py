"""The smaller frictions of issue 34 §6, each in a real Lily kernel (jupyter_client) with
the scripted model and real stdio MCP servers: a bare MCP ``command`` found in the kernel
environment's bin/, ``/mcp`` without literal escapes, a ``run_python`` card that shows its
code once with a hint that fits, a decided card whose saved display says it was decided,
``run_python``'s error as one path-free line (no red traceback), and an alias of a skill
excluded by an error naming the skill and why. (Tab after ``/`` under ``%load_ext lily``:
tests/jupyter/test_extension_completion_kernel.py; ``/mcp`` after editing lily.toml:
test_mcp_reload_kernel.py; the bundle: test_bundle_kernel.py.)"""
from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

import pytest
from kernel_support import Kernel, call, scripted_kernel_world, tool_result

HOSTILE = str(Path(__file__).parent.parent / "mcp" / "hostile_server.py")
USER_TOML = f"""
[mcp.servers.time]
command = "mcp-server-time"
args = ["--local-timezone", "UTC"]
auto_approve = ["get_current_time"]

[mcp.servers.notes]
command = {json.dumps(sys.executable)}
args = [{json.dumps(HOSTILE)}]
timeout = 10
"""
BROKEN_ALIAS = "---\nname: profiler\ndescription: d\ncommand: profile\nsummary: [unclosed\n---\nBody\n"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, ipython_dir, server):
    world = scripted_kernel_world(tmp_path_factory.mktemp("frictions"), ipython_dir, server.url)
    # Jupyter started the kernel without activating its environment: its bin/ is not on PATH
    world.env["PATH"] = "/usr/bin:/bin"
    user = Path(world.env["HOME"]) / ".config" / "lily" / "lily.toml"
    user.parent.mkdir(parents=True)
    user.write_text(USER_TOML)
    (world.ws_skills / "profiler").mkdir(parents=True)
    (world.ws_skills / "profiler" / "SKILL.md").write_text(BROKEN_ALIAS)
    kernel = Kernel("lily", world)
    try:
        yield kernel
    finally:
        kernel.shutdown()


def card_of(run) -> tuple[dict, str]:
    cards = [d for d in run.displays if "(tool call, card `" in d.get("text/markdown", "")]
    assert len(cards) == 1, run.displays
    return cards[0], re.search(r"card `([0-9a-f]{8})`", cards[0]["text/markdown"]).group(1)


def test_a_bare_mcp_command_runs_from_the_kernel_environments_bin(kernel, server, turns):
    assert kernel.ok("%%python\nimport shutil\nprint(shutil.which('mcp-server-time'))"
                     ).stdout.strip() == "None"  # not on the kernel's own PATH
    shown = "\n".join(d.get("text/plain", "") for d in kernel.ok("/mcp").displays)
    assert "time (stdio, user): ready" in shown, shown
    turns.extend([call("mcp__time__get_current_time", {"timezone": "UTC"}, "t1"), "done"])
    kernel.ok("what time is it?")
    assert '"timezone": "UTC"' in tool_result(server, "t1")


def test_mcp_shows_tool_names_without_literal_escapes(kernel):
    (status,) = [d for d in kernel.ok("/mcp").displays if "mcp__notes__echo" in str(d)]
    for mime in ("text/markdown", "text/plain", "text/html"):
        if mime in status:
            assert "mcp__notes__echo" in status[mime], (mime, status[mime])
            assert "\\_" not in status[mime], (mime, status[mime])
    assert "`mcp__notes__echo`" in status["text/markdown"]  # a code span: escaped once


def test_a_run_python_card_shows_the_code_once_with_a_hint_that_fits(kernel, turns):
    code = "best = max([3, 9, 4])\nprint(best)"
    turns.append(call("run_python", {"code": code}, "r1"))
    card, ref = card_of(kernel.ok("Please run the max"))
    for mime in ("text/markdown", "text/plain", "text/html"):
        text = html.unescape(re.sub(r"<style>.*?</style>|<[^>]+>", "", card[mime], flags=re.S))
        assert text.count("max([3, 9, 4])") == 1, (mime, card[mime])
        assert "runs code in your kernel" in card[mime], (mime, card[mime])
        for wrong in ("destructive", "open world", "Arguments:", '"code"'):
            assert wrong not in card[mime], (mime, wrong, card[mime])
    assert kernel.ok(f"/cancel {ref}")


def test_a_decided_card_is_saved_as_decided_and_an_error_is_one_path_free_line(
        kernel, server, turns):
    turns.append(call("run_python", {"code": "x = 1\naverage = x / days"}, "r2"))
    asked = kernel.ok("Please run the average")
    card, ref = card_of(asked)
    assert "Nothing runs until you decide" in card["text/markdown"]
    ids = {m["content"].get("transient", {}).get("display_id")
           for m in asked.of_type("display_data")} - {None}
    turns.append("The code failed: days is not defined.")
    done = kernel.ok(f"/confirm {ref}")
    # the card's own display is updated, so the saved notebook reads as decided
    updates = [m["content"] for m in done.of_type("update_display_data")
               if m["content"].get("transient", {}).get("display_id") in ids]
    assert updates, [m["msg_type"] for m in done.messages]
    for update in updates:
        for text in update["data"].values():
            assert "Nothing runs until you decide" not in str(text)
    assert any("Decided" in str(u["data"].get("text/plain", "")) for u in updates), updates
    # run_python's error: one line where the user confirmed, no red traceback, no temp path
    streams = [m["content"] for m in done.of_type("stream")]
    assert not [s for s in streams if s["name"] == "stderr"], streams
    shown = "".join(s["text"] for s in streams)
    assert "The code raised NameError: name 'days' is not defined (line 2)." in shown, shown
    assert "Traceback" not in shown and "/tmp/" not in shown
    # the model still gets the traceback, path-free, for /fix
    result = tool_result(server, "r2")
    assert "Traceback" in result and 'File "<run_python code>", line 2' in result, result
    # and, first, the exception's last line and the line that raised, to try again with
    assert result.startswith("The code ran and raised NameError: name 'days' is not defined\n"
                             "The line that raised (line 2): average = x / days\n"), result
    assert "/tmp/" not in result and "ipykernel_" not in result
    assert "lily_kernel" not in result  # Lily's own frames are not the user's


def test_an_alias_of_an_excluded_skill_names_the_skill_and_why(kernel):
    line = kernel.run("/profile").error_line()
    assert "/profile is the command of skill 'profiler', which is excluded:" in line, line
    assert "YAML" in line or "yaml" in line, line
    assert "unknown command /nothing_here" in kernel.run("/nothing_here").error_line()
