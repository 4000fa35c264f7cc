"""The golden notebooks under nbconvert and papermill, run as a user runs them (subprocesses).

nbconvert honours the ``raises-exception`` tag: every golden notebook executes
and it exits 0. papermill (2.x) reports any error output as a failed run, tag or
not: the quickstart has no failing cell, so it runs to the end and exits 0;
commands.ipynb (deliberately failing cells, tagged) runs to the end and exits 1
naming the last of them. Neither prints a traceback or a ``KeyboardInterrupt`` from
the kernel. See the README ("papermill and nbconvert") and
docs/front-ends.md#papermill-and-nbconvert.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
GOLDEN = sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))
TIMEOUT = 300  # the whole batch, on a loaded machine


@pytest.fixture
def folder(tmp_path) -> tuple[Path, dict[str, str]]:
    """A copy of notebooks/ (the runs write journals beside them) and a private environment."""
    nb = tmp_path / "notebooks"
    shutil.copytree(REPO / "notebooks", nb)
    for d in ("home", "ipython", "user_skills"):
        (tmp_path / d).mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "LILY_", "SKILLS_", "JPY_", "KERNEL_"))}
    env.update(HOME=str(tmp_path / "home"), IPYTHONDIR=str(tmp_path / "ipython"),
               SKILLS_USER_DIR=str(tmp_path / "user_skills"), PYTHONPATH=str(REPO))
    return nb, env


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)


def tagged(cell, tag: str) -> bool:
    return tag in cell.get("metadata", {}).get("tags", [])


def check_ran_to_the_end(path: Path) -> None:
    """Every code cell ran, and only the cells tagged raises-exception failed."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.get("execution_count") for c in code), path.name
    for cell in code:
        failed = any(o.get("output_type") == "error" for o in cell.get("outputs", []))
        assert failed == tagged(cell, "raises-exception"), (path.name, cell.source)


def test_nbconvert_executes_every_golden_notebook(folder, tmp_path):
    nb, env = folder
    out = tmp_path / "out"
    # one nbconvert per kernel: in a batch, nbconvert keeps the first notebook's kernel
    by_kernel: dict[str, list[str]] = {}
    for name in GOLDEN:
        kernel = nbformat.read(nb / name, as_version=4).metadata["kernelspec"]["name"]
        by_kernel.setdefault(kernel, []).append(name)
    assert set(by_kernel) == {"lily", "python3"}  # the Lily kernel and %load_ext lily
    for names in by_kernel.values():
        proc = run(["nbconvert", "--to", "notebook", "--execute", "--output-dir", str(out),
                    *names], nb, env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "KeyboardInterrupt" not in proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr
    for name in GOLDEN:
        check_ran_to_the_end(out / name)


def test_papermill_reports_a_deliberately_failing_cell(folder, tmp_path):
    nb, env = folder
    out = tmp_path / "commands.out.ipynb"
    proc = run(["papermill", "--no-progress-bar", "commands.ipynb", str(out)], nb, env)
    assert proc.returncode == 1
    # papermill names the last failing cell, with Lily's one-line error
    assert "Error: no agent named 'nobody'. Run /agent for the list of agents." in proc.stderr
    assert "KeyboardInterrupt" not in proc.stdout + proc.stderr
    executed = nbformat.read(out, as_version=4)
    # papermill adds two marker cells that point at the failure; without them the
    # notebook ran to the end, as under nbconvert
    executed.cells = [c for c in executed.cells if not tagged(c, "papermill-error-cell-tag")]
    nbformat.write(executed, out)
    check_ran_to_the_end(out)


@pytest.mark.parametrize("name", ["quickstart.ipynb", "agent.ipynb"])
def test_papermill_runs_a_notebook_without_deliberate_errors(folder, tmp_path, name):
    nb, env = folder
    assert not any(tagged(c, "raises-exception")
                   for c in nbformat.read(nb / name, as_version=4).cells)
    out = tmp_path / name.replace(".ipynb", ".out.ipynb")
    proc = run(["papermill", "--no-progress-bar", name, str(out)], nb, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "KeyboardInterrupt" not in proc.stdout + proc.stderr
    check_ran_to_the_end(out)
