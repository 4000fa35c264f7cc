"""Re-execute the golden notebooks in place, so their outputs become the new reference.

    .venv/bin/python scripts/regenerate.py [NOTEBOOK ...]

Run it after a deliberate change to what a command prints, then review the
diff: nbval (`make test`) compares every later run against these outputs.
Cells tagged ``raises-exception`` are expected to fail.

The saved notebooks are path-free: the checkout's absolute path, wherever it is, becomes
``/path/to/lily`` (notebooks/sanitize.cfg reads both as ``<root>``), so no author's
folders ship in the outputs (tests/test_golden_paths.py).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent.parent / "notebooks"
#: What the checkout's path becomes in the saved outputs.
NEUTRAL_ROOT = "/path/to/lily"


def regenerate(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=120, allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in nb.cells:
        cell.get("metadata", {}).pop("execution", None)
    nb = path_free(nb)
    nbformat.write(nb, path)
    print(f"regenerated {path.relative_to(HERE.parent)}")


def path_free(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` with the checkout's absolute path in outputs and widget states made neutral."""
    root = str(HERE.parent)
    text = json.dumps(nb)
    for form in {root, json.dumps(root)[1:-1]}:  # as written, and as JSON escapes it
        text = text.replace(form, NEUTRAL_ROOT)
    return nbformat.from_dict(json.loads(text))


if __name__ == "__main__":
    targets = [Path(p).resolve() for p in sys.argv[1:]] or sorted(HERE.glob("*.ipynb"))
    for target in targets:
        regenerate(target)
