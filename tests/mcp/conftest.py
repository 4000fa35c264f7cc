"""Fixtures for the MCP tests: a private HOME whose user config names real MCP servers."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from mcp_support import McpWorld


@pytest.fixture
def mcp_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for key in [k for k in os.environ if k.startswith(("OPENAI_", "LILY_", "SKILLS_"))]:
        monkeypatch.delenv(key)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    world = McpWorld(tmp_path)
    yield world
    world.close()
