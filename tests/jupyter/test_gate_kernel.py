"""The gate in a real Lily kernel (docs/permissions.md#the-gate): the model's run_python runs
in the sandbox with no card, changes nothing in the notebook, says so in the footer, and
lands as a proposed ``%%python`` cell, never run by itself; with the sandbox off it asks,
in ``auto`` mode too (issue 41 §5: there, model code once emptied the session's policy).
"""
from __future__ import annotations

import pytest
from kernel_support import call, scripted_kernel, tool_result

from lily_kernel.tools import sandbox

pytestmark = pytest.mark.skipif(sandbox.unavailable() is not None,
                                reason=f"no sandbox here: {sandbox.unavailable()}")

ATTACK = ("import lily\ns = lily.session()\ns.permissions = None\ns.policy = None\n"
          "gate_mark = 'CHANGED'\nprint('CHILD-RAN', 6 * 7)")


def text_of(run) -> str:
    return " ".join(d.get("text/plain", "") + d.get("text/markdown", "") for d in run.displays)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, ipython_dir, server):
    with scripted_kernel(tmp_path_factory.mktemp("gate"), ipython_dir, server.url,
                         LILY_SANDBOX="on", LILY_MODE="auto") as k:
        yield k


def test_model_code_runs_in_the_sandbox_and_lands_as_a_proposed_cell(kernel, server, turns):
    turns.extend([call("run_python", {"code": ATTACK}, "r1"), "It printed 42."])
    run = kernel.run("compute it")
    assert run.status == "ok", run.messages
    assert "card `" not in text_of(run)  # no card: it ran in the sandbox
    told = tool_result(server, "r1")
    assert "ran in the sandbox" in told and "CHILD-RAN 42" in told
    assert "ran in the sandbox" in text_of(run)  # the footer
    assert {"source": "set_next_input", "text": f"%%python\n{ATTACK}", "replace": False} \
        in run.reply.get("payload", [])
    # nothing reached the kernel: the session's policy objects and the namespace are intact
    check = kernel.run("%%python\nimport lily\ns = lily.session()\n"
                       "print(s.permissions is not None, s.policy is not None,"
                       " 'gate_mark' in globals())")
    assert check.stdout.split() == ["True", "True", "False"], check.messages


def test_one_requests_sandboxed_runs_build_on_each_other_and_the_next_request_starts_afresh(
        kernel, server, turns):
    """As in a kernel, what the model's earlier code defined is there for its next code in
    the same request (the 1.5B model used pd, imported by its first run, in its second and
    got a NameError); only runs that ended without an error are run first, silently; no
    name reaches the notebook, and the next request starts from the notebook again."""
    turns.extend([call("run_python", {"code": "import math as m\nbase = 40\nprint('FIRST')"},
                       "b1"),
                  call("run_python", {"code": "undefined_name\nbase = 0"}, "b2"),
                  call("run_python", {"code": "print('SECOND', base + int(m.sqrt(4)))"}, "b3"),
                  "It is 42."])
    run = kernel.run("compute it in steps")
    assert run.status == "ok", run.messages
    assert "FIRST" in tool_result(server, "b1")
    assert "NameError" in tool_result(server, "b2")  # raised: not run again before b3
    second = tool_result(server, "b3")
    assert "SECOND 42" in second and "FIRST" not in second  # b1 ran first, its output dropped
    assert kernel.run("%%python\nprint('base' in globals())").stdout.strip() == "False"
    turns.extend([call("run_python", {"code": "print(base)"}, "b4"), "none"])
    assert kernel.run("a new request").status == "ok"
    assert "NameError: name 'base' is not defined" in tool_result(server, "b4")


def test_with_the_sandbox_off_model_code_asks_even_in_auto_mode(tmp_path, ipython_dir, server,
                                                               turns):
    with scripted_kernel(tmp_path, ipython_dir, server.url, LILY_SANDBOX="off",
                         LILY_MODE="auto") as kernel:
        turns.append(call("run_python", {"code": "print('REAL-RUN')"}, "r2"))
        run = kernel.run("run it for real")
        shown = text_of(run)
        assert "card `" in shown and "the sandbox is unavailable here" in shown, shown
        assert "REAL-RUN" not in run.stdout
        assert kernel.run("/cancel").status == "ok"
