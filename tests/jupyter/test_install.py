"""Kernelspec install, run as a user would (a subprocess), by both entry points:
``python -m lily_kernel install`` and ``lily kernel install``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ENTRY_POINTS = {"module": ["-m", "lily_kernel", "install"],
                "cli": ["-m", "lily_kernel.cli", "kernel", "install"]}
entry_points = pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))


def install(*args: str, home: Path, entry: str = "module") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_", "LILY_"))}
    env["HOME"] = str(home)  # --user, if it ever ran, would write here and not in ~
    return subprocess.run([sys.executable, *ENTRY_POINTS[entry], *args],
                          capture_output=True, text=True, timeout=60, env=env, cwd=str(home))


@entry_points
def test_install_prefix_writes_the_kernelspec(tmp_path, entry):
    prefix = tmp_path / "prefix"
    proc = install("--prefix", str(prefix), home=tmp_path, entry=entry)
    assert proc.returncode == 0, proc.stderr
    spec_dir = prefix / "share" / "jupyter" / "kernels" / "lily"
    spec = json.loads((spec_dir / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable
    assert spec["argv"][1:3] == ["-m", "lily_kernel"]
    assert "{connection_file}" in spec["argv"]
    assert spec["display_name"] == "Lily"
    assert spec["language"] == "markdown"
    assert str(spec_dir) in proc.stdout


def test_installed_spec_is_found_by_jupyter(tmp_path):
    prefix = tmp_path / "prefix"
    assert install("--prefix", str(prefix), home=tmp_path).returncode == 0
    from jupyter_client.kernelspec import KernelSpecManager
    ksm = KernelSpecManager(kernel_dirs=[str(prefix / "share" / "jupyter" / "kernels")])
    spec = ksm.get_kernel_spec("lily")
    assert spec.display_name == "Lily" and spec.argv[0] == sys.executable


@entry_points
def test_user_and_sys_prefix_together_is_a_clear_error(tmp_path, entry):
    proc = install("--user", "--sys-prefix", home=tmp_path, entry=entry)
    assert proc.returncode != 0
    assert "--user" in proc.stderr and "--sys-prefix" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / ".local").exists()  # nothing was installed
