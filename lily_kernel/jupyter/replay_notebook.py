"""The first and last cells of a replay notebook (``lily logs replay``, docs/logs.md#replay).

:func:`start` reads the replay script beside the notebook, copies the files the recorded
session read into a fresh temporary workspace (with the recorded ``lily.toml``), starts a
:class:`~lily_kernel.testing.ScriptedServer` answering with the recorded model turns, and
gives this shell's Lily a new session on that workspace, with the recorded model name
pointed at the server; the original workspace's skills, persona and ``lily.toml`` only when
the replay was written with ``--with-workspace``, and without ``--include-code`` a session
that denies ``run_python`` and asks before every other call (docs/logs.md#replay-and-code). :func:`finish`
fails when a recorded model turn was not used, or when a request diverged.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from lily_kernel.commands.runner import Runner
from lily_kernel.jupyter.cells import session_label
from lily_kernel.jupyter.integration import current
from lily_kernel.session.session import Session
from lily_kernel.testing.replay_model import Replayer
from lily_kernel.testing.server import ScriptedServer
from lily_kernel.tools.gate import Replay

_state: dict[str, Any] = {}


#: What a replay copies only with ``--with-workspace``: what the replayed workspace ships
#: that would configure the replay's session (settings/workspace_trust.PARTS, its persona).
CONFIG_PARTS = ("lily.toml", ".mcp.json", "skills", ".agents", ".claude", "persona", ".lily")


def _materialize(files: dict[str, dict[str, str]], root: Path, config: bool) -> None:
    for rel, content in files.items():
        parts = [p for p in rel.replace("\\", "/").split("/") if p not in ("", ".")]
        if not parts or ".." in parts:
            continue  # never outside the copy
        if not config and parts[0].casefold() in CONFIG_PARTS:
            continue  # a captured skill or lily.toml configures nothing without the flag
        target = root.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        if "base64" in content:
            target.write_bytes(base64.b64decode(content["base64"]))
        else:
            target.write_bytes(content.get("text", "").encode("utf-8"))


def start(script_file: str) -> None:
    """Begin replaying ``script_file`` (relative to the notebook's folder) in this shell."""
    stop()
    path = Path(script_file).resolve()
    script = json.loads(path.read_text(encoding="utf-8"))
    workspace = Path(tempfile.mkdtemp(prefix="lily-replay-"))
    with_workspace = script.get("with_workspace") is True
    _materialize(script.get("files") or {}, workspace, with_workspace)
    if with_workspace and script.get("lily_toml"):
        (workspace / "lily.toml").write_text(script["lily_toml"], encoding="utf-8")
    replayer = Replayer(script.get("turns") or [])
    server = ScriptedServer(replayer).start()
    env = dict(os.environ)
    env.update({"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "replay",
                "LILY_WORKSPACE": str(workspace)})
    for key, var in (("skills_dir", "SKILLS_WORKSPACE_DIR"), ("persona_dir", "LILY_PERSONA_DIR")):
        env.pop(var, None)
        if with_workspace and script.get(key):
            env[var] = str((path.parent / script[key]).resolve())
    if script.get("include_code") is not True:  # no recorded call runs code: run_python
        # is denied and every other call asks, and /confirm is not a cell
        deny = env.get("LILY_TOOLS_DENY", "")
        env["LILY_TOOLS_DENY"] = f"{deny}, run_python" if deny.strip() else "run_python"
        env["LILY_MODE"] = "ask"
    integration = current()
    label = session_label(os.environ)

    def new_session() -> Session:
        session = integration.cells.new_session(workspace, label=label, env=env)
        # without --include-code the gate lets no call run code, by any route (tools/gate.py)
        session.replay = Replay.CODE if script.get("include_code") is True else Replay.NO_CODE
        session.set_model(base_url=server.url, max_retries="0",
                          **({"model": script["model"]} if script.get("model") else {}))
        return session

    integration.cells.runner = Runner(new_session)
    _state.update(server=server, replayer=replayer, workspace=workspace)
    print(f"replaying session {str(script.get('session_id', '?'))[:12]}: "
          f"{len(replayer.turns)} recorded model turn(s), "
          f"{len(script.get('files') or {})} captured file(s)")


def finish() -> None:
    """Check the replay used every recorded model turn, then stop the server."""
    replayer: Replayer | None = _state.get("replayer")
    if replayer is None:
        raise RuntimeError("no replay is running: run the notebook's first cell")
    try:
        if replayer.divergence:
            raise AssertionError(f"replay diverged: {replayer.divergence}")
        if replayer.remaining():
            raise AssertionError(f"replay used {replayer.used} of {len(replayer.turns)} "
                                 "recorded model turns")
        print(f"replay complete: all {len(replayer.turns)} recorded model turn(s) used")
    finally:
        stop()


def stop() -> None:
    """Stop a running replay's server and remove its workspace copy."""
    server = _state.pop("server", None)
    if server is not None:
        server.stop()
    workspace = _state.pop("workspace", None)
    if workspace is not None:
        shutil.rmtree(workspace, ignore_errors=True)
    _state.pop("replayer", None)


def record_outputs(nb_path: Path, timeout: int = 120) -> str | None:
    """Run the replay notebook once (nbclient, in its folder) and save its outputs as the
    reference nbval compares against; what already diverged, or None."""
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError:
        from lily_kernel.errors import LogsError
        raise LogsError("recording the replay's outputs needs nbclient and nbformat "
                        "(pip install nbclient), or use --no-run") from None
    nb = nbformat.read(nb_path, as_version=4)
    NotebookClient(nb, timeout=timeout, allow_errors=True,
                   resources={"metadata": {"path": str(Path(nb_path).parent)}}).execute()
    problem = None
    for number, cell in enumerate(nb.cells, 1):
        cell.get("metadata", {}).pop("execution", None)
        expected = "raises-exception" in cell.get("metadata", {}).get("tags", [])
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and not expected and problem is None:
                problem = f"cell {number}: {out.get('ename')}: {out.get('evalue')}"
    nbformat.write(nb, nb_path)
    return problem
