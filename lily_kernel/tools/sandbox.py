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

The work for Python code is tools/sandboxed_code.py. Standard library only.
"""
from __future__ import annotations

import enum
import json
import os
import select
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from lily_kernel.tools import confinement
from lily_kernel.tools.confinement import Limits

__all__ = ["DEFAULT_LIMITS", "Limits", "SandboxRun", "Status", "run_work", "unavailable"]

OFF_VALUES = ("0", "off", "false", "no")  # LILY_SANDBOX=off turns the sandbox off
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
        return "LILY_SANDBOX=off turned it off"
    return _probe()


_PROBED: list[str | None] = []  # the machine's answer, once known


def _probe() -> str | None:
    """The machine's answer, once per process: a real child confined and back (a probe
    that ran out of time, on a loaded machine, is tried again next time)."""
    if _PROBED:
        return _PROBED[0]
    reason = confinement.unsupported()
    if reason is None:
        try:
            probe = run_work(lambda: True, limits=Limits(seconds=20))
        except OSError as exc:
            reason = f"the sandbox could not start a child ({exc})"
        else:
            if probe.status is Status.TIMEOUT:
                return "the sandbox's probe did not answer within 20 s"
            if probe.status is not Status.DONE or probe.result is not True:
                reason = f"the sandbox failed its probe: {probe.detail or probe.status.value}"
    _PROBED.append(reason)
    return reason


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
    try:
        data, how = _read(read_fd, start + limits.seconds, limits.result_bytes)
    finally:  # an interrupt too: the child never outlives the call
        os.close(read_fd)
        _kill(pid)
        status = _reap(pid)
    seconds = time.monotonic() - start
    if how is Status.TIMEOUT:
        return SandboxRun(how, None, f"the code ran longer than {limits.seconds:g} s", seconds)
    if how is Status.TOO_LARGE:
        return SandboxRun(how, None, f"its result passed {limits.result_bytes:,} bytes", seconds)
    try:
        message = json.loads(data) if data else {}
    except ValueError:
        message = {}
    if not isinstance(message, dict):  # the code may have written to the pipe itself
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


def _reap(pid: int) -> int:
    """Wait for the killed child (no zombie); an interrupt meanwhile is raised after."""
    pending: BaseException | None = None
    while True:
        try:
            status = os.waitpid(pid, 0)[1]
            break
        except KeyboardInterrupt as exc:  # a second ■: the child is dead, reap it first
            pending = exc
        except ChildProcessError:
            status = 0
            break
    if pending is not None:
        raise pending
    return status


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
