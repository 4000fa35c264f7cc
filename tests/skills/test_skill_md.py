"""docs/loader.md#speed: reading one SKILL.md (skills/skill_md.py) through the loader: what
is not a regular file is "missing", nothing blocks, and a file is read to its end."""
from __future__ import annotations

import os

import pytest


def test_skill_md_that_is_not_a_regular_file_is_missing_and_never_blocks(env):
    """What SKILL.md is gets decided when it is read (open without following, then fstat):
    a folder, a FIFO (opened without blocking) or a dangling link is "missing"; a link to
    a file inside the skill folder is read."""
    (env.ws_skills / "a-folder" / "SKILL.md").mkdir(parents=True)
    (env.ws_skills / "a-fifo").mkdir()
    os.mkfifo(env.ws_skills / "a-fifo" / "SKILL.md")
    (env.ws_skills / "dangling").mkdir()
    (env.ws_skills / "dangling" / "SKILL.md").symlink_to(env.ws_skills / "dangling" / "gone.md")
    inside = env.ws_skills / "linked"
    inside.mkdir()
    (inside / "real.md").write_text("---\nsummary: read through the link\n---\nBody.\n")
    (inside / "SKILL.md").symlink_to(inside / "real.md")
    snap = env.snapshot()
    for name in ("a-folder", "a-fifo", "dangling"):
        assert env.diag(snap, "skill_error", name).reason == "SKILL.md is missing"
    assert snap.names() == ["linked"] and snap.get("linked").summary == "read through the link"


def test_a_device_named_skill_md_is_missing(env):
    """Only root makes device nodes; when it can, a character device (as /dev/null) and a
    block device (as a loop device) are "missing"."""
    import stat
    for name, kind, dev in (("a-char", stat.S_IFCHR, os.makedev(1, 3)),
                            ("a-block", stat.S_IFBLK, os.makedev(7, 0))):
        (env.ws_skills / name).mkdir(parents=True)
        try:
            os.mknod(env.ws_skills / name / "SKILL.md", 0o644 | kind, dev)
        except (PermissionError, AttributeError):
            pytest.skip("making a device node needs root (and os.mknod)")
    snap = env.snapshot()
    for name in ("a-char", "a-block"):
        assert env.diag(snap, "skill_error", name).reason == "SKILL.md is missing"


def test_a_sparse_skill_md_is_read_whole(env):
    """A file with holes (read as zeros) is read to its end, wherever its holes are."""
    text = "---\nsummary: holes\n---\nBody.\n"
    for name, layout in (("hole-inside", (text, 65536, "after the hole\n")),
                         ("hole-first", ("", 65536, text))):
        (env.ws_skills / name).mkdir(parents=True)
        before, gap, after = layout
        with open(env.ws_skills / name / "SKILL.md", "wb") as fh:
            fh.write(before.encode())
            fh.seek(len(before) + gap)
            fh.write(after.encode())
    snap = env.snapshot()
    inside = snap.get("hole-inside")
    assert inside.summary == "holes"
    assert inside.text == text + "\0" * 65536 + "after the hole\n"
    first = snap.get("hole-first")
    assert first.text == "\0" * 65536 + text and first.summary == ""


def test_a_skill_md_over_the_limit_is_refused_and_one_under_it_is_read_whole(env):
    """The read stops one byte past the 256 KiB limit (the load then refuses the file for its
    length); a file just under the limit is read whole."""
    body = "---\nsummary: big\n---\n"
    for name, size in (("over", 300 * 1024), ("under", 255 * 1024)):
        env.write_skill(env.ws_skills, name, raw=(body + "y" * (size - len(body))).encode())
    snap = env.snapshot()
    assert "256 KiB" in env.diag(snap, "skill_error", "over").reason
    assert len(snap.get("under").text) == 255 * 1024


READ_PROC = """
import sys
from lily_kernel.skills.skill_md import read
sys.stdout.write(repr(read(sys.argv[1])[0] == open("/proc/version", "rb").read()))
"""


def test_a_skill_md_whose_size_the_system_does_not_tell_is_read_to_its_end(tmp_path):
    """A file whose size is not its length (a /proc file: size 0, text behind it) is read on
    to its end: the read checks the length it got against the size it was told. Run in a
    private mount namespace, where /proc/version is bind-mounted as a skill's SKILL.md
    (root only, and where unshare and mount are allowed; skipped otherwise)."""
    import shutil
    import subprocess
    import sys
    skill = tmp_path / "proc"
    skill.mkdir()
    (skill / "SKILL.md").touch()
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) to bind-mount a /proc file")
    script = 'mount --bind /proc/version "$1" && exec "$2" -c "$3" "$4"'
    run = subprocess.run([unshare, "--mount", "sh", "-c", script, "sh", str(skill / "SKILL.md"),
                          sys.executable, READ_PROC, str(skill)],
                         capture_output=True, text=True, timeout=60)
    if run.returncode != 0 and "mount" in run.stderr + run.stdout:
        pytest.skip(f"this system refuses the bind mount: {run.stderr.strip()[:200]}")
    assert (run.returncode, run.stdout) == (0, "True"), run.stderr
