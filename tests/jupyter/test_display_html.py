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


def test_skills_rows_are_built_once_per_snapshot(env, monkeypatch):
    """/skills builds a snapshot's rows, text and HTML once: a second /skills (or
    /skills --all) of the same snapshot reuses them; a reloaded snapshot is built anew,
    and its table shows what changed."""
    from lily_kernel.commands import render
    from lily_kernel.commands.results import SkillTable
    from lily_kernel.jupyter.display import skills_bundle
    env.write_skill(env.ws_skills, "alpha", "summary: Alpha does A.")
    session = env.session(journal=False)
    built: list[object] = []
    real = render.skill_rows

    def counted(snap: object) -> list[tuple[str, ...]]:
        built.append(snap)
        return real(snap)  # type: ignore[arg-type]
    monkeypatch.setattr(render, "skill_rows", counted)
    first = skills_bundle(SkillTable(session.snapshot))
    again = skills_bundle(SkillTable(session.snapshot))
    assert again == first and "alpha" in first["text/html"]
    assert len(built) <= 2  # the table's rows, the text's: once, not per /skills
    skills_bundle(SkillTable(session.snapshot, show_all=True))
    count = len(built)
    for show_all in (True, False, True):
        skills_bundle(SkillTable(session.snapshot, show_all=show_all))
    assert len(built) == count  # nothing is built again for the same snapshot
    env.write_skill(env.ws_skills, "beta", "summary: Beta does B.")
    session.reload_skills()
    assert "beta" in skills_bundle(SkillTable(session.snapshot))["text/html"]
    assert len(built) > count
