"""docs/logs.md#export, as attacks: every export path of the journal (``lily logs export
--md``, ``--ipynb``, ``lily logs show``, ``/logs``) goes through the one sanitizer, so a
hostile model's, tool's or journal's ``<img onerror=...>`` is inert. Checked the way the
exports are read: the Markdown parsed by markdown-it-py with raw HTML on, the Markdown
rendered to HTML, and the notebook rendered by ``nbconvert --to html``; in Chromium in
tests/e2e/test_attack_logs_export_browser.py."""
from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest
from markdown_it import MarkdownIt

from lily_kernel.cli import main
from lily_kernel.commands import logs_export, sanitize
from lily_kernel.session.logs import Logs, summarize, turns
from tests.commands.logs_hostile import danger, hostile_journal

MD = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


def live(md: str) -> list[str]:
    """What in ``md`` a Markdown viewer that renders HTML would make live."""
    bad = []
    stack = list(MD.parse(md))
    while stack:
        tok = stack.pop()
        stack.extend(tok.children or [])
        if tok.type in ("html_block", "html_inline"):
            bad.append(f"{tok.type}: {tok.content[:80]!r}")
        for attr in ("href", "src"):
            value = tok.attrGet(attr)
            if isinstance(value, str) and not sanitize.safe_url(value):
                bad.append(f"{attr}={value[:60]!r}")
    return bad + danger(MD.render(md))


@pytest.fixture
def hostile(tmp_path):
    ws = tmp_path / "ws"
    sid = hostile_journal(ws)
    return ws, sid


def test_the_markdown_transcript_is_inert(hostile, capsys):
    ws, sid = hostile
    target = ws.parent / "t.md"
    assert main(["logs", "export", sid[:8], "--md", str(target), "--workspace", str(ws)]) == 0
    md = target.read_text()
    assert live(md) == []
    assert "onerror" in md  # the text is kept, readable, only inert
    # lily logs show prints the same transcript
    capsys.readouterr()
    assert main(["logs", "show", sid[:8], "--workspace", str(ws)]) == 0
    shown = capsys.readouterr().out
    assert live(shown) == []
    assert "(interrupted)" in shown and "journal gap" in shown


def test_the_notebook_export_is_inert_in_nbconvert_html(hostile, tmp_path, capsys):
    ws, sid = hostile
    target = tmp_path / "t.ipynb"
    assert main(["logs", "export", sid[:8], "--ipynb", str(target), "--workspace", str(ws)]) == 0
    nb = nbformat.read(target, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            assert live(cell.source) == [], cell.source
        for output in cell.get("outputs", []):
            md = output.get("data", {}).get("text/markdown")
            if md is not None:
                assert live(md) == [], md
    done = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", "--stdout",
                           str(target)], capture_output=True, text=True, timeout=300,
                          check=True)
    assert "onerror" in done.stdout  # shown as text
    assert danger(done.stdout) == []


def test_each_markdown_part_goes_through_the_sanitizer(hostile):
    ws, sid = hostile
    logs = Logs(ws)
    records = logs.checked(sid)
    md = logs_export.markdown(summarize(sid, records), turns(records))
    assert live(md) == []
    # a tool call's heading and its fences are separate blocks: no fence on a heading line
    lines = md.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("**tool call**")]
    assert heads and all(lines[i + 1] == "" and lines[i + 2].startswith("```") and lines[i + 2].endswith("json")
                         for i in heads)
    nb = logs_export.notebook(summarize(sid, records), turns(records))
    outputs = [o for c in nb["cells"] for o in c.get("outputs", [])]
    calls = [o["data"]["text/markdown"] for o in outputs
             if "text/markdown" in o.get("data", {}) and "tool call" in o["data"]["text/markdown"]]
    assert calls and all(c.splitlines()[1] == "" and c.splitlines()[2].startswith("```") and c.splitlines()[2].endswith("json")
                         for c in calls)
    # the python cell: its outputs as journaled, its failure tagged for nbval
    (python,) = [c for c in nb["cells"] if c["metadata"].get("lily", {}).get("kind") == "python"]
    assert "raises-exception" in python["metadata"]["tags"]
    assert [o["output_type"] for o in python["outputs"]] == [
        "stream", "execute_result", "display_data", "error"]
    assert python["outputs"][2]["metadata"]["lily"]["images"][0]["mime"] == "image/png"
    json.dumps(nb)
