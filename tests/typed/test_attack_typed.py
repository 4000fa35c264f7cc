"""Hostile input to typed skills: one ``Error:`` line each, nothing lost, nothing recreated.

Programmatic ``/skill <id> {json}`` calls with a 5,000-digit number, JSON nested 100,000
deep, a lone surrogate for an internal string setting; a model sending the same as tool
arguments; a damaged ``.lily/config.sqlite``; and skills whose Config ACL could never let
them run, refused at load time naming the line (docs/limits-and-secrets.md#bad-input).
"""
from __future__ import annotations

import json

import pytest
from agent_support import World, assert_consistent, run_command, run_shown
from receiver_support import keep_loopback_direct, receivers

from lily_kernel import safejson
from lily_kernel.commands.results import ActionDone
from lily_kernel.errors import CommandError, JSONInputError
from lily_kernel.settings import workspace_trust

pytestmark = pytest.mark.usefixtures("no_machine_model")

KNOBS = """\
---
name: knobs
description: Sets the app's knobs.
---
## 1. Purpose
Set the app's knobs.

## 2. Type
internal

## 3. Config ACL
- write: {write}
- read: ['app']

## 4. Parameters
- level: number (optional) — how much
    config: app.knobs.level
- label: string (optional) — a name for it
    config: {label_path}

## 5. Behaviour
1. Propose the knobs.
"""


def knobs(write: str = "['app.knobs']", label_path: str = "app.knobs.label") -> str:
    return KNOBS.format(write=write, label_path=label_path)


class ExamplesWorld(World):
    """The agent tests' world with Lily's example skills (send_message) turned on."""

    def env(self, server, **extra: str) -> dict[str, str]:
        return super().env(server, SKILLS_EXAMPLES="1", **extra)


@pytest.fixture
def world(tmp_path) -> World:
    w = ExamplesWorld(tmp_path)
    (w.skills / "knobs").mkdir()
    (w.skills / "knobs" / "SKILL.md").write_text(knobs(), encoding="utf-8")
    return w


def error_line(session, cell: str) -> str:
    with pytest.raises(CommandError) as info:
        run_command(session, cell)
    line = info.value.line()
    assert line.startswith("Error: ") and "\n" not in line and "Traceback" not in line, line
    return line


ODD = {
    "huge number": '{"level": ' + "9" * 5000 + "}",
    "deep arrays": '{"level": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "deep objects": '{"level": ' + '{"a":' * 100_000 + "1" + "}" * 100_000 + "}",
    "lone surrogate": '{"label": "\\ud800"}',
    "NaN": '{"level": NaN}',
    "huge float": '{"level": 1' + "0" * 5000 + ".5}",
}


@pytest.mark.parametrize("name", list(ODD))
def test_odd_json_in_a_programmatic_call_is_one_error_line(world, name):
    session = world.session(None, journal=True)
    line = error_line(session, f"/skill knobs {ODD[name]}")  # bench/limits.py typed: how long
    assert "not valid JSON" in line or "must be" in line, line
    assert session.config.items() == {}  # nothing was written
    assert isinstance(run_command(session, '/skill knobs {"level": 3, "label": "ok"}'), ActionDone)
    assert session.config.items() == {"app.knobs.label": "ok", "app.knobs.level": 3}


def test_the_model_sending_odd_json_is_answered_in_one_line_and_the_conversation_stays_consistent(
        world, server):
    """Arguments no repair reads (docs/agent.md#loop-hygiene) are not run: the call is
    answered with one bounded error line naming the signature, and the request goes on."""
    session = world.session(server)
    deep = '{"name": ' + "[" * 20_000 + "]" * 20_000 + "}"  # under the answer cap
    for text in (deep, ODD["huge number"], ODD["lone surrogate"]):
        server.add({"tool_calls": [{"name": "load_skill", "arguments": text, "id": "odd"}]},
                   "recovered")
        assert run_shown(session, "set the knobs").text == "recovered"
        result = [m["content"] for m in session.conversation
                  if m.get("tool_call_id") == "odd"][-1]
        assert result.startswith("Error: not run: invalid JSON arguments for tool 'load_skill'")
        assert "\n" not in result and len(result) < 1_000
        assert "load_skill(name: string)" in result
        assert session.snapshot is not None and "knobs" not in str(session.config.items())
    server.add("fine")
    assert run_shown(session, "hello").text == "fine"
    assert_consistent(session.conversation)


def test_safejson_depth_check_is_exact_and_refuses_deep_input():
    """How long deep input takes (linear in its length) is ``bench/limits.py typed``'s figure."""
    assert safejson.depth('{"a": "[[[[", "b": [[1]]}') == 3
    assert safejson.loads("[" * 64 + "]" * 64) is not None
    with pytest.raises(JSONInputError, match="deeper than 64"):
        safejson.loads("[" * 65 + "]" * 65)
    with pytest.raises(JSONInputError, match="deeper than 64"):
        safejson.loads("[" * 500_000)


def test_a_damaged_config_registry_is_named_and_left_alone(world):
    session = world.session(None, journal=True)
    run_command(session, '/skill knobs {"level": 1}')
    session.config.close()
    path = world.workspace / ".lily" / "config.sqlite"
    for extra in path.parent.glob("config.sqlite-*"):
        extra.unlink()
    garbage = b"this is not a database, the model wrote it " * 200
    path.write_bytes(garbage)
    fresh = world.session(None)
    line = error_line(fresh, '/skill knobs {"level": 2}')
    assert str(path) in line and "damaged" in line and "Move the file aside" in line
    assert path.read_bytes() == garbage  # nothing recreated over it
    line = error_line(fresh, '/skill knobs {"level": 2}')  # and again, the same way
    assert path.read_bytes() == garbage
    path.rename(path.with_name("config.sqlite.damaged"))  # the recovery the message names
    assert isinstance(run_command(fresh, '/skill knobs {"level": 2}'), ActionDone)


def test_a_damaged_config_registry_is_a_tool_error_for_the_model(world, server):
    path = world.workspace / ".lily" / "config.sqlite"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x00garbage" * 500)
    session = world.session(server)
    server.add({"tool_calls": [{"name": "load_skill", "arguments": {"name": "knobs"}, "id": "l"}]},
               {"tool_calls": [{"name": "read_config", "arguments": {"path": "app.knobs.level"},
                                "id": "r"}]},
               "It is damaged.")
    run_shown(session, "what level?")
    result = [m for m in server.chat_requests()[-1]["messages"] if m.get("tool_call_id") == "r"]
    assert result[0]["content"].startswith("Error:") and "damaged" in result[0]["content"]
    assert path.read_bytes() == b"\x00garbage" * 500


# -- load-time check of typed skills -----------------------------------------------------

@pytest.mark.parametrize("write, label_path, line, words", [
    ("['app.knobs']", "system.admin.label", 19, "system.admin.label, outside the skill's write ACL"),
    ("['app.knobs']", "app.knobs_evil.label", 19, "outside the skill's write ACL"),
    ("['']", "app.knobs.label", 12, "empty entry"),
    ("['app.knobs', '']", "app.knobs.label", 12, "empty entry"),
    ("[' ']", "app.knobs.label", 12, "empty entry"),
])
def test_a_typed_skill_whose_acl_cannot_let_it_run_is_a_load_error(world, write, label_path,
                                                                   line, words):
    (world.skills / "knobs" / "SKILL.md").write_text(knobs(write, label_path), encoding="utf-8")
    session = world.session(None)
    assert session.snapshot.get("knobs") is None
    diag = session.snapshot.exclusion("knobs")
    assert diag.kind == "skill_error" and f"line {line}:" in diag.reason and words in diag.reason
    assert "knobs" in error_line(session, '/skill knobs {"level": 1}')


def test_an_empty_acl_list_is_still_allowed(world):
    (world.skills / "knobs" / "SKILL.md").write_text(
        knobs("['app.knobs']").replace("- read: ['app']", "- read: []"), encoding="utf-8")
    session = world.session(None)
    assert session.snapshot.get("knobs") is not None


# -- exactly-once dispatch across an uncertain outcome -------------------------------------

BOB = "https://bob.example/users/bob"
ME = "https://me.example/users/me"


@pytest.fixture
def slow_receiver(monkeypatch):
    """An outbox on 127.0.0.1 that acts on the first POST at once but answers it a second
    late (after the client gave up), accepting once per Idempotency-Key."""
    keep_loopback_direct(monkeypatch)
    with receivers(path="/users/me/outbox") as make:
        yield make({"sleep": 1.0})


def outbox_settings(world: World, url: str, timeout: float = 0.3, retries: int = 0) -> None:
    (world.workspace / "lily.toml").write_text(
        f'[activitypub]\nactor = "{ME}"\noutbox = "{url}"\ntimeout = {timeout}\n'
        f"retries = {retries}\n", encoding="utf-8")
    workspace_trust.trust(world.workspace, world.env(None))  # the user's own outbox (/trust)


SEND = '/skill send_message {"recipient": "' + BOB + '", "content": "exactly once"}'


def test_a_send_answered_after_the_timeout_stays_pending_and_confirm_sends_it_once(
        world, slow_receiver):
    outbox_settings(world, slow_receiver.url)
    session = world.session(None, journal=True)
    line = error_line(session, SEND)
    # the client gave up at its 0.3 s timeout: had it waited for the receiver's late 2xx,
    # the send would have succeeded instead of staying uncertain
    assert "may have been delivered" in line and "/confirm" in line and "/cancel" in line
    held = session.pending
    assert held is not None and held.uncertain and held.skill == "send_message"
    activity_id = held.activity["id"]

    again = error_line(session, SEND)  # the same call again: refused, nothing sent
    assert "/confirm" in again and "/cancel" in again and activity_id in again
    assert len(slow_receiver.requests) == 1

    done = run_command(session, "/confirm")
    assert isinstance(done, ActionDone) and "delivered" in done.summary
    assert session.pending is None
    posts = slow_receiver.requests
    assert len(posts) == 2
    keys = {p["headers"]["Idempotency-Key"] for p in posts}
    assert keys == {activity_id}  # one Idempotency-Key across the retry
    assert {json.loads(p["body"])["id"] for p in posts} == {activity_id}  # one activity
    assert list(slow_receiver.accepted) == [activity_id]
    assert world_outbox_status(world, activity_id) == "delivered"


def test_an_uncertain_send_can_be_cancelled_and_a_new_one_then_goes(world, slow_receiver):
    outbox_settings(world, slow_receiver.url)
    session = world.session(None)
    error_line(session, SEND)
    first = session.pending.activity["id"]
    cancelled = run_command(session, "/cancel")
    assert isinstance(cancelled, ActionDone) and session.pending is None
    done = run_command(session, SEND)  # a new activity, with a new id
    assert "delivered" in done.summary
    assert [json.loads(p["body"])["id"] == first for p in slow_receiver.requests] == [True, False]


@pytest.mark.parametrize("table, words", [
    ("timeout = -1", "[activitypub] timeout"), ("timeout = 'soon'", "[activitypub] timeout"),
    ("retries = 1.5", "[activitypub] retries"), ("retries = -2", "[activitypub] retries"),
])
def test_bad_outbox_settings_are_one_error_line(world, table, words):
    (world.workspace / "lily.toml").write_text(
        f'[activitypub]\nactor = "{ME}"\noutbox = "http://127.0.0.1:9/x"\n{table}\n',
        encoding="utf-8")
    workspace_trust.trust(world.workspace, world.env(None))
    assert words in error_line(world.session(None), SEND)


def world_outbox_status(world: World, activity_id: str) -> str:
    from lily_kernel.typed.outbox import Outbox
    return Outbox.for_workspace(world.workspace).get(activity_id)["status"]


def test_a_confirmed_proposal_answered_late_stays_pending_too(world, slow_receiver):
    from lily_kernel.typed import actions
    outbox_settings(world, slow_receiver.url)
    session = world.session(None)
    action = actions.prepare(session, session.snapshot.get("send_message"),
                             {"recipient": BOB, "content": "card"})
    session.offer(action)  # what the model's propose_action does
    session.show(action.id)  # ... and the face, once the card is displayed
    line = error_line(session, "/confirm")
    assert "may have been delivered" in line and session.pending.id == action.id
    assert session.pending.uncertain
    assert "delivered" in run_command(session, "/confirm").summary
    keys = {p["headers"]["Idempotency-Key"] for p in slow_receiver.requests}
    assert keys == {action.activity["id"]}
    assert len(slow_receiver.accepted) == 1


def test_an_untrusted_outbox_never_receives_the_token(world, monkeypatch):
    """A cloned workspace's lily.toml names the attacker's outbox: the activity stays in
    the local outbox and the token goes nowhere until the user trusts the workspace
    (docs/trust-boundary.md#workspace-trust)."""
    token = "outbox-TOKEN-of-the-user-5e6f"
    monkeypatch.setenv("LILY_OUTBOX_TOKEN", token)
    keep_loopback_direct(monkeypatch)
    with receivers(path="/users/me/outbox") as make:
        evil = make()
        (world.workspace / "lily.toml").write_text(
            f'[activitypub]\nactor = "{ME}"\noutbox = "{evil.url}"\n', encoding="utf-8")
        session = world.session(None)
        done = run_command(session, SEND)
        assert isinstance(done, ActionDone) and "stored in the local outbox" in done.summary
        assert "not trusted" in done.summary and "/trust" in done.summary
        assert evil.requests == []
        # The user's own outbox (LILY_OUTBOX_URL) gets it, with the token.
        mine = make()
        own = world.session(None, LILY_OUTBOX_URL=mine.url)
        run_command(own, SEND.replace("exactly once", "to my own outbox"))
        assert evil.requests == [] and len(mine.requests) == 1
        assert mine.requests[0]["headers"]["Authorization"] == f"Bearer {token}"
