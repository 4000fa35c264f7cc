"""Lily kernel against plain ipykernel, measured in the same run.

    .venv/bin/python bench/kernel_roundtrip.py [--starts 5] [--trips 200]

1. Start-to-ready: launch the kernel and wait for its kernel_info reply
   (jupyter_client's wait_for_ready), alternating lily and python3.
2. Round trip: execute_request sent → status idle received on iopub, for
   `/help` and `/skills` on Lily and `pass` on ipykernel, interleaved so both
   kernels see the same machine noise (each round in a new random order in which
   no kernel answers twice in a row: ``fair_order``). The first runs warm up (imports).
   Every `/skills` builds a filter widget of its own (issue 23.4: one filter per
   output); "first /skills" is the round trip right after a `/reload_skills`
   (not counted), kept to compare with the runs from before that change.
   A second baseline, ipykernel displaying the very bundle `/help` displays,
   shows what any cell with that output costs: `pass` sends no output at all.

Prints medians and the ratios Lily / ipykernel. Only ratios are meant to be
compared across runs: these machines are shared and noisy.
"""
from __future__ import annotations

import argparse
import itertools
import random
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import Any

from jupyter_client.manager import start_new_kernel


def start_time(name: str, cwd: str) -> float:
    t0 = time.perf_counter()
    km, kc = start_new_kernel(kernel_name=name, cwd=cwd, startup_timeout=60)
    elapsed = time.perf_counter() - t0
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    return elapsed


def round_trip(kc, code: str) -> float:
    t0 = time.perf_counter()
    msg_id = kc.execute(code, store_history=True)
    while True:
        msg = kc.get_iopub_msg(timeout=30)
        if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status"
                and msg["content"]["execution_state"] == "idle"):
            break
    elapsed = time.perf_counter() - t0
    reply = kc.get_shell_msg(timeout=30)
    assert reply["content"]["status"] == "ok", reply["content"]
    return elapsed


def fair_order(cases: Sequence[tuple[str, Any, str]], rounds: int, seed: int = 0,
               after: Any = None) -> Iterator[tuple[str | None, Any, str]]:
    """The round trips of ``rounds`` rounds of ``cases`` (``(label, client, code)``): each
    round in a new random order, and no kernel answering two round trips in a row, across
    rounds too, nor right after ``after`` (the client of the round trip just before). Where
    a round's order cannot avoid it, a round trip of another kernel's first case goes
    between, not measured (its label is None).

    Why: a kernel that has just answered answers its next request faster (its threads and
    data still warm in the CPU's caches). An order that runs the cases forward, then
    backward, measures the first and last case twice in a row on their kernel every other
    round, and the others never: on two kernels that made the very same cell read 5% faster
    in one position than in another (``perf.py aa`` measures this bias, both ways).
    """
    rng = random.Random(seed)
    firsts: dict[int, tuple[Any, str]] = {}
    for _, kc, code in cases:
        firsts.setdefault(id(kc), (kc, code))
    last = after
    order = list(cases)
    for _ in range(rounds):
        best, fewest = list(order), len(order) + 1
        for _try in range(200):
            rng.shuffle(order)
            kcs = [last, *(kc for _, kc, _ in order)]
            repeats = sum(a is b for a, b in itertools.pairwise(kcs))
            if repeats < fewest:
                best, fewest = list(order), repeats
                if not repeats:
                    break
        for label, kc, code in best:
            if kc is last:
                other = next(first for key, first in firsts.items() if key != id(kc))
                yield None, *other
            yield label, kc, code
            last = kc


# ipykernel builds the bundle Lily's /help displays, to time the same output without Lily.
HELP_BUNDLE = """\
from IPython.display import display
from lily_kernel.commands import help
from lily_kernel.commands import render
from lily_kernel.session import session
_s = session.Session(journal=False)
B = {"text/plain": render.text(help.commands_page(_s.snapshot)),
     "text/markdown": render.markdown(help.commands_page(_s.snapshot))}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=5)
    ap.add_argument("--trips", type=int, default=200)
    args = ap.parse_args()
    cwd = tempfile.mkdtemp(prefix="lily-bench-")

    starts: dict[str, list[float]] = {"lily": [], "python3": []}
    for _ in range(args.starts):
        for name in ("python3", "lily"):
            starts[name].append(start_time(name, cwd))
    s_py, s_lily = statistics.median(starts["python3"]), statistics.median(starts["lily"])
    print(f"start-to-ready   ipykernel {s_py * 1000:7.1f} ms   lily {s_lily * 1000:7.1f} ms   "
          f"ratio {s_lily / s_py:.2f}x")

    km_py, kc_py = start_new_kernel(kernel_name="python3", cwd=cwd)
    km_lily, kc_lily = start_new_kernel(kernel_name="lily", cwd=cwd)
    try:
        round_trip(kc_py, HELP_BUNDLE)
        cases = [("pass", kc_py, "pass"), ("display(/help bundle)", kc_py, "display(B, raw=True)"),
                 ("/help", kc_lily, "/help"),
                 ("/skills", kc_lily, "/skills"), ("%%python pass", kc_lily, "%%python\npass")]
        for _, kc, code in cases * 5:  # warm-up: imports, widget machinery
            round_trip(kc, code)
        times: dict[str, list[float]] = {label: [] for label, _, _ in cases}
        times["first /skills"] = []
        last = None
        for i in range(args.trips):
            for label, kc, code in fair_order(cases, 1, seed=i, after=last):
                elapsed = round_trip(kc, code)
                if label is not None:
                    times[label].append(elapsed)
                last = kc
            if i % 4 == 0:
                round_trip(kc_lily, "/reload_skills")
                round_trip(kc_py, "pass")  # (so that /skills does not follow its own kernel)
                times["first /skills"].append(round_trip(kc_lily, "/skills"))
                last = kc_lily
    finally:
        for km, kc in ((km_py, kc_py), (km_lily, kc_lily)):
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    base = statistics.median(times["pass"])
    same = statistics.median(times["display(/help bundle)"])
    print(f"round trip       ipykernel `pass` {base * 1000:6.2f} ms, "
          f"`display(<the /help bundle>)` {same * 1000:6.2f} ms (medians of {args.trips})")
    print(f"{'':17}{'':22}{'vs pass':>9}{'vs same output':>16}")
    for label in ("/help", "/skills", "first /skills", "%%python pass"):
        m = statistics.median(times[label])
        print(f"{'':17}lily {'`' + label + '`':17} {m * 1000:6.2f} ms {m / base:5.2f}x"
              + (f" {m / same:12.2f}x" if label == "/help" else ""))


if __name__ == "__main__":
    main()
