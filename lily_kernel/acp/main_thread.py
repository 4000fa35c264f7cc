"""The core's work on the main thread of ``lily acp``, one job at a time, where SIGINT
interrupts it as ■ interrupts a kernel cell (docs/front-ends.md#acp).

The SDK's connection runs on an asyncio loop in another thread and hands each request's
core part here (:meth:`MainThread.submit`); ``session/cancel`` interrupts the running job of
its session (:meth:`MainThread.interrupt`) and cancels that session's waiting ones.
"""
from __future__ import annotations

import concurrent.futures
import queue
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class _Job:
    fn: Callable[[], Any]
    session_id: str | None
    future: concurrent.futures.Future[Any]
    cancelled: bool = False  # cancelled before it ran: it never runs


class MainThread:
    """The core's work, one job at a time on the main thread, where SIGINT interrupts it."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._waiting: list[_Job] = []  # submitted, not yet started
        self._lock = threading.Lock()
        self._running: _Job | None = None
        self._interruptible = False
        self._cancel_sent = False
        self._main = threading.main_thread().ident

    def submit(self, fn: Callable[[], T], session_id: str | None = None
               ) -> concurrent.futures.Future[T]:
        """Run ``fn`` on the main thread after the jobs before it."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        job = _Job(fn, session_id, future)
        with self._lock:
            self._waiting.append(job)
        self._jobs.put(job)
        return future

    def interrupt(self, session_id: str | None = None) -> bool:
        """Interrupt the running job (of ``session_id``, when given), as ■ does a cell; the
        session's jobs still waiting are cancelled too."""
        with self._lock:
            for waiting in self._waiting:
                if session_id is not None and waiting.session_id == session_id:
                    waiting.cancelled = True
            job = self._running
            if job is None or not self._interruptible:
                return False
            if session_id is not None and job.session_id != session_id:
                return False
            self._cancel_sent = True
            assert self._main is not None
            signal.pthread_kill(self._main, signal.SIGINT)
            return True

    def stop(self) -> None:
        """No more jobs (the client is gone): the running one is interrupted, those waiting
        never run, and :meth:`serve` returns."""
        with self._lock:
            for waiting in self._waiting:
                waiting.cancelled = True
        self.interrupt()
        self._jobs.put(None)

    def _on_sigint(self, signum: int, frame: object) -> None:
        if self._interruptible:
            raise KeyboardInterrupt
        if self._cancel_sent:  # a cancel that arrived as its job ended: nothing to stop
            self._cancel_sent = False
            return
        raise KeyboardInterrupt  # Ctrl-C while idle: stop serving

    def serve(self) -> None:
        """Run jobs until :meth:`stop` (or SIGINT while idle, or SIGTERM); the process's
        own SIGINT and SIGTERM handlers are back when it returns."""
        previous = (signal.signal(signal.SIGINT, self._on_sigint),
                    signal.signal(signal.SIGTERM, _on_sigterm))
        try:
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                self._run(job)
        finally:
            for number, handler in zip((signal.SIGINT, signal.SIGTERM), previous, strict=True):
                if handler is not None:
                    signal.signal(number, handler)

    def _run(self, job: _Job) -> None:
        value: Any = None
        error: BaseException | None = None
        with self._lock:
            self._waiting.remove(job)
        if job.cancelled:
            job.future.set_result("cancelled")
            return
        try:
            with self._lock:
                self._running, self._cancel_sent = job, False
                self._interruptible = True
            try:
                value = job.fn()
            finally:
                self._interruptible = False
        except KeyboardInterrupt:
            value = "cancelled"
        except Terminated:  # the process stops: the turn ends cancelled, then serve() returns
            self._interruptible = False
            with self._lock:
                self._running = None
            job.future.set_result("cancelled")
            raise
        except BaseException as exc:  # handed to the awaiting request, never lost
            error = exc
        self._interruptible = False
        with self._lock:
            self._running = None
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(value)


class Terminated(SystemExit):
    """SIGTERM arrived (a client stopping its agent): the sessions' ends are journaled."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated(0)
