"""Jupyter renderings of command results: MIME bundles and the /skills widget.

Every bundle carries ``text/plain`` (console, logs) and ``text/markdown`` or
``text/html`` (nbconvert, GitHub). The ``/skills`` table is plain HTML of its
own, so a saved notebook shows it after a kernel restart (JupyterLab's widget
renderer never falls back to another MIME type when a widget's model is gone);
only its live filter is an ipywidget, displayed apart (docs/jupyter-display.md).
"""
from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from lily_kernel.agent.pending import HeldCall, short
from lily_kernel.commands import render, sanitize
from lily_kernel.commands.results import ActionCard, Answer, ConfirmedRun, SkillTable
from lily_kernel.commands.sanitize import html_text
from lily_kernel.errors import error_line
from lily_kernel.skills.snapshot import Snapshot
from lily_kernel.tools.mcp.mcp_tools import McpImage


def bundle(result: object) -> dict[str, Any]:
    """The MIME bundle for any command result (a card with buttons: :func:`card_bundle`
    and ``card_buttons.CardButtons``)."""
    if isinstance(result, SkillTable):
        return skills_bundle(result)
    if isinstance(result, McpImage) and result.left_out:  # images past the caps: one line
        return {"text/plain": result.left_out,
                "text/markdown": sanitize.md_text(result.left_out)}
    if isinstance(result, McpImage):  # the image itself, as Jupyter shows one (docs/mcp.md#tools)
        import base64
        return {"text/plain": render.text(result),
                result.mime: base64.b64encode(result.data).decode("ascii")}
    return {"text/plain": render.text(result), "text/markdown": render.markdown(result)}


def card_html(card: ActionCard, decided: str | None = None) -> str:
    """The confirmation card as HTML (widgets cannot hold Markdown without an Output widget,
    whose captured display would leak into saved notebooks)."""
    import json
    a = card.action
    if isinstance(a, HeldCall):
        return tool_card_html(card, decided)
    parts = [_title_html(card, "Confirm", a.skill, a.kind),
             _html_table(("parameter", "value"),
                         [(k, json.dumps(v, ensure_ascii=False)) for k, v in a.params.items()],
                         styled=True)]
    if a.kind == "internal":
        parts.append(_html_table(("setting", "now", "after"),
                                 [(p, "—" if a.old.get(p) is None else json.dumps(a.old[p]),
                                   json.dumps(v)) for p, v in a.changes.items()], styled=True))
    else:
        activity = a.activity or {}
        parts.append(f"<p>Sends a <b>{html_text(activity['type'])}</b> activity to "
                     f"{html_text(a.target)}:</p><pre>"
                     f"{html_text(json.dumps(a.activity, indent=2, ensure_ascii=False))}</pre>")
    parts.append(markdown_html(_last_line(card, decided)))
    return "\n".join(parts)


def _title_html(card: ActionCard, verb: str, name: str, kind: str) -> str:
    """A card's heading (``verb name`` (``kind``, its id): its purpose), its warning above
    it, and why it asks below."""
    title = (f"<p><b>{verb} {html_text(name)}</b> ({html_text(kind)}, card "
             f"<code>{short(card.action.id)}</code>)")
    title += f": {html_text(card.purpose)}</p>" if card.purpose else "</p>"
    if card.warning:
        title = f"<p><b>{html_text(card.warning)}</b></p>\n" + title
    if card.reason:
        title += f"\n<p>It asks because {html_text(card.reason)}.</p>"
    return title


def tool_card_html(card: ActionCard, decided: str | None = None) -> str:
    """A held call's approval card: tool, origin, hints, arguments as JSON, a write's diff;
    run_python's code highlighted (pygments comes with IPython). All of it escaped."""
    a = card.action
    assert isinstance(a, HeldCall)
    parts = [_title_html(card, "Approve", render.tool_of(a), "tool call"),
             _html_table(("tool", "from", "hints"),
                         [(render.tool_of(a), render.origin_of(a),
                           render.hints(a.annotations, a.tool, a.origin))], styled=True)]
    arguments = ["<p>Arguments (in full):</p>",
                 f"<pre style=\"max-height:24em;overflow:auto\">{html_text(card.arguments)}</pre>"]
    if card.code is not None and render.code_only(a) is not None:  # the one argument: once
        parts += ["<p>The code:</p>", _highlight(card.code, a.tool)]
    else:
        parts += arguments
        if card.code is not None:
            parts += ["<p>The code:</p>", _highlight(card.code, a.tool)]
    if card.change is not None:
        parts += ["<p>The change to the file:</p>", f"<pre>{html_text(card.change)}</pre>"]
    parts.append(f"<p>{_inline(_last_line(card, decided))}</p>")
    return "\n".join(parts)


def _last_line(card: ActionCard, decided: str | None) -> str:
    """How to decide the card; once decided (``decided``: how), that it was."""
    return render.decide_line(card) if decided is None else render.decided_line(decided)


def _inline(md: str) -> str:
    """One line of Lily's own Markdown (code spans, no other markup) as HTML, escaped."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html_text(md))


def _highlight(code: str, tool: str) -> str:
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer, TextLexer
    except ImportError:  # pragma: no cover
        return f"<pre>{html_text(code)}</pre>"
    lexer = PythonLexer() if tool == "run_python" else TextLexer()
    html: str = highlight(code, lexer, HtmlFormatter(noclasses=True))
    return html


# Once the kernel that drew a card's buttons is gone, JupyterLab and Notebook 7 show "Error
# displaying widget: model not found" in their place: hidden when it sits right after a
# Lily card (trusted notebooks; an untrusted one drops <style>, and the line stays).
_HIDE_DEAD_BUTTONS = ("<style>.jp-OutputArea-child:has(.lily-card) + .jp-OutputArea-child"
                      ":has(> .jp-OutputArea-output.jupyter-widgets) {display: none}</style>")


def card_bundle(card: ActionCard, outcomes: tuple[tuple[str, str, str], ...] = (),
                decided: str | None = None) -> dict[str, Any]:
    """A card as a display of its own, restorable: ``text/plain``, ``text/markdown`` (for
    nbconvert and the like) and ``text/html`` (what front ends show), the card and, under
    it, what its buttons did (``outcomes``: ``(text, markdown, html)``). Its
    buttons are a separate display right after it (:class:`CardButtons`), so a saved
    notebook shows the card and its outcome after a restart (docs/jupyter-display.md);
    once decided (a click, or ``decided`` says how) it says so, not how to decide it."""
    if outcomes and decided is None:
        decided = "with this card's buttons; what happened is below."
    line, now = render.decide_line(card), render.decided_line(decided or "")
    text, md = render.text(card), render.markdown(card)
    if decided is not None:
        plain = line.replace("**", "").replace("`", "")
        text, md = text.replace(plain, now.replace("`", "")), md.replace(line, now)
    text = "\n\n".join([text, *(t for t, _, _ in outcomes)])
    md = "\n\n".join([md, *(m for _, m, _ in outcomes)])
    body = "\n".join([card_html(card, decided), *(h for _, _, h in outcomes)])
    return {"text/plain": text, "text/markdown": md,
            "text/html": f"{_HIDE_DEAD_BUTTONS}\n<div class='lily-card'>\n{body}\n</div>"}


def outcome_parts(outcome: object) -> tuple[str, str, str]:
    """What a click did, as ``(text, markdown, html)``, rendered as ``/confirm`` shows it:
    the summary, what the code printed and showed (a DataFrame as its table, an image as an image), the
    answer with its footer, proposed cells, and a further card."""
    if not isinstance(outcome, ConfirmedRun):
        md = render.markdown(outcome)
        return render.text(outcome), md, markdown_html(md)
    text, html = [render.text(outcome)], [markdown_html(render.markdown(outcome.done))]
    captured = outcome.done.display
    if captured is not None:
        html.append(captured_html(captured))
    elif outcome.output.strip():
        html.append(f"<pre>{html_text(outcome.output.rstrip())}</pre>")
    if outcome.answer is not None:
        html.append(answer_html(outcome.answer))
    for code in outcome.proposed:
        html += ["<p>Proposed as a new cell below this one (not run):</p>",
                 _highlight(code.rstrip(), "run_python")]
    if outcome.card is not None:
        html.append(card_html(outcome.card))
    return "\n\n".join(text), render.markdown(outcome), "\n".join(html)


def answer_html(answer: Answer) -> str:
    """An answer as HTML: the model's Markdown through the sanitizer, the footer small."""
    return (f"{markdown_html(answer.text.rstrip())}\n"
            f"<p><sub>{html_text(answer.footer())}</sub></p>")


def captured_html(captured: Any) -> str:
    """What confirmed code printed and displayed (IPython's captured output), as HTML.

    The same outputs ``/confirm`` shows in its cell (``captured.show()``): the notebook's
    own output, which the user approved to run; its HTML (a DataFrame) and images are kept
    as they are, like any cell output. Text is escaped."""
    parts = []
    if captured.stdout:
        parts.append(f"<pre>{html_text(captured.stdout.rstrip())}</pre>")
    if captured.stderr:
        parts.append("<pre style='background:var(--jp-rendermime-error-background,#fdd)'>"
                     f"{html_text(captured.stderr.rstrip())}</pre>")
    for out in captured.outputs:
        data = out.data
        if "text/html" in data:
            parts.append(str(data["text/html"]))
        elif "image/png" in data or "image/jpeg" in data:
            mime = "image/png" if "image/png" in data else "image/jpeg"
            parts.append(f"<img src='data:{mime};base64,{html_text(str(data[mime]).strip())}'>")
        elif "text/markdown" in data:
            parts.append(markdown_html(str(data["text/markdown"])))
        elif "text/plain" in data:
            parts.append(f"<pre>{html_text(str(data['text/plain']))}</pre>")
    return "\n".join(parts)


class TrustButton:
    """The **Trust** button under a ``/trust`` review: a display of its own, like a card's
    buttons. A click trusts the workspace as that review showed it (``accept(fingerprint)``,
    the same path as ``/trust --yes``); a workspace changed since is refused, one line, and
    nothing is trusted (docs/trust-boundary.md#workspace-trust)."""

    def __init__(self, fingerprint: str, accept: Callable[[str], object]) -> None:
        import ipywidgets as w
        self.fingerprint, self.accept = fingerprint, accept
        self.button = w.Button(description="Trust", button_style="warning", icon="shield",
                               tooltip="Trust this workspace as shown above")
        self.status = w.HTML()
        self.view = w.VBox([w.HBox([self.button]), self.status])
        self.button.on_click(self.click)

    def bundle(self) -> dict[str, Any]:
        """The button's display: the widget, and empty text for consoles and logs."""
        return {"text/plain": "", "application/vnd.jupyter.widget-view+json": {
            "version_major": 2, "version_minor": 0, "model_id": self.view.model_id}}

    def click(self, _button: Any = None) -> None:
        """Trust the workspace as reviewed; show what happened under the button."""
        self.button.disabled = True
        try:
            outcome = self.accept(self.fingerprint)
        except Exception as exc:  # one readable line, never a traceback
            self.status.value = f"<p style='color:#b00'>{html_text(error_line(exc))}</p>"
            return
        self.status.value = markdown_html(render.markdown(outcome))


# Inside a widget, JupyterLab's rendered-HTML styles do not reach a table: it gets its own
# (theme variables, so dark themes work; plain colours elsewhere).
_CELL = ("text-align:left;padding:2px 10px;"
         "border:1px solid var(--jp-border-color2,#ccc)")
_HEAD = _CELL + ";font-weight:bold;background:var(--jp-layout-color2,#f3f3f3)"


def _matching(rows: Iterable[Sequence[object]], filt: str) -> list[Any]:
    """The rows that hold ``filt`` (case-insensitive) in any cell; all rows without one."""
    f = filt.lower().strip()
    return [r for r in rows if not f or any(f in str(c).lower() for c in r)]


def _html_table(headers: Sequence[str], rows: Iterable[Sequence[object]], filt: str = "",
                styled: bool = False) -> str:
    shown = _matching(rows, filt)
    th, td = (_HEAD, _CELL) if styled else ("text-align:left",) * 2
    head = "".join(f"<th style='{th}'>{html_text(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td style='{td}'>{html_text(str(c))}</td>"
                                    for c in r) + "</tr>" for r in shown)
    style = " style='border-collapse:collapse;margin:4px 0'" if styled else ""
    return (f"<table class='lily-table'{style}><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>")


def markdown_html(md: str) -> str:
    """Markdown (an action outcome, as ``/confirm`` shows it) as styled HTML for a widget.

    Rendered by the one sanitizer (raw HTML off, unsafe links dropped,
    docs/trust-boundary.md#display); a widget gets no notebook table CSS, so tables
    get theirs here.
    """
    out = sanitize.markdown_html(md)
    out = out.replace("<table>", "<table class='lily-table' style='border-collapse:collapse;"
                                 "margin:4px 0'>")
    out = re.sub(r"<th( style=\"[^\"]*\")?>", f"<th style='{_HEAD}'>", out)
    return re.sub(r"<td( style=\"[^\"]*\")?>", f"<td style='{_CELL}'>", out)


class _Table:
    """One snapshot's /skills rows, and the text and HTML of its unfiltered table, built
    once: a snapshot never changes (``/reload_skills`` and ``/new`` make a new one), so a
    /skills cell, and each keystroke in its filter, reuses them (bench/README.md)."""

    def __init__(self, snap: Snapshot) -> None:
        self.snapshot = snap
        self.rows = render.skill_rows(snap)
        self.excluded = render.excluded_rows(snap)
        self.omissions = render.index_omissions(snap)
        self._shown: dict[bool, tuple[str, str]] = {}

    def shown(self, result: SkillTable) -> tuple[str, str]:
        """The text and the HTML of ``/skills`` (or ``/skills --all``) for this snapshot."""
        if result.show_all not in self._shown:
            self._shown[result.show_all] = (render.text(result),
                                            skills_html(self.snapshot, result.show_all))
        return self._shown[result.show_all]


_TABLES: list[_Table] = []  # the snapshots shown last (one per session, a few at most)


def _table(snap: Snapshot) -> _Table:
    """The :class:`_Table` of ``snap``, made on its first /skills."""
    for made in _TABLES:
        if made.snapshot is snap:
            return made
    made = _Table(snap)
    _TABLES[:] = [made, *_TABLES[:3]]
    return made


def skills_html(snap: Snapshot, show_all: bool, filt: str = "", styled: bool = False) -> str:
    """The /skills table as HTML; filtered, its heading counts what is shown
    ("2 of 8 skills"), and an empty result says "no skill matches"."""
    rows = _table(snap).rows
    if filt.strip():
        n, total = len(_matching(rows, filt)), len(rows)
        heading = (f"{n} of {total} skill{'s' if total != 1 else ''} match "
                   f"“{filt.strip()}”" if n else f"no skill matches “{filt.strip()}”")
    else:
        heading = render.skills_heading(snap)
    parts = [f"<p><b>{html_text(heading)}</b></p>"]
    if not filt.strip() or _matching(rows, filt):
        parts.append(_html_table(render.skill_columns(snap), rows, filt, styled))
    omissions = _table(snap).omissions
    if omissions:
        parts.append(f"<p>{html_text(omissions)}</p>")
    waiting = render.untrusted_line(snap)
    if waiting:
        parts.append(f"<p>{html_text(waiting)}</p>")
    if show_all:
        excluded = _table(snap).excluded
        parts.append(f"<p><b>Excluded, shadowed and notes ({len(excluded)})</b></p>")
        parts.append(_html_table(render.EXCLUDED_COLUMNS, excluded, filt, styled)
                     if excluded else "<p>(none)</p>")
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


def skills_bundle(result: SkillTable, key: str | None = None) -> dict[str, Any]:
    """The /skills table itself: text and HTML only, so it survives a restart.

    ``key`` names the filter displayed just before it (:func:`filter_bundle`): that
    filter, and no other, hides this table while it filters.
    """
    text, body = _table(result.snapshot).shown(result)
    if key is not None:
        body = f"{_HIDE_DEAD_FILTER}\n<div class='lily-skills lily-skills-{key}'>\n{body}\n</div>"
    return {"text/plain": text, "text/html": body}


def filter_bundle(result: SkillTable) -> tuple[dict[str, Any], str] | None:
    """The live filter of one /skills output, a display of its own, and the key its
    table carries (None without ipywidgets).

    Every /skills output gets a filter of its own (typing in one never filters
    another, and a new one starts empty). Its ``text/plain`` is empty: a front end
    without widgets shows nothing for it, and once its kernel is gone, "model not
    found" appears here (hidden by the table's HTML in JupyterLab), never in place of
    the table.
    """
    made = skills_widget(result)
    if made is None:
        return None
    view, key = made
    return {"text/plain": "", "application/vnd.jupyter.widget-view+json": {
        "version_major": 2, "version_minor": 0, "model_id": view.model_id}}, key


def skills_widget(result: SkillTable) -> tuple[Any, str] | None:
    """A new filter: a Text box, and under it the matching rows while it is not empty;
    returns ``(view, key)``, or None without ipywidgets.

    While filtering, the view also carries a one-rule stylesheet that hides the static
    table of the same output (the one whose class holds ``key``), so a person sees one
    table, filtered in place.
    """
    snap, show_all = result.snapshot, result.show_all
    try:
        import ipywidgets as w
    except ImportError:  # pragma: no cover - ipywidgets is a dependency
        return None
    key = uuid.uuid4().hex[:12]
    box = w.Text(placeholder="filter skills…", description="Filter",
                 layout=w.Layout(width="24em"))
    table = w.HTML("")

    def refilter(change: Mapping[str, Any]) -> None:
        text = change["new"]
        table.value = "" if not text.strip() else (
            f"<style>.lily-skills-{key} {{display: none}}</style>\n"
            + skills_html(snap, show_all, text, styled=True))

    box.observe(refilter, names="value")
    return w.VBox([box, table]), key
