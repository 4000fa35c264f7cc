"""The `lily` command with skills from the wild: a closed pipe ends it quietly, and
``validate --lily`` says what a load here would say (docs/skills-compat.md#validation)."""
from __future__ import annotations

import os
import subprocess
import sys


def test_closed_pipe_exits_quietly(env):
    # more output than a pipe buffer holds, so writing must meet the closed pipe
    for i in range(300):
        env.write_skill(env.ws_skills, f"skill-{i:03d}", f"description: {'words ' * 80}")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SKILLS_", "LILY_"))}
    environ.update(env.session_env(), PYTHONPATH=str(env.repo))
    proc = subprocess.Popen([sys.executable, "-m", "lily_kernel.cli", "skills", "list", "--json"],
                            cwd=env.workspace, env=environ, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    head = proc.stdout.read(64)  # what `| head -c 64` would take
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    rc = proc.wait(timeout=60)
    assert head.startswith(b"{")
    assert stderr == "" and "Traceback" not in stderr
    assert rc == 141  # as a shell reports a command ended by SIGPIPE


def test_validate_lily_gives_the_loaders_reasons(env):
    v = env.base / "v"
    ok = env.write_skill(v, "fine", "description: Fine.")
    clash = env.write_skill(v, "clash", "description: d\ncommand: help")
    gated = env.write_skill(v, "gated", 'description: d\n'
                                        'metadata: {"openclaw": {"requires": {"bins": ["memo-x"]}}}')
    noted = env.write_skill(v, "noted", None, body="Just a body.\n")
    tool = env.write_skill(v, "tooled", "description: d\ninvocation_mode: tool_dispatch\n"
                                        "command_tool: no_such_tool")
    proc = env.cli("skills", "validate", "--lily", str(ok), str(clash), str(gated), str(noted),
                   str(tool), PATH=str(env.bin), check_rc=1)
    assert proc.stdout.splitlines() == [
        f"{clash}: skill_error: 'command' /help collides with the built-in command /help; "
        "built-ins win",
        f"{gated}: ineligible: metadata.openclaw.requires.bins: memo-x not on PATH",
        f"{noted}: note: no summary or description: the model's skills index shows the first "
        "paragraph of the body instead",
        f"{tool}: skill_error: 'command_tool' names 'no_such_tool', which is not a registered tool",
    ]
    assert "2 of 5 skill(s) valid (what Lily would load here)." in proc.stderr
    # the same reasons the loader gives for the same folders
    env.write_skill(env.ws_skills, "gated", 'description: d\n'
                                            'metadata: {"openclaw": {"requires": {"bins": ["memo-x"]}}}')
    check = env.cli("skills", "check", PATH=str(env.bin)).stdout
    assert "ineligible: gated (workspace): metadata.openclaw.requires.bins: memo-x not on PATH" \
        in check


def test_validate_lily_passes_notes_only(env):
    noted = env.write_skill(env.base / "v", "noted", None, body="Just a body.\n")
    proc = env.cli("skills", "validate", "--lily", str(noted), check_rc=0)
    assert "note:" in proc.stdout


def test_strict_and_lily_are_exclusive(env):
    folder = env.write_skill(env.base / "v", "x", "description: d")
    assert env.cli("skills", "validate", "--strict", "--lily", str(folder)).returncode == 2
