"""The sandbox: the model's code run in a confined fork of the kernel (docs/sandbox.md).

:func:`run_work` forks this process; the child confines itself (tools/confinement.py:
every inherited descriptor closed but its result pipe, no key in its environment, rlimits,
``no_new_privs``, Landlock, seccomp) and only then calls the work, which sees the
notebook's namespace as it was at the fork (copy-on-write: nothing it changes reaches the
parent). The child writes one bounded JSON result to the pipe and ends (``os._exit``). The
parent reads at most :attr:`Limits.result_bytes` until :attr:`Limits.seconds` pass, then
kills the child's process group (the child can make no process outside it: no fork, no
``setsid``), reaps it and removes the scratch folder, whatever happened — an interrupt
(``KeyboardInterrupt``) included, which it raises again. One run at a time per process
(a lock): a fork while another child is being set up would copy its pipe.

:func:`run_code` is the work for Python code: its printed output (bounded), the last
expression, the exception (type, message, the failing line) and the figures it drew
(described as text, tools/figures.py, and as PNG). The Jupyter face adds IPython's
transforms and displays (``ShellNotebook.run_sandboxed``). Standard library only.
"""
from __future__ import annotations

import base64
import enum
import functools
import io
import json
import linecache
import os
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NoReturn

from lily_kernel.tools import confinement, figures
from lily_kernel.tools.confinement import Limits
from lily_kernel.tools.notebook_tools import exec_cell

__all__ = ["CodeError", "CodeResult", "Figure", "Limits", "SandboxRun", "Status", "run_code",
           "run_work", "unavailable"]

OFF_VALUES = ("0", "off", "false", "no")  # LILY_SANDBOX=off turns the sandbox off
OUTPUT_CHARS = 60_000  # printed text the child keeps (the first half and the last half)
FIGURES = 4  # figures sent back per run
PNG_BYTES = 512 * 1024  # a larger PNG is sent as its description only
CODE_FILE = "<run_python code>"
_LOCK = threading.Lock()
DEFAULT_LIMITS = Limits()


class Status(enum.Enum):
    """How a sandboxed run ended."""

    DONE = "done"            # the work returned its result (the code itself may have raised)
    TIMEOUT = "timeout"      # the wall clock ran out: the child's process group was killed
    ENDED = "ended"          # the child ended with no result (a signal, a limit, os._exit)
    TOO_LARGE = "too large"  # its result passed Limits.result_bytes: killed
    FAILED = "failed"        # the sandbox could not start: nothing ran


@dataclass(frozen=True)
class SandboxRun:
    """One run of :func:`run_work`: its status, the work's JSON result, why (one line)."""

    status: Status
    result: Any = None
    detail: str = ""
    seconds: float = 0.0


def unavailable(env: Mapping[str, str] | None = None) -> str | None:
    """None when the sandbox works here; else one short line saying why not (turned off
    with ``LILY_SANDBOX=off``, not Linux, no Landlock or too old, a failed probe)."""
    env = os.environ if env is None else env
    if env.get("LILY_SANDBOX", "").strip().lower() in OFF_VALUES:
        return "the sandbox is turned off (LILY_SANDBOX=off)"
    return _probe()


@functools.lru_cache(maxsize=1)
def _probe() -> str | None:
    """The machine's answer, once per process: a real child confined and back."""
    reason = confinement.unsupported()
    if reason is not None:
        return reason
    try:
        probe = run_work(lambda: True, limits=Limits(seconds=20))
    except OSError as exc:
        return f"the sandbox could not start a child ({exc})"
    if probe.status is not Status.DONE or probe.result is not True:
        return f"the sandbox failed its probe: {probe.detail or probe.status.value}"
    return None


# -- the parent -----------------------------------------------------------------------------

def run_work(work: Callable[[], Any], workspace: Path | None = None,
             limits: Limits = DEFAULT_LIMITS, env: Mapping[str, str] | None = None) -> SandboxRun:
    """Run ``work()`` in a confined child; its return value (JSON-able) comes back."""
    scratch = Path(tempfile.mkdtemp(prefix="lily-sandbox-"))
    try:
        plan = confinement.plan(workspace or Path.cwd(), scratch, env)
        with _LOCK:
            return _fork_and_wait(work, plan, limits)
    finally:
        _remove(scratch)


def _fork_and_wait(work: Callable[[], Any], plan: confinement.Plan,
                   limits: Limits) -> SandboxRun:
    start = time.monotonic()
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except BaseException:
        os.close(read_fd)
        os.close(write_fd)
        raise
    if pid == 0:  # pragma: no cover - the child (its coverage is not collected)
        _child(work, plan, limits, read_fd, write_fd)
    os.close(write_fd)
    with suppress(OSError):  # the child may have done it first
        os.setpgid(pid, pid)  # also here: the group exists before the parent may kill it
    status = 0
    try:
        data, how = _read(read_fd, start + limits.seconds, limits.result_bytes)
    finally:  # an interrupt too: the child never outlives the call
        os.close(read_fd)
        _kill(pid)
        _, status = os.waitpid(pid, 0)
    seconds = time.monotonic() - start
    if how is Status.TIMEOUT:
        return SandboxRun(how, None, f"the code ran longer than {limits.seconds:g} s", seconds)
    if how is Status.TOO_LARGE:
        return SandboxRun(how, None, f"its result passed {limits.result_bytes:,} bytes", seconds)
    try:
        message = json.loads(data) if data else {}
    except ValueError:
        message = {}
    if "ok" in message:
        return SandboxRun(Status.DONE, message["ok"], "", seconds)
    if "failed" in message:
        return SandboxRun(Status.FAILED, None, str(message["failed"]), seconds)
    if "crash" in message:
        return SandboxRun(Status.ENDED, None, str(message["crash"]), seconds)
    return SandboxRun(Status.ENDED, None, _ended(status, limits), seconds)


def _read(fd: int, deadline: float, cap: int) -> tuple[bytes, Status]:
    """What the child wrote until it closed the pipe, the deadline or the cap."""
    chunks: list[bytes] = []
    size = 0
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"", Status.TIMEOUT
        if not poller.poll(max(1, int(left * 1000))):
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks), Status.DONE
        size += len(chunk)
        if size > cap:
            return b"", Status.TOO_LARGE
        chunks.append(chunk)


def _kill(pid: int) -> None:
    """SIGKILL the child's process group (every process it could make is in it)."""
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        with suppress(OSError):
            kill(target, signal.SIGKILL)


def _ended(status: int, limits: Limits) -> str:
    if os.WIFEXITED(status):
        return f"the code ended the process (exit status {os.WEXITSTATUS(status)}) with no result"
    number = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
    if number == signal.SIGXCPU:
        return f"the code used its {limits.cpu_seconds} s of CPU time"
    name = signal.Signals(number).name if number in signal.valid_signals() else str(number)
    return f"the process ended by {name} with no result"


def _remove(scratch: Path) -> None:
    """Remove the scratch folder, even one whose modes the code changed."""
    def unlock(function: Any, path: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
            function(path)
        except OSError:
            pass
    shutil.rmtree(scratch, onerror=unlock)


# -- the child ------------------------------------------------------------------------------

def _child(work: Callable[[], Any], plan: confinement.Plan, limits: Limits, read_fd: int,
           write_fd: int) -> NoReturn:  # pragma: no cover - runs in the child
    code, exit_now = 70, os._exit  # kept before the code runs: it could replace os._exit
    try:
        os.close(read_fd)
        fd = confinement.keep_only(write_fd, plan.scratch)
        try:
            confinement.confine(plan, limits)
        except OSError as exc:
            _write_all(fd, json.dumps({"failed": str(exc)}).encode())
            exit_now(71)
        try:
            message: dict[str, Any] = {"ok": work()}
        except BaseException as exc:  # the work's own failure, never the user's code's
            message = {"crash": f"the sandbox's work failed: {type(exc).__name__}: {exc}"[:500]}
        _write_all(fd, json.dumps(message, default=str).encode())
        code = 0
    finally:
        exit_now(code)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# -- Python code ----------------------------------------------------------------------------

@dataclass(frozen=True)
class CodeError:
    """The exception the code raised: its type, message, failing line, the traceback."""

    ename: str
    evalue: str
    line: int | None
    line_text: str
    traceback: str


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
             displays: Displays | None = None) -> CodeResult:
    """Run ``code`` in the sandbox against ``namespace`` (as it is now: the child's copy).
    ``transform`` turns the cell into Python (IPython's magics), ``display`` shows the last
    expression (default: its repr in the output), ``displays`` captures what is shown."""
    def work() -> dict[str, Any]:
        return _execute(code, namespace, transform, display, displays)
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
             display: Callable[[Any], Any] | None,
             displays: Displays | None) -> dict[str, Any]:  # pragma: no cover - in the child
    """In the child: run the code; what it printed, showed, raised and drew, as JSON."""
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
            error = _error(exc)
    drawn = list(_figures(before))
    shown_bounded = [_bounded_bundle(b) for b in bundles[:FIGURES * 2]]
    texts = [b.get("text/plain", "") for b in shown_bounded]
    output = "\n".join(p.rstrip("\n") for p in (out.text(), *texts, *(f["text"] for f in drawn))
                       if p)
    return {"output": output, "printed": out.text(), "error": error, "figures": drawn,
            "displays": shown_bounded}


def _bounded_bundle(bundle: dict[str, Any]) -> dict[str, str]:
    """A displayed bundle's text (clipped) and its PNG (when small), nothing else."""
    kept = {}
    text, png = bundle.get("text/plain"), bundle.get("image/png")
    if isinstance(text, str):
        kept["text/plain"] = text[:OUTPUT_CHARS]
    if isinstance(png, str) and len(png) <= PNG_BYTES * 4 // 3 + 4:
        kept["image/png"] = png
    return kept


def _error(exc: BaseException) -> dict[str, Any]:
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
            "line_text": text.strip()[:500], "traceback": formatted[-6_000:]}


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
