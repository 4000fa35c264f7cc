"""One timer thread for the whole process: the model request's deadline and the waiting line.

A timer is a dict entry, added when a model request starts and removed when it ends, where
``threading.Timer`` started (and tore down) a thread per request: about 0.1 ms each, more on
a loaded machine, paid on every request that finished in time. The thread starts on first
use (again after a fork: a child has no threads). A callback runs in the timer thread and
returns its next delay, or None when it is done; it must be quick (it delays the others).
See docs/limits-and-secrets.md#deadline.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

__all__ = ["TIMERS", "Timers"]

Callback = Callable[[], "float | None"]


class Timers:
    """Callbacks due at monotonic times, run by one daemon thread."""

    def __init__(self, name: str = "lily-timers") -> None:
        self.name = name
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, Callback]] = {}
        self._count = 0
        self._pid = 0  # the process whose thread runs the entries
        # When the thread looks at the entries next (monotonic; -inf while it is awake): an
        # entry due later needs no wake-up. A request's deadline (added and cancelled per
        # request, due in a minute) then costs a dict entry, not a thread switch.
        self._wake = float("inf")

    def add(self, delay: float, callback: Callback) -> int:
        """Run ``callback`` ``delay`` seconds from now (then after each delay it returns);
        the key to :meth:`cancel` it."""
        with self._cond:
            self._count += 1
            due = time.monotonic() + delay
            self._due[self._count] = (due, callback)
            if self._pid != os.getpid():
                self._pid, self._wake = os.getpid(), float("-inf")
                threading.Thread(target=self._run, name=self.name, daemon=True).start()
            elif due < self._wake:
                self._cond.notify()
            return self._count

    def cancel(self, key: int) -> None:
        """Forget an entry: it does not run again (a run in progress finishes)."""
        with self._cond:
            self._due.pop(key, None)

    def _run(self) -> None:
        pid = os.getpid()
        while True:
            with self._cond:
                if self._pid != pid:
                    return
                now = time.monotonic()
                ready = [(k, cb) for k, (due, cb) in self._due.items() if due <= now]
                if not ready:
                    soonest = min((due for due, _ in self._due.values()), default=None)
                    self._wake = float("inf") if soonest is None else soonest
                    self._cond.wait(None if soonest is None else soonest - now)
                    self._wake = float("-inf")
                    continue
                for key, _ in ready:
                    self._due[key] = (float("inf"), self._due[key][1])  # running: not again
            for key, callback in ready:
                try:
                    again = callback()
                except Exception:  # a failing callback ends its own entry, never the thread
                    again = None
                with self._cond:
                    if key in self._due:  # not cancelled meanwhile
                        if again is None:
                            del self._due[key]
                        else:
                            self._due[key] = (time.monotonic() + again, callback)


#: The process's timers (the deadline of every model request, every waiting line).
TIMERS = Timers()
