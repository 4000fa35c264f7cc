"""The file tools through the ACP client's ``fs/read_text_file`` and ``fs/write_text_file``,
over Lily's own file boundary (docs/front-ends.md#files-through-the-client).

An editor that offers these methods (Zed) answers a read from its buffer, so the model sees
what the user sees, unsaved edits included, and applies a write to the buffer for review.
Every rule of the boundary is checked first, on the disk, exactly as for a local read or
write (protected paths, symlinks and hard links, kinds of file, the size caps): only the
bytes come from, or go to, the client. A file the disk does not hold is refused as before.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from lily_kernel.errors import ToolError
from lily_kernel.tools.workspace_fs import WorkspaceFS, split

Read = Callable[[str], str]  # absolute path -> the client's text
Write = Callable[[str, str], None]  # absolute path, text


class ClientFS(WorkspaceFS):
    """The boundary ``base`` describes, whose file bytes travel through the client."""

    def __init__(self, base: WorkspaceFS, read: Read | None, write: Write | None) -> None:
        super().__init__(base.root, base.protected, guard=base.guard,
                         read_bytes=base.read_bytes, write_bytes=base.write_bytes,
                         name=base.name)
        self.on_read = base.on_read
        self._read, self._write = read, write

    def read_bytes_of(self, relpath: str, limit: int | None = None,
                      verb: str = "read") -> tuple[bytes, int]:
        """The boundary's checks on the disk, then the client's text of the file."""
        if self._read is None:
            return super().read_bytes_of(relpath, limit, verb)
        self._checked(relpath, verb)
        parts = split(relpath)
        try:
            data = self._read(str(self.root.joinpath(*parts))).encode("utf-8", "replace")
        except Exception as exc:  # the client refused: one line for the model
            raise ToolError(f"cannot {verb} '{'/'.join(parts)}': the editor said "
                            f"{str(exc)[:200] or type(exc).__name__}") from None
        limit = self.read_bytes if limit is None else limit
        self._seen("/".join(parts), data[:limit + 1])
        return data[:limit + 1], len(data)

    def _checked(self, relpath: str, verb: str) -> None:
        """Every check a local read of the file makes (its bytes are not used)."""
        hook, self.on_read = self.on_read, None
        try:
            super().read_bytes_of(relpath, 0, verb)
        finally:
            self.on_read = hook

    def write(self, relpath: str, content: str) -> int:
        """The boundary's checks (as a local write makes them), then the client writes."""
        if self._write is None:
            return super().write(relpath, content)
        parts = self.check_write(relpath, content)
        self.check_new(relpath)
        data = self.encoded(content)
        path = self.root.joinpath(*parts)
        if os.path.lexists(path):  # what replacing it would refuse: its kind, a link
            self._checked(relpath, "write")
        try:
            self._write(str(Path(path)), content)
        except Exception as exc:
            raise ToolError(f"cannot write '{'/'.join(parts)}': the editor said "
                            f"{str(exc)[:200] or type(exc).__name__}") from None
        return len(data)


def through_client(read: Read | None, write: Write | None
                   ) -> Callable[[WorkspaceFS], WorkspaceFS] | None:
    """What a session's ``files_through`` is for a client offering ``read`` or ``write``."""
    if read is None and write is None:
        return None
    return lambda base: ClientFS(base, read, write)
