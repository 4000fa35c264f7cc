"""Issue 35 §3's acceptance, with real kernels: ``lily logs export --ipynb`` of a session
with ``%%python`` (a CSV load), a plot, a tool call and a card writes a notebook that is
nbformat-valid, stable (nbformat reads and writes it back to the same bytes) and runs
again under ``pytest --nbval`` on the Lily kernel, against a scripted model answering as
the session's did (docs/logs.md#export)."""
from __future__ import annotations

import base64
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import nbformat
import pytest
from kernel_support import make_world, run_cells

from lily_kernel.cli import main
from lily_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.usefixtures("no_machine_model")


def png(width: int = 8, height: int = 4) -> bytes:
    """A small bar chart as a PNG (what an inline plot displays), without matplotlib."""
    bar, blank = bytes((0, 90, 200)), b"\xff\xff\xff"
    rows = b"".join(b"\0" + b"".join(bar if x < (height - y) * 2 else blank
                                     for x in range(width)) for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


PLOT = base64.b64encode(png()).decode()
CELLS = [
    "%%python\nimport pandas as pd\ndf = pd.read_csv('sales.csv')\nprint(len(df), 'rows')",
    "%%python\nfrom IPython.display import Image, display\n"
    f"display(Image(data=__import__('base64').b64decode('{PLOT}')))\n"
    "print('plotted')",
    "What variables do I have?",
    "Print the total amount.",
    "/confirm",
    "/skills",
]


def turns() -> list[dict]:
    return [
        {"tool_calls": [{"name": "list_variables", "arguments": {}, "id": "v1"}]},
        {"content": "You have **df**, a DataFrame of 3 rows."},
        {"tool_calls": [{"name": "run_python",
                         "arguments": {"code": "print(int(df['amount'].sum()))"},
                         "id": "p1"}]},
        {"content": "The total is 60."},
    ]


def kernel_env(base: Path, url: str) -> dict[str, str]:
    return {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "k", "LILY_MAX_RETRIES": "0",
            "LILY_TIMEOUT": "10", "LILY_MODEL": "scripted-test-model",
            "JPY_SESSION_NAME": "sales.ipynb",
            # the recorded run_python waited behind its card (as kernel_support's kernels):
            # the re-run must meet the same card, not the sandbox
            "LILY_SANDBOX": "off"}


def test_export_of_a_session_runs_again_under_nbval(tmp_path, ipython_dir, capsys):
    with ScriptedServer(turns()) as server:
        world = make_world(tmp_path / "rec", ipython_dir, **kernel_env(tmp_path, server.url))
        (world.workspace / "sales.csv").write_text("item,amount\na,10\nb,20\nc,30\n")
        run_cells(world, CELLS)
        assert server.remaining() == 0
    out = tmp_path / "export" / "sales-export.ipynb"
    assert main(["logs", "export", "sales.ipynb", "--ipynb", str(out),
                 "--workspace", str(world.workspace)]) == 0
    capsys.readouterr()
    text = out.read_text()
    nb = nbformat.reads(text, as_version=4)
    nbformat.validate(nb)
    assert nbformat.writes(nb) + "\n" == text  # stable: open and save change nothing
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.source for c in code] == CELLS  # every cell, in order
    load, plot = code[0], code[1]
    assert [o.output_type for o in load.outputs] == ["stream"]
    assert load.outputs[0].text == "3 rows\n"
    kinds = [o.output_type for o in plot.outputs]
    assert kinds == ["display_data", "stream"], kinds
    image = plot.outputs[0].metadata["lily"]["images"][0]
    assert image["mime"] == "image/png" and image["bytes"] == len(png())
    for cell in code[2:]:
        assert "nbval-ignore-output" in cell.metadata["tags"]
    markdown = [o.data["text/markdown"] for c in code for o in c.outputs
                if "text/markdown" in o.get("data", {})]
    assert any(m.startswith("**tool call** `list_variables`\n\n```json\n{}\n```") for m in markdown)
    assert any("**tool call** `run_python`" in m for m in markdown)

    # it runs again on the Lily kernel, under nbval, against a model answering the same way
    shutil.copy(world.workspace / "sales.csv", out.parent / "sales.csv")
    home = tmp_path / "home"
    (home / "ipython").mkdir(parents=True)
    (tmp_path / "user_skills").mkdir()
    with ScriptedServer(turns()) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LILY_",
                                                                          "SKILLS_", "JPY_"))}
        env.update(kernel_env(tmp_path, server.url))
        env.update({"HOME": str(home), "IPYTHONDIR": str(home / "ipython"),
                    "SKILLS_USER_DIR": str(tmp_path / "user_skills"),
                    "PYDEVD_DISABLE_FILE_VALIDATION": "1"})
        done = subprocess.run([sys.executable, "-m", "pytest", "--nbval", str(out), "-q",
                               "-p", "no:cacheprovider", "-p", "no:randomly",
                               "--rootdir", str(out.parent)],
                              cwd=out.parent, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        assert server.remaining() == 0
    assert "6 passed" in done.stdout, done.stdout[-2000:]
