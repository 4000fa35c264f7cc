"""What the eval harness's tests share: a local git repository standing in for the
benchmark's public one (no network)."""
from __future__ import annotations

import subprocess
from pathlib import Path


def commit_all(repo: Path, message: str) -> str:
    """``git init`` ``repo``, commit every file in it, and return the commit's hash."""
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", message], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
