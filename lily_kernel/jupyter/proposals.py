"""Proposed cells placed in the notebook by the front end, after a click as after a run.

A ``set_next_input`` payload reaches a front end only in an execute reply: nothing carries
it after a card's button click (a comm message), and every Run All inserts the same
proposal again. :class:`CellPlacer` is a small anywidget (no JupyterLab extension of
Lily's own): its front end reaches the notebook through the widget manager, which in
JupyterLab and Notebook 7 holds the document (``widget_manager.context.model``), finds the
cell whose output shows ``anchor`` (the widget view displayed in that cell) and inserts
each proposal as a code cell below it, unless the same code already sits in one of the
cells right below (so Run All is idempotent). It reports where each went (``placed``:
``"inserted N"`` or ``"present N"``, N the cell's 1-based position), and the face says so
in the card or the cell (docs/notebook-tools.md#acting). Where no notebook is reachable
(VS Code, classic Notebook) the widget shows the code to copy and reports ``"shown"``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
ROOM = 6  # how many cells below the anchor are looked at for the same code

_ESM = """
const MIME = "application/vnd.jupyter.widget-view+json";
const ROOM = __ROOM__;
const norm = (s) => String(s || "").replace(/\\s+$/, "");

function anchorCell(cells, anchor) {
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    const outputs = cell.outputs;
    if (!outputs) continue;
    for (let j = 0; j < outputs.length; j++) {
      const data = outputs.get(j).data || {};
      const view = data[MIME];
      if (view && view.model_id === anchor) return i;
    }
  }
  return -1;
}

function place(model, note) {
  const proposals = model.get("proposals") || [];
  const placed = [...(model.get("placed") || [])];
  if (placed.length >= proposals.length) return;
  const manager = model.widget_manager;
  const doc = manager && manager.context && manager.context.model;
  const shared = doc && doc.sharedModel;
  const at = doc && doc.cells ? anchorCell(doc.cells, model.get("anchor")) : -1;
  if (!shared || at < 0) {
    note.textContent = "Proposed cell (copy it into a cell):";
    for (const code of proposals.slice(placed.length)) {
      const pre = document.createElement("pre");
      pre.textContent = code;
      note.appendChild(pre);
      placed.push("shown");
    }
  } else {
    for (let k = placed.length; k < proposals.length; k++) {
      const code = norm(proposals[k]);
      let found = -1;
      for (let i = at + 1; i < Math.min(doc.cells.length, at + 1 + ROOM + k); i++) {
        if (norm(doc.cells.get(i).sharedModel.getSource()) === code) { found = i; break; }
      }
      if (found >= 0) {
        placed.push("present " + (found + 1));
      } else {
        const index = Math.min(at + 1 + k, doc.cells.length);
        shared.insertCell(index, { cell_type: "code", source: code, metadata: {} });
        placed.push("inserted " + (index + 1));
      }
    }
  }
  model.set("placed", placed);
  model.save_changes();
}

function render({ model, el }) {
  const note = document.createElement("div");
  note.className = "lily-placer";
  el.appendChild(note);
  const go = () => { try { place(model, note); } catch (e) { note.textContent = String(e); } };
  model.on("change:proposals", go);
  go();
}
export default { render };
""".replace("__ROOM__", str(ROOM))


def available() -> bool:
    """Whether the placer can be shown (anywidget is installed)."""
    try:
        import anywidget  # noqa: F401
    except ImportError:  # pragma: no cover - a dependency; kept optional at import
        return False
    return True


def placer(anchor: str, proposals: Sequence[str] = (),
           on_placed: Callable[[list[str]], None] | None = None) -> Any:
    """A :class:`CellPlacer` widget; ``anchor`` is the model id of the widget view displayed
    in the cell the proposals go below ("" for the placer itself, displayed on its own)."""
    widget = _placer_class()()
    widget.anchor = anchor or widget.model_id
    widget.proposals = list(proposals)
    if on_placed is not None:
        widget.observe(lambda change: on_placed(list(change["new"])), names="placed")
    return widget


_CLASS: list[Any] = []


def _placer_class() -> Any:
    if not _CLASS:
        import anywidget
        import traitlets

        class CellPlacer(anywidget.AnyWidget):
            _esm = _ESM
            anchor = traitlets.Unicode("").tag(sync=True)
            proposals = traitlets.List(traitlets.Unicode()).tag(sync=True)
            placed = traitlets.List(traitlets.Unicode()).tag(sync=True)

        _CLASS.append(CellPlacer)
    return _CLASS[0]


def where(placed: Sequence[str]) -> str:
    """What the placer reported, as one sentence for the card or the cell."""
    parts = []
    for note in placed:
        kind, _, number = note.partition(" ")
        if kind == "inserted":
            parts.append(f"inserted below as cell {number}")
        elif kind == "present":
            parts.append(f"already below as cell {number}, not inserted again")
        else:
            parts.append("shown above to copy (this front end cannot insert cells)")
    if not parts:
        return ""
    noun = "The proposed cell was" if len(parts) == 1 else "The proposed cells were"
    return f"{noun} {'; '.join(parts)}."
