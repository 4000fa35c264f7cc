"""A real session to read back: a Lily kernel, a scripted model, a workspace (docs/logs.md).

:func:`record_session` starts a Lily kernel on a fresh workspace (a workspace skill
``greet``, a file with work markers, ``[journal] capture_reads = true``), points it at a
:class:`ScriptedServer` that reports usage, runs four cells — a command, a prose request
that calls ``scan_todos``, a skill command, a request that calls ``read`` — and shuts
it down. Its journal is then what ``lily logs`` reads in the tests.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel_support import make_world, run_cells, write_skill

from lily_kernel.session.logs import Logs
from lily_kernel.settings import workspace_trust
from lily_kernel.testing.server import ScriptedServer

GREET_BODY = "# Greet\n\nGreet the person named in the request warmly, in one line.\n"
USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
CELLS = (
    "/skills",
    "What is left to do in notes?",
    "/greet Ada",
    "Show me notes/todo.txt",
)


@dataclass
class Recorded:
    workspace: Path
    session_id: str
    env: dict[str, str]
    base: Path


def script() -> list[dict]:
    """The scripted model's turns for :data:`CELLS`."""
    return [
        {"tool_calls": [{"name": "scan_todos", "arguments": {"input": "notes"}, "id": "c1"}],
         "usage": USAGE},
        {"content": "One thing is left: **write the docs**.", "usage": USAGE},
        {"content": "Hello Ada, lovely to see you!", "usage": USAGE},
        {"tool_calls": [{"name": "read", "arguments": {"path": "notes/todo.txt"},
                         "id": "c2"}], "usage": USAGE},
        {"content": "The file says: TODO write the docs.", "usage": USAGE},
    ]


def record_session(base: Path, ipython_dir: Path | None = None) -> Recorded:
    """Run :data:`CELLS` in a real Lily kernel against the scripted model."""
    with ScriptedServer(script()) as server:
        world = make_world(base, ipython_dir, OPENAI_BASE_URL=server.url,
                           LILY_MAX_RETRIES="0", LILY_TIMEOUT="10",
                           LILY_MODEL="scripted-test-model", JPY_SESSION_NAME="demo.ipynb")
        write_skill(world.ws_skills, "greet",
                    "summary: Greet someone.\ninvocation_mode: prompt_rewrite\ncommand: greet",
                    GREET_BODY)
        (world.workspace / "notes").mkdir()
        (world.workspace / "notes" / "todo.txt").write_text("TODO write the docs\n")
        (world.workspace / "lily.toml").write_text("[journal]\ncapture_reads = true\n")
        workspace_trust.trust(world.workspace, world.env)  # capture_reads needs trust
        run_cells(world, CELLS)
        # from the journal: a %%python cell asking for it would be journaled as a cell too
        (session_id,) = Logs(world.workspace).by_session
        assert server.remaining() == 0, server.chat_requests()
    return Recorded(world.workspace, session_id, world.env, base)


def private_home(tmp_path: Path, monkeypatch: Any) -> None:
    """A HOME, IPython folder and user skill root of the test's own, for a replay's pytest."""
    home = tmp_path / "home"
    (home / "ipython").mkdir(parents=True)
    (tmp_path / "user_skills").mkdir()
    for key, value in {"HOME": str(home), "IPYTHONDIR": str(home / "ipython"),
                       "SKILLS_USER_DIR": str(tmp_path / "user_skills"),
                       "PYDEVD_DISABLE_FILE_VALIDATION": "1"}.items():
        monkeypatch.setenv(key, value)
