"""docs/deploy.md#shared-workspace: two kernels (two pods) on one workspace volume.

Each kernel writes its own journal (named after ``KERNEL_ID`` when no label is given); when
two share a label they share a file, and each line is written under a POSIX record lock,
which network filesystems honour. The Config Registry on a shared volume uses SQLite's
rollback journal (its locks are POSIX locks too), not WAL, whose shared memory works only
on one host.
"""
from __future__ import annotations

import subprocess
import sys
import threading
import time

from lily_kernel.jupyter.cells import session_label
from lily_kernel.session.journal import Journal, journal_path, read
from lily_kernel.session.session import Session
from lily_kernel.skills.paths import shared_workspace
from lily_kernel.typed.registry import ConfigRegistry

HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()  # hold the lock until told
os.write(fd, b'{"event": "other_pod"}\\n')
fcntl.lockf(fd, fcntl.LOCK_UN)
"""


def test_a_journal_line_waits_for_another_writers_lock(tmp_path):
    """Another process (another pod's kernel) holds the journal's lock: this kernel's line
    goes after that writer's, not into the middle of it."""
    path = tmp_path / ".lily" / "journal" / "shared.jsonl"
    path.parent.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        writer = threading.Thread(target=Journal(path).append, args=({"event": "this_pod"},))
        writer.start()
        time.sleep(0.5)  # the writer is now waiting for the lock (without it, it wrote)
        holder.stdin.write("go\n")
        holder.stdin.flush()
        writer.join(timeout=10)
        assert holder.wait(timeout=10) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
    assert [r["event"] for r in read(path)] == ["other_pod", "this_pod"]


def test_the_session_label_falls_back_to_the_kernel_id():
    assert session_label({"KERNEL_ID": "k-1"}) == "k-1"
    assert session_label({"KERNEL_ID": "k-1", "JPY_SESSION_NAME": "a.ipynb"}) == "a.ipynb"
    assert session_label({"KERNEL_ID": "k-1", "JPY_SESSION_NAME": "a.ipynb",
                          "KERNEL_LILY_SESSION": "team"}) == "team"
    assert session_label({}) is None


def test_two_kernels_on_one_volume_write_two_journals(env):
    for kernel_id in ("k-1", "k-2"):
        session = Session(env.workspace, label=session_label({"KERNEL_ID": kernel_id}),
                          env=env.session_env(), host=env.host)
        session.end("shutdown")
        session.end("SIGTERM")  # once only
    for kernel_id in ("k-1", "k-2"):
        records = list(read(journal_path(env.workspace, kernel_id)))
        assert [r["event"] for r in records] == ["session_created", "session_ended"]
        assert records[-1]["reason"] == "shutdown"


def journal_mode(registry: ConfigRegistry) -> str:
    registry.get("any.path")  # opens the connection
    return registry._connection().execute("PRAGMA journal_mode").fetchone()[0]


def test_a_shared_workspace_registry_uses_a_rollback_journal(tmp_path, env):
    assert shared_workspace({"LILY_SHARED_WORKSPACE": "1"})
    assert not shared_workspace({"LILY_SHARED_WORKSPACE": "0"}) and not shared_workspace({})
    with ConfigRegistry.for_workspace(tmp_path / "local") as local:
        assert journal_mode(local) == "wal"
    with ConfigRegistry.for_workspace(tmp_path / "shared", shared=True) as shared:
        assert journal_mode(shared) == "delete"
    session = env.session(LILY_SHARED_WORKSPACE="1")
    assert session.config.shared
    assert journal_mode(session.config) == "delete"
