"""The HTML the Jupyter face builds itself: action outcomes and the card's tables.

A widget holds HTML, not Markdown, so the card's Confirm button must show an
outcome the way ``/confirm`` does (a table, not ``| setting | was | now |``).
"""
from __future__ import annotations

import re

from lily_kernel.jupyter.display import markdown_html

CHANGED = ("**read_receipts** changed 1 setting:\n\n"
           "| setting | was | now |\n| --- | --- | --- |\n"
           "| `messaging.rcs.read_receipts` | — | `false` |")


def cells(html: str, tag: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c) for c in re.findall(rf"<{tag}[^>]*>(.*?)</{tag}>", html)]


def test_an_outcome_table_becomes_an_html_table():
    html = markdown_html(CHANGED)
    assert "|" not in html
    assert cells(html, "th") == ["setting", "was", "now"]
    assert cells(html, "td") == ["messaging.rcs.read_receipts", "—", "false"]
    assert "<code>false</code>" in html and "<strong>read_receipts</strong>" in html
    assert "border-collapse:collapse" in html  # styled: a widget gets no notebook table CSS


def test_outcome_text_is_escaped():
    html = markdown_html("Cancelled: **<script>x</script>** did nothing.")
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_an_escaped_pipe_stays_in_its_cell():
    html = markdown_html("| a | b |\n| --- | --- |\n| x \\| y | z |")
    assert cells(html, "td") == ["x | y", "z"]


def test_a_typed_card_renders_escaped_with_its_decide_line():
    """The widget HTML of a typed skill's card: hostile names escaped, the way to decide
    rendered from Markdown (code, not backticks)."""
    from lily_kernel.commands.results import ActionCard
    from lily_kernel.jupyter.display import card_html
    from lily_kernel.typed.actions import Action
    action = Action("abcdef123456", "rr<img src=x onerror=alert(1)>", "internal",
                    {"read_receipts": False}, {"messaging.rcs.read_receipts": False},
                    {"messaging.rcs.read_receipts": None})
    html = card_html(ActionCard(action, "purpose <script>alert(1)</script>"))
    assert "<img" not in html and "<script" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<code>/confirm abcdef12</code>" in html and "`" not in html
