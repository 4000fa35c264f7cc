"""A session as a Markdown transcript or a notebook on the Lily kernel (docs/logs.md#export).

Both are built from the journal's records through :func:`lily_kernel.session.logs.turns`;
the text is already redacted on disk. The notebook is nbformat 4.5 JSON written by hand
(no nbformat dependency in the core): each cell the session ran, in order, with the
answer and the tool calls as its outputs.
"""
from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from lily_kernel.session.logs import SessionSummary, Turn, iso

KERNELSPEC = {"display_name": "Lily", "language": "markdown", "name": "lily"}
LANGUAGE_INFO = {"codemirror_mode": "markdown", "file_extension": ".md",
                 "mimetype": "text/markdown", "name": "markdown",
                 "pygments_lexer": "markdown"}


def _fence(text: str, lang: str = "") -> str:
    """``text`` in a code fence longer than any backtick run inside it."""
    run, longest = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text}\n{fence}"


def cut(text: str, limit: int | None) -> str:
    """``text`` cut to ``limit`` characters with a visible marker (None: whole)."""
    if limit is None or len(text) <= limit:
        return text
    return text[:limit] + f" … [{len(text) - limit:,} more characters]"


def _args(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def _usage(turn: Turn) -> str:
    parts = []
    if turn.models:
        parts.append("model: " + ", ".join(turn.models))
    if turn.tokens_in is not None:
        parts.append(f"tokens: {turn.tokens_in:,} in / {turn.tokens_out or 0:,} out")
    return " · ".join(parts)


def markdown(summary: SessionSummary, turns: list[Turn],
             truncate: int | None = None) -> str:
    """The session as a Markdown document."""
    tokens = ("-" if summary.tokens_in is None
              else f"{summary.tokens_in:,} in / {summary.tokens_out or 0:,} out")
    out = [f"# Lily session {summary.id[:12]}", "",
           f"- label: {summary.label or '-'}",
           f"- started: {iso(summary.started)}",
           f"- last activity: {iso(summary.last)}",
           f"- requests: {summary.requests}, tool calls: {summary.tool_calls}",
           f"- tokens: {tokens}",
           f"- models: {', '.join(summary.models) or '-'}", ""]
    n = 0
    for turn in turns:
        if not turn.is_cell:
            out += [f"*{iso(turn.t)} — {turn.text}*", ""]
            continue
        n += 1
        failed = "" if turn.ok else " (failed)"
        out += [f"## [{n}] {turn.kind}{failed} · {iso(turn.t)}", "",
                _fence(turn.text.rstrip("\n")), ""]
        for call in turn.calls:
            out += [f"**tool call** `{call.name}`", "", _fence(cut(_args(call.args), truncate),
                                                            "json"), ""]
            if call.result is not None:
                out += ["result:", "", _fence(cut(call.result, truncate)), ""]
        for approval in turn.approvals:
            out += [f"*approval: {approval}*", ""]
        for error in turn.errors:
            out += [f"**error:** {error}", ""]
        for answer in turn.answers:
            out += ["**answer:**", "", answer, ""]
        line = _usage(turn)
        if line:
            out += [f"<sub>{line}</sub>", ""]
    return "\n".join(out).rstrip() + "\n"


def cell_id() -> str:
    """A fresh notebook cell id (12 hex characters)."""
    return uuid.uuid4().hex[:12]


def _display(markdown_text: str, plain: str) -> dict[str, Any]:
    return {"output_type": "display_data", "metadata": {},
            "data": {"text/markdown": markdown_text, "text/plain": plain}}


def notebook(summary: SessionSummary, turns: list[Turn],
             truncate: int | None = None) -> dict[str, Any]:
    """The session as a notebook (nbformat 4.5) on the Lily kernel."""
    cells: list[dict[str, Any]] = [{
        "cell_type": "markdown", "id": cell_id(), "metadata": {},
        "source": (f"# Lily session {summary.id[:12]}\n\nExported from the journal by "
                   f"`lily logs export`: {summary.requests} request(s), "
                   f"{summary.tool_calls} tool call(s), models: "
                   f"{', '.join(summary.models) or '-'}.")}]
    count = 0
    for turn in turns:
        if not turn.is_cell:
            continue
        count += 1
        outputs = []
        for call in turn.calls:
            result = "" if call.result is None else cut(call.result, truncate)
            md = (f"**tool call** `{call.name}` {_fence(cut(_args(call.args), truncate), 'json')}"
                  f"\n\nresult:\n\n{_fence(result)}")
            outputs.append(_display(md, f"tool call {call.name}: {_args(call.args)}\n{result}"))
        for error in turn.errors:
            outputs.append({"output_type": "stream", "name": "stderr", "text": f"Error: {error}\n"})
        for answer in turn.answers:
            line = _usage(turn)
            outputs.append(_display(answer + (f"\n\n<sub>{line}</sub>" if line else ""),
                                    answer + (f"\n\n[{line}]" if line else "")))
        cells.append({"cell_type": "code", "id": cell_id(), "execution_count": count,
                      "metadata": {"lily": {"kind": turn.kind, "time": iso(turn.t),
                                            "ok": turn.ok}},
                      "source": turn.text, "outputs": outputs})
    return {"nbformat": 4, "nbformat_minor": 5, "cells": cells,
            "metadata": {"kernelspec": dict(KERNELSPEC), "language_info": dict(LANGUAGE_INFO),
                         "lily": {"session_id": summary.id, "label": summary.label}}}


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (UTF-8), creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def write_notebook(path: Path, nb: dict[str, Any]) -> None:
    """Write the notebook ``nb`` to ``path`` as JSON, as Jupyter does (indent 1)."""
    write_text(path, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
