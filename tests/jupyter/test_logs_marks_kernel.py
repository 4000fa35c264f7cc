"""docs/logs.md#python-cells, with a real kernel: ``lily logs show`` marks a request the user
interrupted "(interrupted)" and a failed command "(failed)" with its error line; the
session is listed by its notebook and its first request."""
from __future__ import annotations

import time

import pytest
from kernel_support import Kernel, scripted_kernel_world

from lily_kernel.cli import main
from lily_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.usefixtures("no_machine_model")


def test_show_marks_interrupted_requests_and_failed_commands(tmp_path, ipython_dir, capsys):
    turns = [{"content": "x " * 50, "chunks": 50, "chunk_delay": 0.2},
             {"content": "Fine, done."}]
    with ScriptedServer(turns) as server:
        world = scripted_kernel_world(tmp_path, ipython_dir, server.url)
        world.env["JPY_SESSION_NAME"] = "marks.ipynb"
        kernel = Kernel("lily", world)
        try:
            msg_id = kernel.kc.execute("Tell me a long story.")
            deadline = time.monotonic() + 30
            while not server.chat_requests() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
            kernel.km.interrupt_kernel()
            reply = kernel.reply(msg_id, timeout=30)
            assert reply["content"]["status"] == "error"
            kernel.iopub_until_idle(msg_id)
            failed = kernel.run("/agent nobody-by-that-name")
            line = failed.error_line()
            kernel.ok("Now a short one.", timeout=60)
        finally:
            kernel.shutdown()
    ws = str(world.workspace)
    assert main(["logs", "show", "marks.ipynb", "--workspace", ws]) == 0
    out = capsys.readouterr().out
    assert "## [1] prose (interrupted)" in out
    assert "## [2] command (failed)" in out and f"**{line}**" in out.replace("\\", "")
    assert "## [3] prose · " in out and "Fine, done." in out
    assert main(["logs", "--workspace", ws]) == 0
    row = next(r for r in capsys.readouterr().out.splitlines() if "marks.ipynb" in r)
    assert row.rstrip().endswith("Tell me a long story.")  # named by its first request
