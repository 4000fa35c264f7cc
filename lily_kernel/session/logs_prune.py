"""Deleting journal records: ``lily logs rm`` and ``lily logs prune`` (docs/logs.md#deleting).

Only the command line calls this; no tool the model can call reaches it, and the journal
folder is a protected path for the model's file tools (docs/trust-boundary.md). A journal
file is rewritten without the deleted sessions' records into a temporary file in ``.lily/``,
which then replaces it (0600, like the journal); a file left empty is removed. If a kernel
appended to the file meanwhile, the rewrite starts over, so no line of another session is
lost. The search index is dropped and rebuilt from the journal on the next search.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from lily_kernel.errors import LogsError
from lily_kernel.session import logs_index
from lily_kernel.session.logs import Logs, journal_dir, journal_files

ATTEMPTS = 5


def _keep(raw: bytes, doomed: set[str]) -> bool:
    try:
        record = json.loads(raw)
    except ValueError:
        return True  # not ours to judge: a torn or foreign line stays as it was
    return not (isinstance(record, dict) and record.get("session_id") in doomed)


def _rewrite(path: Path, doomed: set[str], scratch: Path) -> int:
    """Drop the records of ``doomed`` sessions from ``path``; how many were dropped."""
    for _ in range(ATTEMPTS):
        data = path.read_bytes()
        lines = data.split(b"\n")
        tail = lines.pop()
        kept = [line for line in lines if _keep(line, doomed)]
        dropped = len(lines) - len(kept)
        if dropped == 0:
            return 0
        body = b"".join(line + b"\n" for line in kept) + tail
        tmp = scratch / f".rm-{os.getpid()}-{path.name}"  # outside the journal folder
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, body)
        finally:
            os.close(fd)
        if path.stat().st_size != len(data):  # a kernel appended meanwhile: start over
            tmp.unlink()
            continue
        if body:
            os.replace(tmp, path)
        else:
            tmp.unlink()
            path.unlink()
        return dropped
    raise LogsError(f"{path.name} kept changing while it was rewritten; try again")


def remove(workspace: Path, session_ids: set[str]) -> int:
    """Delete every record of ``session_ids`` from the journal; the records deleted."""
    dropped = 0
    for path in journal_files(workspace):
        try:
            dropped += _rewrite(path, session_ids, journal_dir(workspace).parent)
        except OSError as exc:
            raise LogsError(f"cannot rewrite {path}: {exc.strerror or exc}") from None
    logs_index.forget(workspace)
    return dropped


def older_than(logs: Logs, seconds: float, now: float | None = None) -> list[str]:
    """The sessions whose last activity is more than ``seconds`` ago."""
    limit = (time.time() if now is None else now) - seconds
    return [s.id for s in logs.sessions() if s.last < limit]
