"""``make demo`` (scripts/demo.py) as a newcomer sees it: the quickstart runs, the
transcript ends by pointing to ``make lab``, no cell fails, and no ipykernel warning leaks in."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def checkout_state() -> tuple[str, bool]:
    """``git status --porcelain`` of the checkout (tracked changes and untracked files not
    ignored) and whether notebooks/.lily exists; ("", False) outside a git checkout."""
    try:
        status = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, text=True,
                                capture_output=True, timeout=60)
    except FileNotFoundError:
        return "", False
    return status.stdout, (REPO / "notebooks" / ".lily").exists()


def test_demo_runs_the_quickstart_and_points_to_make_lab(tmp_path):
    """Issue 43 §4 too: the demo leaves the checkout as it was (no changed or new file, no
    journal in notebooks/.lily)."""
    before = checkout_state()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LILY_"))}
    (tmp_path / "user_skills").mkdir()
    env.update(HOME=str(tmp_path), IPYTHONDIR=str(tmp_path / "ipython"),
               SKILLS_USER_DIR=str(tmp_path / "user_skills"))
    proc = subprocess.run([sys.executable, "scripts/demo.py"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    assert "Demo finished: every cell behaved as expected." in proc.stdout
    assert "make lab" in proc.stdout.split("Demo finished")[-1]
    assert ".venv/bin/lily" in proc.stdout
    # the quickstart quotes its one-line error in Markdown and has no failing cell
    lines = proc.stdout.splitlines()
    assert "  # Error: unknown command /skils. Run /help for the list of commands." in lines
    assert not [line for line in lines if line.startswith("    Error: ")]
    # the demo's kernel talks over IPC: ipykernel has no TCP-encryption warning to print
    assert "without encryption" not in proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    assert checkout_state() == before  # nothing written into the checkout
