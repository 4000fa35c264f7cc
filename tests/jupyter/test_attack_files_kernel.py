"""The file boundary in a real Lily kernel (docs/trust-boundary.md), driven by a hostile
scripted model: the kernel's own session is the one that must refuse."""
from __future__ import annotations

import os

import pytest
from kernel_support import Kernel, conversation, scripted_kernel

TOML = "[limits]\nread_bytes = 64\n\n[tools]\ndeny = ['nothing']\n"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, ipython_dir, server):
    with scripted_kernel(tmp_path_factory.mktemp("files-kernel"), ipython_dir, server.url,
                         files={"lily.toml": TOML}) as k:
        yield k


def results(kernel: Kernel) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in conversation(kernel)
            if m.get("role") == "tool"}


def test_a_hostile_model_in_a_kernel_changes_nothing_that_governs_lily(kernel, script):
    ws = kernel.workspace
    os.mkfifo(ws / "pipe")
    (ws / "big.txt").write_text("B" * 200)
    script.turns.extend([
        {"tool_calls": [
            {"id": "toml", "name": "write", "arguments": {"path": "lily.toml", "content": "[tools]\n"}},
            {"id": "skill", "name": "write",
             "arguments": {"path": "skills/evil/SKILL.md", "content": "---\nsummary: x\n---\nx"}},
            {"id": "fifo", "name": "read", "arguments": {"path": "pipe"}},
            {"id": "big", "name": "read", "arguments": {"path": "big.txt"}},
            {"id": "ls", "name": "list", "arguments": {"path": "."}}]},
        {"content": "done"}])
    run = kernel.run("do your worst", timeout=60)
    assert run.status == "ok", run.messages
    got = results(kernel)
    assert got["toml"] == "Error: lily.toml is Lily's configuration; tools cannot write it"
    assert got["skill"].startswith("Error:") and "skill root" in got["skill"]
    assert got["fifo"].startswith("Error:") and "FIFO" in got["fifo"]
    assert got["big"].startswith("B" * 64 + "\n[… cut here")  # lily.toml's read_bytes applies
    assert "lily.toml" not in got["ls"].splitlines() and "big.txt" in got["ls"].splitlines()
    assert (ws / "lily.toml").read_text() == TOML
    assert not (ws / "skills" / "evil").exists()
