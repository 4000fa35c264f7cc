"""Fixtures for the sandbox tests (docs/sandbox.md): a private world — a workspace with a
data file, a fake home holding a fake SSH key and dotfiles — and ``run``, which runs code
in the sandbox from that workspace and checks that the child really ran (it prints
``sandbox_support.MARK`` first) before a test judges what it could not do.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sandbox_support import FAKE_KEY, MARK, World

from lily_kernel.tools import sandbox, sandboxed_code


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    workspace, home, outside, tmp = (tmp_path / n for n in ("ws", "home", "outside", "tmp"))
    for d in (workspace, home / ".ssh", home / ".config" / "lily", home / ".aws", outside, tmp):
        d.mkdir(parents=True)
    (workspace / "data.csv").write_text("x,y\n1,2\n3,4\n")
    (workspace / ".env").write_text("OPENAI_API_KEY=sk-from-dotenv\n")
    (home / ".ssh" / "id_rsa").write_text(FAKE_KEY)
    (home / ".netrc").write_text("machine example.com password hunter2\n")
    (home / ".aws" / "credentials").write_text("aws_secret_access_key = fake\n")
    (home / "notes.txt").write_text("not a secret\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TMPDIR", str(tmp))  # scratch folders land here, to count them
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.chdir(workspace)
    yield World(workspace, home, outside)


@pytest.fixture
def run(world: World) -> Callable[..., sandboxed_code.CodeResult]:
    """``run(code, **limits)``: the code in the sandbox, after a line printing MARK."""
    def go(code: str, namespace: dict[str, Any] | None = None, seconds: float = 20,
           **limits: Any) -> sandboxed_code.CodeResult:
        result = sandboxed_code.run_code(f"print({MARK!r})\n{code}", {} if namespace is None
                                  else namespace, workspace=world.workspace,
                                  limits=sandbox.Limits(seconds=seconds, **limits))
        if result.status is sandbox.Status.DONE:
            assert result.printed.startswith(MARK), result
        return result
    return go
