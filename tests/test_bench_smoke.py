"""The benches stay runnable as bench/README.md documents them (tiny sizes)."""
from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "snapshot_bench.py"


def test_snapshot_bench_runs_and_prints_a_ratio_per_size():
    run = subprocess.run([sys.executable, str(BENCH), "--sizes", "5,20", "--repeat", "1"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    assert lines[0].split() == ["skills", "bare", "read", "snapshot", "ratio"]
    rows = [re.fullmatch(r"\s*(\d+)\s+[\d.]+ms\s+[\d.]+ms\s+[\d.]+x", line) for line in lines[1:]]
    assert all(rows) and [int(m.group(1)) for m in rows] == [5, 20]


def test_importing_snapshot_bench_leaves_the_path_to_perf_tree():
    """`perf.py snapshot --tree DIR` imports snapshot_bench after putting DIR first on the
    path; the import must not put this checkout before it (it did, so every `--tree`
    snapshot figure measured this checkout). Run as a script, it still uses its own."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); before = list(sys.path); "
            "import snapshot_bench; assert sys.path == before, sys.path[:3]")
    run = subprocess.run([sys.executable, "-c", code, str(BENCH.parent)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def test_logs_search_bench_runs_and_prints_its_figures():
    bench = BENCH.parent / "logs_search.py"
    run = subprocess.run([sys.executable, str(bench), "--records", "500", "--sessions", "5",
                          "--repeat", "1"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    assert lines[0].split() == ["records", "what", "median", "vs", "scan"]
    assert [re.fullmatch(r"\s*500\s+(.+?)\s+[\d.]+ms\s+[\d.]+x", line).group(1)
            for line in lines[1:]] == ["scan (no index)", "build index (first -q)", "search",
                                       "search -T --since", "search after +1,000"]


def test_limits_bench_prints_a_ratio_per_figure():
    """bench/limits.py's in-process figures run (the interrupt one starts two kernels: not here)."""
    bench = BENCH.parent / "limits.py"
    rows = {"redaction": 8, "variables": 1, "typed": 6}
    for figure, count in rows.items():
        run = subprocess.run([sys.executable, str(bench), figure, "--n", "1"],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        lines = run.stdout.strip().splitlines()[1:]  # after the "tree:" line
        assert len(lines) == count, lines
        assert all(re.search(r": lily median .* ratio [\d.]+x \([+-][\d.]+ ms\), n=1$", line)
                   for line in lines), lines


def test_perf_snapshot_and_reload_print_their_rows():
    """`perf.py snapshot` keeps its result line (and `--ab`); `perf.py reload` prints its row
    (and checks, as it runs, that each reload read exactly the changed file)."""
    perf = BENCH.parent / "perf.py"
    run = subprocess.run([sys.executable, str(perf), "snapshot", "--n", "1", "--skills", "30"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert re.search(r"^snapshot of 30 skills: lily median .* ratio [\d.]+x \([+-][\d.]+ ms\), "
                     r"n=1$", run.stdout, re.MULTILINE), run.stdout
    # --ab DIR: this checkout and DIR (here itself) in alternating child processes.
    run = subprocess.run([sys.executable, str(perf), "snapshot", "--n", "1", "--skills", "30",
                          "--clock", "cpu", "--ab", str(BENCH.parent.parent)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    rows = re.findall(r"^snapshot of 30 skills, (this checkout|checkout .+?): lily median .* "
                      r"ratio [\d.]+x \([+-][\d.]+ ms\), n=4$", run.stdout, re.MULTILINE)
    assert rows == ["this checkout", f"checkout {BENCH.parent.parent}"], run.stdout
    assert len(re.findall(r"^  paired: median .* [\d.]+x \(p10", run.stdout, re.MULTILINE)) == 2
    assert re.search(r"^this checkout's ratio / that of .+: [\d.]+$", run.stdout, re.MULTILINE)
    # reload: /reload_skills with one skill changed, against the bare stat walk.
    run = subprocess.run([sys.executable, str(perf), "reload", "--n", "2", "--skills", "30"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert re.search(r"^/reload_skills of 30 skills, one changed: lily median .* ratio [\d.]+x "
                     r"\([+-][\d.]+ ms\), n=2$", run.stdout, re.MULTILINE), run.stdout


@pytest.mark.parametrize("kernels", [(2, 2), (2, 2, 2), (2, 3), (1, 4)])
def test_fair_order_never_asks_one_kernel_twice_in_a_row(kernels):
    """Each case is measured once a round, in a random order, and the kernel before each
    measured round trip is always another one (a spacer goes between when it must)."""
    sys.path.insert(0, str(BENCH.parent))
    try:
        from kernel_roundtrip import fair_order
    finally:
        sys.path.remove(str(BENCH.parent))
    clients = [object() for _ in kernels]
    cases = [(f"k{k}c{c}", clients[k], f"code {k}.{c}")
             for k, count in enumerate(kernels) for c in range(count)]
    steps = list(fair_order(cases, 50, seed=1))
    measured = [label for label, _, _ in steps if label is not None]
    assert sorted(measured) == sorted(label for label, _, _ in cases * 50)
    assert all(a[1] is not b[1] for a, b in itertools.pairwise(steps))
    rounds = [tuple(measured[i:i + len(cases)]) for i in range(0, len(measured), len(cases))]
    assert len(set(rounds)) > 1  # the order changes from round to round
    for label, kc, code in steps:
        if label is None:  # a spacer runs another kernel's own first case
            assert (kc, code) in [(c[1], c[2]) for c in cases]


def test_sandbox_bench_runs_in_a_kernel_and_finds_no_leak():
    """bench/sandbox_bench.py (docs/sandbox.md): a few sandboxed runs in a real kernel,
    from two threads; the exit status is 0 only when nothing leaked and every run answered."""
    from lily_kernel.tools import sandbox
    if sandbox.unavailable() is not None:
        pytest.skip(f"no sandbox here: {sandbox.unavailable()}")
    bench = BENCH.parent / "sandbox_bench.py"
    run = subprocess.run([sys.executable, str(bench), "--runs", "6", "--load", "0",
                          "--rows", "1000"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "runs 6 in 2 threads, 1,000 rows, 0 busy process(es)"
    assert [line.split()[0] for line in lines[1:]] == ["fds", "children", "threads", "scratch",
                                                       "statuses", "per"]
    assert lines[5].startswith('statuses  {"done": 6}  wrong results 0')
