"""Typed skills in a real Lily kernel: the confirmation card, /confirm, /cancel, the buttons.

One kernel for the module (through jupyter_client), in a workspace with a
``contacts.yaml``, with ``OPENAI_BASE_URL`` pointing at a ScriptedServer this
process runs; each test queues the turns the "model" answers with. The
workspace's outbox file is read from this process with an Outbox of our own,
so "nothing was sent before the user confirmed" is checked on disk.
"""
from __future__ import annotations

import pytest
from kernel_support import WIDGET_MIME, Kernel, scripted_kernel

from lily_kernel.typed.outbox import Outbox

ALICE = "https://alice.example/users/alice"
CONTACTS = f"alice:\n  actor: {ALICE}\n  aliases: [Alice Chen, ali]\n"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, ipython_dir, server):
    with scripted_kernel(tmp_path_factory.mktemp("typed-kernel"), ipython_dir, server.url,
                         files={"contacts.yaml": CONTACTS},
                         SKILLS_EXAMPLES="1") as k:  # send_message is an example skill
        yield k


def propose(recipient: str, content: str) -> list[dict]:
    return [{"tool_calls": [{"name": "load_skill", "arguments": {"name": "send_message"},
                             "id": "load"}]},
            {"tool_calls": [{"name": "propose_action", "id": "prop",
                             "arguments": {"parameters": {"recipient": recipient,
                                                          "content": content}}}]},
            {"expect": {"contains": "nothing has happened yet"},
             "content": "I will send it once you confirm."}]


def stored(kernel: Kernel) -> list[dict]:
    return Outbox.for_workspace(kernel.workspace).list()


def in_kernel_count(kernel: Kernel) -> int:
    run = kernel.ok("%%python\nimport lily\nprint(len(lily.session().outbox.list()))")
    return int(run.stdout.strip())


def card_of(run) -> dict:
    """The card's own display (restorable: no widget in it); its buttons are the next one."""
    cards = [d for d in run.displays if "lily-card" in d.get("text/html", "")]
    assert len(cards) == 1, run.displays
    after = run.displays[run.displays.index(cards[0]) + 1]
    assert set(after) == {WIDGET_MIME, "text/plain"} and after[WIDGET_MIME]["model_id"]
    return cards[0]


def test_prose_cell_shows_the_answer_and_a_card_and_only_confirm_sends(kernel, turns):
    turns.extend(propose("Alice Chen", "Lunch at noon?"))
    run = kernel.run("Tell Alice Chen: lunch at noon?")
    assert run.status == "ok" and not run.errors, run.messages

    answers = [d for d in run.displays if "I will send it once you confirm." in d.get("text/markdown", "")]
    assert len(answers) == 1, run.displays
    card = card_of(run)
    assert {"text/plain", "text/markdown", "text/html"} <= set(card) and WIDGET_MIME not in card
    assert ALICE in card["text/markdown"] and "Lunch at noon?" in card["text/markdown"]
    assert "send_message" in card["text/markdown"] and "/confirm" in card["text/markdown"]
    assert ALICE in card["text/plain"]

    assert stored(kernel) == []  # nothing in the outbox before the user confirms
    assert in_kernel_count(kernel) == 0

    done = kernel.ok("/confirm")
    shown = [d for d in done.displays if "stored in the local outbox" in d.get("text/markdown", "")]
    assert len(shown) == 1, done.displays
    assert "stored in the local outbox" in shown[0]["text/plain"]
    activities = stored(kernel)
    assert len(activities) == 1
    activity = activities[0]["activity"]
    assert activity["type"] == "Create" and activity["to"] == [ALICE]
    assert activity["object"]["content"] == "Lunch at noon?"
    assert in_kernel_count(kernel) == 1

    assert kernel.run("/cancel").error_line() == "Error: nothing is waiting for confirmation."
    assert kernel.run("/confirm").error_line() == "Error: nothing is waiting for confirmation."
    assert len(stored(kernel)) == 1


def test_the_confirm_button_sends_once(kernel, turns):
    before = len(stored(kernel))
    turns.extend(propose("ali", "clicked"))
    run = kernel.run("tell ali: clicked")
    assert run.status == "ok", run.messages
    card_of(run)
    opened = {m["content"]["comm_id"]: m["content"]["data"]["state"]
              for m in run.of_type("comm_open")}
    buttons = {s.get("description"): cid for cid, s in opened.items()
               if s.get("_model_name") == "ButtonModel"}
    assert set(buttons) == {"Confirm", "Cancel"}, opened
    assert len(stored(kernel)) == before

    def click(comm_id: str) -> str:
        """Click a button as a front end does; return the text the card's widgets then show."""
        msg = kernel.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {
            "method": "custom", "content": {"event": "click"}}})
        kernel.kc.shell_channel.send(msg)
        updates = kernel.iopub_until_idle(msg["header"]["msg_id"])
        # the outcome goes into the card's display (an update by its id); errors by the buttons
        return " ".join([str(m["content"]["data"].get("state", {}).get("value", ""))
                         for m in updates if m["msg_type"] == "comm_msg"]
                        + [m["content"]["data"]["text/html"] for m in updates
                           if m["msg_type"] == "update_display_data"])

    shown = click(buttons["Confirm"])
    assert "stored in the local outbox" in shown, shown
    assert "<strong>send_message</strong>" in shown and "**" not in shown, shown  # as /confirm
    assert len(stored(kernel)) == before + 1
    assert stored(kernel)[-1]["activity"]["object"]["content"] == "clicked"

    again = click(buttons["Confirm"])  # a second click (or a stale card) sends nothing
    assert "nothing is waiting for confirmation" in again, again
    assert len(stored(kernel)) == before + 1
    assert kernel.run("/confirm").error_line() == "Error: nothing is waiting for confirmation."
