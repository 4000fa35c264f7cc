"""Read one skill folder's SKILL.md: bytes, or why they cannot be read (docs/loader.md#speed).

SKILL.md must be a regular file, or a symlink to one inside the skill folder; anything
else, or nothing, is "missing". The read never follows a link out of the folder, never
blocks (a FIFO) and never reads past :data:`MAX_FILE_BYTES` and one byte: open, fstat,
read, close.
"""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from stat import S_ISREG

from lily_kernel.skills.frontmatter import MAX_FILE_BYTES

_SKILL_MD = os.sep + "SKILL.md"

# SKILL.md is opened without following a link, without blocking (a FIFO) and without
# becoming a terminal's; what it is gets asked of the open file (fstat). A symlink (the
# open fails with ELOOP) is checked against the skill folder, then followed.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_OPEN_FLAGS = (os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0))
_OPEN_LINK_FLAGS = _OPEN_FLAGS & ~_NOFOLLOW
_MAX_READ = MAX_FILE_BYTES + 1  # one byte more tells "too big"
_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class Unreadable:
    """Why a SKILL.md could not be read: the skill's error in the diagnostics."""

    reason: str


MISSING = Unreadable("SKILL.md is missing")


def read(path: str) -> tuple[bytes, os.stat_result] | Unreadable:
    """The first _MAX_READ bytes of the skill folder's SKILL.md and the ``fstat`` of the
    file they were read from (taken before the read), or why they cannot be read.

    SKILL.md must be a regular file, or a symlink to one inside the skill folder;
    anything else, or nothing, is "missing". A read that returns the size fstat gave is
    taken as the whole file; any other outcome reads on to the end (or the limit).
    """
    skill_md = path + _SKILL_MD
    try:
        opened: int | Unreadable
        if _NOFOLLOW:
            try:
                opened = os.open(skill_md, _OPEN_FLAGS)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                opened = _open_link(path, skill_md)
        else:  # no O_NOFOLLOW (Windows): ask first
            opened = (_open_link(path, skill_md) if os.path.islink(skill_md)
                      else os.open(skill_md, _OPEN_FLAGS))
        if isinstance(opened, Unreadable):
            return opened
        fd = opened
        try:
            st = os.fstat(fd)
            if not S_ISREG(st.st_mode):
                return MISSING
            data = os.read(fd, min(st.st_size, MAX_FILE_BYTES) + 1)
            if len(data) != st.st_size:  # not the size it had (a /proc file, a sparse one
                data += _read_on(fd, len(data))  # being written, one over the limit)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR):
            return MISSING
        return Unreadable(f"SKILL.md cannot be read: {exc.strerror or exc}")
    return data, st


def _open_link(path: str, skill_md: str) -> int | Unreadable:
    """An open descriptor of the file the symlink ``skill_md`` points to, or why not."""
    if not os.path.isfile(skill_md):
        return MISSING
    real_dir = os.path.realpath(path)
    target = os.path.realpath(skill_md)
    if os.path.commonpath([real_dir, target]) != real_dir:
        return Unreadable(f"SKILL.md is a symlink to {target}, outside the skill folder")
    return os.open(skill_md, _OPEN_LINK_FLAGS)


def _read_on(fd: int, have: int) -> bytes:
    """What follows in ``fd``, up to _MAX_READ bytes in all with the ``have`` already read."""
    chunks = []
    while have < _MAX_READ:
        chunk = os.read(fd, min(_CHUNK, _MAX_READ - have))
        if not chunk:
            break
        chunks.append(chunk)
        have += len(chunk)
    return b"".join(chunks)
