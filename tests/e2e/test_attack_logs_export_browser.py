"""ATTACK in the browser: the journal's exports, rendered as people read them, run nothing
(docs/logs.md#export). A hostile journal (every payload in every field) is exported with
``lily logs export --md`` and ``--ipynb``; the notebook is rendered by ``nbconvert --to
html`` and the transcript by a Markdown viewer that renders raw HTML (markdown-it-py, html
on), each loaded in Chromium: no payload runs, no dangerous element or link is in the
page, and the payloads' text is there to read."""
from __future__ import annotations

import subprocess
import sys

import pytest
from markdown_it import MarkdownIt

from lily_kernel.cli import main
from tests.commands.logs_hostile import hostile_journal

pytestmark = pytest.mark.usefixtures("browser_ready")

DANGER_JS = """() => {
  const bad = [];
  for (const el of document.querySelectorAll('body *')) {
    const tag = el.tagName.toLowerCase();
    if (['iframe','object','embed','base','form','frame'].includes(tag)) bad.push(tag);
    if (tag === 'img' && el.getAttribute('src') === 'x') bad.push('img src=x');
    for (const a of el.attributes) {
      const v = (a.value || '').replace(/[\\s\\x00-\\x1f]/g, '').toLowerCase();
      if (a.name.startsWith('on')) bad.push(tag + ' ' + a.name);
      if (['href','src','action','formaction','data'].includes(a.name)
          && /^(javascript|vbscript):/.test(v)) bad.push(tag + ' ' + a.name + '=' + v);
    }
  }
  return bad;
}"""


def check(browser, html: str) -> None:
    page = browser.new_page()
    try:
        page.route("**/*", lambda route: route.abort())  # no network: the page alone
        page.set_content(html, wait_until="load")
        page.wait_for_timeout(500)
        assert page.evaluate("() => window.__pwned === 1 || document.title === 'pwned'") is False
        assert page.evaluate(DANGER_JS) == []
        assert "onerror" in page.inner_text("body")  # shown as text
    finally:
        page.close()


def test_exports_render_inert_in_chromium(browser, tmp_path, capsys):
    ws = tmp_path / "ws"
    sid = hostile_journal(ws)
    md_path, nb_path = tmp_path / "t.md", tmp_path / "t.ipynb"
    assert main(["logs", "export", sid[:8], "--md", str(md_path), "--ipynb", str(nb_path),
                 "--workspace", str(ws)]) == 0
    capsys.readouterr()
    html = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", "--stdout",
                           str(nb_path)], capture_output=True, text=True, timeout=300,
                          check=True).stdout
    check(browser, html)
    viewer = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    check(browser, "<!doctype html><html><body>" + viewer.render(md_path.read_text())
          + "</body></html>")
