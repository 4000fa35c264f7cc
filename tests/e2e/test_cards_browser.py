"""Confirmation cards as a person sees them, in JupyterLab and in Notebook 7.

The Confirm button's outcome renders as ``/confirm`` renders it (a DataFrame as a
table, the answer as Markdown with its footer, no literal fences or tags); a saved
notebook shows the card, what ran and the answer after a kernel restart and a page
reload (not "model not found"); a card decided with ``/confirm`` has inactive
buttons (docs/jupyter-display.md#confirmation-cards).
"""
from __future__ import annotations

import pytest
from lab_support import Notebook, code_notebook
from playwright.sync_api import expect
from test_lab_browser import LONG, run_setup, setup_cell

pytestmark = pytest.mark.usefixtures("browser_ready")

CODE = "import pandas as pd\npd.DataFrame({'city': ['Oslo', 'Rome'], 'temp_c': [3, 18]})"


def run_card(front, page, turns, server, name: str, *extra: str) -> Notebook:
    """A notebook whose cell 1 asks for a run_python call; its card is shown."""
    code_notebook(front.root / name, setup_cell(server), "Show me the temperatures.", *extra)
    turns.append({"tool_calls": [{"name": "run_python", "arguments": {"code": CODE},
                                  "id": "df-call"}]})
    nb = Notebook(page, front, name)
    run_setup(nb)
    nb.run(1)
    expect(nb.output(1).get_by_role("button", name="Run once")).to_be_visible(timeout=LONG)
    return nb


def test_every_card_button_shows_its_whole_label(front, page, model, turns):
    server, _ = model
    code_notebook(front.root / "card-labels.ipynb", setup_cell(server), "Write a note.")
    turns.append({"tool_calls": [{"name": "write", "arguments": {
        "path": "note.txt", "content": "hello\n"}, "id": "w-call"}]})
    nb = Notebook(page, front, "card-labels.ipynb")
    run_setup(nb)
    nb.run(1)
    always = nb.output(1).get_by_role("button", name="Always this session")
    expect(always).to_be_visible(timeout=LONG)
    for button in nb.output(1).locator(".widget-button").all():  # none cut to "Always this se…"
        assert button.evaluate("b => b.scrollWidth <= b.clientWidth"), button.inner_text()


def test_confirm_button_shows_a_table_and_survives_a_restart(front, page, model, turns):
    server, _ = model
    nb = run_card(front, page, turns, server, "card-click.ipynb")
    out = nb.output(1)
    expect(out.locator(".lily-card")).to_contain_text("Approve run_python")
    turns.append({"content": "The **warmest** city is Rome."})
    out.get_by_role("button", name="Run once").click()

    table = out.locator(".lily-card table.dataframe")
    expect(table).to_be_visible(timeout=LONG)
    expect(table).to_contain_text("Rome")
    expect(out.locator(".lily-card strong", has_text="warmest")).to_be_visible()
    expect(out.locator(".lily-card sub")).to_contain_text("model: scripted-e2e")
    text = out.inner_text()
    assert "```" not in text and "<sub>" not in text and "**" not in text, text
    expect(out.get_by_role("button", name="Run once")).to_be_disabled()

    nb.save()
    nb.restart()
    page.reload()
    nb.wait_idle()
    out = nb.output(1)
    card = out.locator(".lily-card")
    expect(card).to_contain_text("Approve run_python")  # the card,
    expect(card.locator("table.dataframe")).to_contain_text("Rome")  # what ran,
    expect(card).to_contain_text("The warmest city is Rome.")  # and the answer
    expect(page.get_by_text("model not found")).to_be_hidden()


def test_buttons_are_inactive_once_confirm_decides_the_card(front, page, model, turns):
    server, _ = model
    nb = run_card(front, page, turns, server, "card-command.ipynb", "/confirm")
    turns.append({"content": "Done by command."})
    nb.run(2)
    expect(nb.output(2)).to_contain_text("Done by command.", timeout=LONG)
    out = nb.output(1)
    expect(out.get_by_role("button", name="Run once")).to_be_disabled()
    expect(out.get_by_role("button", name="Deny")).to_be_disabled()
    expect(out).to_contain_text("/confirm")
