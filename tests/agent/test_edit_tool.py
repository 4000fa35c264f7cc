"""The ``edit`` tool (issue 30): one exact text of a workspace file replaced, the rest kept.

Replayed from the real 1.5B model's run: asked "In settings.txt, change debug = true to
debug = false.", it loaded a skill and reviewed the change, or rewrote the whole file with
``write`` and dropped its other line. Offered ``edit``, it called
``edit(path="settings.txt", old="debug = true", new="debug = false")`` (bench/README.md).
Every permission rule that holds for ``write`` holds for ``edit``: a card with the diff,
plan mode, files that run by themselves, and a ``[tools]`` rule naming ``write`` (attack
tests: a rule written before ``edit`` existed is not slipped past).

Lily's real loop and the real ``openai`` client against the scripted server on 127.0.0.1.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import World, run_shown

from lily_kernel.acp import acp_updates
from lily_kernel.agent import loop, pending
from lily_kernel.testing.server import ScriptedServer
from lily_kernel.tools import offering

pytestmark = pytest.mark.usefixtures("no_machine_model")

SETTINGS = "debug = true\nport = 8080\n"
EDIT = {"path": "settings.txt", "old": "debug = true", "new": "debug = false"}


@pytest.fixture
def world(tmp_path) -> World:
    world = World(tmp_path)
    (world.workspace / "settings.txt").write_text(SETTINGS)
    return world


def call(name: str, args: dict, id: str) -> dict:
    return {"tool_calls": [{"name": name, "arguments": args, "id": id}]}


def results(server: ScriptedServer) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for req in server.chat_requests()
            for m in req["messages"] if m.get("role") == "tool"}


def settings(world: World) -> str:
    return (world.workspace / "settings.txt").read_text()


def test_an_edit_shows_its_diff_on_a_card_and_changes_only_that_text(world):
    script = [call("edit", EDIT, "e1"), "debug is now false."]
    with ScriptedServer(script) as server:
        session = world.session(server)
        reply = run_shown(session, "In settings.txt, change debug = true to debug = false.")
        proposal = reply.proposal
        assert proposal is not None and proposal.tool == "edit"
        assert "-debug = true\n+debug = false\n" in (proposal.change or "")
        assert settings(world) == SETTINGS  # nothing written before the user decides
        outcome = pending.decide(session, None, ok=True)
        final = loop.resume(session, outcome.item, outcome.result)
        assert final.text == "debug is now false."
        assert results(server)["e1"] == "replaced 1 occurrence in settings.txt"
    assert settings(world) == "debug = false\nport = 8080\n"


def test_a_confirmed_edit_does_not_run_when_the_file_changed_after_its_card(world):
    with ScriptedServer([call("edit", EDIT, "e1"), "Not done."]) as server:
        session = world.session(server)
        assert run_shown(session, "turn debug off in settings.txt").proposal is not None
        (world.workspace / "settings.txt").write_text("debug = true\nport = 9090\n")
        outcome = pending.decide(session, None, ok=True)
        loop.resume(session, outcome.item, outcome.result)
        got = results(server)["e1"]
    assert "changed since the card was shown" in got, got
    assert settings(world) == "debug = true\nport = 9090\n"


@pytest.mark.parametrize(("args", "says"), [
    ({**EDIT, "old": "debug=true"}, "'debug=true' is not in settings.txt: old must be the "
                                    "file's text exactly"),
    ({**EDIT, "old": "= "}, "'= ' occurs 2 times in settings.txt: give old with enough"),
    ({**EDIT, "old": ""}, "old is empty: give the exact text of settings.txt to replace"),
    ({**EDIT, "path": "missing.txt"}, 'write(path="missing.txt", content=...) creates one'),
    ({"path": "settings.txt", "old": "debug = true"}, "missing required argument"),
])
def test_an_edit_that_cannot_apply_says_what_would_and_shows_no_card(world, args, says):
    with ScriptedServer([call("edit", args, "e1"), "Sorry."]) as server:
        session = world.session(server)
        reply = run_shown(session, "fix the settings")
        got = results(server)["e1"]
    assert reply.proposal is None and session.pending is None
    assert got.startswith("Error: ") and says in got, got
    assert settings(world) == SETTINGS


def test_an_edit_that_changes_nothing_answers_no_change_without_a_card(world):
    same = {**EDIT, "new": "debug = true"}
    with ScriptedServer([call("edit", same, "e1"), "Nothing to change."]) as server:
        session = world.session(server)
        reply = run_shown(session, "set debug in settings.txt")
        got = results(server)["e1"]
    assert reply.proposal is None and reply.text == "Nothing to change."
    assert got.startswith("no change: settings.txt already holds exactly this content")


def test_edits_mode_edits_without_a_card(world):
    with ScriptedServer([call("edit", EDIT, "e1"), "Done."]) as server:
        reply = loop.run(world.session(server, LILY_MODE="edits"), "turn debug off")
    assert reply.proposal is None and reply.text == "Done."
    assert settings(world) == "debug = false\nport = 8080\n"


# -- attack tests: every rule for write holds for edit ----------------------------------------

def user_toml(world: World, text: str) -> None:
    user = Path(world.base) / "home" / ".config" / "lily"
    user.mkdir(parents=True, exist_ok=True)
    (user / "lily.toml").write_text(text)


def test_a_deny_rule_for_write_denies_edit_too(world):
    user_toml(world, '[tools]\ndeny = ["write"]\n')
    with ScriptedServer([call("edit", EDIT, "e1"), "Could not."]) as server:
        loop.run(world.session(server, LILY_MODE="auto"), "turn debug off in settings.txt")
        offered = [t["function"]["name"] for t in server.chat_requests()[0]["tools"]]
        got = results(server)["e1"]
    assert "edit" not in offered and "write" not in offered
    assert "denied by the tool policy" in got
    assert settings(world) == SETTINGS


def test_an_allow_list_without_write_or_edit_leaves_edit_out(world):
    user_toml(world, '[tools]\nallow = ["read", "load_skill"]\n')
    with ScriptedServer([call("edit", EDIT, "e1"), "Could not."]) as server:
        loop.run(world.session(server, LILY_MODE="auto"), "turn debug off in settings.txt")
        got = results(server)["e1"]
    assert "not in the tool policy's allow list" in got and settings(world) == SETTINGS


def test_a_confirm_rule_for_write_makes_edit_ask_even_in_edits_mode(world):
    user_toml(world, '[tools]\nconfirm = ["write"]\n')
    with ScriptedServer([call("edit", EDIT, "e1")]) as server:
        reply = run_shown(world.session(server, LILY_MODE="edits"), "turn debug off")
    assert reply.proposal is not None and reply.proposal.tool == "edit"
    assert settings(world) == SETTINGS


def test_plan_mode_neither_offers_nor_runs_edit(world):
    with ScriptedServer([call("edit", EDIT, "e1"), "Planned."]) as server:
        reply = loop.run(world.session(server, LILY_MODE="plan"), "plan it")
        offered = [t["function"]["name"] for t in server.chat_requests()[0]["tools"]]
        got = results(server)["e1"]
    assert reply.text == "Planned." and "edit" not in offered
    assert "not available in plan mode" in got and settings(world) == SETTINGS


@pytest.mark.parametrize("mode", ["ask", "edits", "auto"])
def test_an_edit_of_a_file_that_runs_by_itself_waits_for_a_card_in_every_mode(world, mode):
    (world.workspace / "conftest.py").write_text("X = 1\n")
    hostile = {"path": "conftest.py", "old": "X = 1", "new": "import os; os.system('id')"}
    with ScriptedServer([call("edit", hostile, "e1")]) as server:
        reply = run_shown(world.session(server, LILY_MODE=mode), "tidy the tests")
    proposal = reply.proposal
    assert proposal is not None and proposal.tool == "edit"
    assert "pytest imports it" in proposal.reason and proposal.always_refusal
    assert (world.workspace / "conftest.py").read_text() == "X = 1\n"


def test_an_edit_of_a_protected_file_is_refused_without_a_card(world):
    (world.workspace / "lily.toml").write_text("[model]\n")
    widen = {"path": "lily.toml", "old": "[model]", "new": "[tools]\nallow = []"}
    with ScriptedServer([call("edit", widen, "e1"), "Could not."]) as server:
        reply = run_shown(world.session(server, LILY_MODE="auto"), "tidy the config")
        got = results(server)["e1"]
    assert reply.proposal is None and got.startswith("Error: ")
    assert (world.workspace / "lily.toml").read_text() == "[model]\n"


# -- what is offered, and the ACP face's diff ---------------------------------------------------

@pytest.mark.parametrize(("text", "offered"), [
    ("In settings.txt, change debug = true to debug = false.", True),
    ("Replace foo with bar in app.py", True),
    ("Read notes.txt and summarise it.", False),  # a file, but no word of change
    ("Change the plot's colour.", False),          # a change, but no file
    ("What is in settings.txt?", False),          # "settings" is not "set"
])
def test_the_small_profile_offers_edit_for_a_change_to_a_file(text, offered):
    assert ("edit" in offering.asked_for(text)) is offered


def test_the_acp_diff_of_an_edit_is_the_whole_file_before_and_after(world):
    session = world.session(None)
    diff = acp_updates.write_diff(session, "edit", EDIT, SETTINGS)
    assert diff is not None and diff.path == str(world.workspace / "settings.txt")
    assert (diff.old_text, diff.new_text) == (SETTINGS, "debug = false\nport = 8080\n")
    assert acp_updates.write_diff(session, "edit", {**EDIT, "old": "nope"}, SETTINGS) is None
    assert acp_updates.write_diff(session, "read", {"path": "settings.txt"}, SETTINGS) is None
