"""Read one skill folder's SKILL.md: bytes, or why they cannot be read (docs/loader.md#speed).

SKILL.md must be a regular file, or a symlink to one inside the skill folder; anything
else, or nothing, is "missing". The read never follows a link out of the folder, never
blocks (a FIFO), never reads past :data:`MAX_FILE_BYTES` and one byte, and costs as few
system calls as that allows: open, one question of what the file is, one read, close.
"""
from __future__ import annotations

import errno
import os
import sys
from dataclasses import dataclass
from stat import S_ISREG

from lily_kernel.skills.frontmatter import MAX_FILE_BYTES

_SKILL_MD = os.sep + "SKILL.md"

# SKILL.md is opened without following a link, without blocking (a FIFO) and without
# becoming a terminal's; what it is gets asked of the open file (below). A symlink (the
# open fails with ELOOP) is checked against the skill folder, then followed.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_OPEN_FLAGS = (os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0))
_OPEN_LINK_FLAGS = _OPEN_FLAGS & ~_NOFOLLOW
# On Linux, lseek(SEEK_END) asks that more cheaply than fstat (for which Python builds a whole
# stat result) or lseek(SEEK_HOLE) (which walks the file's extents): a regular file answers
# its size; a folder answers an offset its read then refuses; a FIFO, a terminal, an empty
# file and the usual devices answer 0 or an error, and fstat decides. (A device node, which
# only root can make, whose driver answers a size under the limit is read like a file:
# within the limit, without blocking.)
_SIZE_FIRST = sys.platform.startswith("linux")
_PREAD = hasattr(os, "pread")  # (not on Windows, where the offset is still at the start)


_MAX_READ = MAX_FILE_BYTES + 1  # one byte more tells "too big"
_CHUNK = 64 * 1024
_TOO_BIG: bytes | None = None


@dataclass(frozen=True, slots=True)
class Unreadable:
    """Why a SKILL.md could not be read: the skill's error in the diagnostics."""

    reason: str


MISSING = Unreadable("SKILL.md is missing")


def read(path: str) -> bytes | Unreadable:
    """The first _MAX_READ bytes of the skill folder's SKILL.md, or why they cannot be read.

    SKILL.md must be a regular file, or a symlink to one inside the skill folder;
    anything else, or nothing, is "missing" (but for a device node that tells lseek its
    size: see _SIZE_FIRST). A read that returns exactly the size lseek or fstat gave is
    taken as the whole file; any other outcome reads on to the end.
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
        try:  # read up to _MAX_READ bytes, to the end of the file
            try:  # the file's size, where lseek tells it
                size = os.lseek(fd, 0, os.SEEK_END) if _SIZE_FIRST else 0
            except OSError:  # a FIFO, a terminal, a device
                size = 0
            if not 0 < size < _MAX_READ:  # else a regular file (or a folder: its read fails)
                st = os.fstat(fd)
                if not S_ISREG(st.st_mode):
                    return MISSING
                size = st.st_size
            if size < _MAX_READ:  # read from the start, wherever lseek left the offset
                data = os.pread(fd, size + 1, 0) if _PREAD else os.read(fd, size + 1)
                if len(data) != size:
                    os.lseek(fd, len(data), os.SEEK_SET)
                    data += _read_on(fd, len(data))
            else:
                os.lseek(fd, 0, os.SEEK_SET)
                data = _read_on(fd, 0)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR):
            return MISSING
        return Unreadable(f"SKILL.md cannot be read: {exc.strerror or exc}")
    if len(data) == _MAX_READ:
        return _too_big()
    return data


def _open_link(path: str, skill_md: str) -> int | Unreadable:
    """An open descriptor of the file the symlink ``skill_md`` points to, or why not."""
    if not os.path.isfile(skill_md):
        return MISSING
    real_dir = os.path.realpath(path)
    target = os.path.realpath(skill_md)
    if os.path.commonpath([real_dir, target]) != real_dir:
        return Unreadable(f"SKILL.md is a symlink to {target}, outside the skill folder")
    return os.open(skill_md, _OPEN_LINK_FLAGS)


def _too_big() -> bytes:
    """A stand-in for any SKILL.md over the limit (parsing rejects it for its length
    alone), so that the reads waiting to be parsed hold one such block, not many."""
    global _TOO_BIG
    if _TOO_BIG is None:
        _TOO_BIG = bytes(_MAX_READ)
    return _TOO_BIG


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
