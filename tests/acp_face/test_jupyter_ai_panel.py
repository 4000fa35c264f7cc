"""Lily behind jupyter-ai 3.2's chat panel in headless Chromium, as a user sees it: the code a
held run_python call would run (a hidden character shown), a chat reopened, the panel's mode
selector, model picker and context meter (docs/front-ends.md#what-works-where).

Skipped where Playwright or Debian's Chromium is missing; ``LILY_REQUIRE_BROWSER=1`` turns the
skip into a failure. Each step leaves a screenshot in the test's tmp_path (never committed).
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from acp_support import execute
from jai_support import JAI_BIN, TOKEN, Jupyter, install

from lily_kernel.testing import ScriptedServer

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not (JAI_BIN / "jupyter").exists(),
                                reason="jupyter-ai's own environment .venv-jai is not built "
                                       "here: `make jai-venv` builds it (make test does)")


@pytest.fixture(autouse=True)
def browser_ready() -> None:
    why = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        why = "Playwright is not installed (pip install -e '.[test]')"
    if why is None and not Path(CHROMIUM).exists():
        why = f"Chromium not found at {CHROMIUM}: apt-get install chromium"
    if why is None:
        return
    if os.environ.get("LILY_REQUIRE_BROWSER") == "1":
        pytest.fail(f"LILY_REQUIRE_BROWSER=1, but jupyter-ai's panel cannot be run: {why}")
    pytest.skip(why)


@contextlib.contextmanager
def panel(server: Jupyter, shots: Path) -> Iterator[Any]:
    """lily.chat open in JupyterLab with Lily picked; a screenshot of the end, pass or fail."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(90_000)
        try:
            page.goto(server.url(f"lab/tree/lily.chat?token={TOKEN}"))
            page.get_by_placeholder("Type a chat message").wait_for()
            page.locator(".jp-jai-personaControls-persona", has_text="Lily").wait_for()
            yield page
        finally:
            page.screenshot(path=str(shots / "end.png"))
            browser.close()


def send(page: Any, text: str) -> None:
    box = page.get_by_placeholder("Type a chat message")
    box.fill(text)
    box.press("Enter")


def control(page: Any, title: str) -> Any:
    """A control of the panel's toolbar (the drawn one, not its hidden measuring copy)."""
    return page.locator(f".jp-jai-personaControls-controls > button[title='{title}']")


def shows(page: Any, title: str, value: str) -> None:
    """Wait until the toolbar's control ``title`` shows ``value``."""
    page.wait_for_function(
        "([title, value]) => [...document.querySelectorAll("
        "`.jp-jai-personaControls-controls > button[title=${title}]`)]"
        ".some(b => b.innerText.trim() == value)", arg=[title, value])


def test_run_pythons_code_is_shown_in_the_panel_before_allow_and_deny_runs_nothing(tmp_path):
    install()
    code = "marker = 6 * 7 # \u202eok\nprint(marker)\n"
    script = [{"tool_calls": [{"id": "call_p", "name": "run_python",
                               "arguments": {"code": code}}]}]
    with ScriptedServer(script) as model:
        server = Jupyter(tmp_path, model)
        (server.root / "lily.chat").write_text("")
        try:
            session = server.post("api/sessions", {"path": "analysis.ipynb", "type": "notebook",
                                                   "name": "analysis.ipynb",
                                                   "kernel": {"name": "python3"}})
            kernel = session["kernel"]["id"]
            with panel(server, tmp_path) as page:
                send(page, "compute the marker")
                deny = page.get_by_role("button", name="Deny")
                deny.wait_for()
                # what the user reads before deciding: the exact code, the hidden
                # character shown as a code point, and the card's warning
                line = page.get_by_text("marker = 6 * 7 # ⟨U+202E⟩ok")
                assert line.is_visible()
                assert page.get_by_text("print(marker)").is_visible()
                assert page.get_by_text("invisible or direction-changing").first.is_visible()
                assert "\u202e" not in page.inner_text("body")
                assert page.get_by_role("button", name="Run once").is_visible()
                assert page.get_by_role("button", name="Always this session").count() == 0
                page.screenshot(path=str(tmp_path / "before-deny.png"))
                deny.click()
                page.get_by_text("did not run").first.wait_for()
                page.screenshot(path=str(tmp_path / "after-deny.png"))
            ran = execute(server.port, TOKEN, kernel, "", user_expressions={
                "ran": "'marker' in globals()"})
        finally:
            server.stop()
    assert ran["user_expressions"]["ran"]["data"]["text/plain"] == "False"
    assert len(model.chat_requests()) == 1  # Deny: the model was not asked again


def _saved(chat_file: Path, text: str) -> list[str]:
    """The bodies of the .chat file's messages holding ``text``, once the file has one."""
    for _ in range(60):  # jupyter-ai saves the chat shortly after a change
        if chat_file.exists() and text in chat_file.read_text():
            break
        time.sleep(0.5)
    messages = json.loads(chat_file.read_text())["messages"]
    return [str(m.get("body", "")) for m in messages if text in str(m.get("body", ""))]


def test_a_chat_closed_and_reopened_shows_the_earlier_answer_once(tmp_path):
    install()
    script = [{"content": "Noted: 42."},
              {"expect": {"contains": "which number"}, "content": "It was 42."}]
    with ScriptedServer(script) as model:
        first = Jupyter(tmp_path, model)
        chat_file = first.root / "lily.chat"
        chat_file.write_text("")
        try:
            (tmp_path / "first").mkdir()
            with panel(first, tmp_path / "first") as page:
                send(page, "remember the number 42")
                page.get_by_text("Noted: 42.").wait_for()
                page.locator(".lm-TabBar-tab", has_text="lily.chat") \
                    .locator(".lm-TabBar-tabCloseIcon").click()
                page.get_by_placeholder("Type a chat message").wait_for(state="detached")
                page.locator(".jp-DirListing-item", has_text="lily.chat").dblclick()
                page.get_by_text("Noted: 42.").wait_for()
                time.sleep(2)  # a late replay would land now
                assert page.get_by_text("Noted: 42.").count() == 1
                page.screenshot(path=str(tmp_path / "reopened.png"))
            _saved(chat_file, "acp_session_ids")
        finally:
            first.stop()
        second = Jupyter(tmp_path, model)  # a restart: jupyter-ai calls session/load
        try:
            with panel(second, tmp_path) as page:
                page.get_by_text("Noted: 42.").wait_for()
                send(page, "which number did I say?")
                page.get_by_text("It was 42.").wait_for()
                time.sleep(2)
                page.screenshot(path=str(tmp_path / "after-restart.png"))
                shown = page.get_by_text("Noted: 42.").count()
                note = page.get_by_text("this chat's conversation").count()
        finally:
            second.stop()
    assert shown == 1
    assert note == 1  # the resume note, naming the chat
    assert len(_saved(chat_file, "Noted: 42.")) == 1
    sent = model.chat_requests()[1]["messages"]
    assert [m["content"] for m in sent if m["role"] != "system"][:2] == [
        "remember the number 42", "Noted: 42."]


def test_the_panels_mode_selector_model_picker_and_context_meter_drive_lily(tmp_path):
    install()
    script = [{"content": "Hello there.", "usage": {"prompt_tokens": 1234, "completion_tokens": 56}},
              {"content": "Hello from the other model."}]
    with ScriptedServer(script, models=["other-model"]) as model:
        # an endpoint that serves two models: the user names one (else the first request's
        # error names both, docs/agent.md)
        server = Jupyter(tmp_path, model, env={"LILY_MODEL": "gpt-4o-mini"})
        (server.root / "lily.chat").write_text("")
        journal = server.root / ".lily"
        try:
            with panel(server, tmp_path) as page:
                # a mode typed in the chat moves the selector (current_mode_update)
                mode = control(page, "Mode")
                assert mode.inner_text().strip() == "Ask"
                send(page, "/mode plan")
                page.get_by_text("Permission mode is now").wait_for()
                shows(page, "Mode", "Plan")
                # the selector: Lily's four modes; a choice is sent with the next message
                mode.click()
                menu = page.get_by_role("menuitem")
                menu.first.wait_for()
                names = page.locator(".jp-jai-controlMenu-name").all_inner_texts()
                page.screenshot(path=str(tmp_path / "modes.png"))
                menu.filter(has=page.get_by_text("Edits", exact=True)).click()
                shows(page, "Mode", "Edits")
                send(page, "/mode")
                page.get_by_text("Permission mode: edits").wait_for()
                # typed after a choice in the selector: the panel keeps showing its choice
                # and would send it again with the next message; Lily says so
                send(page, "/mode ask")
                page.get_by_text("Permission mode is now ask").wait_for()
                page.get_by_text("control keeps the choice made there").wait_for()
                page.screenshot(path=str(tmp_path / "mode-typed.png"))
                after_typed = control(page, "Mode").inner_text().strip()
                control(page, "Mode").click()
                page.get_by_role("menuitem").filter(
                    has=page.get_by_text("Ask", exact=True)).click()
                send(page, "/mode")
                page.get_by_text("Permission mode: ask").wait_for()
                notes = page.get_by_text("control keeps the choice made there").count()
                # the context meter after a step: the step's tokens of the window
                send(page, "say hello")
                page.get_by_text("Hello there.").wait_for()
                chip = page.locator(".jp-jai-usage-chip")
                chip.wait_for()
                meter = chip.get_attribute("title")
                chip.click()
                page.locator(".jp-jai-usage-card").wait_for()
                card = page.locator(".jp-jai-usage-card").inner_text()
                page.screenshot(path=str(tmp_path / "usage.png"))
                page.keyboard.press("Escape")
                # the model picker: the endpoint's models; choosing one is /model NAME
                picker = control(page, "Model")
                assert picker.inner_text().strip() == "gpt-4o-mini"
                picker.click()
                models = page.get_by_role("menuitem")
                models.first.wait_for()
                listed = page.locator(".jp-jai-controlMenu-name").all_inner_texts()
                page.screenshot(path=str(tmp_path / "models.png"))
                models.filter(has=page.get_by_text("other-model", exact=True)).click()
                send(page, "say hello again")
                page.get_by_text("Hello from the other model.").wait_for()
                page.screenshot(path=str(tmp_path / "other-model.png"))
        finally:
            server.stop()
        requests = model.chat_requests()
    records = [json.loads(line) for f in sorted(journal.rglob("acp-*.jsonl"))
               for line in f.read_text().splitlines() if line.strip()]
    changes = [r for r in records if r.get("event") == "mode_changed"]
    assert len(changes) == 3, changes  # plan (typed), edits (the selector), ask (typed)
    assert names == ["Default (Plan)", "Plan", "Ask", "Edits", "Auto"], names  # its Default
    assert after_typed == "Edits"  # jupyter-ai shows the user's own choice
    assert notes == 1  # said once, after the typed command only
    assert meter == "Context: 1.29k of 128k tokens (1%)\nSession tokens: 1.29k", meter
    assert "1.29k of 128k (1%)" in card, card
    assert "session tokens\n1.29k\ninput\n1.23k\noutput\n56" in card.lower(), card
    assert listed == ["Default (gpt-4o-mini)", "gpt-4o-mini", "scripted-model", "other-model"], \
        listed  # jupyter-ai's Default, the configured model, the endpoint's two
    assert [r["model"] for r in requests] == ["gpt-4o-mini", "other-model"]
