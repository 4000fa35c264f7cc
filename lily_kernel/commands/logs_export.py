"""A session as a Markdown transcript or a notebook on the Lily kernel (docs/logs.md#export).

Both are built from the journal's records through :func:`lily_kernel.session.logs.turns`;
the text is already redacted on disk. Every text that came from the journal (a request,
an answer, a tool's arguments and result, an error, a label) goes through the one
sanitizer, :mod:`lily_kernel.commands.sanitize`, before it enters Markdown: an answer is
Markdown made inert (no raw HTML, no unsafe link), anything else is escaped or fenced, so
no ``<img onerror=...>`` survives into ``lily logs show``, ``--md``, ``--ipynb`` or
``/logs`` (docs/logs.md#export). The notebook is nbformat 4.5 JSON written by hand (no
nbformat dependency in the core) exactly as nbformat writes it, so opening and saving it
changes nothing.
"""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lily_kernel.commands import sanitize
from lily_kernel.errors import CommandError, LogsError, ToolError
from lily_kernel.session.logs import SessionSummary, Turn, iso
from lily_kernel.settings import autorun
from lily_kernel.tools import gate

if TYPE_CHECKING:
    from lily_kernel.session.session import Session

KERNELSPEC = {"display_name": "Lily", "language": "markdown", "name": "lily"}
LANGUAGE_INFO = {"codemirror_mode": "markdown", "file_extension": ".md",
                 "mimetype": "text/markdown", "name": "markdown",
                 "pygments_lexer": "markdown"}
# A command's or a request's outputs in the export are the journal's account of them (the
# tool calls, the answer), not what the kernel shows when the cell runs again: nbval runs
# such a cell and checks it does not fail, and compares the outputs of the %%python cells.
IGNORE_OUTPUT = "nbval-ignore-output"
RAISES = "raises-exception"


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


def _error(text: str) -> str:
    """A journaled error as its one line (``Error: ...``), whichever form it was kept in."""
    return "Error: " + text.removeprefix("Error: ")


def _call_md(name: str, args: Any, result: str | None, truncate: int | None) -> list[str]:
    """A tool call and its result as Markdown blocks: a heading line, then each fence on a
    line of its own."""
    out = [f"**tool call** {sanitize.code_span(name, table=False)}", "",
           sanitize.code_block(cut(_args(args), truncate), "json"), ""]
    if result is not None:
        out += ["**result**", "", sanitize.code_block(cut(result, truncate)), ""]
    return out


def _marks(turn: Turn) -> str:
    return ((" (failed)" if not turn.ok or (turn.kind != "prose" and turn.errors) else "")
            + (" (interrupted)" if turn.interrupted else ""))


def output_summary(output: dict[str, Any]) -> str:
    """One journaled output of a ``%%python`` cell as plain text: its text, and for each
    image its type, size and hash."""
    images = [i for i in output.get("images") or [] if isinstance(i, dict)]
    lines = [str(output.get("text", ""))] if output.get("text") else []
    for image in images:
        size = image.get("bytes")
        lines.append(f"[{image.get('mime', 'image')}"
                     + (f", {size:,} bytes" if isinstance(size, int) else "")
                     + f", sha256 {str(image.get('sha256', '?'))[:16]}…]")
    return "\n".join(lines)


def markdown(summary: SessionSummary, turns: list[Turn],
             truncate: int | None = None) -> str:
    """The session as a Markdown document, inert whatever the journal holds."""
    tokens = ("-" if summary.tokens_in is None
              else f"{summary.tokens_in:,} in / {summary.tokens_out or 0:,} out")
    out = [f"# Lily session {sanitize.md_text(summary.id[:12])}", "",
           f"- notebook: {sanitize.md_text(summary.label or '-')}",
           f"- first request: {sanitize.md_text(summary.first or '-')}",
           f"- started: {iso(summary.started)}",
           f"- last activity: {iso(summary.last)}",
           f"- requests: {summary.requests}, tool calls: {summary.tool_calls}",
           f"- tokens: {tokens}",
           f"- models: {sanitize.md_text(', '.join(summary.models) or '-')}",
           *([f"- **foreign journal**: {sanitize.md_text(summary.foreign)}"]
             if summary.foreign else []), ""]
    n = 0
    for turn in turns:
        if not turn.is_cell:
            out += [f"*{iso(turn.t)} — {sanitize.md_text(turn.text)}*", ""]
            continue
        n += 1
        lang = "python" if turn.kind == "python" else ""
        out += [f"## [{n}] {turn.kind}{_marks(turn)} · {iso(turn.t)}", "",
                sanitize.code_block(turn.text.rstrip("\n"), lang), ""]
        for output in turn.outputs:
            out += [sanitize.code_block(cut(output_summary(output), truncate)), ""]
        for call in turn.calls:
            out += _call_md(call.name, call.args, call.result, truncate)
        for approval in turn.approvals:
            out += [f"*approval: {sanitize.md_text(approval)}*", ""]
        for error in turn.errors:
            out += [f"**{sanitize.md_text(_error(error))}**", ""]
        for answer in turn.answers:
            out += ["**answer**", "", sanitize.markdown(answer), ""]
        line = _usage(turn)
        if line:
            out += [f"*{sanitize.md_text(line)}*", ""]
    return "\n".join(out).rstrip() + "\n"


def cell_id() -> str:
    """A fresh notebook cell id (12 hex characters)."""
    return uuid.uuid4().hex[:12]


def _display(markdown_text: str, plain: str) -> dict[str, Any]:
    return {"output_type": "display_data", "metadata": {},
            "data": {"text/markdown": markdown_text, "text/plain": plain}}


def _python_outputs(turn: Turn, count: int) -> list[dict[str, Any]]:
    """A ``%%python`` cell's outputs as journaled: streams, results, displays (an image by
    its hash, in the output's metadata: the journal keeps no image), its error."""
    outputs: list[dict[str, Any]] = []
    for output in turn.outputs:
        kind, text = output.get("type"), str(output.get("text", ""))
        if kind == "stream":
            outputs.append({"output_type": "stream",
                            "name": "stderr" if output.get("name") == "stderr" else "stdout",
                            "text": text})
        elif kind == "result":
            outputs.append({"output_type": "execute_result", "execution_count": count,
                            "metadata": {}, "data": {"text/plain": text}})
        elif kind == "display":
            images = [i for i in output.get("images") or [] if isinstance(i, dict)]
            outputs.append({"output_type": "display_data", "data": {"text/plain": text},
                            "metadata": {"lily": {"images": images}} if images else {}})
    for error in turn.errors:
        ename, _, evalue = error.partition(": ")
        outputs.append({"output_type": "error", "ename": ename or "Error", "evalue": evalue,
                        "traceback": [error]})
    return outputs


def notebook(summary: SessionSummary, turns: list[Turn],
             truncate: int | None = None) -> dict[str, Any]:
    """The session as a notebook (nbformat 4.5) on the Lily kernel that runs again: its
    ``%%python`` cells, commands and requests in order, each with its outputs."""
    cells: list[dict[str, Any]] = [{
        "cell_type": "markdown", "id": cell_id(), "metadata": {},
        "source": (f"# Lily session {sanitize.md_text(summary.id[:12])}\n\n"
                   f"Exported from the journal by `lily logs export`: notebook "
                   f"{sanitize.md_text(summary.label or '-')}, {summary.requests} request(s), "
                   f"{summary.tool_calls} tool call(s), models: "
                   f"{sanitize.md_text(', '.join(summary.models) or '-')}."
                   + (f"\n\n**Foreign journal**: {sanitize.md_text(summary.foreign)}."
                      if summary.foreign else ""))}]
    count = 0
    for turn in turns:
        if not turn.is_cell:
            continue
        count += 1
        outputs: list[dict[str, Any]] = []
        tags: list[str] = []
        if turn.kind == "python":
            outputs = _python_outputs(turn, count)
        else:
            tags.append(IGNORE_OUTPUT)
            for call in turn.calls:
                result = None if call.result is None else cut(call.result, truncate)
                md = "\n".join(_call_md(call.name, call.args, result, truncate)).rstrip()
                outputs.append(_display(md, f"tool call {call.name}: {_args(call.args)}"
                                            + (f"\n{result}" if result is not None else "")))
            for error in turn.errors:
                outputs.append({"output_type": "stream", "name": "stderr",
                                "text": _error(error) + "\n"})
            for answer in turn.answers:
                line = _usage(turn)
                outputs.append(_display(
                    sanitize.markdown(answer) + (f"\n\n*{sanitize.md_text(line)}*" if line else ""),
                    answer + (f"\n\n[{line}]" if line else "")))
        if not turn.ok or turn.errors or turn.interrupted:
            tags.append(RAISES)
        metadata: dict[str, Any] = {"lily": {"kind": turn.kind, "time": iso(turn.t),
                                             "ok": turn.ok, "interrupted": turn.interrupted}}
        if tags:
            metadata["tags"] = tags
        cells.append({"cell_type": "code", "id": cell_id(), "execution_count": count,
                      "metadata": metadata, "source": turn.text.rstrip("\n"), "outputs": outputs})
    return {"nbformat": 4, "nbformat_minor": 5, "cells": cells,
            "metadata": {"kernelspec": dict(KERNELSPEC), "language_info": dict(LANGUAGE_INFO),
                         "lily": {"session_id": summary.id, "label": summary.label,
                                  **({"foreign": summary.foreign} if summary.foreign else {})}}}


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (UTF-8), creating its folder, once :func:`refusal` allows
    it (LogsError naming the rule otherwise)."""
    problem = refusal(path)
    if problem:
        raise LogsError(f"{problem}; an export is never written there, name another file "
                        "(docs/logs.md#where-exports-go)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def refusal(path: Path) -> str | None:
    """Why Lily writes no export to ``path`` anywhere on disk (``lily logs export``,
    ``replay --to``): a file that runs by itself (settings/autorun.py: a ``.pth``,
    ``sitecustomize.py``, a CI workflow ...), Lily's own state or a git folder, or a place
    where Python or Jupyter run files at start: a Python environment (a folder under one
    holding ``pyvenv.cfg``, ``site-packages``, the interpreter's own folders) or a
    kernelspec. None: an ordinary file."""
    import sysconfig

    from lily_kernel.tools.protected import MARKERS
    full = Path(os.path.abspath(path))
    said = gate.user_write(full.as_posix().lstrip("/"))
    if isinstance(said, gate.Refused):
        return said.reason.replace("' runs", "' is a file that runs", 1)
    folded = [autorun.fold(p) for p in full.parts]
    for name, what in ((".lily", "Lily's state"), (".git", "a git folder (its hooks run)")):
        if name in folded:
            return f"'{full}' is inside {what}"
    if {"site-packages", "dist-packages"} & set(folded):
        return f"'{full}' is inside a Python environment, whose files run at every start"
    for key in ("stdlib", "platstdlib", "purelib", "platlib", "scripts"):
        where = sysconfig.get_paths().get(key)
        if where and (full == Path(where) or Path(where) in full.parents):
            return f"'{full}' is inside the Python installation ({key})"
    for folder in full.parents:
        for marker, what in MARKERS:
            if (folder / marker).is_file():
                return f"'{full}' is inside {what.split(' (')[0]} at {folder}"
    return None


def in_workspace(session: Session, target: str) -> str:
    """``/logs export``'s FILE as a path relative to the session's workspace (CommandError
    when it lies outside: an export goes where ``write`` may write)."""
    path = Path(target).expanduser()
    if path.is_absolute():
        try:
            path = Path(os.path.abspath(path)).relative_to(os.path.abspath(session.workspace))
        except ValueError:
            raise CommandError(f"{target} is outside the workspace; /logs export writes "
                               "inside it, as write does (lily logs export writes anywhere "
                               "else)") from None
    return path.as_posix()


def write_for_user(session: Session, rel: str, text: str) -> None:
    """Write an export the user asked for in a notebook under the rules ``write`` obeys
    (docs/logs.md#where-exports-go): nothing in plan mode; never a file that runs by itself;
    never a protected path, a symlink or past the ``[limits] write_bytes`` cap (the
    workspace's file boundary, tools/workspace_fs.py). CommandError naming the rule."""
    said = gate.user_write(rel, session.permissions.mode, session.workspace)
    if isinstance(said, gate.Refused) and said.kind is gate.Refusal.MODE:
        raise CommandError("in plan mode nothing is written: /mode ask, then /logs export "
                           "again")
    if isinstance(said, gate.Refused):
        raise CommandError(f"{said.reason}; /logs export never writes such a file, name "
                           "another (docs/logs.md#where-exports-go)")
    try:
        session.files.write(rel, text)
    except ToolError as exc:
        raise CommandError(f"cannot export there: {exc}") from None


def notebook_json(nb: dict[str, Any]) -> str:
    """The notebook ``nb`` as the JSON text nbformat writes (multi-line strings as lists of
    lines, keys sorted, indent 1), so reading and writing it with nbformat, as a front end
    does on save, gives the same bytes."""
    for cell in nb["cells"]:
        if isinstance(cell.get("source"), str):
            cell["source"] = cell["source"].splitlines(True)
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and isinstance(output.get("text"), str):
                output["text"] = output["text"].splitlines(True)
            for key, value in output.get("data", {}).items():
                if isinstance(value, str) and key.startswith("text/"):
                    output["data"][key] = value.splitlines(True)
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False,
                      separators=(",", ": ")) + "\n"


def write_notebook(path: Path, nb: dict[str, Any]) -> None:
    """Write the notebook ``nb`` to ``path`` as nbformat would (:func:`notebook_json`)."""
    write_text(path, notebook_json(nb))
