"""The kernelspec carries Lily's logo, and an install copies it where Jupyter finds it."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

from lily_kernel.skills.paths import bundled

LOGOS = {"logo-32x32.png": 32, "logo-64x64.png": 64}


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", path
    return struct.unpack(">II", data[16:24])


def test_the_bundled_kernelspec_has_the_logos():
    source = bundled("kernelspec")
    for name, size in LOGOS.items():
        assert png_size(source / name) == (size, size)
    assert (source / "logo-svg.svg").read_text().lstrip().startswith("<svg")


def test_install_copies_the_logos_where_jupyter_finds_them(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_", "LILY_"))}
    env["HOME"] = str(tmp_path)
    prefix = tmp_path / "prefix"
    proc = subprocess.run([sys.executable, "-m", "lily_kernel", "install", "--prefix", str(prefix)],
                          capture_output=True, text=True, timeout=60, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    from jupyter_client.kernelspec import KernelSpecManager
    ksm = KernelSpecManager(kernel_dirs=[str(prefix / "share" / "jupyter" / "kernels")])
    folder = Path(ksm.get_all_specs()["lily"]["resource_dir"])
    # jupyter_server serves every logo-* file of that folder to the launcher
    assert {p.name for p in folder.glob("logo-*")} == {*LOGOS, "logo-svg.svg"}
    for name, size in LOGOS.items():
        assert png_size(folder / name) == (size, size)
    # and the Help menu's page, written from the command table (test_help_page.py)
    assert "/reload_skills" in (folder / "help.html").read_text(encoding="utf-8")
