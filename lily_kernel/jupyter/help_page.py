"""The page behind the Help menu's "Lily help" entry (docs/front-ends.md#help-menu).

Written into the kernelspec folder at install time from the built-in command table, so it
never lists a command the kernel does not have. A static page: no script.
"""
from __future__ import annotations

import html

from lily_kernel.commands.table import BUILTINS

PAGE_NAME = "help.html"

_HEAD = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Lily: help</title>
  <style>
    body { font-family: system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.5; }
    table { border-collapse: collapse; width: 100%; margin: 1rem 0; }
    td, th { border-bottom: 1px solid #ddd; padding: .35rem .6rem; text-align: left; vertical-align: top; }
    code { background: #f3f3f3; padding: 0 .2rem; border-radius: 3px; }
  </style>
</head>
<body>
  <!-- Written by the kernelspec install from lily_kernel/commands/table.py. No script. -->
  <h1>Lily</h1>
  <p>A local, skill-driven AI agent inside Jupyter. A notebook is a session.</p>
  <h2>What a cell does</h2>
  <table>
    <tr><th>a cell that starts with</th><th>goes to</th></tr>
    <tr><td><code>/</code></td><td>the command router: code answers, never the model</td></tr>
    <tr><td><code>%</code> or <code>!</code></td><td>IPython, as usual (magics, shell)</td></tr>
    <tr><td><code>%%python</code></td><td>Python, in the notebook's namespace</td></tr>
    <tr><td>anything else</td><td>the agent (set <code>OPENAI_API_KEY</code> or <code>OPENAI_BASE_URL</code> before starting the kernel)</td></tr>
  </table>
  <h2>Commands</h2>
  <table>
    <tr><th>command</th><th>what it does</th></tr>
"""

_TAIL = """      <tr><td><code>/&lt;alias&gt; [input]</code></td><td>A skill's alias: the same as <code>/skill &lt;name&gt; [input]</code>.</td></tr>
  </table>
  <p>In a notebook, <code>/help</code> lists these with the skill aliases of your session, and
  <code>/help &lt;skill&gt;</code> shows one skill. In a terminal, <code>lily --help</code>.</p>
  <h2>Skills</h2>
  <p>A skill is a folder with a <code>SKILL.md</code>. Lily reads the workspace's
  <code>skills/</code>, your <code>~/.lily/skills</code> and the skills it ships with, in that
  order of precedence, once per session: run <code>/reload_skills</code> after an edit and
  <code>/skills --all</code> to see every excluded skill and why.</p>
  <h2>More</h2>
  <p>The project's <code>README.md</code> and its <code>docs/</code> folder hold the full manual:
  <code>docs/commands.md</code>, <code>docs/skill-format.md</code>, <code>docs/agent.md</code>,
  <code>docs/notebook-tools.md</code> and <code>docs/trust-boundary.md</code>.</p>
</body>
</html>
"""


def page() -> str:
    """The help page: cell routing, every built-in command, where the manual is."""
    rows = "".join(f"      <tr><td><code>{html.escape(c.usage)}</code></td>"
                   f"<td>{html.escape(c.summary)}</td></tr>\n" for c in BUILTINS)
    return _HEAD + rows + _TAIL
