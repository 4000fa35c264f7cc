"""Snapshot build time against a bare read of the same SKILL.md files.

    .venv/bin/python bench/snapshot_bench.py [--sizes 100,1000,10000] [--repeat 7] [--all-roots]

``--all-roots`` reads the skills from the workspace root among every source a session
has (docs/loader.md#roots: the other agents' four folders too, absent here), as a
kernel started in a fresh folder does.

For each size, generates that many skills in a temporary workspace root and
measures, alternating in the same run: (a) reading every SKILL.md (scandir +
open + read), the floor any loader pays; (b) building the whole snapshot
(discovery, precedence, parse, eligibility, index, hash). Prints the medians
and their ratio. The machines are shared and noisy: only the ratio, measured
in the same run, is meant to be compared.

No file content is kept between builds: each one lists, reads and parses every
SKILL.md (no cache is given to build_snapshot: a session's reload is
``perf.py reload``). Before each timed section the garbage collector is run to completion,
outside the timer, so neither section pays for collections the other one caused;
the collector passes a build makes over its own objects are timed with it.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__":  # run as a script: this checkout's lily_kernel. Imported by
    # perf.py, it must not put this checkout first: perf.py --tree chooses the checkout.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lily_kernel.skills.loader import build_snapshot
from lily_kernel.skills.paths import SOURCES, Root

try:
    from lily_kernel.tools.builtin_tools import register_builtins
    from lily_kernel.tools.tool_registry import ToolPolicy, ToolRegistry
except ImportError:  # a checkout (perf.py --tree, --ab) from before the rooms of issue 31
    from lily_kernel.agent.builtin_tools import register_builtins  # type: ignore[no-redef]
    from lily_kernel.agent.tools import ToolPolicy, ToolRegistry  # type: ignore[no-redef]

TEMPLATE = """---
name: {name}
description: Generated skill number {i} for the snapshot benchmark. Use when benchmarking.
summary: Benchmark skill {i}
invocation_mode: prompt_rewrite
requires_tools: [read]
eligibility:
  os: [darwin, linux, win32]
metadata:
  author: bench
  version: "1.{i}"
---

# Skill {i}

Do the thing numbered {i}, carefully.
"""


def generate(root: Path, n: int) -> None:
    for i in range(n):
        name = f"skill-{i:05d}"
        d = root / name
        d.mkdir()
        (d / "SKILL.md").write_text(TEMPLATE.format(name=name, i=i))


def bare_read(root: Path) -> int:
    total = 0
    for entry in os.scandir(root):
        with open(os.path.join(entry.path, "SKILL.md"), "rb") as fh:
            total += len(fh.read())
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--all-roots", action="store_true",
                    help="every source a session reads, the others absent")
    args = ap.parse_args()
    tools = ToolRegistry()
    print(f"{'skills':>7}  {'bare read':>10}  {'snapshot':>10}  {'ratio':>6}")
    for n in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "skills"
            root.mkdir()
            generate(root, n)
            register_builtins(tools, Path(tmp))
            sources = SOURCES if args.all_roots else ("workspace", "user", "bundled")
            roots = tuple(Root(s, root, True) if s == "workspace" else
                          Root(s, Path(tmp) / f"none-{s}", False) for s in sources)
            policy = ToolPolicy()
            snap = build_snapshot(roots, tools, policy)
            assert len(snap.skills) == n, (len(snap.skills), snap.diagnostics[:3])
            reads, snaps = [], []
            for _ in range(args.repeat):
                gc.collect()
                t0 = time.perf_counter()
                bare_read(root)
                t1 = time.perf_counter()
                gc.collect()
                t2 = time.perf_counter()
                build_snapshot(roots, tools, policy)
                t3 = time.perf_counter()
                reads.append(t1 - t0)
                snaps.append(t3 - t2)
            r, s = statistics.median(reads), statistics.median(snaps)
            print(f"{n:>7}  {r * 1000:>8.1f}ms  {s * 1000:>8.1f}ms  {s / r:>5.2f}x", flush=True)


if __name__ == "__main__":
    main()
