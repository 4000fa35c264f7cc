"""Jupyter renderings of command results: MIME bundles and the /skills widget.

Every bundle carries ``text/plain`` (console, logs) and ``text/markdown`` or
``text/html`` (nbconvert, GitHub). The ``/skills`` table is plain HTML of its
own, so a saved notebook shows it after a kernel restart (JupyterLab's widget
renderer never falls back to another MIME type when a widget's model is gone);
only its live filter is an ipywidget, displayed apart (docs/jupyter-display.md).
"""
from __future__ import annotations

import html
import re
import uuid

from lily_kernel.commands import render
from lily_kernel.commands.results import ActionCard, McpImage, SkillTable
from lily_kernel.skills.snapshot import Snapshot
from lily_kernel.errors import error_line


def bundle(result, confirm=None) -> dict:
    """The MIME bundle for any command result.

    ``confirm(action, ok) -> result`` makes an :class:`ActionCard` live: the
    bundle then carries Confirm / Cancel buttons that call it.
    """
    if isinstance(result, SkillTable):
        return skills_bundle(result)
    if isinstance(result, McpImage):  # the image itself, as Jupyter shows one (docs/mcp.md#tools)
        import base64
        return {"text/plain": render.text(result),
                result.mime: base64.b64encode(result.data).decode("ascii")}
    data = {"text/plain": render.text(result), "text/markdown": render.markdown(result)}
    if isinstance(result, ActionCard) and confirm is not None:
        view = card_widget(result, confirm)
        if view is not None:
            data["application/vnd.jupyter.widget-view+json"] = {
                "version_major": 2, "version_minor": 0, "model_id": view.model_id}
    return data


def card_html(card: ActionCard) -> str:
    """The confirmation card as HTML (widgets cannot hold Markdown without an Output widget,
    whose captured display would leak into saved notebooks)."""
    import json
    a = card.action
    if a.kind == "tool":
        return tool_card_html(card)
    title = f"<p><b>Confirm {html.escape(a.skill)}</b> ({a.kind})"
    title += f": {html.escape(card.purpose)}</p>" if card.purpose else "</p>"
    parts = [title, _html_table(("parameter", "value"),
                                [(k, json.dumps(v, ensure_ascii=False)) for k, v in a.params.items()],
                                styled=True)]
    if a.kind == "internal":
        parts.append(_html_table(("setting", "now", "after"),
                                 [(p, "—" if a.old.get(p) is None else json.dumps(a.old[p]),
                                   json.dumps(v)) for p, v in a.changes.items()], styled=True))
    else:
        parts.append(f"<p>Sends a <b>{html.escape(a.activity['type'])}</b> activity to "
                     f"{html.escape(a.target)}:</p><pre>"
                     f"{html.escape(json.dumps(a.activity, indent=2, ensure_ascii=False))}</pre>")
    return "\n".join(parts)


def tool_card_html(card: ActionCard) -> str:
    """A held tool call: its arguments, code syntax-highlighted (pygments comes with IPython)."""
    import json
    a = card.action
    title = f"<p><b>Confirm {html.escape(a.tool)}</b> (tool call)"
    title += f": {html.escape(card.purpose)}</p>" if card.purpose else "</p>"
    parts = [title]
    for name, value in a.args.items():
        if isinstance(value, str) and ("\n" in value or name == "code"):
            parts.append(f"<p><code>{html.escape(name)}</code>:</p>" + _highlight(value, a.tool))
        else:
            parts.append(f"<p><code>{html.escape(name)}</code> = "
                         f"<code>{html.escape(json.dumps(value, ensure_ascii=False))}</code></p>")
    return "\n".join(parts)


def _highlight(code: str, tool: str) -> str:
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer, TextLexer
    except ImportError:  # pragma: no cover
        return f"<pre>{html.escape(code)}</pre>"
    lexer = PythonLexer() if tool == "run_python" else TextLexer()
    return highlight(code, lexer, HtmlFormatter(noclasses=True))


def card_widget(card: ActionCard, confirm):
    """The card with Confirm / Cancel buttons; the outcome appears under them."""
    try:
        import ipywidgets as w
    except ImportError:  # pragma: no cover
        return None
    yes = w.Button(description="Confirm", button_style="success", icon="check")
    no = w.Button(description="Cancel", icon="times")
    status = w.HTML()

    def click(ok: bool):
        def handler(_button) -> None:
            yes.disabled = no.disabled = True
            try:
                outcome = confirm(card.action, ok)
            except Exception as exc:  # one readable line, never a traceback
                yes.disabled = no.disabled = False
                line = error_line(exc)
                status.value = f"<p style='color:#b00'>{html.escape(line)}</p>"
                return
            status.value = markdown_html(render.markdown(outcome))
        return handler

    yes.on_click(click(True))
    no.on_click(click(False))
    return w.VBox([w.HTML(card_html(card)), w.HBox([yes, no]), status])


# Inside a widget, JupyterLab's rendered-HTML styles do not reach a table: it gets its own
# (theme variables, so dark themes work; plain colours elsewhere).
_CELL = ("text-align:left;padding:2px 10px;"
         "border:1px solid var(--jp-border-color2,#ccc)")
_HEAD = _CELL + ";font-weight:bold;background:var(--jp-layout-color2,#f3f3f3)"


def _html_table(headers, rows, filt: str = "", styled: bool = False) -> str:
    f = filt.lower().strip()
    shown = [r for r in rows if not f or any(f in str(c).lower() for c in r)]
    th, td = (_HEAD, _CELL) if styled else ("text-align:left",) * 2
    head = "".join(f"<th style='{th}'>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td style='{td}'>{html.escape(str(c))}</td>"
                                    for c in r) + "</tr>" for r in shown)
    style = " style='border-collapse:collapse;margin:4px 0'" if styled else ""
    return (f"<table class='lily-table'{style}><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>")


def _inline(text: str) -> str:
    """`code` and **bold** of one escaped line of short Markdown."""
    out = html.escape(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)


def markdown_html(md: str) -> str:
    """Short Markdown (paragraphs, pipe tables, `code`, **bold**) as styled HTML.

    Action outcomes are Markdown (as ``/confirm`` shows them); a widget holds HTML, so
    the card's Confirm button shows the same table through this.
    """
    parts: list[str] = []
    for block in re.split(r"\n\s*\n", md.strip()):
        lines = block.strip().splitlines()
        if len(lines) >= 2 and lines[0].startswith("|") and set(lines[1]) <= set("|-: "):
            cells = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", ln.strip())[1:-1]]
                     for ln in lines if ln.strip()]
            head = "".join(f"<th style='{_HEAD}'>{_inline(c)}</th>" for c in cells[0])
            body = "".join("<tr>" + "".join(f"<td style='{_CELL}'>{_inline(c)}</td>" for c in r)
                           + "</tr>" for r in cells[2:])
            parts.append("<table class='lily-table' style='border-collapse:collapse;margin:4px 0'>"
                         f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        else:
            parts.append("<p>" + "<br>".join(_inline(ln) for ln in lines) + "</p>")
    return "\n".join(parts)


def skills_html(snap: Snapshot, show_all: bool, filt: str = "", styled: bool = False) -> str:
    parts = [f"<p><b>{html.escape(render.skills_heading(snap))}</b></p>",
             _html_table(render.skill_columns(snap), render.skill_rows(snap), filt, styled)]
    if show_all:
        rows = render.excluded_rows(snap)
        parts.append(f"<p><b>Excluded, shadowed and notes ({len(rows)})</b></p>")
        parts.append(_html_table(render.EXCLUDED_COLUMNS, rows, filt, styled)
                     if rows else "<p>(none)</p>")
    elif snap.excluded():
        parts.append(f"<p>{len(snap.excluded())} skill(s) excluded; "
                     "<code>/skills --all</code> shows why.</p>")
    return "\n".join(parts)


# Once the kernel that drew a filter is gone, JupyterLab and Notebook 7 show "Error
# displaying widget: model not found" in its place (the renderer marks its own node
# .jupyter-widgets; a live view is a child of it). The table hides that one output, right
# before a Lily table. Trusted notebooks only: an untrusted one drops <style>, and the
# line stays, harmless.
_HIDE_DEAD_FILTER = ("<style>.jp-OutputArea-child:has(> .jp-OutputArea-output.jupyter-widgets)"
                     ":has(+ .jp-OutputArea-child .lily-skills) {display: none}</style>")


def skills_bundle(result: SkillTable) -> dict:
    """The /skills table itself: text and HTML only, so it survives a restart."""
    key = _key(result)
    body = skills_html(result.snapshot, result.show_all)
    if key is not None:
        body = f"{_HIDE_DEAD_FILTER}\n<div class='lily-skills lily-skills-{key}'>\n{body}\n</div>"
    return {"text/plain": render.text(result), "text/html": body}


def filter_bundle(result: SkillTable) -> dict | None:
    """The live filter of a /skills table, a display of its own (None without ipywidgets).

    Its ``text/plain`` is empty: a front end without widgets shows nothing for it, and
    once its kernel is gone, "model not found" appears here (hidden by the table's
    HTML in JupyterLab), never in place of the table.
    """
    view = skills_widget(result)
    if view is None:
        return None
    return {"text/plain": "", "application/vnd.jupyter.widget-view+json": {
        "version_major": 2, "version_minor": 0, "model_id": view.model_id}}


# One widget per (snapshot, --all): building one costs ~5 ms and a dozen comm
# messages, so showing the same snapshot again displays another view of the
# same model (its views stay in sync: it is the same table). Each has a key that
# the static tables of that snapshot carry as a CSS class.
_widgets: dict[tuple[int, bool], tuple[Snapshot, object, str]] = {}
_WIDGET_CACHE = 8


def _key(result: SkillTable) -> str | None:
    cached = _widgets.get((id(result.snapshot), result.show_all))
    return cached[2] if cached is not None and cached[0] is result.snapshot else None


def skills_widget(result: SkillTable):
    """The filter: a Text box, and under it the matching rows while it is not empty.

    While filtering, the view also carries a one-rule stylesheet that hides the static
    tables of the same snapshot, so a person sees one table, filtered in place.
    """
    snap, show_all = result.snapshot, result.show_all
    cached = _widgets.get((id(snap), show_all))
    if cached is not None and cached[0] is snap and getattr(cached[1], "comm", None) is not None:
        return cached[1]
    try:
        import ipywidgets as w
    except ImportError:  # pragma: no cover - ipywidgets is a dependency
        return None
    key = uuid.uuid4().hex[:12]
    box = w.Text(placeholder="filter skills…", description="Filter",
                 layout=w.Layout(width="24em"))
    table = w.HTML("")

    def refilter(change) -> None:
        text = change["new"]
        table.value = "" if not text.strip() else (
            f"<style>.lily-skills-{key} {{display: none}}</style>\n"
            + skills_html(snap, show_all, text, styled=True))

    box.observe(refilter, names="value")
    view = w.VBox([box, table])
    if len(_widgets) >= _WIDGET_CACHE:
        _widgets.clear()
    _widgets[(id(snap), show_all)] = (snap, view, key)
    return view
