"""ATTACK: a hostile model, skill and configuration against a real Lily kernel's displays.

Every payload of the sanitizer's table goes in through each route a front end shows —
the answer, tool-call arguments on a card, an endpoint error, the model name in the
footer and waiting line, a skill's fields in /help and /skills — and every bundle the
kernel sends is checked as a trusted front end would render it: no raw HTML element
outside an allow-list, no event-handler attribute, no unsafe URL
(docs/trust-boundary.md#display). The browser runs the same payloads in
tests/e2e/test_attack_render_browser.py.
"""
from __future__ import annotations

import json
from html.parser import HTMLParser
from typing import Any

import pytest
from kernel_support import Kernel, call, scripted_kernel_world, write_skill

from lily_kernel.commands import sanitize
from tests.commands.sanitize_payloads import PAYLOADS
from tests.commands.test_sanitize import _harmless

ALL = "\n\n".join(f"{name}: {payload}" for name, payload in PAYLOADS)
ONE_LINE = " ".join(p.replace("\n", " ") for _, p in PAYLOADS)
_HTML_OK = {"p", "b", "code", "table", "thead", "tbody", "tr", "th", "td", "div", "pre",
            "span", "style", "strong", "em", "ul", "li", "ol", "br", "a", "h1", "h2", "h3"}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.bad: list[Any] = []
        self.styles = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _HTML_OK:
            self.bad.append(tag)
        if tag == "style":
            self.styles += 1
        for name, value in attrs:
            if name.startswith("on") or (name in ("href", "src")
                                         and not sanitize.safe_url(value or "")):
                self.bad.append((tag, name, value))


def check_bundles(run: Any) -> int:
    """Every text/markdown and text/html the run sent is harmless; returns how many."""
    seen = 0
    for msg in run.messages:
        data = msg["content"].get("data") or {}
        if "text/markdown" in data:
            _harmless(data["text/markdown"], frozenset({"sub"}))  # the footer's own tag
            seen += 1
        if "text/html" in data:
            tags = _Tags()
            tags.feed(data["text/html"])
            assert not tags.bad, (tags.bad, data["text/html"][:2000])
            seen += 1
        state = data.get("state") or {}
        if isinstance(state.get("value"), str) and "<" in state["value"]:
            tags = _Tags()  # an ipywidgets HTML model's value is set as innerHTML
            tags.feed(state["value"])
            assert not tags.bad, (tags.bad, state["value"][:2000])
            seen += 1
    return seen


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, ipython_dir, server):
    world = scripted_kernel_world(tmp_path_factory.mktemp("attack-render"), ipython_dir,
                                  server.url)
    meta = json.dumps(ONE_LINE)
    write_skill(world.ws_skills, "hostile-skill",
                f"name: hostile-skill\ndescription: {meta}\nlicense: {meta}\n"
                f"argument-hint: {meta}\nmetadata:\n  evil: {meta}",
                body=ALL)
    kernel = Kernel("lily", world)
    yield kernel
    kernel.shutdown()


def test_hostile_answer_is_inert_and_readable(kernel, turns):
    turns.append({"content": ALL, "chunks": 7})
    run = kernel.ok("say something")
    assert check_bundles(run) >= 2  # the live Markdown and the answer at least
    answer = [d["text/markdown"] for d in run.displays if "text/markdown" in d][-1]
    assert "click me" in answer and "script tag" in answer


def test_hostile_tool_arguments_on_a_card_are_inert(kernel, turns):
    turns.append(call("run_python", {"code": ALL}, "att1"))
    run = kernel.ok("run something")
    assert check_bundles(run) >= 1
    assert any("Approve run_python" in d.get("text/markdown", "") for d in run.displays)
    assert check_bundles(kernel.ok("/cancel")) >= 1


def test_hostile_endpoint_error_is_one_plain_line(kernel, turns):
    turns.append({"status": 500, "error_message": ONE_LINE})
    run = kernel.run("fail please")
    assert run.error_line().startswith("Error: ")
    check_bundles(run)


def test_hostile_skill_fields_in_help_and_skills(kernel):
    for cell in ("/help hostile-skill", "/help", "/skills", "/skills --all"):
        run = kernel.ok(cell)
        assert check_bundles(run) >= 1, cell
    shown = json.dumps(kernel.ok("/help hostile-skill").displays)
    assert "hostile-skill" in shown and "click me" in shown


def test_hostile_model_name_in_footer_and_model_table(kernel, turns):
    evil = "<img src=x onerror=alert(1)>[x](javascript:alert(1))"
    kernel.ok("%%python\nimport lily\nlily.session().set_model(model=" + repr(evil) + ")")
    try:
        turns.append({"content": "fine"})
        run = kernel.ok("hello")
        assert check_bundles(run) >= 1
        footer = [d["text/markdown"] for d in run.displays if "text/markdown" in d][-1]
        assert "onerror" in footer  # readable, as text
        assert check_bundles(kernel.ok("/model")) >= 1
    finally:
        kernel.ok("%%python\nimport lily\nlily.session().set_model(model='scripted-test-model')")
