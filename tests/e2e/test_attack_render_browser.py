"""ATTACK in the browser: hostile text through every display path runs nothing in JupyterLab.

The sanitizer's payload table (each would set ``window.__pwned`` or the page title if it
ran) goes through a real Lily kernel in JupyterLab: the answer, the footer (a hostile
model name), ``/help`` and ``/skills`` (a hostile workspace skill), a card (hostile
``run_python`` code), and the saved notebook reopened in a new page. Nothing runs, no
dangerous element or link reaches the page, and the text stays readable
(docs/trust-boundary.md#display). Also issue 23's display points: each /skills output
filters alone (23.4), %%python cells highlight as Python (23.11), streaming text renders
as Markdown as it arrives (23.12).
"""
from __future__ import annotations

import json
import re

import pytest
from lab_support import Notebook, code_notebook
from playwright.sync_api import expect

from tests.commands.sanitize_payloads import PAYLOADS

pytestmark = pytest.mark.usefixtures("browser_ready")
LONG = 90_000
ALL = "\n\n".join(f"{name}: {payload}" for name, payload in PAYLOADS)
ONE_LINE = " ".join(p.replace("\n", " ") for _, p in PAYLOADS)
EVIL_MODEL = "scripted-e2e<img src=x onerror=\"window.__pwned=1\">"

# What must never reach an output: a script, an event handler, an active element or an
# unsafe link (checked in the DOM JupyterLab built).
DANGER_JS = """(root) => {
  const bad = [];
  for (const el of root.querySelectorAll('.jp-OutputArea-output *')) {
    const tag = el.tagName.toLowerCase();
    if (['script','iframe','object','embed','svg','base','meta','form','frame'].includes(tag))
      bad.push(tag + ' in ' + (el.parentElement && el.parentElement.outerHTML.slice(0, 200)));
    for (const a of el.attributes) {
      const v = (a.value || '').replace(/[\\s\\x00-\\x1f]/g, '').toLowerCase();
      if (a.name.startsWith('on')) bad.push(tag + ' ' + a.name);
      if (['href','src','action','formaction','data','xlink:href'].includes(a.name)
          && /^(javascript|vbscript|data):/.test(v)) bad.push(tag + ' ' + a.name + '=' + v);
    }
  }
  return bad;
}"""


def pwned(page) -> bool:
    return page.evaluate("() => window.__pwned === 1 || document.title === 'pwned'")


def assert_inert(page, notebook_panel) -> None:
    """Nothing ran and no dangerous element or link is in the notebook's outputs."""
    assert not pwned(page)
    bad = notebook_panel.evaluate(DANGER_JS)
    assert bad == [], bad


def hostile_workspace(lab) -> str:
    """A folder whose workspace skill carries the payloads in every field /help shows."""
    folder = lab.root / "attack"
    skill = folder / "skills" / "hostile-skill"
    skill.mkdir(parents=True, exist_ok=True)
    meta = json.dumps(ONE_LINE)
    (skill / "SKILL.md").write_text(
        f"---\nname: hostile-skill\ndescription: {meta}\nlicense: {meta}\n"
        f"argument-hint: {meta}\nmetadata:\n  evil: {meta}\n---\n{ALL}\n", encoding="utf-8")
    # A workspace's own skills load only once the user trusted it (docs/trust-boundary.md):
    # this user did, so the payloads reach /help and /skills, where they must stay inert.
    from lily_kernel.settings import workspace_trust
    workspace_trust.trust(folder, lab.env)
    return "attack"


def setup_cell(server, model: str) -> str:
    return ("%%python\nimport lily\n"
            f"lily.session().set_model(base_url={server.url!r}, model={model!r}, "
            "max_retries='0', timeout='120')\nprint('model ready')")


def test_payloads_run_nowhere_and_stay_readable(lab, page, browser, model, turns):
    server, _ = model
    folder = hostile_workspace(lab)
    name = f"{folder}/render.ipynb"
    code_notebook(lab.root / name, setup_cell(server, EVIL_MODEL), "say it",
                  "/help hostile-skill", "/skills", "/help", "run this")
    turns.extend([
        {"content": ALL, "chunks": 9},
        {"tool_calls": [{"name": "run_python", "arguments": {"code": ALL}, "id": "evil1"}]},
    ])
    nb = Notebook(page, lab, name)
    panel = page.locator(".jp-Notebook")
    nb.run(0)
    expect(nb.output(0)).to_contain_text("model ready", timeout=LONG)
    for i in range(1, 6):
        nb.run(i)
        expect(nb.prompt(i)).not_to_have_text(re.compile(r"\[\*\]|\[ \]"), timeout=LONG)
    # every path showed its text, as text
    answer = nb.output(1)
    expect(answer).to_contain_text("click me", timeout=LONG)
    expect(answer).to_contain_text("<script>window.__pwned=1")  # shown, not run
    expect(answer).to_contain_text("onerror")  # the footer's hostile model name, as text
    expect(nb.output(2)).to_contain_text("hostile-skill")
    expect(nb.output(2)).to_contain_text("onload")
    expect(nb.output(3).locator(".lily-skills table")).to_contain_text("hostile-skill")
    expect(nb.output(4)).to_contain_text("Lily commands")
    expect(nb.output(5).get_by_role("button", name="Run once")).to_be_visible(timeout=LONG)
    expect(nb.output(5)).to_contain_text("</code></pre>")
    # no unsafe link survived: the "click me" texts are not links
    assert nb.output(1).locator("a", has_text="click me").count() == 0
    # click everything that is a link in the answer: none runs anything
    for link in nb.output(1).locator("a").all():
        href = (link.get_attribute("href") or "").lower()
        assert href.startswith(("http", "mailto", "#")) or "://" not in href, href
    assert_inert(page, panel)

    # saved, then reopened in a new page: still nothing runs, the text is still there
    nb.save()
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    try:
        fresh = context.new_page()
        fresh.goto(lab.page_url(name))
        fresh.locator(".jp-Notebook .jp-Cell").nth(5).wait_for(timeout=LONG)
        again = fresh.locator(".jp-Notebook .jp-Cell").nth(1).locator(".jp-OutputArea")
        expect(again).to_contain_text("click me", timeout=LONG)
        expect(again).to_contain_text("<script>window.__pwned=1")
        fresh.wait_for_timeout(1500)  # give any onerror a chance to fire
        assert_inert(fresh, fresh.locator(".jp-Notebook"))
    finally:
        context.close()


def test_each_skills_output_filters_alone(lab, page):
    code_notebook(lab.root / "two-skills.ipynb", "/skills", "/skills")
    nb = Notebook(page, lab, "two-skills.ipynb")
    nb.run(0)
    nb.run(1)
    first, second = nb.output(0), nb.output(1)
    for out in (first, second):
        expect(out.locator(".lily-skills table")).to_be_visible(timeout=LONG)
        expect(out.locator(".widget-text input")).to_have_value("")
    first.locator(".widget-text input").fill("todo")
    filtered = first.locator(".widget-html table")
    expect(filtered).to_contain_text("todo_scan")
    expect(filtered).not_to_contain_text("plan_compiler")
    expect(first.locator(".widget-html")).to_contain_text(re.compile(r"1 of \d+ skills match"))
    expect(first.locator(".lily-skills table")).to_be_hidden()
    # the second output is untouched: its whole table, its empty filter
    expect(second.locator(".lily-skills table")).to_be_visible()
    expect(second.locator(".lily-skills table")).to_contain_text("plan_compiler")
    expect(second.locator(".widget-text input")).to_have_value("")
    second.locator(".widget-text input").fill("zzz-nothing")
    expect(second.locator(".widget-html")).to_contain_text("no skill matches")
    expect(first.locator(".widget-html table")).to_contain_text("todo_scan")


def test_python_cells_highlight_as_python(lab, page):
    code_notebook(lab.root / "highlight.ipynb", "%%python\nvalues = [1, 2]\nvalues")
    nb = Notebook(page, lab, "highlight.ipynb")
    mime = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.codeMimetype")
    assert mime == "text/x-ipython", mime
    language = page.evaluate("""async () => {
        const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
        return (await k.info).language_info.name; }""")
    assert language == "python"
    editor = nb.cell(0).locator(".cm-content")
    # Python highlighting: `values` a variable, the numbers numbers; not a Markdown link
    expect(editor.locator("span", has_text=re.compile(r"^1$")).first).to_be_visible()
    styles = editor.evaluate("""e => [...e.querySelectorAll('span')].map(s =>
        [s.textContent, getComputedStyle(s).color, getComputedStyle(s).textDecorationLine])""")
    assert not any(d == "underline" for _, _, d in styles), styles  # no link
    numbers = {c for t, c, _ in styles if t in ("1", "2")}
    plain = {c for t, c, _ in styles if t == "values"}
    assert numbers and numbers != plain, styles  # the numbers are coloured as numbers
    nb.run(0)
    expect(nb.output(0)).to_contain_text("[1, 2]")


def test_streaming_text_renders_as_markdown_as_it_arrives(lab, page, model, turns):
    server, _ = model
    code_notebook(lab.root / "stream.ipynb", setup_cell(server, "scripted-e2e"), "stream")
    # words that differ: the same word 40 times would be a runaway the agent stops
    # (docs/agent.md#loop-hygiene)
    long_line = " ".join(f"supercalifragilistic{i}" for i in range(40))
    turns.append({"content": f"**STREAM-BOLD** {long_line}\n\n- STREAM-ITEM " + "x " * 50,
                  "chunks": 20, "chunk_delay": 0.4})
    nb = Notebook(page, lab, "stream.ipynb")
    nb.run(0)
    expect(nb.output(0)).to_contain_text("model ready", timeout=LONG)
    nb.run(1)
    live = nb.output(1).locator("[data-mime-type='text/markdown'] strong", has_text="STREAM-BOLD")
    expect(live).to_be_visible(timeout=LONG)
    # while streaming (the cell still runs), it is rendered Markdown, wrapped at words
    assert nb.prompt(1).inner_text().strip() == "[*]:"
    rendered = nb.output(1).locator("[data-mime-type='text/markdown']").first
    assert rendered.evaluate("e => getComputedStyle(e.querySelector('p') || e).wordBreak") \
        != "break-all"
    expect(nb.output(1)).to_contain_text("STREAM-ITEM", timeout=LONG)
    expect(nb.prompt(1)).not_to_have_text("[*]:", timeout=LONG)
