"""Re-execute the golden notebooks in place, so their outputs become the new reference.

    .venv/bin/python scripts/regenerate.py [NOTEBOOK ...]

Run it after a deliberate change to what a command prints, then review the
diff: nbval (`make test`) compares every later run against these outputs.
Cells tagged ``raises-exception`` are expected to fail.
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent.parent / "notebooks"


def regenerate(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=120, allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in nb.cells:
        cell.get("metadata", {}).pop("execution", None)
    nbformat.write(nb, path)
    print(f"regenerated {path.relative_to(HERE.parent)}")


if __name__ == "__main__":
    targets = [Path(p).resolve() for p in sys.argv[1:]] or sorted(HERE.glob("*.ipynb"))
    for target in targets:
        regenerate(target)
