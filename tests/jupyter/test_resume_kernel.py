"""Conversations that last (docs/session.md#resume): a notebook's kernel restarted through
jupyter_client, as JupyterLab restarts it, takes up the conversation from the journal;
``/new`` starts afresh; a card left waiting is never resumed; ``/rewind`` and ``/fork``
change what the next request sends, and the journal records both.

Each kernel runs with ``JPY_SESSION_NAME`` set, as Jupyter Server sets it to the notebook's
path: that is the journal's label, and so the notebook's identity.
"""
from __future__ import annotations

import json

import pytest
from kernel_support import Kernel, call, conversation, scripted_kernel_world

from lily_kernel.session.logs import Logs


@pytest.fixture
def notebook(tmp_path, ipython_dir, server):
    """A kernel for the notebook ``analysis.ipynb``, restarted with ``notebook.restart()``."""
    world = scripted_kernel_world(tmp_path, ipython_dir, server.url)
    world.env["JPY_SESSION_NAME"] = str(world.workspace / "analysis.ipynb")
    kernel = Kernel("lily", world)

    def restart() -> None:
        kernel.km.restart_kernel(now=True)
        kernel.kc.wait_for_ready(timeout=60)
    kernel.restart = restart  # type: ignore[attr-defined]
    yield kernel
    kernel.shutdown()


def sent_texts(request: dict) -> list[str]:
    """The user and assistant texts a chat request carried, in order."""
    return [m["content"].strip() for m in request["messages"]
            if m["role"] in ("user", "assistant") and isinstance(m.get("content"), str)]


def notices(run) -> list[str]:
    return [d["text/markdown"] for d in run.displays if "text/markdown" in d]


def journal(kernel: Kernel) -> list[dict]:
    records = []
    for path in sorted((kernel.workspace / ".lily" / "journal").glob("*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return records


def test_a_restarted_kernel_resumes_the_conversation_and_says_so(notebook, server, turns):
    turns.extend([{"content": "ANSWER-ONE"}, {"content": "ANSWER-TWO"}])
    notebook.ok("What columns does df have?")
    notebook.ok("/model temperature=0.3")
    notebook.restart()
    run = notebook.ok("And which one is numeric?")
    assert "Resumed 1 request" in notices(run)[0] and "/new starts afresh" in notices(run)[0]
    second = server.chat_requests()[-1]
    assert sent_texts(second)[-3:] == ["What columns does df have?", "ANSWER-ONE",
                                       "And which one is numeric?"]
    # the conversation only: what /model set stays with the kernel that set it
    assert second.get("temperature") != 0.3
    # the line shows once; the journal names the session it resumed
    assert not any("Resumed" in n for n in notices(notebook.ok("/skills")))
    created = [r for r in journal(notebook) if r.get("event") == "session_created"]
    assert created[-1]["resumed_from"] == created[0]["session_id"]


def test_new_after_a_resume_starts_afresh_and_the_next_restart_resumes_nothing(
        notebook, server, turns):
    turns.extend([{"content": "ANSWER-ONE"}, {"content": "ANSWER-TWO"}])
    notebook.ok("Remember the number 41.")
    notebook.restart()
    notebook.ok("/new")
    assert conversation(notebook) == []
    notebook.ok("Hello again")
    assert sent_texts(server.chat_requests()[-1]) == ["Hello again"]
    notebook.restart()
    assert [m["content"].strip() for m in conversation(notebook)] == ["Hello again", "ANSWER-TWO"]


def test_a_pending_card_is_not_resumed(notebook, server, turns):
    turns.append(call("run_python", {"code": "open('planted.txt', 'w').write('x')"}, "c1"))
    run = notebook.ok("Make a file, please")
    assert any("/confirm" in n for n in notices(run))  # the card waits
    notebook.restart()
    # nothing waits in the new kernel, and nothing ran
    assert notebook.run("/confirm").error_line() == "Error: nothing is waiting for confirmation."
    assert not (notebook.workspace / "planted.txt").exists()
    assert all(not m.get("tool_calls") for m in conversation(notebook))


def test_always_grants_are_not_resumed(notebook, server, turns):
    (notebook.workspace / "notes.txt").write_text("old\n")
    turns.extend([call("write", {"path": "notes.txt", "content": "new\n"}, "c1"),
                  {"content": "DONE"}])
    notebook.ok("Rewrite my notes")
    notebook.ok("/confirm --always")
    notebook.restart()
    before = journal(notebook)
    assert any(r.get("event") == "tool_approved" for r in before)  # it was granted ...
    run = notebook.ok("%%python\nimport lily\nprint(sorted(lily.session().approved))")
    assert run.stdout.strip() == "[]"  # ... and is gone after the restart


def test_rewind_drops_requests_from_what_the_model_sees(notebook, server, turns):
    turns.extend([{"content": "A1"}, {"content": "A2"}, {"content": "A3"}, {"content": "A4"}])
    for text in ("first", "second", "third"):
        notebook.ok(text)
    listed = notices(notebook.ok("/rewind"))[0]
    assert "| 1 |" in listed and "| 3 |" in listed and "`second`" in listed
    dropped = notices(notebook.ok("/rewind 2"))[0]
    assert "requests 2–3" in dropped and "`third`" in dropped
    notebook.ok("fourth")
    assert sent_texts(server.chat_requests()[-1]) == ["first", "A1", "fourth"]
    rewound = [r for r in journal(notebook) if r.get("event") == "conversation_rewound"]
    assert [(r["request"], r["keep"]) for r in rewound] == [(2, 2)]
    # the rewind holds across a restart too
    notebook.restart()
    assert [m["content"].strip() for m in conversation(notebook)] == ["first", "A1", "fourth", "A4"]
    assert notebook.run("/rewind 9").error_line().startswith("Error: no request 9")


def test_fork_carries_the_conversation_into_a_new_session(notebook, server, turns):
    turns.extend([{"content": "A1"}, {"content": "A2"}])
    notebook.ok("base question")
    before = journal(notebook)[0]["session_id"]
    shown = notices(notebook.ok("/fork try-plotly"))[0]
    assert "1 request carried over" in shown
    notebook.ok("another direction")
    assert sent_texts(server.chat_requests()[-1]) == ["base question", "A1", "another direction"]
    created = [r for r in journal(notebook) if r.get("event") == "session_created"]
    assert created[-1]["forked_from"] == before and created[-1]["fork_name"] == "try-plotly"
    rows = {s.id: s for s in Logs(notebook.workspace).sessions()}
    fork = rows[created[-1]["session_id"]]
    assert (fork.parent, fork.parent_kind) == (before, "forked")


def test_resume_can_be_turned_off(notebook, server, turns):
    turns.append({"content": "A1"})
    notebook.ok("a question")
    (notebook.workspace / "lily.toml").write_text("[session]\nresume = false\n")
    notebook.restart()
    assert conversation(notebook) == []
