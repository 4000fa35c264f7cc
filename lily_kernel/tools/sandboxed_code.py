"""Python code run in the sandbox (docs/sandbox.md#what-the-code-gets).

:func:`run_code` runs code through tools/sandbox.py's confined child: what it printed
(bounded, the first and the last half kept), the last expression, the exception (type,
message, the failing line) and the figures it drew (described as text, tools/figures.py,
and as PNG when small). The Jupyter face adds IPython's transforms and displays
(``ShellNotebook.run_sandboxed``). Whatever the child sends back is checked before it is
believed: its code could have written anything. Standard library only.
"""
from __future__ import annotations

import base64
import difflib
import io
import linecache
import re
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from lily_kernel.tools import figures
from lily_kernel.tools.notebook_tools import exec_cell
from lily_kernel.tools.sandbox import DEFAULT_LIMITS, Limits, Status, run_work

OUTPUT_CHARS = 60_000  # printed text the child keeps (the first half and the last half)
FIGURES = 4  # figures sent back per run
PNG_BYTES = 512 * 1024  # a larger PNG is sent as its description only
CODE_FILE = "<run_python code>"
REPLAY_FILE = "<an earlier run_python code>"  # what a replayed run is called (replay=)


@dataclass(frozen=True)
class CodeError:
    """The exception the code raised: its type, message, failing line, the traceback."""

    ename: str
    evalue: str
    line: int | None
    line_text: str
    traceback: str
    hint: str = ""  # what the code meant, when Lily can tell (:func:`missing_columns`)


@dataclass(frozen=True)
class Figure:
    """A figure the code drew: its description (tools/figures.py) and its PNG, if small."""

    text: str
    png: bytes | None = None


@dataclass(frozen=True)
class CodeResult:
    """One sandboxed run of code; ``detail`` says why when ``status`` is not DONE."""

    status: Status
    output: str = ""  # what it printed, then the text of what it showed and drew
    error: CodeError | None = None
    figures: tuple[Figure, ...] = ()
    displays: tuple[dict[str, Any], ...] = ()  # MIME bundles the code displayed (a face's)
    detail: str = ""
    seconds: float = 0.0
    printed: str = ""  # what it printed only (stdout and stderr, bounded)


#: A face's capture of what the code displays: a context whose list holds the MIME bundles
#: after it exits (the Jupyter face's is IPython's capture_output).
Displays = Callable[[], AbstractContextManager[list[dict[str, Any]]]]


def run_code(code: str, namespace: dict[str, Any], *, workspace: Path | None = None,
             limits: Limits = DEFAULT_LIMITS, transform: Callable[[str], str] | None = None,
             display: Callable[[Any], Any] | None = None,
             displays: Displays | None = None, replay: Sequence[str] = ()) -> CodeResult:
    """Run ``code`` in the sandbox against ``namespace`` (as it is now: the child's copy).
    ``transform`` turns the cell into Python (IPython's magics), ``display`` shows the last
    expression (default: its repr in the output), ``displays`` captures what is shown.
    ``replay``: code run first in the child, in order, its output, figures and errors
    dropped — the request's earlier runs, so the names they defined are there (within the
    same limits)."""
    def work() -> dict[str, Any]:
        return _execute(code, namespace, transform, display, displays, replay)
    run = run_work(work, workspace, limits)
    if run.status is not Status.DONE or not isinstance(run.result, dict):
        return CodeResult(run.status, detail=run.detail, seconds=run.seconds)
    try:  # the child's code could have written anything: nothing of it is trusted
        got = run.result
        error = CodeError(**got["error"]) if got.get("error") else None
        shown = tuple(Figure(str(f["text"]), base64.b64decode(f["png"]) if f.get("png")
                             else None) for f in got["figures"][:FIGURES])
        return CodeResult(Status.DONE, str(got["output"]), error, shown,
                          tuple(dict(d) for d in got["displays"][:FIGURES * 2]),
                          seconds=run.seconds, printed=str(got["printed"]))
    except (KeyError, TypeError, ValueError, AttributeError):
        return CodeResult(Status.ENDED, detail="the child's result was not the sandbox's",
                          seconds=run.seconds)


class _Bounded(io.TextIOBase):
    """A text stream that keeps the first and the last :data:`OUTPUT_CHARS` / 2 characters
    (the tail trimmed now and then, so a flood costs linear time)."""

    def __init__(self) -> None:
        self.head: list[str] = []
        self.tail: list[str] = []
        self.size = self.tail_size = self.total = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        half, written = OUTPUT_CHARS // 2, len(text)
        self.total += written
        if self.size < half:
            taken = text[:half - self.size]
            self.head.append(taken)
            self.size += len(taken)
            text = text[len(taken):]
        if text:
            self.tail.append(text)
            self.tail_size += len(text)
            if self.tail_size > 4 * half:
                self.tail = ["".join(self.tail)[-half:]]
                self.tail_size = half
        return written

    def text(self) -> str:
        half = OUTPUT_CHARS // 2
        tail = "".join(self.tail)[-half:]
        cut = self.total - self.size - len(tail)
        return "".join(self.head) + (f"\n[… {cut:,} characters cut …]\n" if cut else "") + tail


def _execute(code: str, namespace: dict[str, Any], transform: Callable[[str], str] | None,
             display: Callable[[Any], Any] | None, displays: Displays | None,
             replay: Sequence[str] = ()) -> dict[str, Any]:  # pragma: no cover - in the child
    """In the child: run the code; what it printed, showed, raised and drew, as JSON."""
    _replay(replay, namespace, transform, displays)
    out = _Bounded()
    sys.stdout = sys.stderr = out
    pyplot = sys.modules.get("matplotlib.pyplot")
    before = set(pyplot.get_fignums()) if pyplot is not None else set()
    shown: list[dict[str, Any]] = []
    error = None
    capture = displays() if displays is not None else nullcontext(shown)
    with capture as bundles:
        try:
            source = transform(code) if transform is not None else code
            linecache.cache[CODE_FILE] = (len(source), None, source.splitlines(True), CODE_FILE)
            exec_cell(SimpleNamespace(user_global_ns=namespace, user_ns=namespace), source,
                      CODE_FILE, display or (lambda value: print(repr(value))))
        except BaseException as exc:  # SystemExit and KeyboardInterrupt are the code's too
            error = _error(exc, namespace)
    drawn = list(_figures(before))
    shown_bounded = [_bounded_bundle(b) for b in bundles[:FIGURES * 2]]
    texts = [b.get("text/plain", "") for b in shown_bounded]
    output = "\n".join(p.rstrip("\n") for p in (out.text(), *texts, *(f["text"] for f in drawn))
                       if p)
    return {"output": output, "printed": out.text(), "error": error, "figures": drawn,
            "displays": shown_bounded}


def _replay(codes: Sequence[str], namespace: dict[str, Any],
            transform: Callable[[str], str] | None,
            displays: Displays | None) -> None:  # pragma: no cover - in the child
    """In the child, before the code: ``codes`` run in ``namespace``, each to its end or its
    first exception, what they print and show dropped and the figures they drew closed."""
    if not codes:
        return
    sys.stdout = sys.stderr = _Bounded()
    for earlier in codes:
        # SystemExit too; what it displays is captured (the face's capture) and dropped
        with suppress(BaseException), \
                displays() if displays is not None else nullcontext([]):
            source = transform(earlier) if transform is not None else earlier
            exec_cell(SimpleNamespace(user_global_ns=namespace, user_ns=namespace), source,
                      REPLAY_FILE, lambda value: None)
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close("all")


def _bounded_bundle(bundle: dict[str, Any]) -> dict[str, str]:
    """A displayed bundle's text (clipped) and its PNG (when small), nothing else."""
    kept = {}
    text, png = bundle.get("text/plain"), bundle.get("image/png")
    if isinstance(text, str):
        kept["text/plain"] = text[:OUTPUT_CHARS]
    if isinstance(png, str) and len(png) <= PNG_BYTES * 4 // 3 + 4:
        kept["image/png"] = png
    return kept


def _error(exc: BaseException, namespace: dict[str, Any]) -> dict[str, Any]:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f.filename == CODE_FILE]
    line = ours[-1].lineno if ours else getattr(exc, "lineno", None) if isinstance(
        exc, SyntaxError) else None
    text = (ours[-1].line or "") if ours else ""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != CODE_FILE:
        tb = tb.tb_next  # the sandbox's own frames are not the user's
    formatted = "".join(traceback.format_exception(type(exc), exc, tb))
    return {"ename": type(exc).__name__, "evalue": str(exc)[:2_000], "line": line,
            "line_text": text.strip()[:500], "traceback": formatted[-6_000:],
            "hint": missing_columns(exc, text, namespace)}


_QUOTED = re.compile(r"'([^'\n]{1,200})'|\"([^\"\n]{1,200})\"")
_NAME = re.compile(r"[A-Za-z_]\w*")
_NOT_IN_INDEX = re.compile(r"^\[(.*)\] not in index$", re.S)
HINT_CHARS = 400  # of the column names in the hint, at most


def missing_columns(exc: BaseException, line: str, namespace: Mapping[str, Any]) -> str:
    """For a ``KeyError`` on a line that indexes a DataFrame: what that frame has instead
    ("df has no column 'year'. Did you mean 'Year'? Its 3 columns: …", the names up to
    :data:`HINT_CHARS` characters), else "". Python names what you meant for a NameError or
    an AttributeError; pandas does not for a column, and a small model guesses column names
    (``data['fare']`` for ``Fare``). Only the frames the failing line names, by the text of
    their names and column labels: nothing else of the data."""
    if not isinstance(exc, KeyError) or not line:
        return ""
    key = str(exc.args[0]) if exc.args else ""
    listed = _NOT_IN_INDEX.match(key)  # pandas' "['a', 'b'] not in index"
    wanted = [a or b for a, b in _QUOTED.findall(listed.group(1))] if listed else [key]
    out = []
    for name in dict.fromkeys(_NAME.findall(line)):
        frame = namespace.get(name)
        if type(frame).__name__ != "DataFrame":
            continue
        try:
            columns = [str(c) for c in frame.columns]  # type: ignore[union-attr]
        except Exception:  # an object that only looks like a frame
            continue
        lacks = [w for w in wanted if w not in columns]
        if not lacks:
            continue
        close = difflib.get_close_matches(lacks[0], columns, n=3, cutoff=0.6) or \
            [c for c in columns if c.lower() == lacks[0].lower()]
        shown = ", ".join(repr(c) for c in columns)
        if len(shown) > HINT_CHARS:
            shown = shown[:shown.rfind(", ", 0, HINT_CHARS)] + ", …"
        meant = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        out.append(f"{name} has no column {lacks[0]!r}.{meant} Its {len(columns)} columns: "
                   f"{shown}.")
    return "\n".join(out[:2])


def _figures(before: set[int]) -> Iterator[dict[str, Any]]:
    """The figures the code opened: each described, with its PNG when small."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    for number in [n for n in pyplot.get_fignums() if n not in before][:FIGURES]:
        fig = pyplot.figure(number)
        try:
            text = figures.describe(fig)
        except Exception:
            text = repr(fig)
        png = io.BytesIO()
        try:
            fig.savefig(png, format="png", dpi=72)
        except Exception:
            png = io.BytesIO()
        data = png.getvalue()
        yield {"text": text, "png": base64.b64encode(data).decode() if 0 < len(data) <= PNG_BYTES
               else None}
