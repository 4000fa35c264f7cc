"""Issue 35 §3: ``lily logs replay`` of a session that ran every built-in command passes
``pytest --nbval``. Whatever varies from run to run in a command's output (session ids,
times, paths, usage counts, card ids, snapshot hashes) is sanitized from one list,
``logs_replay.SANITIZE`` (docs/logs.md#replay)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from kernel_support import Kernel, make_world, write_skill
from logs_support import private_home

from lily_kernel.cli import main
from lily_kernel.commands.table import BUILTIN_NAMES
from lily_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.usefixtures("no_machine_model")

USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
CELLS = [
    "/help",
    "/help greet",
    "/skills",
    "/skills --all",
    "/greet Ada",
    "/skill greet Grace",
    "/agent",
    "/agent default",
    "/reload_skills",
    "/reload_persona",
    "/model",
    "/model scripted-test-model temperature=0.2",
    "Run some Python for me.",
    "/cancel",
    "Run it again, please.",
    "/confirm",
    "/compact",
    "/mcp",
    "/trust",
    "/mode",
    "/policy",
    "/logs",
    "/logs 3",
    "/logs export transcript.md",
    "/rewind",
    "/rewind 3",
    "/new",
]


def turns() -> list[dict]:
    code = {"code": "print(6 * 7)"}
    return [
        {"content": "Hello Ada!", "usage": USAGE},
        {"content": "Hello Grace!", "usage": USAGE},
        {"tool_calls": [{"name": "run_python", "arguments": code, "id": "r1"}], "usage": USAGE},
        {"tool_calls": [{"name": "run_python", "arguments": code, "id": "r2"}], "usage": USAGE},
        {"content": "It printed 42.", "usage": USAGE},
    ]


def test_replay_of_every_builtin_command_passes_nbval(tmp_path, ipython_dir, capsys,
                                                       monkeypatch):
    ran = {cell.split()[0][1:] for cell in CELLS if cell.startswith("/")}
    ran.add("fork")  # in the second session, below
    assert ran | {"greet"} >= BUILTIN_NAMES, BUILTIN_NAMES - ran  # every built-in command
    with ScriptedServer(turns()) as server:
        world = make_world(tmp_path / "rec", ipython_dir, OPENAI_BASE_URL=server.url,
                           OPENAI_API_KEY="k", LILY_MAX_RETRIES="0", LILY_TIMEOUT="10",
                           LILY_MODEL="scripted-test-model", JPY_SESSION_NAME="all.ipynb")
        write_skill(world.ws_skills, "greet",
                    "summary: Greet someone.\ninvocation_mode: prompt_rewrite\ncommand: greet",
                    "# Greet\n\nGreet the person named in the request.\n")
        (world.workspace / "lily.toml").write_text("[model]\ntemperature = 0.5\n")
        kernel = Kernel("lily", world)
        try:
            sid = kernel.ok("%%python\nimport lily\nprint(lily.session().session_id)"
                            ).stdout.strip()
            for cell in CELLS:
                kernel.run(cell, timeout=60)
            kernel.run("/help", timeout=60)  # the new session's: /new is its first record
            after = kernel.ok("%%python\nimport lily\nprint(lily.session().session_id)").stdout.strip()
            kernel.run("/fork trial", timeout=60)  # a third session: /fork is its first record
            forked = kernel.ok("%%python\nimport lily\nprint(lily.session().session_id)").stdout.strip()
        finally:
            kernel.shutdown()
        assert server.remaining() == 0
    private_home(tmp_path, monkeypatch)
    # replayed where it was recorded: without a sandbox, run_python asked (kernel_support)
    monkeypatch.setenv("LILY_SANDBOX", "off")
    replays = tmp_path / "replays"
    for session in (sid, after, forked):
        code = main(["logs", "replay", session[:12], "--workspace", str(world.workspace),
                     "--to", str(replays), "--include-code", "--with-workspace"])
        out, err = capsys.readouterr()
        assert code == 0, out + err
    done = subprocess.run([sys.executable, "-m", "pytest", "--nbval", str(replays), "-q",
                           "-p", "no:cacheprovider", "-p", "no:randomly",
                           "--rootdir", str(replays)],
                          cwd=replays, env=dict(os.environ), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-6000:]
    # setup, the id cell, every cell but /new, finish; setup, /new, /help, the id, finish;
    # setup, /fork, the id, finish
    assert f"{len(CELLS) + 2 + 5 + 4} passed" in done.stdout, done.stdout[-2000:]
