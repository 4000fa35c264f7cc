"""The real-browser suite's gate: skipped with a reason without Chromium, unless CI
(``LILY_REQUIRE_BROWSER=1``, set by .ci/run) requires it, and then it fails."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_e2e(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "LILY_REQUIRE_BROWSER"}
    full.update(LILY_CHROMIUM=str(tmp_path / "no-chromium"), **env)
    return subprocess.run([sys.executable, "-m", "pytest", "tests/e2e", "-q", "-rs",
                           "-p", "no:cacheprovider"], cwd=REPO, env=full,
                          capture_output=True, text=True, timeout=300)


def test_without_chromium_the_suite_is_skipped_with_the_reason(tmp_path):
    proc = run_e2e(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "skipped" in proc.stdout and "passed" not in proc.stdout
    assert "real-browser suite (tests/e2e) skipped: Chromium not found" in proc.stdout


def test_ci_turns_the_skip_into_a_failure(tmp_path):
    proc = run_e2e(tmp_path, LILY_REQUIRE_BROWSER="1")
    assert proc.returncode != 0
    assert "LILY_REQUIRE_BROWSER=1, but the real-browser suite cannot run" in proc.stdout
    assert "skipped" not in proc.stdout.splitlines()[-1]
