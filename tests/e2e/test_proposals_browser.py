"""Proposed cells land as cells, in JupyterLab and in Notebook 7 (issue 34 §2).

``propose_cell`` after a card's **Run once** inserts a real cell below the card's cell, as
after a typed request, and the card says where it went; Run All twice leaves one copy of
each proposal (the placer skips a proposal already below: docs/notebook-tools.md#acting).
"""
from __future__ import annotations

import pytest
from lab_support import Notebook, code_notebook
from playwright.sync_api import expect
from test_cards_browser import run_card
from test_lab_browser import LONG, setup_cell

pytestmark = pytest.mark.usefixtures("browser_ready")

PROPOSAL = "print('from the proposal')"


def propose(turns, answer: str) -> None:
    turns += [{"tool_calls": [{"name": "propose_cell", "arguments": {"code": PROPOSAL},
                               "id": "p-call"}]},
              {"content": answer}]


def sources(page) -> list[str]:
    return page.evaluate("""() => {
      const w = window.jupyterapp.shell.currentWidget;
      const cells = w.content.model.cells;
      const out = [];
      for (let i = 0; i < cells.length; i++) out.push(cells.get(i).sharedModel.getSource());
      return out;
    }""")


def test_run_once_inserts_the_proposed_cell_below_the_card(front, page, model, turns):
    server, _ = model
    nb = run_card(front, page, turns, server, "propose-click.ipynb")
    propose(turns, "I proposed a cell below.")
    out = nb.output(1)
    out.get_by_role("button", name="Run once").click()
    card = out.locator(".lily-card")
    expect(card).to_contain_text("inserted below as cell 3", timeout=LONG)
    expect(nb.cell(2).locator(".jp-InputArea-editor")).to_contain_text(PROPOSAL)
    assert sources(page)[2] == f"%%python\n{PROPOSAL}", sources(page)
    expect(nb.prompt(2)).not_to_contain_text("1")  # placed, not run
    expect(card).to_contain_text("I proposed a cell below.")


def test_run_all_twice_does_not_duplicate_a_proposal(front, page, model, turns):
    server, _ = model
    name = "propose-run-all.ipynb"
    code_notebook(front.root / name, setup_cell(server), "Suggest a first look.")
    nb = Notebook(page, front, name)

    def run_all(answer: str, placed: str) -> None:
        """Run all, the model proposing the same cell and answering ``answer``; the card
        says where the cell is (``placed``) and one copy of it stands in the notebook."""
        propose(turns, answer)
        nb.command("notebook:run-all-cells")
        expect(nb.output(1)).to_contain_text(placed, timeout=LONG)
        expect(nb.output(1)).to_contain_text(answer, timeout=LONG)
        nb.wait_idle()
        assert sources(page).count(f"%%python\n{PROPOSAL}") == 1, sources(page)

    run_all("First answer.", "inserted below as cell 3")
    run_all("Second answer.", "already below as cell 3, not inserted again")
    assert len(sources(page)) == 3, sources(page)
