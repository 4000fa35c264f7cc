"""The golden notebooks ship path-free and the quickstart without a red traceback (issue 34
§6): no saved output carries the checkout's absolute path, a temporary file or a home
folder (scripts/regenerate.py writes the checkout as /path/to/lily), and no quickstart
cell shows a traceback. nbval (``make test``) runs them green; this reads what is saved."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
#: Absolute paths that are an author's machine, not the notebook's content.
PRIVATE = ("/tmp/", "/var/folders/", "ipykernel_", "/home/", "/Users/", "/root/",
           "C:\\\\Users")
#: A checkout's folder in a path (an author's checkout anywhere: /work/main, ~/src/lily...).
CHECKOUT = re.compile(r"(/[^\s\"'`|<>()\\]+?)/(skills|examples|persona|notebooks)(/|\b)")
NEUTRAL = "/path/to/lily"


def outputs(path: Path) -> list[tuple[int, str]]:
    """(cell index, the JSON of its outputs) for each cell, and the widget states."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    found = [(i, json.dumps(c.get("outputs", []))) for i, c in enumerate(nb["cells"])]
    return [*found, (-1, json.dumps(nb.get("metadata", {}).get("widgets", {})))]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_saved_outputs_are_path_free(path):
    roots = {str(REPO), str(Path.home())} - {"/"}
    for cell, text in outputs(path):
        for private in (*roots, *PRIVATE):
            assert private not in text, (path.name, cell, private)
        for found in CHECKOUT.finditer(text):
            assert found.group(1) in (NEUTRAL, NEUTRAL + "/notebooks"), (path.name, cell,
                                                                        found.group(0))


def test_the_quickstart_shows_no_traceback():
    nb = json.loads((REPO / "notebooks" / "quickstart.ipynb").read_text(encoding="utf-8"))
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            assert out["output_type"] != "error", (i, out)
            if out["output_type"] == "stream":
                assert out["name"] != "stderr", (i, out)
                assert "Traceback" not in "".join(out["text"]), (i, out)


def test_regenerate_writes_the_checkout_as_a_neutral_path():
    import importlib.util
    spec = importlib.util.spec_from_file_location("regenerate", REPO / "scripts" / "regenerate.py")
    regenerate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(regenerate)
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("/help x")])
    nb.cells[0].outputs = [nbformat.v4.new_output(
        "display_data", data={"text/plain": f"source  bundled ({REPO}/skills/x)"})]
    clean = regenerate.path_free(nb)
    assert clean.cells[0].outputs[0]["data"]["text/plain"] == \
        "source  bundled (/path/to/lily/skills/x)"
    assert os.fspath(REPO) not in json.dumps(clean)
