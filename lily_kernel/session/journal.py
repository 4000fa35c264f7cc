"""Append-only session journal: one JSON object per line, flushed each turn.

A crash of the process can at most leave the last line incomplete; :func:`read` skips such a
line, so the journal is always readable. Secrets are never passed in: callers
journal the model configuration without its API key, and every line is redacted
(URL userinfo, live secret values) before it is written. A record larger than the
``[limits] journal_record_bytes`` cap is replaced by a marker record holding its
head (docs/limits-and-secrets.md#caps).

Each record carries ``prev``, the hash of the record of its session written before it
(:func:`record_hash`; ``null`` for a session's first), so an edited, deleted, inserted or
reordered record breaks the chain (:func:`verify_chain`, docs/logs.md#hash-chain). Given the
user's :class:`JournalKey`, each record also carries ``kid`` and ``mac`` (an HMAC over the
line as written, its link included), which prove Lily wrote it for this user
(:mod:`lily_kernel.session.journal_auth`, docs/logs.md#authenticity). A write
that fails or is short is never silent: the record waits in memory, :meth:`Journal.take_notice`
gives the face one line for the cell, and the next record retries, after a ``journal_gap``
record saying what was late or lost (docs/logs.md#fail-loud).
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import re
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lily_kernel import redaction

try:
    import fcntl
except ImportError:  # Windows: no POSIX locks; a journal there is one process's alone
    fcntl = None  # type: ignore[assignment]
_LOCKS = fcntl is not None  # POSIX advisory locks (not on Windows)

LOCK_WAIT = 5.0  # seconds a record waits for another kernel's lock on the same journal
CHAIN_KEY = "prev"  # the key of a record's link to the record before it
MAC_KEY = "mac"  # a record's HMAC with the user's journal key (hex)
KID_KEY = "kid"  # which journal key wrote the record (the start of the key's own hash)
# what a reader adds to a record (not hashed): where it is, and (journal_auth) its mark
READER_KEYS = frozenset({"_file", "_line", "_mark"})
QUEUE_RECORDS = 1000  # records kept in memory while writes fail; older ones are then lost
QUEUE_BYTES = 8 * 1024 * 1024  # ... and at most this many bytes of them


def journal_path(workspace: Path, label: str) -> Path:
    """The journal file of session ``label`` in ``workspace``: a readable slug of the label
    and the start of the sha256 of its exact text, so two labels never share a file
    (``Q1 report.ipynb``, ``Q1_report.ipynb``; on a filesystem that folds case too) and the
    name is safe on every filesystem (docs/session.md#journal)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("._")[:80] or "session"
    tag = hashlib.sha256(label.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return workspace / ".lily" / "journal" / f"{safe}-{tag}.jsonl"


def canonical(record: Mapping[str, Any]) -> bytes:
    """A record's canonical JSON: keys sorted, no spaces, ASCII only (a lone surrogate is an
    escape, not an encoding error), without the keys a reader adds."""
    data = {k: v for k, v in record.items() if k not in READER_KEYS}
    return json.dumps(data, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True).encode("ascii")


def record_hash(record: Mapping[str, Any]) -> str:
    """The sha256 (hex) of a record's canonical JSON: what the next record's ``prev`` holds."""
    return hashlib.sha256(canonical(record)).hexdigest()


@dataclass(frozen=True)
class JournalKey:
    """The user's journal key (session/journal_auth.py keeps it): its bytes and its id."""

    secret: bytes
    kid: str

    @classmethod
    def of(cls, secret: bytes) -> JournalKey:
        """The key ``secret`` with its id (a hash, never the key)."""
        return cls(secret, hashlib.sha256(b"lily journal key\0" + secret).hexdigest()[:16])

    def mac(self, head: bytes) -> str:
        """The HMAC-SHA256 (hex) of ``head``: a record's line as written, up to its
        ``mac`` (so ``prev`` and ``kid`` are covered), byte for byte."""
        return hmac.new(self.secret, head, hashlib.sha256).hexdigest()


class Journal:
    """Appends records, each linked to the one before; a failed write is kept, announced
    once per cell (:meth:`take_notice`) and retried with the next record."""

    def __init__(self, path: Path | None, max_bytes: int = 1024 * 1024,
                 env: Mapping[str, str] | None = None, prev: str | None = None,
                 key: JournalKey | None = None) -> None:
        self.path = path
        self.key = key  # signs each record (None: unkeyed records, foreign when read back)
        self.max_bytes = max_bytes
        self.env = env  # whose secret values are masked (None: the process's, live)
        self.prev = prev  # the hash of the last record written (a resumed chain passes it)
        self.error: str | None = None  # why the last write failed, until one succeeds
        self._notice: str | None = None  # the line the face shows for this cell
        # records not yet written: (time, JSON text without ``prev``, that text parsed)
        self._queue: list[tuple[float, str, dict[str, Any]]] = []
        self._lost = 0  # records dropped from a full queue
        self._torn: bool | None = None  # the file ends mid-line (None: not checked yet)
        self._fd = -1  # the journal, open for append from the first record on
        self._close: weakref.finalize[[int], Journal] | None = None  # closes it with this journal

    def append(self, record: dict[str, Any], redacted: bool = False) -> None:
        """Append one record (with its time) to the journal; a write error is kept, not raised.

        ``redacted``: the caller redacted every string of ``record`` already, with this
        journal's environment (a command line, redacted once where it is stored:
        ``Session.record_command``); else the whole line is redacted here."""
        if self.path is None:
            return
        t = round(time.time(), 3)
        full = {"t": t, **record}
        line = json.dumps(full, default=str, ensure_ascii=False)
        if not redacted:
            line = redaction.redact(line, self.env)
        try:
            parsed = json.loads(line)
        except ValueError:  # a mask ran past a string's end (a line-based rule, one JSON line)
            line = json.dumps(_redact_strings(json.loads(json.dumps(full, default=str)),
                                              self.env), ensure_ascii=False)
            parsed = json.loads(line)
        # a lone surrogate stays visible; the margin is for ``prev``
        if len(line.encode("utf-8", "backslashreplace")) + 80 > self.max_bytes:
            line = _cut_record(record, line, len(line.encode("utf-8", "backslashreplace")),
                               self.max_bytes)
            parsed = json.loads(line)
        self._queue.append((t, line, parsed))
        self._trim()
        self._flush(record.get("session_id"))

    def take_notice(self) -> str | None:
        """The one line the face shows in the cell for what the journal could not write
        (or that it writes again), once; None when all is well."""
        notice, self._notice = self._notice, None
        return notice

    def _trim(self) -> None:
        """Keep the queue of unwritten records bounded: the oldest go (counted as lost)."""
        size = sum(len(item) for _, item, _ in self._queue)
        while len(self._queue) > 1 and (len(self._queue) > QUEUE_RECORDS or size > QUEUE_BYTES):
            size -= len(self._queue.pop(0)[1])
            self._lost += 1

    def _flush(self, session_id: object) -> None:
        """Write what waits: after a failure, first the ``journal_gap`` record, then the late
        records in order, each in one write(2) linked to the last one written."""
        late = len(self._queue) - 1
        try:
            if self.error is not None:
                assert self.path is not None
                # the gap's time is the first late record's: readers sort by time, and
                # the gap must come before the records it announces
                gap = {"t": self._queue[0][0], "event": "journal_gap",
                       "session_id": session_id, "reason": self.error,
                       "late": late, "lost": self._lost}
                text = json.dumps(gap, ensure_ascii=False)
                self._write(text, json.loads(text))
                self._notice = (f"journal: recording again; {late} record(s) written late"
                                + (f", {self._lost} lost" if self._lost else ""))
                self.error, self._lost = None, 0
            while self._queue:
                self._write(self._queue[0][1], self._queue[0][2])
                self._queue.pop(0)
        except OSError as exc:
            self.close()
            self.error = _reason(exc)
            self._notice = f"journal: not recorded: {self.error}; retrying"

    def _write(self, body: str, parsed: dict[str, Any]) -> None:
        """Write one record, ``body`` (``parsed``: its data) with its link to the record
        before; OSError when the write fails or is short (the partial line is then closed, as
        a line that is not JSON, by the next write)."""
        assert self.path is not None
        line = "{" + f'"{CHAIN_KEY}":{json.dumps(self.prev)},' + body[1:]
        full = {**parsed, CHAIN_KEY: self.prev}
        data = line.encode("utf-8", "backslashreplace")
        if self.key is not None:  # the mark: an HMAC over the line's bytes up to it
            head = data[:-1] + f',"{KID_KEY}":"{self.key.kid}"'.encode("ascii")
            full[KID_KEY], full[MAC_KEY] = self.key.kid, self.key.mac(head)
            data = head + f',"{MAC_KEY}":"{full[MAC_KEY]}"'.encode("ascii") + b"}"
        data += b"\n"
        digest = record_hash(full)
        # One write(2) of a whole line to a file opened for append: once it returns, the
        # line survives a crash of this process (no fsync: that guards against power
        # loss, at milliseconds per command cell).
        fd = self._open()
        locked = _lock(fd)
        try:
            if self._torn is None:  # under the lock: another writer is never mid-line here
                self._torn = _ends_torn(self.path)  # else this record would be glued to it
            if self._torn:
                # end the partial line so it can never parse: cut one byte short, it would
                # be a whole record, written twice and forking the chain
                data = b"#\n" + data
            written = os.write(fd, data)
        finally:
            if locked:
                fcntl.lockf(fd, fcntl.LOCK_UN)
        self._torn = False
        if written != len(data):
            self._torn = written > 0
            # part of the line (a disk filling up, a file size limit): never taken as written
            raise OSError(errno.EIO, f"short write ({written} of {len(data)} bytes)")
        self.prev = digest

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


def _reason(exc: OSError) -> str:
    """Why a write failed, in a few words (``No space left on device``)."""
    return str(exc.strerror or exc)


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


def _redact_strings(value: Any, env: Mapping[str, str] | None) -> Any:
    """``value`` (JSON data) with every string redacted on its own."""
    if isinstance(value, str):
        return redaction.redact(value, env)
    if isinstance(value, list):
        return [_redact_strings(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _redact_strings(v, env) for k, v in value.items()}
    return value


def _cut_record(record: dict[str, Any], line: str, size: int, cap: int) -> str:
    """A record that fits ``cap`` bytes in place of an oversized one: its event, session and
    the head of its JSON text, so the journal stays readable and says what was cut."""
    head: dict[str, Any] = {"t": round(time.time(), 3), "event": record.get("event"),
                            "session_id": record.get("session_id"), "cut": True,
                            "bytes": size, "cap": cap}
    room = max(0, cap - len(json.dumps(head).encode("utf-8")) - 160)
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


# -- checking the chain ---------------------------------------------------------------

UNCHAINED = "unchained journal: written before Lily linked its records, so tampering cannot be detected"


def verify_chain(records: Iterable[dict[str, Any]]) -> str | None:
    """Check one session's records (each with ``_file`` and ``_line`` as the reader sets
    them) against their chain: None when every link holds, :data:`UNCHAINED` when no record
    has a link (an older Lily), else which record breaks it and how.

    Within a file, each record's ``prev`` is the hash of the session's record before it
    there; the first one in a file has ``null`` (the session's start) or the hash of one of
    the session's records in another file (a session another kernel went on with)."""
    by_file: dict[str, list[dict[str, Any]]] = {}
    every = list(records)
    for record in every:
        by_file.setdefault(str(record.get("_file", "")), []).append(record)
    linked = [r for r in every if CHAIN_KEY in r]
    if not linked:
        return UNCHAINED
    hashes: dict[str, list[str]] = {}
    for name, recs in by_file.items():
        recs.sort(key=lambda r: int(r.get("_line") or 0))
        hashes[name] = [record_hash(r) for r in recs]
    for name, recs in sorted(by_file.items()):
        elsewhere = {h for other, hs in hashes.items() if other != name for h in hs}
        for i, record in enumerate(recs):
            where = f"{name}:{record.get('_line', '?')}"
            if CHAIN_KEY not in record:
                return f"{where}: a record without a link in a chained session (inserted?)"
            prev = record[CHAIN_KEY]
            if i == 0:
                if prev is None or prev in elsewhere:
                    continue
                return (f"{where}: the session's first record here links to a record that "
                        "is not there (one was deleted, or this one was inserted or moved)")
            if prev != hashes[name][i - 1]:
                return (f"{where}: does not follow the record before it (a record was edited, "
                        "deleted, inserted or reordered)")
    return None
