"""``lily logs -q`` over a large journal: the FTS5 index against a plain scan.

    .venv/bin/python bench/logs_search.py [--records 100000] [--sessions 200] [--repeat 7]

Generates a journal of that many records (prose, commands, model calls, answers, tool
calls and results, as a session writes them) spread over one file per session, then
measures, medians of ``--repeat``:

- *scan*: read every journal file and test each line for the words (``bytes in``), the
  floor a search without an index pays (and what ``grep`` does);
- *build*: the first ``lily logs -q`` in a workspace: the index built from nothing;
- *search*: a later ``lily logs -q`` (index brought up to date: nothing new) with a query
  and with ``-T``/``--since`` filters;
- *append*: a search after 1,000 records were appended since the last one.

Prints each time and its ratio to the scan. Target (issue 17): a search under 1 s at
100,000 records. The machines are shared and noisy: compare ratios.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lily_kernel.session import logs_index

WORDS = ["plan", "skill", "notebook", "data", "frame", "error", "retry", "cache", "model",
         "tool", "token", "table", "journal", "session", "answer", "request", "budget",
         "invoice", "pipeline", "deploy", "review"]


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def records(rng: random.Random, sid: str, t0: float, count: int, start: int = 0):
    """``count`` records of one session, shaped as Lily journals them."""
    for i in range(start, start + count):
        t = t0 + i
        kind = i % 5
        if kind == 0:
            yield {"t": t, "event": "prose", "session_id": sid, "text": _sentence(rng, 12)}
        elif kind == 1:
            yield {"t": t, "event": "model_call", "session_id": sid, "model": "gpt-4o-mini",
                   "usage": {"prompt_tokens": 900, "completion_tokens": 120}}
        elif kind == 2:
            args = json.dumps({"path": f"data/{rng.choice(WORDS)}.csv"})
            yield {"t": t, "event": "message", "session_id": sid, "message": {
                "role": "assistant", "content": None, "tool_calls": [
                    {"id": f"c{sid[:4]}{i}", "type": "function",
                     "function": {"name": "read", "arguments": args}}]}}
        elif kind == 3:
            yield {"t": t, "event": "message", "session_id": sid, "message": {
                "role": "tool", "tool_call_id": f"c{sid[:4]}{i - 1}",
                "content": _sentence(rng, 60)}}
        else:
            yield {"t": t, "event": "message", "session_id": sid, "message": {
                "role": "assistant", "content": _sentence(rng, 40)}}


def generate(ws: Path, total: int, sessions: int, seed: int = 7) -> list[Path]:
    rng = random.Random(seed)
    folder = ws / ".lily" / "journal"
    folder.mkdir(parents=True)
    per = total // sessions
    paths = []
    for s in range(sessions):
        sid = f"{s:032x}"
        path = folder / f"session-{s:04d}.jsonl"
        with open(path, "w") as fh:
            for r in records(rng, sid, 1.7e9 + s * 1e5, per):
                fh.write(json.dumps(r) + "\n")
        paths.append(path)
    return paths


def scan(ws: Path, words: list[str]) -> int:
    needles = [w.encode() for w in words]
    hits = 0
    for path in sorted((ws / ".lily" / "journal").iterdir()):
        for line in path.read_bytes().split(b"\n"):
            if all(n in line for n in needles):
                hits += 1
    return hits


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--sessions", type=int, default=200)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        paths = generate(ws, args.records, args.sessions)
        query = "invoice pipeline"
        scans = [timed(lambda: scan(ws, query.split())) for _ in range(args.repeat)]
        builds = []
        for _ in range(max(1, args.repeat // 3)):
            logs_index.forget(ws)
            builds.append(timed(lambda: logs_index.search(ws, query, limit=20)))
        searches = [timed(lambda: logs_index.search(ws, query, limit=20))
                    for _ in range(args.repeat)]
        filtered = [timed(lambda: logs_index.search(ws, query, tool="read", since=1.7e9,
                                                    limit=20)) for _ in range(args.repeat)]
        rng = random.Random(1)
        appends = []
        for k in range(args.repeat):
            with open(paths[k % len(paths)], "a") as fh:
                for r in records(rng, f"{k % len(paths):032x}", 1.8e9, 1000, start=10**6 * (k + 1)):
                    fh.write(json.dumps(r) + "\n")
            appends.append(timed(lambda: logs_index.search(ws, query, limit=20)))
        base = statistics.median(scans)
        print(f"{'records':>8}  {'what':<24}{'median':>10}  {'vs scan':>8}")
        for name, values in (("scan (no index)", scans), ("build index (first -q)", builds),
                             ("search", searches), ("search -T --since", filtered),
                             ("search after +1,000", appends)):
            m = statistics.median(values)
            print(f"{args.records:>8}  {name:<24}{m * 1000:>8.1f}ms  {m / base:>7.2f}x")


if __name__ == "__main__":
    main()
