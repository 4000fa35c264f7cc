"""docs/logs.md#fail-loud in a real Lily kernel: its workspace on a tiny tmpfs that fills
up. The cells that cannot be journaled each say so in one line, the journal is not
switched off, and once space is freed the late records are written after a
``journal_gap`` that ``lily logs show`` marks. Needs root (mount); skipped otherwise."""
from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_support import Kernel, make_world

from lily_kernel.cli import main
from lily_kernel.session.logs import Logs

pytestmark = pytest.mark.usefixtures("no_machine_model")


@pytest.fixture
def tiny_fs(tmp_path) -> Iterator[Path]:
    """A 512 KiB tmpfs mounted at ``tmp_path/ws`` (the kernel's workspace)."""
    mount = tmp_path / "ws"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(folder: Path) -> Path:
    """Fill the filesystem of ``folder`` to the last byte; the filler's path."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError:
            pass
        try:
            while True:
                if fh.write(b"\0") == 0:
                    break
        except OSError:
            pass
    return filler


def stderr(run) -> list[str]:
    return [line for m in run.of_type("stream") if m["content"]["name"] == "stderr"
            for line in m["content"]["text"].splitlines()]


def test_a_full_disk_is_announced_per_cell_and_recovered(tiny_fs, ipython_dir, capsys):
    world = make_world(tiny_fs.parent, ipython_dir, JPY_SESSION_NAME="full.ipynb")
    kernel = Kernel("lily", world)
    try:
        assert stderr(kernel.ok("/skills")) == []  # journaled; the journal file exists
        filler = fill(tiny_fs)
        failed: list[str] = []
        ran = 0
        while len(failed) < 3 and ran < 200:  # the last page's slack takes a few records
            lines = stderr(kernel.ok("/help"))
            assert len(lines) <= 1, lines  # one line per cell at most
            failed += lines
            ran += 1
        assert failed[-2:] == ["journal: not recorded: No space left on device; retrying"] * 2
        assert all(line.startswith("journal: not recorded: ") for line in failed), failed
        filler.unlink()  # space is freed: the next record writes the late ones
        lines = stderr(kernel.ok("/skills"))
        assert len(lines) == 1 and lines[0].startswith("journal: recording again; "), lines
        assert stderr(kernel.ok("/help")) == []  # and all is well again
    finally:
        kernel.shutdown()
    logs = Logs(tiny_fs)
    (sid,) = logs.by_session
    records = logs.checked(sid)  # the chain holds across the gap
    commands = [r["command"] for r in records if r.get("event") == "command"]
    assert commands == ["/skills", *["/help"] * ran, "/skills", "/help"]  # none lost
    assert [r["event"] for r in records].count("journal_gap") == 1
    assert main(["logs", "show", sid[:8], "--workspace", str(tiny_fs)]) == 0
    out = capsys.readouterr().out
    assert "journal gap: writes failed (No space left on device)" in out
