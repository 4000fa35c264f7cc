"""The agent loop in a real Lily kernel (jupyter_client) against a ScriptedServer.

One kernel for the module, started with ``OPENAI_BASE_URL`` pointing at a
ScriptedServer on 127.0.0.1 that this process runs. The server answers from a
queue each test fills (:class:`Script`), so a failing test cannot leave turns
behind for the next one. Prose cells must end as Markdown with the footer;
faults and interrupts must end as one-line cell errors and leave the kernel,
its session and its conversation usable.
"""
from __future__ import annotations

import json
import re
import time

import pytest
from agent_support import assert_consistent
from kernel_support import Kernel, call, conversation, scripted_kernel

from lily_kernel.testing.server import ScriptedServer


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, ipython_dir, server):
    with scripted_kernel(tmp_path_factory.mktemp("agent-kernel"), ipython_dir, server.url) as k:
        yield k


def markdown_answer(run) -> str:
    shown = [d["text/markdown"] for d in run.displays if "text/markdown" in d]
    assert len(shown) == 1, run.messages
    return shown[0]


def wait_for_requests(server: ScriptedServer, count: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while len(server.chat_requests()) < count:
        assert time.monotonic() < deadline, f"the kernel sent {len(server.chat_requests())} requests"
        time.sleep(0.02)


# -- prose cells ------------------------------------------------------------------------

def test_prose_cell_ends_as_markdown_with_the_footer(kernel, server, turns):
    turns.extend([call("load_skill", {"name": "plan_compiler"}, "k1"),
                  {"content": "KERNEL-ANSWER with **bold** text", "chunks": 5}])
    run = kernel.run("Plan my week, please")
    assert run.status == "ok", run.messages
    assert not run.errors
    md = markdown_answer(run)
    assert "KERNEL-ANSWER with **bold** text" in md
    assert "skill: plan_compiler" in md and "model: scripted-test-model" in md
    final = next(d for d in run.displays if "text/markdown" in d)
    assert "KERNEL-ANSWER" in final["text/plain"] and "skill: plan_compiler" in final["text/plain"]
    # the live display streamed into ends empty
    live = [m for m in run.of_type("display_data") if "text/markdown" not in m["content"]["data"]]
    assert len(live) == 1
    live_id = live[0]["content"]["transient"]["display_id"]
    updates = [m["content"]["data"] for m in run.of_type("update_display_data")
               if m["content"]["transient"]["display_id"] == live_id]
    assert updates and updates[-1] == {"text/plain": ""}
    sent = server.chat_requests()[-1]
    assert sent["model"] == "scripted-test-model"
    user = sent["messages"][-3]
    assert (user["role"], user["content"].strip()) == ("user", "Plan my week, please")


def test_endpoint_fault_is_one_line_and_the_next_cell_works(kernel, server, turns):
    turns.extend([{"status": 503, "error_message": "KERNEL-FAULT-MARK"}])
    line = kernel.run("this one fails").error_line()
    assert line.startswith("Error: the model endpoint failed (HTTP 503)") and "KERNEL-FAULT-MARK" in line
    turns.append("AFTER-FAULT-ANSWER")
    assert "AFTER-FAULT-ANSWER" in markdown_answer(kernel.ok("and this one works"))


def test_tool_dispatch_command_makes_no_model_request(kernel, server, turns):
    (kernel.workspace / "work.py").write_text("# TODO: KERNEL-TODO-MARK\n", encoding="utf-8")
    before = len(server.requests)
    run = kernel.ok("/todos")
    assert "KERNEL-TODO-MARK" in json.dumps(run.displays)
    assert len(server.requests) == before


def test_streaming_text_is_inert_markdown_as_it_arrives(kernel, turns):
    """Issue 23.12: the live display carries Markdown (a front end wraps it at words and
    renders it as it grows), made inert like the final answer."""
    turns.append({"content": "<img src=x onerror=alert(1)> **one**\n\n- two\n- three",
                  "chunks": 4})
    run = kernel.ok("stream it")
    live = [m for m in run.of_type("display_data") if "text/markdown" not in m["content"]["data"]]
    live_id = live[0]["content"]["transient"]["display_id"]
    updates = [m["content"]["data"] for m in run.of_type("update_display_data")
               if m["content"]["transient"]["display_id"] == live_id]
    growing = [u["text/markdown"] for u in updates if u.get("text/markdown")]
    assert growing and growing[0].startswith("&lt;img"), updates  # the first chunk at once
    assert all("<img" not in md for md in growing)
    assert all(u.get("text/plain") != "" for u in updates if "text/markdown" in u)
    assert updates[-1] == {"text/plain": ""}


# -- the waiting indicator --------------------------------------------------------------

def live_updates(run) -> list[str]:
    """The texts the live display went through, in order."""
    live = [m for m in run.of_type("display_data") if "text/markdown" not in m["content"]["data"]]
    assert len(live) == 1, run.messages
    live_id = live[0]["content"]["transient"]["display_id"]
    return [m["content"]["data"]["text/plain"] for m in run.of_type("update_display_data")
            if m["content"]["transient"]["display_id"] == live_id]


def test_waiting_line_counts_seconds_in_place_and_goes_with_the_first_token(kernel, turns):
    turns.append({"delay": 3.5, "content": "LATE-ANSWER arrives", "chunks": 2})
    run = kernel.ok("a slow model, please")
    texts = live_updates(run)
    waiting = [t for t in texts if "waiting for" in t]
    seconds = [int(re.fullmatch(r"waiting for scripted-test-model… (\d+) s", t).group(1))
               for t in waiting]
    assert len(seconds) >= 2 and seconds == sorted(set(seconds)), texts  # ticking, in place
    assert seconds[0] in (1, 2), texts  # the first after about a second of silence
    first_token = next(i for i, t in enumerate(texts) if t.startswith("LATE-"))
    assert all("waiting for" not in t for t in texts[first_token:]), texts
    assert texts[-1] == ""  # and the live display ends empty, as always


def test_no_waiting_line_when_the_model_answers_at_once(kernel, turns):
    turns.append({"content": "QUICK-ANSWER", "chunks": 1})
    run = kernel.ok("a quick one")
    assert not [m for m in run.messages if "waiting for" in json.dumps(m["content"])]


def test_waiting_line_goes_when_the_request_fails(kernel, turns):
    turns.append({"delay": 1.6, "status": 503, "error_message": "SLOW-FAULT"})
    run = kernel.run("this one fails slowly")
    assert run.error_line().startswith("Error: the model endpoint failed (HTTP 503)")
    texts = live_updates(run)
    assert texts[0].startswith("waiting for scripted-test-model… ") and texts[-1] == ""


# -- interrupt --------------------------------------------------------------------------

def interrupt_after(kernel: Kernel, server: ScriptedServer, code: str, requests: int,
                    settle: float = 0.4, shown: list | None = None) -> dict:
    """Run ``code``, interrupt once the server got ``requests`` more requests; the reply
    (``shown`` gets the cell's iopub messages)."""
    start = len(server.chat_requests())
    msg_id = kernel.kc.execute(code)
    wait_for_requests(server, start + requests)
    time.sleep(settle)
    kernel.km.interrupt_kernel()
    # a hang guard, not a time limit (bench/limits.py interrupt measures that): the cell left
    # alone runs 10-30 s more and never ends in "Error: interrupted"
    reply = kernel.reply(msg_id, timeout=30)
    content = reply["content"]
    assert content["status"] == "error"
    assert len(content["traceback"]) == 1 and content["traceback"][0].startswith("Error: interrupted")
    messages = kernel.iopub_until_idle(msg_id)
    if shown is not None:
        shown.extend(messages)
    errors = [m["content"] for m in messages if m["msg_type"] == "error"]
    assert [e["traceback"] for e in errors] == [content["traceback"]]
    assert kernel.km.is_alive()
    return content


def test_interrupt_during_a_slow_stream(kernel, server, turns):
    words = " ".join(f"SLOWWORD{i}" for i in range(100))
    turns.extend([call("load_skill", {"name": "plan_compiler"}, "before-stream"),
                  {"content": words, "chunks": 100, "chunk_delay": 0.1}])
    shown: list = []
    interrupt_after(kernel, server, "a slow answer please", requests=2, shown=shown)
    # the text shown so far stays, marked; the cell still fails (Run All stops there)
    last = [m["content"]["data"] for m in shown if m["msg_type"] == "update_display_data"][-1]
    assert "SLOWWORD0" in last["text/plain"] and last["text/plain"].endswith("(interrupted)")
    assert "SLOWWORD0" in last["text/markdown"] and "(interrupted)" in last["text/markdown"]
    assert "SLOWWORD99" not in last["text/plain"]

    turns.append({"expect": {"contains": "after the interrupt"}, "content": "ANSWER-AFTER-INTERRUPT"})
    assert "ANSWER-AFTER-INTERRUPT" in markdown_answer(kernel.ok("after the interrupt"))
    conv = conversation(kernel)
    assert_consistent(conv)
    assert "SLOWWORD0" not in json.dumps(conv)  # the partial answer is not kept
    ids = [c["id"] for m in conv for c in m.get("tool_calls") or []]
    assert "before-stream" in ids  # the completed step is
    assert_consistent(server.chat_requests()[-1]["messages"][1:])


def test_interrupt_during_a_tool_leaves_no_dangling_call(kernel, server, turns):
    kernel.ok("%%python\nimport lily, time\n@lily.tool\n"
              "def sleepy_tool(seconds: int = 30) -> str:\n    time.sleep(seconds)\n    return 'slept'")
    turns.append(call("sleepy_tool", {"seconds": 30}, "sleepy"))
    interrupt_after(kernel, server, "run the sleepy tool", requests=1)

    conv = conversation(kernel)
    assert_consistent(conv)
    result = [m for m in conv if m.get("tool_call_id") == "sleepy"]
    assert len(result) == 1 and result[0]["content"].startswith("Error: interrupted")

    turns.append("ANSWER-AFTER-TOOL-INTERRUPT")
    assert "ANSWER-AFTER-TOOL-INTERRUPT" in markdown_answer(kernel.ok("go on"))
    assert_consistent(server.chat_requests()[-1]["messages"][1:])
