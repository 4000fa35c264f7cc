"""What a person sees of Lily in JupyterLab (headless Chromium, driven by Playwright).

Each test opens a notebook of its own in the session's JupyterLab (so each has
its own Lily kernel) and checks the page: the /skills table and its filter, a
one-line error, the table after a kernel restart and a page reload, the typed
card's Confirm button, the waiting line, completion and inspection, interrupt,
and the quickstart run from top to bottom. Every wait is on what the page
shows, with generous timeouts.
"""
from __future__ import annotations

import re

import pytest
from lab_support import Notebook, code_notebook
from playwright.sync_api import expect

pytestmark = pytest.mark.usefixtures("browser_ready")
LONG = 90_000  # ms, for whole-notebook runs on a loaded machine
MODEL = "scripted-e2e"


def setup_cell(server, examples: bool = False) -> str:
    """``examples``: the opt-in example skills too (read_receipts, send_message)."""
    return ("%%python\nimport lily\n"
            + ("import os\nos.environ['SKILLS_EXAMPLES'] = '1'\nlily.session().renew()\n"
               if examples else "")
            + f"lily.session().set_model(base_url={server.url!r}, model={MODEL!r}, "
            "max_retries='0', timeout='120')\nprint('model ready')")


def run_setup(nb: Notebook) -> None:
    nb.run(0)
    expect(nb.output(0)).to_contain_text("model ready")


def test_skills_table_and_its_filter(lab, page):
    code_notebook(lab.root / "skills.ipynb", "/skills")
    nb = Notebook(page, lab, "skills.ipynb")
    nb.run(0)
    out = nb.output(0)
    table = out.locator(".lily-skills table")
    expect(table).to_be_visible()
    expect(table).to_contain_text("plan_compiler")
    expect(table).to_contain_text("todo_scan")
    box = out.locator(".widget-text input")
    expect(box).to_be_visible()

    box.fill("todo")  # the filter shows the matching rows in place of the table
    filtered = out.locator(".widget-html table")
    expect(filtered).to_contain_text("todo_scan")
    expect(filtered).not_to_contain_text("plan_compiler")
    expect(table).to_be_hidden()

    box.fill("")  # cleared: the whole table again
    expect(table).to_be_visible()
    expect(filtered).to_have_count(0)


def test_a_failed_command_is_one_line(lab, page):
    code_notebook(lab.root / "error.ipynb", "/skils")
    nb = Notebook(page, lab, "error.ipynb")
    nb.run(0)
    err = nb.output(0).locator("[data-mime-type='application/vnd.jupyter.stderr']")
    expect(err).to_have_text("Error: unknown command /skils. Run /help for the list of commands.")
    assert "Traceback" not in nb.output(0).inner_text()


def test_saved_table_survives_restart_and_reload(lab, page):
    code_notebook(lab.root / "saved.ipynb", "/skills")
    nb = Notebook(page, lab, "saved.ipynb")
    nb.run(0)
    expect(nb.output(0).locator(".widget-text input")).to_be_visible()
    expect(nb.output(0).locator(".lily-skills table")).to_be_visible()  # a display of its own
    nb.wait_idle()  # saved with its whole output and its count
    nb.save()
    nb.restart()
    page.reload()
    nb.wait_idle()
    table = nb.output(0).locator(".lily-skills table")
    expect(table).to_be_visible()
    expect(table).to_contain_text("research_assistant")
    # the dead filter's "Error displaying widget: model not found" is hidden by the table
    expect(page.get_by_text("model not found")).to_be_hidden()


def test_confirm_button_renders_its_result_as_a_table(lab, page, model, turns):
    server, _ = model
    code_notebook(lab.root / "typed.ipynb", setup_cell(server, examples=True),
                  "Please turn off my read receipts.")
    turns.extend([
        {"tool_calls": [{"name": "load_skill", "arguments": {"name": "read_receipts"}}]},
        {"tool_calls": [{"name": "propose_action",
                         "arguments": {"parameters": {"read_receipts": False}}}]},
        {"content": "I will turn read receipts **off** once you confirm."},
    ])
    nb = Notebook(page, lab, "typed.ipynb")
    run_setup(nb)
    nb.run(1)
    out = nb.output(1)
    confirm = out.get_by_role("button", name="Confirm")
    expect(confirm).to_be_visible(timeout=LONG)
    card_tables = out.locator(".lily-card table")
    expect(card_tables.first).to_contain_text("read_receipts")
    assert card_tables.first.evaluate("t => getComputedStyle(t).borderCollapse") == "collapse"

    confirm.click()
    done = out.locator("table", has_text="was")
    expect(done).to_be_visible()
    expect(done.locator("th")).to_have_text(["setting", "was", "now"])
    expect(done).to_contain_text("messaging.rcs.read_receipts")
    assert "| setting |" not in out.inner_text()
    expect(confirm).to_be_disabled()


def test_waiting_line_while_the_model_is_silent(lab, page, model, turns):
    server, _ = model
    code_notebook(lab.root / "waiting.ipynb", setup_cell(server), "Answer slowly, please.")
    turns.append({"delay": 5, "content": "SLOW-ANSWER at last"})
    nb = Notebook(page, lab, "waiting.ipynb")
    run_setup(nb)
    nb.run(1)
    out = nb.output(1)
    line = re.compile(rf"waiting for {MODEL}… (\d+) s")
    expect(out).to_contain_text(line, timeout=LONG)
    first = line.search(out.inner_text()).group(1)
    # updated in place: a later count replaces it, one line at a time
    expect(out).to_contain_text(re.compile(rf"waiting for {MODEL}… (?!{first} s)\d+ s"))
    assert out.inner_text().count("waiting for") == 1
    expect(out).to_contain_text("SLOW-ANSWER at last", timeout=LONG)
    expect(out).not_to_contain_text("waiting for")
    assert len(re.findall("SLOW-ANSWER", out.inner_text())) == 1


def test_tab_completes_a_command_and_shift_tab_inspects_an_alias(lab, page):
    code_notebook(lab.root / "complete.ipynb", "")
    nb = Notebook(page, lab, "complete.ipynb")
    editor = nb.cell(0).locator(".cm-content")
    nb.complete(0, "/he", "/help")
    expect(editor).to_have_text("/help")

    nb.type_into(0, "/plan")
    page.keyboard.press("Shift+Tab")
    tooltip = page.locator(".jp-Tooltip")
    expect(tooltip).to_be_visible()
    expect(tooltip).to_contain_text("plan_compiler")


def test_interrupt_stops_a_hung_model_call(lab, page, model, turns):
    server, _ = model
    code_notebook(lab.root / "interrupt.ipynb", setup_cell(server), "This will hang.")
    turns.append({"delay": 300, "content": "never shown"})
    nb = Notebook(page, lab, "interrupt.ipynb")
    run_setup(nb)
    nb.run(1)
    out = nb.output(1)
    expect(out).to_contain_text(f"waiting for {MODEL}…", timeout=LONG)
    nb.command("notebook:interrupt-kernel")  # the toolbar's ■ button
    err = out.locator("[data-mime-type='application/vnd.jupyter.stderr']")
    expect(err).to_contain_text("Error: interrupted")
    expect(out).not_to_contain_text("waiting for")
    nb.wait_idle()


def test_quickstart_run_all(lab, page):
    nb = Notebook(page, lab, "quickstart.ipynb")
    nb.command("runmenu:run-all")
    # the quickstart's last cell is /fix; the cell it proposes comes below it, not run,
    # and it is Python as the Lily kernel needs it (issue 23 point 3)
    fix = page.locator(".jp-Notebook .jp-CodeCell", has_text="/fix").last
    expect(fix.locator(".jp-InputPrompt")).to_have_text(re.compile(r"\[\d+\]:"), timeout=LONG)
    expect(fix.locator(".jp-OutputArea")).to_contain_text("[scripted model]")
    proposed = page.locator(".jp-Notebook .jp-CodeCell").last
    expect(proposed.locator(".jp-InputArea-editor")).to_contain_text("%%python")
    errors = page.locator(".jp-OutputArea [data-mime-type='application/vnd.jupyter.stderr']")
    # no failing cell (Run All reached /fix), and no traceback: the confirmed run_python
    # says in one line what its code raised, the error /fix then explains
    expect(errors).to_have_count(0)
    raised = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stdout']",
                          has_text="The code raised NameError: name 'days' is not defined")
    expect(raised).to_have_count(1)
    expect(page.locator(".lily-skills table")).to_be_visible()


def test_the_launcher_shows_lilys_logo(lab, page):
    page.goto(f"{lab.url}/lab?token={lab.token}&reset")
    card = page.locator(".jp-LauncherCard[data-category='Notebook']", has_text="Lily")
    expect(card).to_be_visible(timeout=LONG)
    logo = card.locator("img")
    expect(logo).to_have_attribute("src", re.compile(r"/kernelspecs/lily/logo-"))
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=logo.element_handle())


def test_the_help_menu_opens_lilys_help_page(lab, page):
    """Help > Lily help opens the page the kernelspec ships (not jupyter.org)."""
    Notebook(page, lab, "quickstart.ipynb")
    page.locator(".lm-MenuBar-itemLabel", has_text="Help").click()
    entry = page.locator(".lm-Menu-itemLabel", has_text="Lily help")
    expect(entry).to_be_visible(timeout=LONG)
    entry.click()
    # JupyterLab opens a local help link in a tab of its own, as an iframe
    frame = page.locator("iframe[src$='/kernelspecs/lily/help.html']")
    expect(frame).to_be_visible(timeout=LONG)
    inner = page.frame_locator("iframe[src$='/kernelspecs/lily/help.html']")
    expect(inner.locator("h1")).to_have_text("Lily")
    expect(inner.locator("table").nth(1)).to_contain_text("/reload_skills")
