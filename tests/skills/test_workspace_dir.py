"""Where the workspace is: LILY_WORKSPACE, else a gateway's KERNEL_WORKING_DIR, else the cwd
(docs/front-ends.md#remote-kernels)."""
from __future__ import annotations

import os
from pathlib import Path

from lily_kernel.skills.paths import workspace_dir


def test_workspace_dir_precedence(tmp_path):
    there = tmp_path / "there"
    there.mkdir()
    assert workspace_dir({"KERNEL_WORKING_DIR": str(there)}) == there
    assert workspace_dir({"KERNEL_WORKING_DIR": str(there), "LILY_WORKSPACE": "/w"}) == Path("/w")
    assert workspace_dir({"KERNEL_WORKING_DIR": str(tmp_path / "nope")}) == Path(os.getcwd())
