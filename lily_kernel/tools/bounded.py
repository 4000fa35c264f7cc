"""Run a function for at most a few seconds: how slow library code ends as "(… timed out)".

The notebook tools call library code (``DataFrame.head``, NumPy statistics) in the
kernel's main thread, where the agent loop runs; they call no code of the notebook's own
classes at all, because such code can swallow every exception sent to stop it. On the main thread of a Unix process
whose SIGALRM is free, :func:`call` arms ``signal.setitimer`` and the alarm
raises :class:`TooSlow` inside the function: the work really stops, like a
Ctrl-C the user could have pressed, and the timer re-fires every 50 ms in case
the code swallows the first one. Anywhere else (another thread, Windows, a
SIGALRM handler of the user's) it runs the function in a daemon thread and
stops waiting at the bound; that thread is abandoned and may finish later.
Neither can stop a long C loop that never returns to Python. See
docs/notebook-tools.md#bounds.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

REFIRE = 0.05


class TooSlow(BaseException):
    """Raised inside the bounded function when its time is up (a BaseException, so a
    plain ``except Exception`` in user code does not swallow it)."""


def call(fn: Callable[[], Any], seconds: float) -> tuple[bool, Any]:
    """``(True, value)``, ``(True, exception)`` when ``fn`` raised, or ``(False, None)``
    when it did not finish within ``seconds``."""
    if _alarm_usable():
        return _with_alarm(fn, seconds)
    return _with_thread(fn, seconds)


def _alarm_usable() -> bool:
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return False
    try:
        return (signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None)
                and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))
    except (ValueError, OSError):
        return False


def _with_alarm(fn: Callable[[], Any], seconds: float) -> tuple[bool, Any]:
    armed = [True]

    def ring(signum: int, frame: FrameType | None) -> None:
        if armed[0]:
            raise TooSlow()

    previous = signal.signal(signal.SIGALRM, ring)
    box: list[Any] = []
    try:
        _run_armed(fn, seconds, armed, box)
    except TooSlow:
        pass  # the alarm is already off here (see _run_armed's finally)
    finally:
        signal.signal(signal.SIGALRM, previous)
    return (True, box[0]) if box else (False, None)


def _run_armed(fn: Callable[[], Any], seconds: float, armed: list[Any], box: list[Any]) -> None:
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds, REFIRE)
        try:
            box.append(fn())
        except TooSlow:
            raise
        except Exception as exc:
            box.append(exc)
    finally:
        while True:  # disarm, even if the alarm rings while we do
            try:
                armed[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                break
            except TooSlow:
                continue


def _with_thread(fn: Callable[[], Any], seconds: float) -> tuple[bool, Any]:
    box: list[Any] = []

    def work() -> None:
        try:
            box.append(fn())
        except Exception as exc:
            box.append(exc)

    worker = threading.Thread(target=work, name="lily-bounded", daemon=True)
    worker.start()
    worker.join(seconds)
    return (True, box[0]) if box else (False, None)
