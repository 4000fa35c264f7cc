"""Tool calls written as text in a real Lily kernel (docs/agent.md#tool-calls-written-as-text).

Attack angle: a call a model writes as text (a fenced JSON object, Hermes/Qwen's
``<tool_call>`` tags) gets no shortcut around approval: ``run_python`` read from text waits
for its card exactly like a structured call, runs only on Confirm, and Cancel leaves the
namespace untouched. The footer says the call was read from text.
"""
from __future__ import annotations

import re

import pytest
from kernel_support import scripted_kernel, tool_result


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, ipython_dir, server):
    with scripted_kernel(tmp_path_factory.mktemp("text-calls"), ipython_dir, server.url,
                         files={"notes.txt": "NOTES-MARK\n"}) as k:
        yield k


def card_ref(run) -> str:
    cards = [d for d in run.displays if "(tool call, card `" in d.get("text/markdown", "")]
    assert len(cards) == 1, run.displays
    return re.search(r"card `([0-9a-f]{8})`", cards[0]["text/markdown"]).group(1)


def test_run_python_read_from_text_still_waits_for_the_card(kernel, server, turns):
    turns.append('<tool_call>\n{"name": "run_python", "arguments": {"code": '
                 '"TEXT_CALL_RAN = 41 + 1"}}\n</tool_call>')
    run = kernel.run("compute it")
    assert run.status == "ok", run.error_line()
    ref = card_ref(run)
    shown = "".join(d.get("text/markdown", "") for d in run.displays)
    assert "**Approve run_python**" in shown and "TEXT_CALL_RAN = 41 + 1" in shown
    assert "<tool_call>" not in shown  # the call's text is not shown as an answer
    assert kernel.run("%%python\nprint('TEXT_CALL_RAN' in globals())").stdout.strip() == "False"
    turns.append({"expect": {"contains": "The code ran"}, "content": "It is 42."})
    done = kernel.run(f"/confirm {ref}")
    assert done.status == "ok", done.error_line()
    assert any("It is 42." in d.get("text/markdown", "") for d in done.displays)
    assert kernel.run("%%python\nprint(TEXT_CALL_RAN)").stdout.strip() == "42"


def test_a_cancelled_text_call_never_runs(kernel, server, turns):
    turns.append('```json\n{"name": "run_python", "arguments": {"code": '
                 '"CANCELLED_MARK = 1"}}\n```')
    ref = card_ref(kernel.run("set the mark"))
    assert kernel.run(f"/cancel {ref}").status == "ok"
    turns.append("OK.")
    assert kernel.run("never mind").status == "ok"
    sent = server.chat_requests()[-1]["messages"]
    ids = [c["id"] for m in sent for c in m.get("tool_calls") or []]
    assert len(ids) == len(set(ids)) == 2  # each text call has its own id
    assert tool_result(server, ids[-1]) == "declined by the user"
    assert kernel.run("%%python\nprint('CANCELLED_MARK' in globals())").stdout.strip() == "False"


def test_a_read_from_text_runs_and_the_footer_says_so(kernel, server, turns):
    turns.extend(['{"name": "read", "arguments": {"path": "notes.txt"}}',
                  {"expect": {"contains": "NOTES-MARK"}, "content": "The notes say NOTES-MARK."}])
    run = kernel.run("what do my notes say?")
    assert run.status == "ok", run.error_line()
    shown = "".join(d.get("text/markdown", "") for d in run.displays)
    assert "The notes say NOTES-MARK." in shown and "tool call read from text" in shown
    assert '{"name": "read"' not in shown
