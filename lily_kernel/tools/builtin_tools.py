"""Tools every session starts with, confined to the session's workspace.

``read``, ``write``, ``edit`` and ``list`` are the workspace file tools; ``scan_todos``
backs the ``todo_scan`` skill (``/todos``) and ``compile_plan`` turns notes into
the plan format of docs/agent.md#tools without a model; both serve deterministic
``tool_dispatch`` skills. Every file operation goes through the session's
:class:`~lily_kernel.tools.workspace_fs.WorkspaceFS` (docs/trust-boundary.md):
no symlink followed, regular files only, protected paths refused, reads and
writes capped.
"""
from __future__ import annotations

import codecs
import difflib
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from lily_kernel.errors import ToolError
from lily_kernel.settings.limits import Limits
from lily_kernel.tools import workspace_fs
from lily_kernel.tools.tool_registry import ToolRegistry

# Folders /todos never enters (docs/trust-boundary.md#scan_todos); any folder whose name
# starts with "." and any virtual environment (pyvenv.cfg, conda-meta) is skipped too.
SKIP_DIRS = {".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__",
             ".ipynb_checkpoints", ".lily", ".mypy_cache", ".pytest_cache", ".tox",
             "build", "dist"}
TODO_RE = re.compile(r"\b(TODO|FIXME|XXX|HACK)\b(?:\([^)]*\))?(?::|\s|$)\s*(.*)")
READ_ONLY = {"readOnlyHint": True}
MAX_SCAN_BYTES = 1_000_000
MAX_NOTEBOOK_BYTES = 16_000_000  # saved outputs (images) make notebooks large; only sources count


def default_files(workspace: Path) -> Callable[[], workspace_fs.WorkspaceFS]:
    """The boundary of a registry built outside a session: protected set from the process
    environment, default caps; computed once, on first use."""
    box: list[workspace_fs.WorkspaceFS] = []

    def files() -> workspace_fs.WorkspaceFS:
        if not box:
            from lily_kernel.skills.paths import persona_dirs
            box.append(workspace_fs.for_session(workspace, Limits(), persona_dirs(workspace),
                                                os.environ))
        return box[0]
    return files


def register_builtins(registry: ToolRegistry, workspace: Path,
                      files: Callable[[], workspace_fs.WorkspaceFS] | None = None) -> None:
    """Add the built-in tools, bound to ``workspace``, to ``registry``.

    ``files`` gives the current boundary (a session passes its own, so its ``[limits]`` and
    protected set apply, and a ``/new`` that re-reads lily.toml takes effect).
    """
    fs = files or default_files(Path(workspace))

    @registry.register(name="read", annotations=READ_ONLY)
    def read_file(path: str) -> str:
        """Read a workspace text file."""
        return fs().read(path)

    @registry.register(name="write", change=lambda args: write_change(fs(), args),
                       annotations={"readOnlyHint": False, "destructiveHint": True})
    def write_file(path: str, content: str) -> str:
        """Write a workspace text file."""
        write_change(fs(), {"path": path, "content": content})  # refuses a non-text file
        fs().write(path, content)
        return f"wrote {len(content)} characters to {path}"

    @registry.register(name="edit", change=lambda args: edit_change(fs(), args),
                       annotations={"readOnlyHint": False, "destructiveHint": True})
    def edit_file(path: str, old: str, new: str) -> str:
        """Replace one exact text in a workspace file.

        `old` must occur exactly once in the file, as the file holds it; the rest of the
        file is kept. A new file is written with `write`.
        """
        fs().write(path, edited(fs(), {"path": path, "old": old, "new": new})[1])
        return f"replaced 1 occurrence in {path}"

    @registry.register(name="list", annotations=READ_ONLY)
    def list_files(path: str = ".") -> str:
        """List a workspace folder (folders end with '/')."""
        return "\n".join(name + ("/" if is_dir else "") for name, is_dir in fs().list(path))

    @registry.register(name="scan_todos", annotations=READ_ONLY)
    def scan_todos(input: str = "") -> str:
        """Find TODO/FIXME/XXX/HACK markers in the workspace.

        `input` is an optional folder or file relative to the workspace. Returns
        a Markdown table of file, line and note, in path order.
        """
        where = input.strip().splitlines()[0] if input.strip() else "."
        where = "/".join(workspace_fs.split(where)) or "."
        hits = [hit for path, data in fs().scan(where, _scan_limit, _skip_dir)
                for hit in _markers(path, data)]
        if not hits:
            return f"No TODO, FIXME, XXX or HACK markers under `{where}`."
        lines = [f"**{len(hits)} marker{'s' if len(hits) != 1 else ''}** under `{where}`:", "",
                 "| file | line | marker | note |", "| --- | ---: | --- | --- |"]
        for shown, lineno, tag, note in hits:
            note = note.strip().replace("|", "\\|")[:120]
            lines.append(f"| {shown} | {lineno} | {tag} | {note} |")
        return "\n".join(lines)

    registry.register(compile_plan, annotations=READ_ONLY)


#: What :func:`write_change` says of a write that would change nothing: the agent answers
#: "no change" without a card and without writing (docs/agent.md#loop-hygiene).
NO_CHANGE = "(no change: the file already holds exactly this content)"


def write_change(fs: workspace_fs.WorkspaceFS, args: Mapping[str, Any]) -> str | None:
    """What a ``write`` would change in a file that exists: a unified diff; None for a new
    file. ToolError when the write would be refused (a protected path, past the cap, a file
    the boundary will not open, a file that is not UTF-8 text): no card is shown for it.
    Read through the file boundary, never around it (docs/notebook-tools.md#confirmation)."""
    path, content = args.get("path"), args.get("content")
    if not isinstance(path, str) or not isinstance(content, str):
        return None
    fs.check_write(path, content)
    found = _current_text(fs, path, "write replaces")
    if found is None:
        return None
    old, size = found
    if size > fs.read_bytes:
        return (f"(the file exists and holds {size:,} bytes, more than a read shows: "
                "the whole file is replaced)")
    return _diff(path, old, content)


def _current_text(fs: workspace_fs.WorkspaceFS, path: str,
                  verb: str) -> tuple[str, int] | None:
    """What a file holds now, as far as a read shows, and its size; None when there is no
    file (a write would create one: the folders on its way are checked). ToolError when the
    boundary refuses it, or what was read is not UTF-8 text (``verb``: the tool and what it
    does, for that line)."""
    try:
        data, size = fs.read_bytes_of(path, verb="write")
    except ToolError:
        if os.path.lexists(os.path.join(fs.root, *workspace_fs.split(path))):
            raise  # there is something there the boundary refuses: so is the write
        fs.check_new(path)  # a new file: the folders on its way must pass too
        return None
    complete = size <= fs.read_bytes
    try:  # a cut file may end inside a character: only what was read must be text
        return codecs.getincrementaldecoder("utf-8")().decode(data[:fs.read_bytes], complete), size
    except UnicodeDecodeError:
        raise ToolError(f"'{_shown(path)}' is not UTF-8 text ({size:,} bytes, sha256 "
                        f"{hashlib.sha256(data).hexdigest()[:16]}…{'' if complete else ' of the first bytes'}); "
                        f"{verb} text files only, so it leaves this one as it is") from None


def _shown(path: str) -> str:
    return "/".join(workspace_fs.split(path)) or path


def _diff(path: str, old: str, new: str) -> str:
    """The unified diff of a file's text, or :data:`NO_CHANGE`."""
    shown = _shown(path)
    diff = "".join(difflib.unified_diff(old.splitlines(keepends=True),
                                        new.splitlines(keepends=True),
                                        f"a/{shown}", f"b/{shown}"))
    return diff or NO_CHANGE


def edited(fs: workspace_fs.WorkspaceFS, args: Mapping[str, Any]) -> tuple[str, str]:
    """The text an ``edit`` call finds in its file and the text it leaves there: ``old``
    replaced by ``new``, once. ToolError, naming the call that would work, when ``old`` is
    empty, not in the file or in it more than once, or the file is missing, not text or
    larger than a read shows."""
    path, old, new = args.get("path"), args.get("old"), args.get("new")
    if not isinstance(path, str) or not isinstance(old, str) or not isinstance(new, str):
        raise ToolError("edit takes path, old and new as strings, e.g. "
                        'edit(path="settings.txt", old="debug = true", new="debug = false")')
    shown = _shown(path)
    if not old:
        raise ToolError(f"old is empty: give the exact text of {shown} to replace "
                        f'(read(path="{shown}") shows it); write(path, content) writes a whole file')
    found = _current_text(fs, path, "edit changes")
    if found is None:
        raise ToolError(f"no file '{shown}' in the workspace; edit changes a file that exists: "
                        f'write(path="{shown}", content=...) creates one')
    text, size = found
    if size > fs.read_bytes:
        raise ToolError(f"'{shown}' holds {size:,} bytes, more than a read shows "
                        f"({fs.read_bytes:,}): edit would not see the whole file")
    count = text.count(old)
    if count == 0:
        raise ToolError(f"{old!r} is not in {shown}: old must be the file's text exactly, "
                        f'spaces and case included (read(path="{shown}") shows it)')
    if count > 1:
        raise ToolError(f"{old!r} occurs {count} times in {shown}: give old with enough of "
                        "the text around it to occur once")
    return text, text.replace(old, new, 1)


def edit_change(fs: workspace_fs.WorkspaceFS, args: Mapping[str, Any]) -> str | None:
    """What an ``edit`` would change: the diff of the whole file (:data:`NO_CHANGE` when
    ``new`` is ``old``). ToolError when the edit, or the write it makes, would be refused."""
    before, after = edited(fs, args)
    fs.check_write(str(args["path"]), after)
    return _diff(str(args["path"]), before, after)


_CONSTRAINT_RE = re.compile(r"^(constraints?:|must\b|must not\b|never\b|do not\b|don't\b|"
                            r"without\b|no more than\b|at most\b|at least\b|only\b)", re.I)
_PHASE_RE = re.compile(r"^(#+\s*|phase\b[^:]*:\s*)(.*)$", re.I)
_BULLET_RE = re.compile(r"^([-*+]|\d+[.)]|\[[ xX]\])\s+")


def compile_plan(input: str = "") -> str:
    """Compile notes into a plan: Objective, Constraints, Phases, Steps (docs/agent.md#tools).

    The first line is the objective. Lines that start like a constraint ("must",
    "never", "without", "constraint:" ...) are constraints. Headings ("## ...")
    or "Phase ...:" lines open a phase; every other line is a step of the
    current phase. Deterministic: the same notes give the same plan.
    """
    lines = [line.strip() for line in input.splitlines() if line.strip()]
    if not lines:
        raise ToolError("give the notes to compile, e.g. /plan followed by the goal and steps "
                        "on the next lines")
    objective = _BULLET_RE.sub("", lines[0]).rstrip(".") + "."
    constraints: list[str] = []
    phases: list[tuple[str, list[str]]] = []
    for line in lines[1:]:
        text = _BULLET_RE.sub("", line)
        phase = _PHASE_RE.match(text)
        if phase and (text.startswith("#") or text.lower().startswith("phase")):
            phases.append((phase.group(2).strip().rstrip(":") or f"Phase {len(phases) + 1}", []))
        elif _CONSTRAINT_RE.match(text):
            constraints.append(re.sub(r"^constraints?:\s*", "", text, flags=re.I))
        else:
            if not phases:
                phases.append(("Do the work", []))
            phases[-1][1].append(text)
    out = ["# Plan", "", "## Objective", objective, "", "## Constraints"]
    out += [f"- {c}" for c in constraints] or ["- (none stated)"]
    out += ["", "## Phases"]
    out += [f"{i}. {name} ({len(steps)} step{'s' if len(steps) != 1 else ''})"
            for i, (name, steps) in enumerate(phases, 1)] or ["1. (no steps given)"]
    out += ["", "## Steps"]
    for i, (_name, steps) in enumerate(phases, 1):
        out += [f"- [ ] {i}.{j} {step}" for j, step in enumerate(steps, 1)]
    if not any(steps for _, steps in phases):
        out.append("- [ ] Break the objective into steps")
    return "\n".join(out)


def _scan_limit(name: str) -> int:
    return MAX_NOTEBOOK_BYTES if name.endswith(".ipynb") else MAX_SCAN_BYTES


def _skip_dir(fd: int, name: str) -> bool:
    """Version control, caches, Lily's state and virtual environments are not the user's work."""
    if name in SKIP_DIRS or name.startswith("."):
        return True
    for marker in ("pyvenv.cfg", "conda-meta"):
        try:
            os.stat(marker, dir_fd=fd, follow_symlinks=False)
            return True
        except OSError:
            pass
    return False


def _markers(path: str, data: bytes) -> Iterator[tuple[str, int, str, str]]:
    """(file cell, line, marker, note) of each marker in one file's bytes."""
    if path.endswith(".ipynb"):
        for number, source in _notebook_sources(data):
            for lineno, tag, note in _line_markers(source):
                yield f"`{path}` cell {number}", lineno, tag, note
        return
    if b"\0" in data[:4096]:
        return
    for lineno, tag, note in _line_markers(data.decode("utf-8", errors="replace")):
        yield f"`{path}`", lineno, tag, note


# A marker counts in a comment (after a comment opener on its line) or at the start of a
# line (after a list bullet or heading marks); the word in running prose ("Which TODO
# markers are there?") or in a string is not a marker (docs/agent.md#tools).
_COMMENT_OPENERS = ("#", "//", "/*", "<!--", "--", ";")
_LINE_START = re.compile(r"^\s*(?:[-*+>]\s+|\d+[.)]\s+|#+\s*|\[[ xX]\]\s+)*$")


def _line_markers(text: str) -> Iterator[tuple[int, str, str]]:
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in TODO_RE.finditer(line):
            before = line[:m.start()]
            if _LINE_START.match(before) or any(o in before for o in _COMMENT_OPENERS):
                yield lineno, m.group(1), m.group(2)
                break


def _notebook_sources(data: bytes) -> Iterator[tuple[int, str]]:
    """(cell number, source) of a notebook's code and Markdown cells; never their outputs."""
    try:
        nb = json.loads(data.decode("utf-8", errors="replace"))
        cells = nb.get("cells") if isinstance(nb, dict) else None
    except (ValueError, RecursionError):
        return
    if not isinstance(cells, list):
        return
    for number, cell in enumerate(cells, 1):
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown"):
            continue
        source = cell.get("source")
        if isinstance(source, list):
            source = "".join(s for s in source if isinstance(s, str))
        if isinstance(source, str):
            yield number, source
