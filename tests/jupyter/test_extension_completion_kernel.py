"""Under ``%load_ext lily`` in a Python kernel, Tab completes a command cell as the Lily
kernel does (issue 34 §6: Tab after ``/sk`` offered nothing), and an ``@`` mention in a
``%%lily`` cell (issue 34 §3); Python still completes."""
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


def test_at_in_a_lily_cell_completes_mentions_like_the_kernel(python3):
    python3.ok("import pandas as pd\ndaily = pd.DataFrame({'n': [1, 2]})")
    code = "%%lily\nSummarise @da"
    reply = python3.complete(code)
    assert reply["matches"] == ["daily"], reply
    assert (reply["cursor_start"], reply["cursor_end"]) == (len(code) - 2, len(code))
    assert {"error", "figure", "cell[-1]"} <= set(python3.complete("%%lily\nsee @")["matches"])
    (python3.workspace / "daily.csv").write_text("n\n1\n2\n")
    assert python3.complete("%%lily\nRead @daily.")["matches"] == ["daily.csv"]
    # elsewhere in a %%lily cell (not after an @), Python's completions stay
    assert "daily" in python3.complete("%%lily\nsee @daily and dai")["matches"]
