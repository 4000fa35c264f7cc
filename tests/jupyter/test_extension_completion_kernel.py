"""Under ``%load_ext lily`` in a Python kernel, Tab completes a command cell as the Lily
kernel does (issue 34 §6: Tab after ``/sk`` offered nothing); Python still completes."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def python3(tmp_path_factory, ipython_dir):
    from kernel_support import Kernel, make_world
    world = make_world(tmp_path_factory.mktemp("ext-complete"), ipython_dir)
    kernel = Kernel("python3", world)
    try:
        assert kernel.run("%load_ext lily").status == "ok"
        yield kernel
    finally:
        kernel.shutdown()


@pytest.mark.parametrize(("code", "matches", "start"), [
    ("/sk", {"/skill", "/skills"}, 0),
    ("/skill pla", {"plan_compiler"}, 7),
    ("/help /rel", {"/reload_skills", "/reload_persona"}, 6),
    ("x = 1\n/sk", set(), None),  # not a command cell: Python's completions, not Lily's
])
def test_load_ext_lily_completes_commands_like_the_kernel(python3, code, matches, start):
    reply = python3.complete(code)
    assert reply["status"] == "ok"
    if start is None:
        assert not {"/skill", "/skills"} & set(reply["matches"])
        return
    assert set(reply["matches"]) == matches, reply
    assert (reply["cursor_start"], reply["cursor_end"]) == (start, len(code))


def test_python_still_completes_under_load_ext_lily(python3):
    python3.ok("sales_total = 3")
    assert "sales_total" in python3.complete("sales_t")["matches"]
