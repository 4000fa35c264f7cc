"""The demo's stand-in model shows the headline notebook features in a real Lily kernel:
``/fix`` explains the last error and proposes a ``%%python`` cell, ``/explore`` summarises a
DataFrame and proposes a cell, and every answer's footer reports token usage."""
from __future__ import annotations

import pytest
from kernel_support import scripted_kernel

from lily_kernel.testing.server import ScriptedServer
from lily_kernel.testing.standin import demo_responder


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, ipython_dir):
    with ScriptedServer(demo_responder) as server, scripted_kernel(
            tmp_path_factory.mktemp("standin"), ipython_dir, server.url) as k:
        yield k


def proposed(run) -> str:
    texts = [p["text"] for p in run.reply.get("payload", []) if p.get("source") == "set_next_input"]
    assert len(texts) == 1, run.reply
    return texts[0]


def answer(run) -> str:
    return "\n".join(d.get("text/markdown", "") for d in run.displays)


def test_fix_explains_and_proposes_a_python_cell_that_runs(kernel):
    assert kernel.run("%%python\ntotal = 10 / days").status == "error"
    run = kernel.run("/fix")
    assert run.status == "ok", run.messages
    text = answer(run)
    assert "NameError: name 'days' is not defined" in text
    assert "tokens:" in text  # usage is reported
    cell = proposed(run)
    assert cell.startswith("%%python\ndays = 7")
    assert "total = 10 / days" in cell
    assert kernel.run(cell).status == "ok"  # the proposed cell runs as Python
    assert kernel.run("%%python\nprint(total)").stdout.strip() == f"{10 / 7}"


def test_explore_summarises_a_dataframe_and_proposes_describe(kernel):
    kernel.ok("%%python\nimport pandas as pd\nsales = pd.DataFrame({'units': [1, 2], 'price': [2.5, 4.0]})")
    run = kernel.run("/explore sales")
    assert run.status == "ok", run.messages
    text = answer(run)
    assert "`sales` at a glance" in text and "2 rows × 2 columns" in text
    assert proposed(run) == "%%python\nsales.describe(include='all')"
