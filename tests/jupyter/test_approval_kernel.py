"""The approval card and /confirm in a real Lily kernel, against a hostile scripted model.

docs/notebook-tools.md#confirmation and docs/typed-skills.md#confirmation: one card per
held call (a write over an existing file shows its diff), decided by /confirm [id]
[--always] or /cancel [id]; a card waits only once displayed, a new proposal never
replaces it, and a request that fails leaves nothing waiting (issues 15.6 and 16).
"""
from __future__ import annotations

import re

import pytest
from kernel_support import WIDGET_MIME, call, scripted_kernel, tool_result

from lily_kernel.typed.outbox import Outbox

CONTACTS = "alice:\n  actor: https://alice.example/users/alice\n"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, ipython_dir, server):
    with scripted_kernel(tmp_path_factory.mktemp("approval"), ipython_dir, server.url,
                         files={"notes.txt": "keep\nold line\n", "contacts.yaml": CONTACTS},
                         SKILLS_EXAMPLES="1") as k:  # send_message is an example skill
        yield k


def card_of(run, kind: str = "(tool call, card `") -> tuple[dict, str]:
    """The one card a cell displayed, and its id."""
    cards = [d for d in run.displays if kind in d.get("text/markdown", "")]
    assert len(cards) == 1, run.displays
    ref = re.search(r"card `([0-9a-f]{8})`", cards[0]["text/markdown"]).group(1)
    return cards[0], ref


def test_a_write_over_a_file_shows_its_diff_and_always_stops_the_card(kernel, server, turns):
    notes = kernel.workspace / "notes.txt"
    turns.append(call("write", {"path": "notes.txt", "content": "keep\nnew line\n"}, "w1"))
    run = kernel.run("change my notes")
    card, ref = card_of(run)
    md = card["text/markdown"]
    assert "**Approve write**" in md and "```diff" in md and "-old line\n+new line" in md
    buttons = run.displays[run.displays.index(card) + 1]  # a display of their own
    assert WIDGET_MIME in buttons and notes.read_text() == "keep\nold line\n"
    turns.extend([{"expect": {"contains": "wrote"}, "content": "Changed."}])
    done = kernel.run(f"/confirm {ref} --always")
    assert done.status == "ok", done.messages
    assert notes.read_text() == "keep\nnew line\n"
    assert any("Changed." in d.get("text/markdown", "") for d in done.displays)
    turns.extend([call("write", {"path": "notes.txt", "content": "third\n"}, "w2"), "Again."])
    again = kernel.run("once more")
    assert not any("card `" in d.get("text/markdown", "") for d in again.displays)
    assert notes.read_text() == "third\n" and tool_result(server, "w2").startswith("wrote")
    assert kernel.run("/new").status == "ok"  # --always lasts until /new
    turns.append(call("write", {"path": "notes.txt", "content": "fourth\n"}, "w3"))
    card_of(kernel.run("and again"))
    assert kernel.run("/cancel").status == "ok" and notes.read_text() == "third\n"


def test_run_python_refuses_always_and_deny_says_declined(kernel, server, turns):
    turns.append(call("run_python", {"code": "open('ran.txt', 'w').write('x')"}, "r1"))
    _, ref = card_of(kernel.run("run it"))
    line = kernel.run(f"/confirm {ref} --always").error_line()
    assert line.startswith("Error: --always is refused: run_python is always asked")
    assert not (kernel.workspace / "ran.txt").exists()
    assert kernel.run(f"/cancel {ref}").status == "ok"
    turns.append("OK.")
    after = kernel.run("never mind")
    assert after.status == "ok", after.error_line()
    assert tool_result(server, "r1") == "declined by the user"
    assert not (kernel.workspace / "ran.txt").exists()


# -- a hostile model ---------------------------------------------------------------------

def test_two_held_calls_in_one_step_show_one_card_and_the_second_never_runs(kernel, server,
                                                                           turns):
    turns.append({"tool_calls": [
        {"name": "run_python", "arguments": {"code": "open('a.txt','w').write('a')"},
         "id": "h1"},
        {"name": "write", "arguments": {"path": "notes.txt", "content": "pwned"}, "id": "h2"},
        {"name": "run_python", "arguments": {"code": "open('b.txt','w').write('b')"},
         "id": "h3"}]})
    _, ref = card_of(kernel.run("do everything"))
    turns.append("Done.")
    assert kernel.run(f"/confirm {ref}").status == "ok"
    assert (kernel.workspace / "a.txt").exists() and not (kernel.workspace / "b.txt").exists()
    assert kernel.workspace.joinpath("notes.txt").read_text() != "pwned"
    assert tool_result(server, "h2").startswith("Error: not run")
    assert tool_result(server, "h3").startswith("Error: not run")


def load_and_propose(tag: str, *contents: str) -> list[dict]:
    """load send_message, then one step proposing each content (a hostile model's step)."""
    return [call("load_skill", {"name": "send_message"}, f"load-{tag}"),
            {"tool_calls": [{"name": "propose_action", "id": f"{tag}{i}", "arguments": {
                "parameters": {"recipient": "alice", "content": text}}}
                for i, text in enumerate(contents, 1)]}]


def sent(kernel) -> list[str]:
    stored = Outbox.for_workspace(kernel.workspace).list()
    return [a["activity"]["object"]["content"] for a in stored]


def test_a_request_that_fails_after_proposing_leaves_nothing_to_confirm(kernel, server, turns):
    turns.extend([*load_and_propose("e", "proposed, then the endpoint failed"),
                  {"status": 500, "error_message": "endpoint down"}])
    failed = kernel.run("tell alice something")
    assert failed.error_line().startswith("Error:")
    assert not any(WIDGET_MIME in d for d in failed.displays)  # no card was shown ...
    assert kernel.run("/confirm").error_line() == "Error: nothing is waiting for confirmation."
    assert sent(kernel) == []  # ... so nothing can be confirmed or sent
    turns.append("Nothing was sent.")  # and the model is told its proposal was never shown
    assert kernel.run("did it go?").status == "ok"
    assert tool_result(server, "e1").startswith("Error: not run: the request ended before")


def test_a_second_proposal_is_refused_while_the_first_waits(kernel, server, turns):
    turns.extend([*load_and_propose("a", "the one shown", "a silent replacement"), "One card."])
    _, ref = card_of(kernel.run("tell alice"), "(external, card `")
    assert tool_result(server, "a2").startswith(f"Error: not run: card {ref}")
    turns.extend([*load_and_propose("b", "a later replacement"), "Still one card."])
    later = kernel.run("no, tell her this instead")
    assert not any(WIDGET_MIME in d for d in later.displays)
    assert tool_result(server, "b1").startswith(f"Error: not run: card {ref}")
    assert kernel.run(f"/confirm {ref}").status == "ok"
    assert sent(kernel) == ["the one shown"]


def test_a_stale_card_id_names_the_card_that_waits(kernel, server, turns):
    turns.append(call("run_python", {"code": "1"}, "s1"))
    _, old = card_of(kernel.run("one"))
    assert kernel.run(f"/cancel {old}").status == "ok"
    turns.append(call("run_python", {"code": "2"}, "s2"))
    _, new = card_of(kernel.run("two"))
    line = kernel.run(f"/confirm {old}").error_line()
    assert line == (f"Error: card {old} is no longer waiting (it was cancelled, declined or "
                    f"done); card {new} waits: /confirm {new} or /cancel {new}.")
    assert kernel.run(f"/cancel {new}").status == "ok"
