"""Kernelspec install, run as a user would (a subprocess), by both entry points:
``python -m lily_kernel install`` and ``lily kernel install``."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ENTRY_POINTS = {"module": ["-m", "lily_kernel", "install"],
                "cli": ["-m", "lily_kernel.cli", "kernel", "install"]}
entry_points = pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
REPO = Path(__file__).resolve().parents[2]


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


# -- permissions: a shared install (JupyterHub, a shared conda) must be readable by all ----

def _modes(spec_dir: Path) -> dict[str, int]:
    """The folder's mode (as ".") and each of its entries'."""
    return {(p.name if p != spec_dir else "."): stat.S_IMODE(p.stat().st_mode)
            for p in [spec_dir, *sorted(spec_dir.iterdir())]}


def _install_strict_umask(python: str, *args: str, home: Path, **env: str):
    """Install with umask 077, so the modes cannot come from a lenient umask."""
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("JUPYTER_", "LILY_", "XDG_"))}
    full.update(HOME=str(home), **env)
    return subprocess.run([python, "-m", "lily_kernel", "install", *args], env=full,
                          cwd=str(home), capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: os.umask(0o077))


def _throwaway_venv(base: Path) -> str:
    """A bare venv whose sys.prefix is under ``base``; it imports this checkout and the
    test environment's packages through PYTHONPATH (no pip, so it takes a moment)."""
    venv.EnvBuilder(with_pip=False).create(base)
    return str(base / "bin" / "python")


@pytest.mark.parametrize("where", ["--prefix", "--sys-prefix", "--user"])
def test_the_kernelspec_is_readable_by_every_user(tmp_path, where):
    home = tmp_path / "home"
    home.mkdir()
    python, args, env = sys.executable, [where], {}
    if where == "--prefix":
        args.append(str(tmp_path / "prefix"))
        spec_dir = tmp_path / "prefix" / "share" / "jupyter" / "kernels" / "lily"
    elif where == "--sys-prefix":
        python = _throwaway_venv(tmp_path / "venv")
        site = [p for p in sys.path if p.endswith("site-packages")]
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), *site])
        spec_dir = tmp_path / "venv" / "share" / "jupyter" / "kernels" / "lily"
    else:
        spec_dir = home / ".local" / "share" / "jupyter" / "kernels" / "lily"
    proc = _install_strict_umask(python, *args, home=home, **env)
    assert proc.returncode == 0, proc.stderr
    assert str(spec_dir) in proc.stdout
    modes = _modes(spec_dir)
    assert modes.pop(".") == 0o755
    assert "kernel.json" in modes
    assert set(modes.values()) == {0o644}, {k: oct(v) for k, v in modes.items()}
