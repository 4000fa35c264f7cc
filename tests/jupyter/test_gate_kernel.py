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
