"""The file trust boundary: every file operation of a model-callable tool goes through here.

A path is walked one component at a time, each opened relative to its parent's descriptor
with ``O_NOFOLLOW``: no symlink is followed anywhere and nothing is checked by name and then
opened by name. The opened file is checked with ``fstat``: only a regular file with a single
hard link is read or written (a FIFO is opened non-blocking, so it never blocks, then
refused). Protected paths -- Lily's own state, configuration, contacts, persona and skill
folders, and ``.git`` -- are neither listed, read nor written. Reads stop at ``read_bytes``
+ 1 bytes; writes over ``write_bytes`` are refused. Contract: docs/trust-boundary.md.
"""
from __future__ import annotations

import codecs
import contextlib
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from lily_kernel.errors import ToolError
from lily_kernel.settings.limits import Limits
from lily_kernel.tools.protected import MARKERS, Protected, fold, policy_paths, protected_set

_SEP = re.compile(r"[/\\]")
# getattr: the module must import everywhere; _root_fd refuses where dir_fd is missing.
_DIR_FLAGS = (os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
              | getattr(os, "O_CLOEXEC", 0))
_FILE_FLAGS = (getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
MAX_DEPTH = 64  # scan() goes no deeper (each level holds one open descriptor)
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def split(relpath: object) -> tuple[str, ...]:
    r"""The components of a relative path; ToolError for absolute paths, '..' and NUL.

    ``.``, empty components and trailing slashes drop out; ``\\`` counts as a separator.
    """
    if not isinstance(relpath, str):
        raise ToolError("path must be a string")
    if "\0" in relpath:
        raise ToolError("path contains a NUL character")
    rel = relpath.strip()
    if rel.startswith(("/", "\\", "~")) or os.path.isabs(rel):
        raise ToolError(f"path '{relpath}' is absolute; use a path relative to the workspace")
    parts = tuple(p for p in _SEP.split(rel) if p not in ("", "."))
    if ".." in parts:
        raise ToolError(f"path '{relpath}' contains '..'; paths must stay inside the workspace")
    return parts


class _Fd:
    """A descriptor closed on leaving the ``with`` block."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> int:
        return self.fd

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


class WorkspaceFS:
    """Files under ``root`` as the model's tools may reach them."""

    def __init__(self, root: str | Path, protected: Iterable[Protected] = (), *,
                 guard: Iterable[str | Path] = (), read_bytes: int = Limits.read_bytes,
                 write_bytes: int = Limits.write_bytes, name: str = "workspace") -> None:
        self.root = Path(root)
        self.protected = tuple(protected)
        self.guard = tuple(Path(p) for p in guard)  # absolute paths whose inodes are protected
        self.read_bytes = read_bytes
        self.write_bytes = write_bytes
        self.name = name
        # Told (path, bytes) of every file a tool reads: the journal's capture_reads
        # (docs/logs.md#replay) keeps them so a replay can run against the same files.
        self.on_read: Callable[[str, bytes], None] | None = None

    def _seen(self, path: str, data: bytes) -> None:
        if self.on_read is not None:
            self.on_read(path, data)

    # -- rules -------------------------------------------------------------------
    def protection(self, parts: tuple[str, ...]) -> Protected | None:
        """The protected path ``parts`` lies in (or is), else None."""
        folded = tuple(fold(p) for p in parts)
        for p in self.protected:
            if p.covers(folded):
                return p
        return None

    def _check(self, parts: tuple[str, ...], verb: str) -> None:
        hit = self.protection(parts)
        if hit:
            raise ToolError(hit.refusal("/".join(parts), verb))
        if verb == "write":  # a file here would take the place of a protected folder
            folded = tuple(fold(p) for p in parts)
            for p in self.protected:
                if p.parts[:len(folded)] == folded:
                    raise ToolError(f"'{'/'.join(parts)}' would take the place of a folder "
                                    f"holding {p.shown}, {p.what}; tools cannot write it")

    def identities(self) -> set[tuple[int, int]]:
        """(device, inode) of every protected path that exists now, links and targets."""
        found = set()
        for path in self.guard:
            for follow in (False, True):
                try:
                    st = os.stat(path, follow_symlinks=follow)
                except (OSError, ValueError):
                    continue
                found.add((st.st_dev, st.st_ino))
        return found

    def _check_identity(self, st: os.stat_result, parts: tuple[str, ...], verb: str,
                        ids: set[tuple[int, int]]) -> None:
        if (st.st_dev, st.st_ino) in ids:
            raise ToolError(f"'{'/'.join(parts) or '.'}' is one of Lily's protected files or "
                            f"folders under another name; tools cannot {verb} it")

    # -- walking -----------------------------------------------------------------
    def _root_fd(self) -> int:
        if os.open not in os.supports_dir_fd or not getattr(os, "O_NOFOLLOW", 0):
            raise ToolError("the file tools need a system that opens files relative to a "
                            "folder (Linux, macOS)")
        try:
            return os.open(self.root, _DIR_FLAGS & ~os.O_NOFOLLOW)  # the root may be a link
        except OSError as exc:
            raise ToolError(f"cannot open the {self.name} folder: {exc.strerror or exc}") from None

    def _open_dir(self, parts: tuple[str, ...], verb: str, ids: set[tuple[int, int]],
                  create: bool = False, partial: bool = False) -> int:
        """A descriptor of the folder ``parts`` under the root, no symlink followed
        (``partial``: of the deepest one that exists)."""
        fd = self._root_fd()
        try:
            self._check_identity(os.fstat(fd), (), verb, ids)
            for i, name in enumerate(parts):
                here = parts[:i + 1]
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if partial:
                        return fd
                    if not create:
                        raise ToolError(f"cannot {verb} '{'/'.join(parts)}': no folder "
                                        f"'{'/'.join(here)}'") from None
                    try:
                        os.mkdir(name, 0o777, dir_fd=fd)
                    except FileExistsError:
                        pass
                    except OSError as exc:
                        raise ToolError(f"cannot create folder '{'/'.join(here)}': "
                                        f"{exc.strerror or exc}") from None
                    try:
                        child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    except OSError as exc:
                        raise self._explain(fd, name, here, verb, exc) from None
                except OSError as exc:
                    raise self._explain(fd, name, here, verb, exc) from None
                os.close(fd)
                fd = child
                self._check_identity(os.fstat(fd), here, verb, ids)
                marker = _marker(fd)
                if marker:
                    where = (f"'{'/'.join(here)}/' is" if here == parts else
                             f"'{'/'.join(parts)}' is inside '{'/'.join(here)}/',")
                    raise ToolError(f"{where} {marker[1]}: it holds {marker[0]}; "
                                    f"tools cannot {verb} it")
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _explain(self, dir_fd: int, name: str, parts: tuple[str, ...], verb: str,
                 exc: OSError) -> ToolError:
        shown = "/".join(parts)
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return ToolError(f"cannot {verb} '{shown}': {exc.strerror or exc}")
        if stat.S_ISLNK(st.st_mode):
            return ToolError(f"'{shown}' is a symlink; tools do not follow symlinks, which "
                             "could lead outside the workspace")
        if not stat.S_ISDIR(st.st_mode):
            return ToolError(f"cannot {verb} '{shown}': it is not a folder")
        return ToolError(f"cannot {verb} '{shown}': {exc.strerror or exc}")

    def _kind_refusal(self, st: os.stat_result, shown: str, verb: str) -> ToolError | None:
        if stat.S_ISREG(st.st_mode):
            if st.st_nlink > 1:
                return ToolError(f"'{shown}' has {st.st_nlink} hard links; tools do not {verb} "
                                 "files with more than one, which could be outside the workspace")
            return None
        if stat.S_ISDIR(st.st_mode):
            return ToolError(f"'{shown}' is a folder; " + ("use the list tool" if verb == "read"
                                                          else f"tools {verb} files only"))
        if stat.S_ISLNK(st.st_mode):
            return ToolError(f"'{shown}' is a symlink; tools do not follow symlinks, which "
                             "could lead outside the workspace")
        kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a regular file")
        return ToolError(f"'{shown}' is {kind}; tools {verb} regular files only")

    def _open_file(self, dir_fd: int, name: str, parts: tuple[str, ...], verb: str,
                   ids: set[tuple[int, int]]) -> tuple[int, os.stat_result]:
        """Open an existing regular file read-only, refusing everything else."""
        shown = "/".join(parts)
        try:
            before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise ToolError(f"cannot {verb} '{shown}': no such file") from None
        except OSError as exc:
            raise ToolError(f"cannot {verb} '{shown}': {exc.strerror or exc}") from None
        refusal = self._kind_refusal(before, shown, verb)  # never open a device or FIFO
        if refusal:
            raise refusal
        try:
            fd = os.open(name, os.O_RDONLY | _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            raise self._explain(dir_fd, name, parts, verb, exc) from None
        try:
            st = os.fstat(fd)  # what was opened is what counts
            refusal = self._kind_refusal(st, shown, verb)
            if refusal:
                raise refusal
            self._check_identity(st, parts, verb, ids)
            return fd, st
        except BaseException:
            os.close(fd)
            raise

    # -- the operations ------------------------------------------------------------
    def read_bytes_of(self, relpath: str, limit: int | None = None,
                      verb: str = "read") -> tuple[bytes, int]:
        """At most ``limit`` + 1 bytes of a file, and the file's size; ``verb`` names what
        a refusal says tools cannot do (``write`` when a write reads the file it replaces)."""
        parts = split(relpath)
        if not parts:
            raise ToolError(f"'{relpath or '.'}' is the {self.name} folder; use the list tool")
        self._check(parts, verb)
        ids = self.identities()
        limit = self.read_bytes if limit is None else limit
        with _Fd(self._open_dir(parts[:-1], verb, ids)) as dfd:
            fd, st = self._open_file(dfd, parts[-1], parts, verb, ids)
        with _Fd(fd):
            data = _read_upto(fd, limit + 1)
        self._seen("/".join(parts), data)
        return data, st.st_size

    def read(self, relpath: str) -> str:
        """A file's text (UTF-8), cut at ``read_bytes`` with a visible marker."""
        data, size = self.read_bytes_of(relpath)
        return decode_capped(data, self.read_bytes, size)

    def check_write(self, relpath: str, content: str) -> tuple[str, ...]:
        """The checks a write makes before it opens anything (a protected path, the cap):
        ToolError naming the rule; the path's components when they pass."""
        parts = split(relpath)
        if not parts:
            raise ToolError(f"cannot write to the {self.name} folder itself")
        self._check(parts, "write")
        if len(content) > self.write_bytes:
            raise ToolError(f"content is {len(content)} characters, more than the "
                            f"{self.write_bytes} bytes a write accepts ([limits] write_bytes "
                            "in lily.toml)")
        return parts

    def check_new(self, relpath: str) -> None:
        """The folders a write of a new file would walk, as far as they exist: ToolError
        for a symlink, a protected alias or a folder where code runs by itself on the way
        (what the write itself would refuse), without creating anything."""
        parts = split(relpath)
        os.close(self._open_dir(parts[:-1], "write", self.identities(), partial=True))

    def encoded(self, content: str) -> bytes:
        """``content`` as the UTF-8 a write stores; ToolError when it is not text or is
        longer than ``[limits] write_bytes``."""
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError("content is not valid Unicode text (it holds a lone surrogate)") from None
        if len(data) > self.write_bytes:
            raise ToolError(f"content is {len(data)} bytes; a write accepts at most "
                            f"{self.write_bytes} ([limits] write_bytes in lily.toml)")
        return data

    def write(self, relpath: str, content: str) -> int:
        """Replace (or create) a file with ``content``; the number of bytes written."""
        parts = self.check_write(relpath, content)
        if len(content) > self.write_bytes:  # UTF-8 has at least a byte per character
            raise ToolError(f"content is {len(content)} characters, more than the "
                            f"{self.write_bytes} bytes a write accepts ([limits] write_bytes "
                            "in lily.toml)")
        data = self.encoded(content)
        ids = self.identities()
        shown = "/".join(parts)
        with _Fd(self._open_dir(parts[:-1], "write", ids, create=True)) as dfd:
            name = parts[-1]
            mode = None  # a new file: 0o666 less the umask, as open(2) makes it
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            except OSError as exc:
                raise ToolError(f"cannot write '{shown}': {exc.strerror or exc}") from None
            if st is not None:
                refusal = self._kind_refusal(st, shown, "write")
                if refusal:
                    raise refusal
                self._check_identity(st, parts, "write", ids)
                mode = stat.S_IMODE(st.st_mode) & 0o777  # never keep setuid/setgid
            # A new file under a fresh name, then rename(2) within the folder: whatever sits
            # at `name` meanwhile (a symlink, a hard link) is replaced, never written through.
            tmp = f".lily-write-{secrets.token_hex(8)}.tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE_FLAGS,
                             0o666 if mode is None else 0o600, dir_fd=dfd)
            except OSError as exc:
                raise ToolError(f"cannot write '{shown}': {exc.strerror or exc}") from None
            try:
                with _Fd(fd):
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                    if mode is not None:  # a replaced file keeps its permissions
                        os.fchmod(fd, mode)
                os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise ToolError(f"cannot write '{shown}': {exc.strerror or exc}") from None
        return len(data)

    def list(self, relpath: str = ".") -> list[tuple[str, bool]]:
        """(name, is_folder) of a folder's entries, protected ones left out, sorted by name."""
        parts = split(relpath)
        self._check(parts, "list")
        ids = self.identities()
        out = []
        with _Fd(self._open_dir(parts, "list", ids)) as dfd, os.scandir(dfd) as entries:
            for entry in entries:
                if self._hidden(parts, entry, ids, dfd):
                    continue
                out.append((entry.name, entry.is_dir(follow_symlinks=False)))
        return sorted(out)

    def _hidden(self, parts: tuple[str, ...], entry: os.DirEntry[str], ids: set[tuple[int, int]], dfd: int) -> bool:
        if self.protection((*parts, entry.name)):
            return True
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            return True
        if stat.S_ISDIR(st.st_mode) and _holds_marker(dfd, entry.name):
            return True  # a virtual environment or kernelspec under any name
        return (st.st_dev, st.st_ino) in ids

    def scan(self, relpath: str, limit: Callable[[str], int],
             skip_dir: Callable[[int, str], bool]) -> Iterator[tuple[str, bytes]]:
        """(path, bytes) of each regular file under ``relpath``, in path order.

        Protected, non-regular, hard-linked and symlinked entries are skipped, as are files
        over ``limit(name)`` bytes and folders for which ``skip_dir(fd, name)`` is true.
        """
        for path, data in self._scan(relpath, limit, skip_dir):
            self._seen(path, data)
            yield path, data

    def _scan(self, relpath: str, limit: Callable[[str], int],
              skip_dir: Callable[[int, str], bool]) -> Iterator[tuple[str, bytes]]:
        parts = split(relpath)
        self._check(parts, "read")
        ids = self.identities()
        if parts:
            with _Fd(self._open_dir(parts[:-1], "read", ids)) as dfd:
                st = _lstat(dfd, parts[-1])
                if st is not None and not stat.S_ISDIR(st.st_mode):
                    fd, st = self._open_file(dfd, parts[-1], parts, "read", ids)
                    with _Fd(fd):
                        if st.st_size <= limit(parts[-1]):
                            yield "/".join(parts), _read_upto(fd, limit(parts[-1]) + 1)
                    return
        with _Fd(self._open_dir(parts, "read", ids)) as dfd:
            yield from self._scan_dir(dfd, parts, limit, skip_dir, ids, 0)

    def _scan_dir(self, dfd: int, parts: tuple[str, ...], limit: Callable[[str], int],
                  skip_dir: Callable[[int, str], bool], ids: set[tuple[int, int]],
                  depth: int) -> Iterator[tuple[str, bytes]]:
        with os.scandir(dfd) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            here = (*parts, entry.name)
            if self._hidden(parts, entry, ids, dfd):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if depth >= MAX_DEPTH:
                    continue
                try:
                    child = os.open(entry.name, _DIR_FLAGS, dir_fd=dfd)
                except OSError:
                    continue
                with _Fd(child):
                    cst = os.fstat(child)
                    if (cst.st_dev, cst.st_ino) in ids or skip_dir(child, entry.name):
                        continue
                    yield from self._scan_dir(child, here, limit, skip_dir, ids, depth + 1)
            elif stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_size <= limit(entry.name):
                try:
                    fd, st = self._open_file(dfd, entry.name, here, "read", ids)
                except ToolError:
                    continue
                with _Fd(fd):
                    data = _read_upto(fd, limit(entry.name) + 1)
                if len(data) <= limit(entry.name):
                    yield "/".join(here), data


def _marker(dir_fd: int) -> tuple[str, str] | None:
    """The marker file (pyvenv.cfg, kernel.json) the open folder holds, and what it makes the
    folder (docs/trust-boundary.md#protected-paths), or None."""
    for name, what in MARKERS:
        if _lstat(dir_fd, name) is not None:
            return name, what
    return None


def _holds_marker(dir_fd: int, name: str) -> bool:
    """Whether the folder ``name`` in ``dir_fd`` (a listed folder, not a link) holds a marker."""
    return any(_lstat(dir_fd, f"{name}/{marker}") is not None for marker, _ in MARKERS)


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None


def _read_upto(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left > 0:
        try:
            chunk = os.read(fd, min(left, 1 << 20))
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def decode_capped(data: bytes, cap: int, size: int) -> str:
    """UTF-8 text of ``data``; when it exceeds ``cap``, its first ``cap`` bytes and a marker."""
    if len(data) <= cap:
        return data.decode("utf-8", errors="replace")
    text = codecs.getincrementaldecoder("utf-8")(errors="replace").decode(data[:cap])
    return text + (f"\n[… cut here: the file is {size} bytes and a read returns at most {cap} "
                   "([limits] read_bytes in lily.toml); the rest was not read …]")


def for_session(workspace: Path, limits: Limits, persona_dirs: Iterable[Path],
                env: Mapping[str, str]) -> WorkspaceFS:
    """The boundary of one session: its workspace, protected set and caps."""
    from lily_kernel.settings.workspace_trust import data_dir
    from lily_kernel.skills.paths import skill_roots
    roots = [r.path for r in skill_roots(env, workspace)]
    protected, guard = protected_set(Path(workspace), persona_dirs, roots, [data_dir(env)],
                                     policy_paths(env))
    return WorkspaceFS(workspace, protected, guard=guard, read_bytes=limits.read_bytes,
                       write_bytes=limits.write_bytes)
