"""A Lily kernel started by a real Jupyter Enterprise Gateway, used over its REST API and websocket.

EG 3.x pins jupyter_client 6 (which breaks ipykernel 7), so the gateway runs from its own
virtual environment, ``.venv-eg``, built by ``make eg-venv`` (``make test`` builds it; this
module builds it too when it is missing). It serves Lily's kernelspec, whose argv runs
Lily's own Python: the gateway and the kernel are separate services, as on a cluster.
The client does what JupyterLab does through a gateway: it starts a kernel with
``KERNEL_USERNAME`` and ``KERNEL_WORKING_DIR`` (EG refuses to start kernels for the users in
``EG_UNAUTHORIZED_USERS``, ``root`` by default), runs ``/skills`` and an agent request,
restarts the kernel, interrupts a running cell and shuts the kernel down (docs/deploy.md).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.error
from pathlib import Path

import pytest
from kernel_support import make_world
from test_kernel_gateway import (
    Channels,
    check_first_cells,
    first_cells,
    free_port,
    http,
    run_in_own_loop,
    scripted_model_env,
    stop,
    team_workspace,
    wait_until_serving,
)
from tornado.websocket import websocket_connect

from lily_kernel.session.journal import journal_path
from lily_kernel.skills.paths import bundled

REPO = Path(__file__).resolve().parents[2]
EG_VENV = REPO / ".venv-eg"
EG_STAMP = EG_VENV / ".eg-installed"


def eg_python() -> Path:
    """The gateway's own Python, building ``.venv-eg`` through the Makefile when missing."""
    if not EG_STAMP.is_file():
        if shutil.which("make") is None:
            pytest.fail("make is needed to build .venv-eg (or run `make eg-venv` by hand)")
        subprocess.run(["make", "-s", "eg-venv"], cwd=REPO, check=True)
    return EG_VENV / "bin" / "python"


def lily_kernelspec(kernels: Path) -> None:
    """Lily's kernelspec, running this (Lily's) Python, where the gateway looks for specs."""
    spec = json.loads((bundled("kernelspec") / "kernel.json").read_text())
    spec["argv"][0] = sys.executable
    spec["display_name"] = "Lily (through Enterprise Gateway)"
    folder = kernels / "lily"
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(json.dumps(spec))


@pytest.fixture
def gateway(tmp_path, ipython_dir):
    """``jupyter enterprisegateway`` from .venv-eg on a free port of 127.0.0.1."""
    python = eg_python()
    world = make_world(tmp_path / "eg", ipython_dir)
    jupyter_path = tmp_path / "eg" / "jupyter"
    lily_kernelspec(jupyter_path / "kernels")
    port, response_port = free_port(), free_port()
    env = dict(world.env,
               JUPYTER_PATH=str(jupyter_path),
               JUPYTER_DATA_DIR=str(tmp_path / "eg" / "data"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "eg" / "runtime"),
               # what EG passes on from its own environment, and from clients
               EG_INHERITED_ENVS="PATH,PYTHONPATH,HOME,IPYTHONDIR,SKILLS_USER_DIR,"
                                 "PYDEVD_DISABLE_FILE_VALIDATION",
               EG_CLIENT_ENVS="OPENAI_BASE_URL,LILY_MODEL,LILY_MAX_RETRIES,LILY_TIMEOUT")
    log_path = tmp_path / "gateway.log"
    log = open(log_path, "w")
    proc = subprocess.Popen([str(python), "-m", "enterprise_gateway", "--ip=127.0.0.1",
                             f"--port={port}", "--port_retries=0",
                             f"--EnterpriseGatewayApp.response_port={response_port}",
                             "--EnterpriseGatewayApp.allowed_kernels=['lily']"],
                            cwd=str(world.workspace), env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    wait_until_serving(proc, base + "/api/kernelspecs", log_path)
    yield base, world.workspace, log_path
    stop(proc)
    log.close()


def test_enterprise_gateway_refuses_root(gateway):
    base, _, _ = gateway
    with pytest.raises(urllib.error.HTTPError) as refused:
        http("POST", base + "/api/kernels", {"name": "lily", "env": {"KERNEL_USERNAME": "root"}})
    assert refused.value.code == 403
    assert "KERNEL_USERNAME" in refused.value.read().decode()


def test_a_lily_kernel_through_enterprise_gateway(gateway, tmp_path, server, turns):
    base, gateway_home, log_path = gateway
    assert "lily" in http("GET", base + "/api/kernelspecs")["kernelspecs"]
    workspace = team_workspace(tmp_path / "volume" / "alice")
    turns.append({"content": "Hello through Enterprise Gateway."})
    kernel = http("POST", base + "/api/kernels", {"name": "lily", "env": {
        "KERNEL_USERNAME": "alice", "KERNEL_WORKING_DIR": str(workspace),
        **scripted_model_env(server)}})
    url = f"ws{base[4:]}/api/kernels/{kernel['id']}/channels"
    try:
        async def first_run():
            ws = await websocket_connect(url)
            try:
                return await first_cells(Channels(ws))
            finally:
                ws.close()

        runs = run_in_own_loop(first_run)
        http("POST", f"{base}/api/kernels/{kernel['id']}/restart", {})

        def interrupt_once_started(output: dict) -> None:
            if "started" in output.get("text", ""):  # EG's interrupt: its REST call
                http("POST", f"{base}/api/kernels/{kernel['id']}/interrupt", {})

        async def after_restart():
            ws = await websocket_connect(url)
            try:
                channels = Channels(ws)
                stopped = await channels.execute(
                    "%%python\nimport time\nprint('started', flush=True)\n"
                    "for _ in range(600): time.sleep(0.1)", on_output=interrupt_once_started)
                return stopped, await channels.execute("/help")
            finally:
                ws.close()

        (i_reply, _), (h_reply, h_out) = run_in_own_loop(after_restart)
    finally:
        http("DELETE", f"{base}/api/kernels/{kernel['id']}")

    check_first_cells(runs, "Hello through Enterprise Gateway.", workspace, server)
    assert i_reply["status"] == "error" and i_reply["ename"] == "KeyboardInterrupt"
    assert h_reply["status"] == "ok" and "/skills" in json.dumps(h_out)
    # One journal, named after the kernel id EG gave (no other label was sent), in the
    # workspace: the restart ended the first session there, the shutdown the second.
    journal = journal_path(workspace, kernel['id'])
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    created = [r for r in records if r["event"] == "session_created"]
    ended = [r.get("reason") for r in records if r["event"] == "session_ended"]
    assert len(created) == 2 and all(r["workspace"] == str(workspace) for r in created)
    assert ended == ["restart", "shutdown"], (ended, log_path.read_text()[-3000:])
    assert any(r.get("event") == "command" and r.get("command") == "/skills --all" for r in records)
    assert not (gateway_home / ".lily").exists()  # nothing in the gateway's own folder
