"""The benches stay runnable as bench/README.md documents them (tiny sizes)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "snapshot_bench.py"


def test_snapshot_bench_runs_and_prints_a_ratio_per_size():
    run = subprocess.run([sys.executable, str(BENCH), "--sizes", "5,20", "--repeat", "1"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    assert lines[0].split() == ["skills", "bare", "read", "snapshot", "ratio"]
    rows = [re.fullmatch(r"\s*(\d+)\s+[\d.]+ms\s+[\d.]+ms\s+[\d.]+x", line) for line in lines[1:]]
    assert all(rows) and [int(m.group(1)) for m in rows] == [5, 20]


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
