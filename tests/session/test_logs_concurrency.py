"""Two processes append to one workspace's journals while ``lily logs -q`` searches:
no record is lost or corrupted (docs/logs.md#search)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from lily_kernel.session import logs, logs_index

N = 600
WRITER = textwrap.dedent("""
    import sys
    from lily_kernel.session.session import Session
    ws, label, tag, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    session = Session(ws, label=label, env={"HOME": ws, "SKILLS_USER_DIR": ws + "/u"})
    for i in range(n):
        session.record_command(f"/note {tag} number{i} " + "x" * (i % 97) * 40, ok=True)
        session.record_prose(f"prose {tag} number{i}")
    print(session.session_id)
""")


def test_two_writers_and_a_searcher_lose_nothing(tmp_path):
    ws = tmp_path / "ws"
    (ws / "u").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    # both "kernels" share one journal file (the same notebook name) and a third has its own
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(ws), label, tag, str(N)],
                                stdout=subprocess.PIPE, text=True, env=env)
               for label, tag in (("shared", "alpha"), ("shared", "beta"), ("own", "gamma"))]
    searches = 0
    while any(w.poll() is None for w in writers):  # search while they write
        found = subprocess.run([sys.executable, "-m", "lily_kernel.cli", "logs", "-q",
                                "number1", "--workspace", str(ws), "--json"],
                               capture_output=True, text=True, env=env, timeout=120)
        assert found.returncode == 0, found.stderr
        json.loads(found.stdout)
        assert "Traceback" not in found.stderr
        searches += 1
    ids = [w.communicate()[0].strip() for w in writers]
    assert all(w.returncode == 0 for w in writers) and searches >= 1

    read = logs.Logs(ws)
    assert read.notes.all() == []  # no torn, glued or foreign line anywhere
    for sid, tag in zip(ids, ("alpha", "beta", "gamma"), strict=True):
        cells = [t.text for t in logs.turns(read.records(sid)) if t.is_cell]
        assert len(cells) == 2 * N
        assert {c.split()[2] for c in cells} == {f"number{i}" for i in range(N)}
        assert all(tag in c for c in cells)
    # the index, updated while they wrote, now holds every record exactly once
    index = logs_index.Index(ws)
    try:
        index.refresh()
        for tag in ("alpha", "beta", "gamma"):
            hits = index.search(f"prose {tag}", limit=10 * N)
            assert len(hits) == N
    finally:
        index.close()
