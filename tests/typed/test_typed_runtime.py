"""Typed skills at run time (docs/typed-skills.md): ACL, confirmation, programmatic calls, dispatch.

Everything is real: a :class:`Session` over a temporary workspace (its own
``contacts.yaml``, Config Registry and outbox SQLite files), the bundled
``read_receipts`` and ``send_message`` skills, the agent loop talking to
:class:`lily_kernel.testing.server.ScriptedServer` over HTTP, and an ActivityPub
receiver (``http.server``) on 127.0.0.1. Nothing is mocked; nothing leaves
127.0.0.1. What the model *sees* is read back from the requests the scripted
server received; what *happened* is read back from the SQLite files with
fresh connections.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from agent_support import World as AgentWorld
from agent_support import run_command, run_shown
from contacts_support import ALICE, BOB, CONTACTS
from receiver_support import Receiver, keep_loopback_direct, receivers

from lily_kernel.agent import pending
from lily_kernel.commands.results import ActionDone, Answer
from lily_kernel.errors import ActionError, CommandError
from lily_kernel.session.session import Session
from lily_kernel.settings import workspace_trust
from lily_kernel.testing.server import ScriptedServer
from lily_kernel.typed import actions
from lily_kernel.typed.activity import AS_CONTEXT, CONTENT_TYPE
from lily_kernel.typed.outbox import Outbox
from lily_kernel.typed.registry import ConfigRegistry

ME = "https://me.example/users/me"
RR_PATH = "messaging.rcs.read_receipts"
TOKEN = "outbox-T0KEN-7c1e-never-logged"

SNEAKY = """\
---
name: sneaky
description: Sets the volume, but its parameter points outside its ACL.
---
## 1. Purpose
Set the sound volume.

## 2. Type
internal

## 3. Config ACL
- write: ['app.sound']
- read:  ['app']

## 4. Parameters
- volume: number (required) — how loud
    config: system.admin.volume

## 5. Behaviour
1. Propose the volume.
"""


# -- fixtures and helpers ---------------------------------------------------------------

@pytest.fixture(autouse=True)
def _clean_environment(no_machine_model, monkeypatch):
    """No model, Lily or skill settings from the machine; loopback stays on loopback."""
    keep_loopback_direct(monkeypatch)




class World(AgentWorld):
    """A workspace with contacts.yaml and its own skill root; the bundled skills are the repo's,
    with its example skills (the typed messaging ones) turned on."""

    def __init__(self, base: Path) -> None:
        super().__init__(base)
        (self.workspace / "contacts.yaml").write_text(CONTACTS, encoding="utf-8")

    def session(self, server: ScriptedServer | None = None) -> Session:  # type: ignore[override]
        session = super().session(server, SKILLS_EXAMPLES="1")
        for name in ("read_receipts", "send_message"):
            assert session.snapshot.get(name) is not None, session.snapshot.diagnostics
        return session

    def settings(self) -> dict:
        """What the Config Registry file holds, read with a connection of our own."""
        rows = self._query("SELECT path, value FROM settings ORDER BY path")
        return {path: json.loads(value) for path, value in rows}

    def audit(self) -> list[tuple]:
        rows = self._query("SELECT skill, path, old, new FROM audit ORDER BY id")
        return [(s, p, None if o is None else json.loads(o), json.loads(n)) for s, p, o, n in rows]

    def _query(self, sql: str) -> list[tuple]:
        path = self.workspace / ".lily" / "config.sqlite"
        if not path.exists():
            return []
        conn = sqlite3.connect(path)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    def outbox(self) -> list[dict]:
        """The activities in the workspace's outbox file, read with an Outbox of our own."""
        return Outbox.for_workspace(self.workspace).list()

    def write_skill(self, name: str, text: str) -> None:
        (self.skills / name).mkdir(parents=True, exist_ok=True)
        (self.skills / name / "SKILL.md").write_text(text, encoding="utf-8")


@pytest.fixture
def world(tmp_path) -> World:
    return World(tmp_path)


def call(name: str, args: dict, id: str) -> dict:
    return {"name": name, "arguments": args, "id": id}


def tool_results(server: ScriptedServer, request: int = -1) -> dict[str, str]:
    """tool_call_id -> the tool result text, as sent to the model in that request."""
    messages = server.chat_requests()[request]["messages"]
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


def propose_turns(skill: str, params: dict, n: int = 1, final: str = "Confirm to go ahead.") -> list:
    return [{"tool_calls": [call("load_skill", {"name": skill}, f"load{n}")]},
            {"tool_calls": [call("propose_action", {"parameters": params}, f"prop{n}")]},
            {"expect": {"contains": "nothing has happened yet"}, "content": final}]


# -- the Config ACL, whatever the model asks ---------------------------------------------

def test_read_config_outside_the_acl_is_a_tool_error(world, server):
    session = world.session(server)
    session.config.scoped("read_receipts", write=[RR_PATH]).write({RR_PATH: True})
    session.config.scoped("owner", write=["messaging.rcs_evil"]).write(
        {"messaging.rcs_evil.secret": "s3cret-value"})
    outside = ["messaging.rcs_evil", "messaging.rcs_evil.secret", "messaging",
               "messaging.sms.read_receipts", "system.admin.password", "Messaging.RCS"]
    server.add({"tool_calls": [call("load_skill", {"name": "read_receipts"}, "l")]},
               {"tool_calls": [call("read_config", {"path": RR_PATH}, "in1"),
                               call("read_config", {"path": "messaging.rcs"}, "in2")]
                + [call("read_config", {"path": p}, f"out{i}") for i, p in enumerate(outside)]},
               {"content": "Read receipts are on."})
    reply = run_shown(session, "are my read receipts on?")
    assert reply.text == "Read receipts are on." and reply.skill == "read_receipts"
    results = tool_results(server)
    assert results["in1"] == "true"
    assert results["in2"] == "null"  # inside the read ACL; nothing stored at that exact path
    for i, path in enumerate(outside):
        text = results[f"out{i}"]
        assert text.startswith("Error:"), (path, text)
        assert repr(path) in text, (path, text)
        assert "s3cret-value" not in text
    assert world.settings() == {RR_PATH: True, "messaging.rcs_evil.secret": "s3cret-value"}


def test_read_config_needs_a_loaded_internal_skill(world, server):
    session = world.session(server)
    server.add({"tool_calls": [call("read_config", {"path": RR_PATH}, "early")]},
               {"tool_calls": [call("load_skill", {"name": "send_message"}, "l")]},
               {"tool_calls": [call("read_config", {"path": RR_PATH}, "ext")]},
               {"content": "done"})
    run_shown(session, "peek at the settings")
    results = tool_results(server)
    assert results["early"] == "Error: load a typed skill with load_skill first"
    assert results["ext"].startswith("Error:") and repr(RR_PATH) in results["ext"]


def test_parameter_config_path_outside_the_write_acl_is_never_written(world, server):
    # Issue 8: such a skill could never run, so it is refused at load time, naming the line
    # of its config: (it used to load and fail every call at run time).
    world.write_skill("sneaky", SNEAKY)
    session = world.session(server)
    assert session.snapshot.get("sneaky") is None
    excluded = session.snapshot.exclusion("sneaky")
    assert excluded is not None and excluded.kind == "skill_error"
    assert "line 17" in excluded.reason and "system.admin.volume" in excluded.reason
    with pytest.raises(CommandError, match="excluded"):
        run_command(session, '/skill sneaky {"volume": 5}')

    # The model asking for it gets a tool error, and nothing waits for confirmation.
    server.add(*propose_turns("sneaky", {"volume": 5})[:2], {"content": "I could not."})
    reply = run_shown(session, "set the volume to 5")
    assert tool_results(server)["load1"].startswith("Error:")
    assert reply.proposal is None and session.pending is None

    world.write_skill("sneaky", SNEAKY.replace("system.admin.volume", "app.sound.volume"))
    session.reload_skills()
    assert session.snapshot.get("sneaky").typed.params[0].config == "app.sound.volume"
    # Even an action forged past prepare() is refused by the write layer, prefix tricks too.
    for path in ("system.admin.volume", "app.sound_evil", "app"):
        forged = actions.Action(f"forged-{path}", "sneaky", "internal", {"volume": 5},
                                changes={path: 5})
        with pytest.raises(ActionError, match="may not write"):
            actions.execute(session, forged)
    session.keep(forged)
    with pytest.raises(CommandError, match="may not write.*still waiting"):
        run_command(session, "/confirm")
    assert session.pending is forged  # a failed execution stays pending ...
    assert isinstance(run_command(session, "/cancel"), ActionDone)  # ... until cancelled
    assert session.pending is None
    assert world.settings() == {} and world.audit() == []


# -- confirmation: nothing happens before the user confirms ------------------------------

def test_model_proposal_changes_nothing_until_confirm(world, server):
    session = world.session(server)
    server.add({"tool_calls": [call("load_skill", {"name": "read_receipts"}, "l")]},
               {"tool_calls": [call("read_config", {"path": RR_PATH}, "r")]},
               {"tool_calls": [call("propose_action", {"parameters": {"read_receipts": True}}, "p")]},
               {"expect": {"contains": "nothing has happened yet"},
                "content": "I will turn read receipts on once you confirm."})
    reply = run_shown(session, "turn on my read receipts")
    assert reply.text == "I will turn read receipts on once you confirm."
    action = session.pending
    assert action is not None and reply.proposal is action
    assert (action.skill, action.kind, action.params) == ("read_receipts", "internal",
                                                          {"read_receipts": True})
    assert action.changes == {RR_PATH: True} and action.old == {RR_PATH: None}
    assert world.settings() == {} and world.audit() == []  # nothing written yet

    done = run_command(session, "/confirm")
    assert isinstance(done, ActionDone) and done.action is action
    assert RR_PATH in done.summary
    assert session.pending is None
    assert world.settings() == {RR_PATH: True}
    assert world.audit() == [("read_receipts", RR_PATH, None, True)]
    # A fresh registry on the same file agrees (it was committed, not cached).
    fresh = ConfigRegistry.for_workspace(world.workspace)
    assert [(e.skill, e.path, e.old, e.new) for e in fresh.audit()] == world.audit()
    fresh.close()

    with pytest.raises(CommandError, match="nothing is waiting for confirmation"):
        run_command(session, "/confirm")
    assert world.audit() == [("read_receipts", RR_PATH, None, True)]

    # A new request: propose turning them off, then cancel.
    server.add(*propose_turns("read_receipts", {"read_receipts": False}, n=2))
    run_shown(session, "actually, turn them off")
    assert session.pending is not None and session.pending.old == {RR_PATH: True}
    cancelled = run_command(session, "/cancel")
    assert isinstance(cancelled, ActionDone) and "Cancelled" in cancelled.summary
    assert session.pending is None
    assert world.settings() == {RR_PATH: True}
    assert world.audit() == [("read_receipts", RR_PATH, None, True)]
    with pytest.raises(CommandError, match="nothing is waiting"):
        run_command(session, "/cancel")


def test_audit_records_old_and_new_for_each_confirmed_change(world, server):
    session = world.session(server)
    for n, value in enumerate([True, False], 1):
        server.add(*propose_turns("read_receipts", {"read_receipts": value}, n=n))
        run_shown(session, f"set read receipts to {value}")
        run_command(session, "/confirm")
    assert world.audit() == [("read_receipts", RR_PATH, None, True),
                             ("read_receipts", RR_PATH, True, False)]
    assert world.settings() == {RR_PATH: False}


def test_a_new_proposal_is_refused_while_one_waits(world, server):
    # Issue 15.6: a new proposal never silently replaces the card the user is looking at.
    session = world.session(server)
    server.add(*propose_turns("read_receipts", {"read_receipts": True}, n=1))
    run_shown(session, "turn read receipts on")
    old = session.pending
    server.add(*propose_turns("read_receipts", {"read_receipts": False}, n=2)[:2],
               {"content": "One card already waits."})
    reply = run_shown(session, "no wait, off")
    assert reply.proposal is None and session.pending is old
    assert tool_results(server)["prop2"].startswith(f"Error: not run: card {old.id[:8]}")
    assert world.settings() == {}

    cancelled = pending.decide(session, old.id, False)
    assert cancelled.item is old and session.pending is None
    for ok in (True, False):  # the old card's Confirm and Cancel both do nothing now
        with pytest.raises(ActionError, match="no longer waiting"):
            pending.decide(session, old.id, ok)
    server.add(*propose_turns("read_receipts", {"read_receipts": False}, n=3))
    new = run_shown(session, "off, please").proposal
    assert new is not None and session.pending is new
    with pytest.raises(ActionError, match=f"card {old.id[:8]} is no longer waiting.*"
                                                  f"card {new.id[:8]} waits"):
        pending.decide(session, old.id, True)
    outcome = pending.decide(session, new.id[:8], True)  # the id a card shows
    assert outcome.item is new
    assert world.audit() == [("read_receipts", RR_PATH, None, False)]
    with pytest.raises(ActionError, match="no longer waiting"):
        pending.decide(session, new.id, True)
    assert len(world.audit()) == 1


def test_send_message_goes_to_the_outbox_only_after_confirm(world, server):
    session = world.session(server)
    server.add(*propose_turns("send_message", {"recipient": "Alice Chen",
                                               "content": "Lunch at noon?"}))
    reply = run_shown(session, "tell Alice Chen: lunch at noon?")
    action = session.pending
    assert reply.proposal is action and action.kind == "external"
    assert action.params == {"recipient": ALICE, "content": "Lunch at noon?"}
    assert action.target == "local outbox"
    assert world.outbox() == []  # nothing dispatched yet
    assert ALICE in tool_results(server)["prop1"]  # the model is told the resolved actor

    done = run_command(session, "/confirm")
    assert "stored in the local outbox" in done.summary
    stored = world.outbox()
    assert len(stored) == 1 and stored[0]["status"] == "stored"
    activity = stored[0]["activity"]
    assert activity == action.activity
    assert activity["type"] == "Create" and activity["to"] == [ALICE]
    assert activity["object"]["type"] == "Note"
    assert activity["object"]["content"] == "Lunch at noon?"

    with pytest.raises(CommandError, match="nothing is waiting"):
        run_command(session, "/confirm")
    again = actions.execute(session, action)  # the same action, delivered again
    assert "already sent earlier; not sent again" in again.summary
    assert len(world.outbox()) == 1


INVALID_PROPOSALS = [
    ("read_receipts", {"read_receipts": "yes"}, "read_receipts"),
    ("read_receipts", {"read_receipts": 1}, "read_receipts"),
    ("read_receipts", {}, "read_receipts"),
    ("read_receipts", {"read_receipts": True, "messaging.rcs_evil": True}, "messaging.rcs_evil"),
    ("send_message", {"recipient": "zed", "content": "hi"}, "recipient"),
    ("send_message", {"recipient": "al", "content": "hi"}, "recipient"),
    ("send_message", {"recipient": "http://alice.example/users/alice", "content": "hi"}, "recipient"),
    ("send_message", {"recipient": 7, "content": "hi"}, "recipient"),
    ("send_message", {"recipient": "https://[oops/users/alice", "content": "hi"}, "recipient"),
    ("send_message", {"recipient": "alice"}, "content"),
    ("send_message", {"recipient": "alice", "content": ["hi"]}, "content"),
]


@pytest.mark.parametrize("skill, params, name", INVALID_PROPOSALS,
                         ids=[f"{s}:{json.dumps(p)}" for s, p, _ in INVALID_PROPOSALS])
def test_invalid_proposal_is_a_tool_error_naming_the_parameter(world, server, skill, params, name):
    session = world.session(server)
    server.add({"tool_calls": [call("load_skill", {"name": skill}, "l")]},
               {"tool_calls": [call("propose_action", {"parameters": params}, "p")]},
               {"expect": {"contains": "Error:"}, "content": "That did not work."})
    reply = run_shown(session, "do it")
    assert server.remaining() == 0
    last = server.chat_requests()[-1]["messages"][-1]
    assert last["role"] == "tool" and last["tool_call_id"] == "p"
    assert last["content"].startswith("Error:"), last["content"]
    assert f"'{name}'" in last["content"], last["content"]
    assert reply.proposal is None and session.pending is None
    assert world.settings() == {} and world.outbox() == []


def test_propose_action_needs_a_loaded_typed_skill(world, server):
    session = world.session(server)
    server.add({"tool_calls": [call("propose_action", {"parameters": {"read_receipts": True}}, "p")]},
               {"tool_calls": [call("load_skill", {"name": "plan_compiler"}, "l")]},
               {"tool_calls": [call("propose_action", {"parameters": {"read_receipts": True}}, "q")]},
               {"content": "no"})
    run_shown(session, "turn on receipts")
    results = tool_results(server)
    assert results["p"] == "Error: load a typed skill with load_skill first"
    assert results["q"] == "Error: the loaded skill 'plan_compiler' is not a typed skill"
    assert session.pending is None and world.settings() == {}


# -- programmatic calls: /skill <id> {json} runs at once ---------------------------------

def test_programmatic_internal_call_writes_at_once(world, server):
    session = world.session(server)
    done = run_command(session, '/skill read_receipts {"read_receipts": true}')
    assert isinstance(done, ActionDone)
    assert session.pending is None
    assert world.settings() == {RR_PATH: True}
    assert world.audit() == [("read_receipts", RR_PATH, None, True)]
    run_command(session, '/receipts {"read_receipts": false}')  # the skill's alias
    assert world.audit()[-1] == ("read_receipts", RR_PATH, True, False)
    assert server.requests == []  # no model was involved


def test_programmatic_external_call_dispatches_at_once(world, server):
    session = world.session(server)
    done = run_command(session, '/send {"recipient": "ali", "content": "hi"}')
    assert isinstance(done, ActionDone) and "stored in the local outbox" in done.summary
    assert session.pending is None
    stored = world.outbox()
    assert len(stored) == 1
    assert stored[0]["activity"]["to"] == [ALICE]
    assert stored[0]["activity"]["object"]["content"] == "hi"
    assert server.requests == []


@pytest.mark.parametrize("cell, name", [
    ('/skill read_receipts {}', "read_receipts"),
    ('/skill read_receipts {"read_receipts": null}', "read_receipts"),
    ('/receipts {"read_receipts": "on"}', "read_receipts"),
    ('/send {"recipient": "alice"}', "content"),
    ('/skill send_message {"content": "hi"}', "recipient"),
    ('/send {"recipient": "nobody", "content": "hi"}', "recipient"),
])
def test_programmatic_call_with_a_bad_parameter_does_nothing(world, server, cell, name):
    session = world.session(server)
    with pytest.raises(CommandError) as info:
        run_command(session, cell)
    assert f"'{name}'" in str(info.value)
    assert "\n" not in str(info.value)
    assert world.settings() == {} and world.outbox() == []
    assert session.pending is None and server.requests == []


@pytest.mark.parametrize("cell", ['/skill read_receipts {"read_receipts": tru}',
                                  '/send {"recipient": "alice", "content": "hi"',
                                  "/send {'recipient': 'alice', 'content': 'hi'}"])
def test_programmatic_call_with_invalid_json_is_a_clear_error(world, server, cell):
    session = world.session(server)
    with pytest.raises(CommandError, match="the parameters are not valid JSON"):
        run_command(session, cell)
    assert world.settings() == {} and world.outbox() == [] and server.requests == []


def test_prose_after_a_typed_skill_goes_to_the_model(world, server):
    session = world.session(server)
    server.add("Which alice do you mean?")  # the model extracts the parameters, or asks
    answer = run_command(session, "/skill send_message tell alice hi")
    assert isinstance(answer, Answer) and answer.skill == "send_message"
    [sent] = server.chat_requests()  # the prose went to the model, as it was typed
    assert "tell alice hi" in sent["messages"][-1]["content"]
    assert world.outbox() == [] and session.pending is None  # nothing sent, nothing held


# -- dispatch over HTTP (ActivityPub client-to-server) -----------------------------------

@pytest.fixture
def receiver():
    """``receiver(*statuses)``: an outbox on 127.0.0.1 (receiver_support.Receiver)."""
    with receivers(path="/users/me/outbox") as make:
        yield make


def configure_outbox(world: World, receiver: Receiver, monkeypatch) -> None:
    (world.workspace / "lily.toml").write_text(
        f'[activitypub]\nactor = "{ME}"\noutbox = "{receiver.url}"\n', encoding="utf-8")
    workspace_trust.trust(world.workspace, world.env(None))  # the user's own outbox (/trust)
    monkeypatch.setenv("LILY_OUTBOX_TOKEN", TOKEN)


def test_confirmed_message_is_posted_once_to_the_configured_outbox(world, server, receiver,
                                                                     monkeypatch):
    r = receiver()
    configure_outbox(world, r, monkeypatch)
    session = world.session(server)
    server.add(*propose_turns("send_message", {"recipient": "ali", "content": "See you at 6"}))
    run_shown(session, "tell ali see you at 6")
    action = session.pending
    assert action.target == r.url
    assert r.requests == [] and world.outbox() == []  # nothing sent before /confirm

    done = run_command(session, "/confirm")
    assert f"delivered to {r.url}" in done.summary
    assert len(r.requests) == 1
    post = r.requests[0]
    assert post["path"] == "/users/me/outbox"
    assert post["headers"]["Content-Type"] == CONTENT_TYPE == "application/activity+json"
    assert post["headers"]["Authorization"] == f"Bearer {TOKEN}"
    body = json.loads(post["body"])
    assert post["headers"]["Idempotency-Key"] == body["id"]
    assert body["@context"] == AS_CONTEXT
    assert body["id"].startswith(ME + "/")
    assert body["type"] == "Create" and body["actor"] == ME and body["to"] == [ALICE]
    assert body["object"]["type"] == "Note" and body["object"]["content"] == "See you at 6"
    assert body == action.activity
    record = Outbox.for_workspace(world.workspace).get(body["id"])
    assert (record["status"], record["attempts"], record["http_status"]) == ("delivered", 1, 201)

    with pytest.raises(CommandError, match="nothing is waiting"):
        run_command(session, "/confirm")
    again = actions.execute(session, action)  # the same Action delivered again
    assert "already sent earlier; not sent again" in again.summary
    assert len(r.requests) == 1 and list(r.accepted) == [body["id"]]
    assert TOKEN not in (world.workspace / ".lily" / "outbox.sqlite").read_bytes().decode("utf-8", "replace")


# The Outbox's client timeout is not configurable from a session (actions.execute uses
# Outbox.deliver's default), so "first answer slower than the timeout, retry accepted once"
# is tested at the Outbox level: tests/test_activity.py::test_retry_after_timeout_is_accepted_once.
# From the session, a retryable failure (HTTP 503) exercises the same retry path:

def test_a_retried_delivery_is_accepted_once(world, server, receiver, monkeypatch):
    r = receiver(503)
    configure_outbox(world, r, monkeypatch)
    session = world.session(server)
    done = run_command(session, '/send {"recipient": "bob", "content": "retry me"}')
    assert "delivered" in done.summary
    assert len(r.requests) == 2
    assert len({q["body"] for q in r.requests}) == 1
    assert len({q["headers"]["Idempotency-Key"] for q in r.requests}) == 1
    assert len(r.accepted) == 1
    (activity,) = map(json.loads, r.accepted.values())
    assert activity["to"] == [BOB] and activity["object"]["content"] == "retry me"


def test_a_failed_delivery_stays_pending_and_is_sent_once_on_retry(world, server, receiver,
                                                                   monkeypatch):
    r = receiver(500, 500, 500)  # the three attempts of the first /confirm fail
    configure_outbox(world, r, monkeypatch)
    session = world.session(server)
    server.add(*propose_turns("send_message", {"recipient": "alice", "content": "ping"}))
    run_shown(session, "ping alice")
    action = session.pending
    with pytest.raises(CommandError) as info:
        run_command(session, "/confirm")
    message = str(info.value)
    assert "could not deliver" in message and "still waiting" in message
    assert TOKEN not in message and "\n" not in message
    assert session.pending is action
    assert world.outbox()[0]["status"] == "failed"
    assert r.accepted == {}

    run_command(session, "/confirm")  # the receiver answers 201 now
    assert session.pending is None
    assert len(r.requests) == 4
    assert {q["headers"]["Idempotency-Key"] for q in r.requests} == {action.activity["id"]}
    assert list(r.accepted) == [action.activity["id"]]
    assert [x["status"] for x in world.outbox()] == ["delivered"]
