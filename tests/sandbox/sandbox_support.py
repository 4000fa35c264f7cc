"""Helpers of the sandbox tests (docs/sandbox.md): the marker the child prints first, a
fake key, the world's paths, and counts of this process's children and descriptors."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from lily_kernel.tools import sandbox

MARK = "SANDBOX-CHILD-RAN"
FAKE_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nfake-key-for-the-sandbox-tests\n"

needs_sandbox = pytest.mark.skipif(sandbox.unavailable() is not None,
                                   reason=f"no sandbox here: {sandbox.unavailable()}")


@dataclass
class World:
    workspace: Path
    home: Path
    outside: Path  # a folder outside the workspace, writable by this user

    def leftovers(self) -> list[str]:
        """Scratch folders still in the temp folder (each run removes its own)."""
        return sorted(p.name for p in Path(os.environ["TMPDIR"]).glob("lily-sandbox-*"))


def children() -> list[int]:
    """This process's children still alive or unreaped (from /proc)."""
    me = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[1] == me:
                found.append(int(entry.name))
    return found


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))
