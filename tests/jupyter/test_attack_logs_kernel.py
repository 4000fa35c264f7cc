"""docs/logs.md#notebook, as an attack in a real Lily kernel: ``/logs`` and ``/logs export``
of a session whose model answered with every payload, called a tool with a hostile name
and arguments, and whose %%python cell printed them, show nothing live."""
from __future__ import annotations

import pytest
from kernel_support import Kernel, scripted_kernel_world

from lily_kernel.session.journal import journal_path
from lily_kernel.testing.server import ScriptedServer
from tests.commands.logs_hostile import ALL, danger
from tests.commands.test_logs_export_sanitized import live

pytestmark = pytest.mark.usefixtures("no_machine_model")


def test_logs_and_its_exports_are_inert(tmp_path, ipython_dir):
    turns = [{"tool_calls": [{"name": "list_variables", "arguments": {"x": ALL}, "id": "v1"}]},
             {"content": ALL}]
    with ScriptedServer(turns) as server:
        world = scripted_kernel_world(tmp_path, ipython_dir, server.url)
        kernel = Kernel("lily", world)
        try:
            kernel.ok("%%python\nprint(" + repr(ALL) + ")")
            kernel.ok(ALL, timeout=60)
            shown = kernel.ok("/logs")
            for bundle in shown.displays:
                if "text/markdown" in bundle:
                    assert live(bundle["text/markdown"]) == [], bundle["text/markdown"]
                if "text/html" in bundle:
                    assert danger(bundle["text/html"]) == []
            assert shown.displays
            kernel.ok("/logs export t.md")
            kernel.ok("/logs export t.ipynb")
        finally:
            kernel.shutdown()
    md = (world.workspace / "t.md").read_text()
    assert live(md) == [] and "onerror" in md
    assert "print(" in md  # the %%python cell is in the transcript
    import nbformat
    nb = nbformat.read(world.workspace / "t.ipynb", as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if "text/markdown" in output.get("data", {}):
                assert live(output["data"]["text/markdown"]) == []


def test_logs_export_refuses_a_journal_edited_under_the_kernel(tmp_path, ipython_dir):
    world = scripted_kernel_world(tmp_path, ipython_dir, "http://127.0.0.1:9/v1")
    world.env["JPY_SESSION_NAME"] = "edit.ipynb"
    kernel = Kernel("lily", world)
    try:
        kernel.ok("/skills")
        kernel.ok("/help")
        path = journal_path(world.workspace, "edit.ipynb")
        rows = path.read_text().splitlines()
        rows[1] = rows[1].replace('"/skills"', '"/skills --all"')  # edited after the fact
        path.write_text("\n".join(rows) + "\n")
        line = kernel.run("/logs export t.md").error_line()
        assert f"has been tampered with or damaged: {path.name}:3" in line, line
        assert not (world.workspace / "t.md").exists()
    finally:
        kernel.shutdown()
