"""Append-only session journal: one JSON object per line, flushed each turn.

A crash of the process can at most leave the last line incomplete; :func:`read` skips such a
line, so the journal is always readable. Secrets are never passed in: callers
journal the model configuration without its API key, and every line is redacted
(URL userinfo, live secret values) before it is written. A record larger than the
``[limits] journal_record_bytes`` cap is replaced by a marker record holding its
head (docs/limits-and-secrets.md#caps).
"""
from __future__ import annotations

import errno
import json
import os
import re
import time
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from lily_kernel import redaction

try:
    import fcntl
except ImportError:  # Windows: no POSIX locks; a journal there is one process's alone
    fcntl = None  # type: ignore[assignment]
_LOCKS = fcntl is not None  # POSIX advisory locks (not on Windows)

LOCK_WAIT = 5.0  # seconds a record waits for another kernel's lock on the same journal


def journal_path(workspace: Path, label: str) -> Path:
    """The journal file of session ``label`` in ``workspace``."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("._") or "session"
    return workspace / ".lily" / "journal" / f"{safe}.jsonl"


class Journal:
    """Appends records; if the workspace cannot be written, it says so once and goes on."""

    def __init__(self, path: Path | None, max_bytes: int = 1024 * 1024,
                 env: Mapping[str, str] | None = None) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.env = env  # whose secret values are masked (None: the process's, live)
        self.error: str | None = None
        self._tail_checked = False  # a torn line left by a crash is closed before the first write
        self._fd = -1  # the journal, open for append from the first record on
        self._close: weakref.finalize[[int], Journal] | None = None  # closes it with this journal

    def append(self, record: dict[str, Any], redacted: bool = False) -> None:
        """Append one record (with its time) to the journal; a write error is kept, not raised.

        ``redacted``: the caller redacted every string of ``record`` already, with this
        journal's environment (a command line, redacted once where it is stored:
        ``Session.record_command``); else the whole line is redacted here."""
        if self.path is None or self.error:
            return
        line = json.dumps({"t": round(time.time(), 3), **record}, default=str, ensure_ascii=False)
        if not redacted:
            line = redaction.redact(line, self.env)
        data = (line + "\n").encode("utf-8", "backslashreplace")  # a lone surrogate stays visible
        if len(data) > self.max_bytes:
            data = (_cut_record(record, line, len(data), self.max_bytes) + "\n").encode("utf-8")
        try:
            if not self._tail_checked:
                self._tail_checked = True
                if _ends_torn(self.path):  # else this record would be glued to the torn line
                    data = b"\n" + data
            # One write(2) of a whole line to a file opened for append: once it
            # returns, the line survives a crash of this process (no fsync: that
            # guards against power loss, at milliseconds per command cell).
            fd = self._open()
            locked = _lock(fd)
            try:
                os.write(fd, data)
            finally:
                if locked:
                    fcntl.lockf(fd, fcntl.LOCK_UN)
        except OSError as exc:
            self.close()
            self.error = f"journal disabled: cannot write {self.path}: {exc.strerror or exc}"

    def _open(self) -> int:
        """The journal's descriptor, kept open between records (an open(2) is most of a
        record's cost); opened again when the file was removed or replaced meanwhile
        (``lily logs rm`` rewrites it), so no record goes to a file nobody can read."""
        assert self.path is not None
        if self._fd >= 0 and os.fstat(self._fd).st_nlink > 0:
            return self._fd
        self.close()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags, 0o600)
        except FileNotFoundError:  # first record, or the folder was removed meanwhile
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, flags, 0o600)
        self._fd, self._close = fd, weakref.finalize(self, os.close, fd)
        return fd

    def close(self) -> None:
        """Close the journal's descriptor (the next record opens it again)."""
        if self._close is not None:
            self._close()
        self._fd, self._close = -1, None


def _lock(fd: int) -> bool:
    """Take a POSIX record lock on the open journal, waiting at most ``LOCK_WAIT`` seconds.

    Two kernels whose pods share a workspace volume may write one journal (the same
    ``KERNEL_LILY_SESSION``). ``O_APPEND`` alone is atomic only on a local filesystem; a
    ``fcntl`` lock is what NFS honours (through its lock manager, and it refreshes the
    file's size for the append), so lines from two hosts never interleave
    (docs/deploy.md#shared-workspace). A lock that cannot be had in time (a dead client's
    lease) does not stop the kernel: the line is written without it.
    """
    if not _LOCKS:
        return False
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EAGAIN) or time.monotonic() > deadline:
                return False  # no locking here (ENOLCK), or held too long
            time.sleep(0.01)


def _cut_record(record: dict[str, Any], line: str, size: int, cap: int) -> str:
    """A record that fits ``cap`` bytes in place of an oversized one: its event, session and
    the head of its JSON text, so the journal stays readable and says what was cut."""
    head: dict[str, Any] = {"t": round(time.time(), 3), "event": record.get("event"),
                            "session_id": record.get("session_id"), "cut": True,
                            "bytes": size, "cap": cap}
    room = max(0, cap - len(json.dumps(head).encode("utf-8")) - 64)
    # ensure_ascii keeps the byte count of the head predictable (at most 6 bytes a char)
    head["head"] = line[: room // 6]
    return json.dumps(head, ensure_ascii=True)


def _ends_torn(path: Path) -> bool:
    """Whether ``path`` exists and its last line lacks its newline (a crash mid-write)."""
    try:
        with open(path, "rb") as fh:
            if fh.seek(0, os.SEEK_END) == 0:
                return False
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"
    except OSError:
        return False


def read(path: Path) -> Iterator[dict[str, Any]]:
    """The journal's records, skipping a torn last line left by a crash."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record
