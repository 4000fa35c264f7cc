"""The Jupyter /skills table (HTML and the widget's table) shows argument-hint too
(docs/skills-compat.md#claude-code-conventions)."""
from __future__ import annotations

from lily_kernel.commands.results import SkillTable
from lily_kernel.jupyter.display import skills_bundle, skills_html


def test_html_table_has_the_arguments_column(env):
    env.write_skill(env.ws_skills, "fix-issue", "description: Fix.\nargument-hint: '<number>'")
    snap = env.snapshot()
    html = skills_html(snap, show_all=False)
    assert "<th style='text-align:left'>arguments</th>" in html
    assert "<td style='text-align:left'>&lt;number&gt;</td>" in html
    assert html in skills_bundle(SkillTable(snap))["text/html"]
