"""``make demo``: run a notebook headless on the Lily kernel and print a transcript.

    python scripts/demo.py [NOTEBOOK]   (default: notebooks/quickstart.ipynb)

The notebook is executed fresh with nbclient, in a temporary copy of its folder (nothing
is written back, no journal lands in the checkout); each
cell's source and its text outputs are printed, so a newcomer can read what
Lily does without opening Jupyter. Cells tagged ``raises-exception`` are
expected to fail; any other failure makes the demo exit 1.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def transcript(nb) -> tuple[str, int]:
    """The readable text of an executed notebook and the number of unexpected errors."""
    out: list[str] = []
    unexpected = 0
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            out.append(textwrap.indent(cell.source, "  # ") + "\n")
            continue
        n = cell.get("execution_count") or " "
        out.append(f"In [{n}]: " + cell.source.replace("\n", "\n        "))
        expected = "raises-exception" in cell.get("metadata", {}).get("tags", [])
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "stream":
                out.append(textwrap.indent(output["text"].rstrip(), "    "))
            elif kind in ("display_data", "execute_result"):
                data = output.get("data", {})
                text = data.get("text/markdown") or data.get("text/plain", "")
                out.append(textwrap.indent(text.rstrip(), "    "))
            elif kind == "error":
                out.append(textwrap.indent("\n".join(output.get("traceback", [])), "    ")
                           + ("" if expected else "   <-- unexpected error"))
                unexpected += not expected
        out.append("")
    return "\n".join(out), unexpected


def main(argv: list[str]) -> int:
    import nbformat
    from nbclient import NotebookClient

    path = Path(argv[0]) if argv else ROOT / "notebooks" / "quickstart.ipynb"
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    kernel = nb.metadata.get("kernelspec", {}).get("name", "lily")
    print(f"Lily demo: executing {path.name} headless on the '{kernel}' kernel "
          "(no API key needed for commands).\n")
    with tempfile.TemporaryDirectory(prefix="lily-demo-") as sockets:
        # the notebook's folder, copied: the kernel's journal (.lily/) and whatever the cells
        # write land there, never in the checkout (git status stays clean)
        folder = Path(sockets) / path.parent.name
        shutil.copytree(path.parent, folder,
                        ignore=shutil.ignore_patterns(".lily", ".ipynb_checkpoints"))
        km = local_kernel(kernel, sockets)
        try:
            NotebookClient(nb, km=km, timeout=120, allow_errors=True,
                           resources={"metadata": {"path": str(folder)}}).execute()
        finally:  # nbclient shuts down only the kernels it made itself
            if km.has_kernel:
                km.shutdown_kernel()
    text, unexpected = transcript(nb)
    print(text)
    if unexpected:
        print(f"{unexpected} cell(s) failed unexpectedly.", file=sys.stderr)
        return 1
    print("Demo finished: every cell behaved as expected.\n")
    print(NEXT)
    return 0


NEXT = """Next:
  make lab            open a copy of this notebook (in lab/) in JupyterLab on the
                      Lily kernel (installs JupyterLab into .venv the first time)
  .venv/bin/lily      the same commands in a terminal: .venv/bin/lily run /skills
  make test           the tests, including the real-browser suite when Chromium is installed"""


def local_kernel(name: str, folder: str):
    """A kernel manager whose kernel talks over Unix sockets in ``folder``.

    The demo's kernel is a child of this process: IPC transport is the right one,
    and it spares the transcript ipykernel's warning about unencrypted TCP.
    """
    from jupyter_client.manager import KernelManager
    return KernelManager(kernel_name=name, transport="ipc", ip=os.path.join(folder, "kernel"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
