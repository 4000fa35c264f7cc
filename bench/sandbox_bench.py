"""A thousand sandboxed runs in one Lily kernel, under load (docs/sandbox.md).

    .venv/bin/python bench/sandbox_bench.py [--runs 1000] [--threads 2] [--load 1] [--rows 1000000]

Starts a real Lily kernel holding a DataFrame of ``--rows`` rows, and ``--load`` processes
that keep a core busy. In the kernel, ``--threads`` threads share ``--runs`` calls of
``ShellNotebook.run_sandboxed`` (code that computes on the DataFrame): runs from two
threads at once are serialised by the sandbox's lock, so a deadlock would show as a run
that never ends. Before and after, the kernel counts its open descriptors
(``/proc/self/fd``), its child processes (``/proc/*/stat``), its threads and the scratch
folders left; every run's status and wall time are kept. Prints one line per figure: the
counts before and after, the statuses, the median, 95th percentile and slowest run (a
run's time includes its wait for the lock), and the whole loop's wall time per run. Exits
1 when anything leaked, a run did not answer or a result was wrong.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from jupyter_client.manager import start_new_kernel

SETUP = """%%python
import json, os, statistics, threading, time, glob, tempfile
import pandas as pd
from lily_kernel.jupyter.notebook import ShellNotebook
from lily_kernel.tools import sandbox as _sandbox
_nb = ShellNotebook(get_ipython(), None, "%%python")
df = pd.DataFrame({"x": range(ROWS), "y": [i % 7 for i in range(ROWS)]})

def _children():
    me, found = str(os.getpid()), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    found += f.read().rsplit(")", 1)[1].split()[1] == me
            except OSError:
                pass
    return found

def _state():
    return {"fds": len(os.listdir("/proc/self/fd")), "children": _children(),
            "threads": threading.active_count(),
            "scratch": len(glob.glob(tempfile.gettempdir() + "/lily-sandbox-*"))}

def _bench(runs, threads):
    _nb.run_sandboxed("1")  # warm up: the first run probes nothing, but imports do
    before = _state()
    times, statuses, wrong = [], {}, 0
    lock = threading.Lock()
    def worker(n):
        nonlocal wrong
        for _ in range(n):
            t0 = time.perf_counter()
            r = _nb.run_sandboxed("int(df.x.sum() + df.y.max())")
            elapsed = time.perf_counter() - t0
            status = "done" if r.error is None else r.error.ename
            with lock:
                times.append(elapsed)
                statuses[status] = statuses.get(status, 0) + 1
                wrong += r.error is None and str(ROWS * (ROWS - 1) // 2 + 6) not in r.output
    workers = [threading.Thread(target=worker, args=(runs // threads,)) for _ in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - start
    after = _state()
    times.sort()
    print(json.dumps({"before": before, "after": after, "statuses": statuses, "wrong": wrong,
                      "median_ms": 1000 * statistics.median(times),
                      "p95_ms": 1000 * times[int(0.95 * (len(times) - 1))],
                      "max_ms": 1000 * times[-1], "runs": len(times),
                      "each_ms": 1000 * wall / len(times)}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--load", type=int, default=1, help="processes keeping a core busy")
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.load)]
    base = Path(tempfile.mkdtemp(prefix="sandbox-bench-"))
    (base / "tmp").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LILY_"))}
    env.update(HOME=str(base), TMPDIR=str(base / "tmp"), IPYTHONDIR=str(base / "ipython"))
    km, kc = start_new_kernel(kernel_name="lily", cwd=str(base), env=env, startup_timeout=60)
    try:
        ran = kc.execute_interactive(SETUP.replace("ROWS", str(args.rows)), timeout=300,
                                     output_hook=lambda m: None)
        assert ran["content"]["status"] == "ok", ran["content"]
        out: list[str] = []
        ran = kc.execute_interactive(
            f"%%python\n_bench({args.runs}, {args.threads})", timeout=args.runs * 30,
            output_hook=lambda m: out.append(m["content"].get("text", ""))
            if m["msg_type"] == "stream" else None)
        assert ran["content"]["status"] == "ok", ran["content"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        for p in load:
            p.kill()
            p.wait()
    got = json.loads("".join(out))
    print(f"runs {got['runs']} in {args.threads} threads, {args.rows:,} rows, "
          f"{args.load} busy process(es)")
    for key in ("fds", "children", "threads", "scratch"):
        print(f"{key:<9} before {got['before'][key]:>4}  after {got['after'][key]:>4}")
    print(f"statuses  {json.dumps(got['statuses'])}  wrong results {got['wrong']}")
    print(f"per run   median {got['median_ms']:.1f} ms  p95 {got['p95_ms']:.1f} ms  "
          f"max {got['max_ms']:.1f} ms  (waiting for the other threads' runs included); "
          f"wall / runs {got['each_ms']:.1f} ms")
    leaked = any(got["after"][k] != got["before"][k] for k in ("fds", "children", "scratch"))
    return 1 if leaked or got["wrong"] or set(got["statuses"]) != {"done"} else 0


if __name__ == "__main__":
    sys.exit(main())
