"""docs/logs.md#fail-loud: a failed or short journal write is never silent. The cell gets
one line, the record waits, the next record retries (after a ``journal_gap`` record), the
chain still holds and ``lily logs show`` marks the gap. Real failures: a file size limit
(RLIMIT_FSIZE, a short write then EFBIG) in a child process; and one injected short write."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from lily_kernel.session import journal as journal_module
from lily_kernel.session.journal import Journal
from lily_kernel.session.logs import Logs, turns

SID = "d" * 32


def short_once(tmp_path: Path, monkeypatch, cut: Callable[[bytes], bytes]) -> Journal:
    """A journal holding a ``session_created`` record, whose next write writes only
    ``cut(data)`` (the disk had no room for the rest); the writes after it are whole."""
    journal = Journal(tmp_path / ".lily" / "journal" / "s.jsonl")
    journal.append({"event": "session_created", "session_id": SID})
    real_write = os.write
    calls = {"n": 0}

    def write(fd: int, data: bytes) -> int:
        calls["n"] += 1
        return real_write(fd, cut(data) if calls["n"] == 1 else data)

    monkeypatch.setattr(journal_module.os, "write", write)
    return journal


def test_a_short_write_is_announced_retried_and_marked(tmp_path, monkeypatch):
    journal = short_once(tmp_path, monkeypatch, lambda data: data[: len(data) // 2])  # half
    journal.append({"event": "command", "session_id": SID, "command": "/skills", "ok": True})
    notice = journal.take_notice()
    assert notice is not None and notice.startswith("journal: not recorded: short write (")
    assert notice.endswith("; retrying") and journal.take_notice() is None  # once
    journal.append({"event": "command", "session_id": SID, "command": "/help", "ok": True})
    assert journal.take_notice() == "journal: recording again; 1 record(s) written late"
    logs = Logs(tmp_path)
    records = logs.checked(SID)  # the chain links past the partial line
    events = [(r["event"], r.get("command")) for r in records]
    assert events == [("session_created", None), ("journal_gap", None),
                      ("command", "/skills"), ("command", "/help")]
    gap = records[1]
    assert gap["reason"].startswith("short write") and gap["late"] == 1 and gap["lost"] == 0
    assert any("not a JSON record" in note for note in logs.notes.all())  # the partial line
    assert "journal gap: writes failed (short write" in "\n".join(t.text for t in turns(records))


def test_a_write_one_byte_short_is_not_read_as_a_record(tmp_path, monkeypatch):
    # the disk had room for the whole record but its newline: the partial line is valid
    # JSON, and read as a record it would appear twice and fork the chain
    journal = short_once(tmp_path, monkeypatch, lambda data: data[:-1])
    journal.append({"event": "command", "session_id": SID, "command": "/skills", "ok": True})
    journal.append({"event": "command", "session_id": SID, "command": "/help", "ok": True})
    records = Logs(tmp_path).checked(SID)
    assert [r.get("command", r["event"]) for r in records] == [
        "session_created", "journal_gap", "/skills", "/help"]


CHILD = textwrap.dedent("""
    import json, os, resource, sys
    from lily_kernel.session.journal import Journal
    path, sid = sys.argv[1], sys.argv[2]
    j = Journal(__import__("pathlib").Path(path))
    j.append({"event": "session_created", "session_id": sid})
    size = os.path.getsize(path)
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 40, hard))  # room for part of a line
    notices = []
    for i in range(3):
        j.append({"event": "prose", "session_id": sid, "text": f"request {i} " + "x" * 200})
        notices.append(j.take_notice())
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # space again
    j.append({"event": "prose", "session_id": sid, "text": "after"})
    notices.append(j.take_notice())
    print(json.dumps(notices))
""")


def test_a_real_file_size_limit_short_write_then_efbig(tmp_path):
    path = tmp_path / ".lily" / "journal" / "s.jsonl"
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), SID], capture_output=True,
                         text=True, timeout=60, check=True)
    notices = json.loads(out.stdout)
    assert notices[0].startswith("journal: not recorded: short write (40 of ")
    assert notices[1] == notices[2] == "journal: not recorded: File too large; retrying"
    assert notices[3] == "journal: recording again; 3 record(s) written late"
    records = Logs(tmp_path).checked(SID)
    assert [r.get("text", r["event"]) for r in records] == [
        "session_created", "journal_gap", *(f"request {i} " + "x" * 200 for i in range(3)),
        "after"]
    assert records[1]["reason"] == "File too large"  # the last reason before it wrote again


def test_a_full_queue_drops_the_oldest_and_counts_them(tmp_path, monkeypatch):
    path = tmp_path / ".lily" / "journal" / "s.jsonl"
    journal = Journal(path)
    journal.append({"event": "session_created", "session_id": SID})
    monkeypatch.setattr(journal_module, "QUEUE_RECORDS", 5)

    def full(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    real_write = os.write
    monkeypatch.setattr(journal_module.os, "write", full)
    for i in range(8):
        journal.append({"event": "prose", "session_id": SID, "text": f"r{i}"})
    assert journal.take_notice() == "journal: not recorded: No space left on device; retrying"
    monkeypatch.setattr(journal_module.os, "write", real_write)
    journal.append({"event": "prose", "session_id": SID, "text": "r8"})
    assert journal.take_notice() == "journal: recording again; 4 record(s) written late, 4 lost"
    records = Logs(tmp_path).checked(SID)
    assert [r.get("text") for r in records[2:]] == ["r4", "r5", "r6", "r7", "r8"]
    assert records[1]["lost"] == 4


def test_path_none_records_nothing(tmp_path: Path):
    journal = Journal(None)
    journal.append({"event": "x", "session_id": SID})
    assert journal.take_notice() is None and journal.error is None
