"""The process's one timer thread (lily_kernel/agent/timers.py): entries run, repeat, cancel,
survive a failing neighbour, and never start a thread per entry. No timing is asserted: every
wait is an event with a generous bound."""
from __future__ import annotations

import threading

from lily_kernel.agent.timers import Timers


def test_an_entry_runs_once_and_a_cancelled_one_never():
    timers = Timers(name="lily-timers-test")
    busy, gate, ran, cancelled = threading.Event(), threading.Event(), threading.Event(), []

    def hold() -> None:  # keeps the thread busy while the next entry is added and cancelled
        busy.set()
        gate.wait(30)
    timers.add(0.0, hold)
    assert busy.wait(30)
    key = timers.add(0.0, lambda: cancelled.append(1))  # due at once, but the thread is busy
    timers.cancel(key)
    timers.add(0.0, ran.set)
    gate.set()
    assert ran.wait(30)
    assert cancelled == []


def test_an_entry_repeats_with_the_delay_it_returns_until_none():
    timers = Timers(name="lily-timers-test")
    count, done = [], threading.Event()

    def tick() -> float | None:
        count.append(1)
        if len(count) == 3:
            done.set()
            return None
        return 0.0
    timers.add(0.0, tick)
    assert done.wait(30)
    assert len(count) == 3


def test_a_failing_callback_does_not_stop_the_others_and_one_thread_serves_all():
    timers = Timers(name="lily-timers-test-one")
    done = [threading.Event() for _ in range(20)]

    def boom() -> None:
        raise RuntimeError("a display failed")
    timers.add(0.0, boom)
    for event in done:
        timers.add(0.0, event.set)
    assert all(event.wait(30) for event in done)
    names = [t.name for t in threading.enumerate()]
    assert names.count("lily-timers-test-one") == 1


def test_a_later_entry_does_not_wake_the_thread_and_an_earlier_one_does():
    """The thread sleeps until its soonest entry: one due later (a request's deadline) is
    added without waking it; one due sooner wakes it and runs on time."""
    timers = Timers(name="lily-timers-test-wake")
    wakes = []
    real_notify = timers._cond.notify

    def notify(n: int = 1) -> None:
        wakes.append(n)
        real_notify(n)
    timers._cond.notify = notify  # type: ignore[method-assign]
    first = timers.add(3600.0, lambda: None)  # starts the thread, which sleeps an hour
    for _ in range(50):
        for _ in range(200):  # until the thread sleeps (an event wait, no timing asserted)
            with timers._cond:
                if timers._wake != float("-inf"):
                    break
            threading.Event().wait(0.01)
        timers.cancel(timers.add(7200.0, lambda: None))
    assert wakes == []
    ran = threading.Event()
    timers.add(0.0, ran.set)
    assert ran.wait(30) and wakes
    timers.cancel(first)
