"""Jupyter renderings of command results: MIME bundles and the /skills widget.

Every bundle carries ``text/plain`` (console, logs) and ``text/markdown`` or
``text/html`` (nbconvert, GitHub); the ``/skills`` table adds an ipywidgets
view with a text filter, in the same bundle, so a live front end shows the
widget and everything else still reads well.
"""
from __future__ import annotations

import html

from lily_kernel.commands import render
from lily_kernel.commands.results import ActionCard, SkillTable
from lily_kernel.skills.snapshot import Snapshot
from lily_kernel.errors import error_line


def bundle(result, confirm=None) -> dict:
    """The MIME bundle for any command result.

    ``confirm(action, ok) -> result`` makes an :class:`ActionCard` live: the
    bundle then carries Confirm / Cancel buttons that call it.
    """
    if isinstance(result, SkillTable):
        return skills_bundle(result, widget=True)
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
                                [(k, json.dumps(v, ensure_ascii=False)) for k, v in a.params.items()])]
    if a.kind == "internal":
        parts.append(_html_table(("setting", "now", "after"),
                                 [(p, "—" if a.old.get(p) is None else json.dumps(a.old[p]),
                                   json.dumps(v)) for p, v in a.changes.items()]))
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
            status.value = ("<pre style='white-space:pre-wrap'>"
                            f"{html.escape(render.text(outcome))}</pre>")
        return handler

    yes.on_click(click(True))
    no.on_click(click(False))
    return w.VBox([w.HTML(card_html(card)), w.HBox([yes, no]), status])


def _html_table(headers, rows, filt: str = "") -> str:
    f = filt.lower().strip()
    shown = [r for r in rows if not f or any(f in str(c).lower() for c in r)]
    head = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td style='text-align:left'>{html.escape(str(c))}</td>"
                                    for c in r) + "</tr>" for r in shown)
    return f"<table class='lily-table'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def skills_html(snap: Snapshot, show_all: bool, filt: str = "") -> str:
    parts = [f"<p><b>{html.escape(render.skills_heading(snap))}</b></p>",
             _html_table(render.skill_columns(snap), render.skill_rows(snap), filt)]
    if show_all:
        rows = render.excluded_rows(snap)
        parts.append(f"<p><b>Excluded, shadowed and notes ({len(rows)})</b></p>")
        parts.append(_html_table(render.EXCLUDED_COLUMNS, rows, filt) if rows else "<p>(none)</p>")
    elif snap.excluded():
        parts.append(f"<p>{len(snap.excluded())} skill(s) excluded; "
                     "<code>/skills --all</code> shows why.</p>")
    return "\n".join(parts)


def skills_bundle(result: SkillTable, widget: bool = True) -> dict:
    data = {"text/plain": render.text(result),
            "text/html": skills_html(result.snapshot, result.show_all)}
    if widget:
        view = skills_widget(result)
        if view is not None:
            data["application/vnd.jupyter.widget-view+json"] = {
                "version_major": 2, "version_minor": 0, "model_id": view.model_id}
    return data


# One widget per (snapshot, --all): building one costs ~5 ms and a dozen comm
# messages, so showing the same snapshot again displays another view of the
# same model (its views stay in sync: it is the same table).
_widgets: dict[tuple[int, bool], tuple[Snapshot, object]] = {}
_WIDGET_CACHE = 8


def skills_widget(result: SkillTable):
    """A filterable table: a Text box above an HTML table that follows it."""
    snap, show_all = result.snapshot, result.show_all
    cached = _widgets.get((id(snap), show_all))
    if cached is not None and cached[0] is snap and getattr(cached[1], "comm", None) is not None:
        return cached[1]
    try:
        import ipywidgets as w
    except ImportError:  # pragma: no cover - ipywidgets is a dependency
        return None
    box = w.Text(placeholder="filter skills…", description="Filter",
                 layout=w.Layout(width="24em"))
    table = w.HTML(skills_html(snap, show_all))

    def refilter(change) -> None:
        table.value = skills_html(snap, show_all, change["new"])

    box.observe(refilter, names="value")
    view = w.VBox([box, table])
    if len(_widgets) >= _WIDGET_CACHE:
        _widgets.clear()
    _widgets[(id(snap), show_all)] = (snap, view)
    return view
