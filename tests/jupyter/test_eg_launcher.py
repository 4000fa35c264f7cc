"""Lily started the way Enterprise Gateway's Python launcher starts a kernel in a pod.

EG's launchers are not in its wheel (they ship in the kernel image), so the test does the
launcher's part itself: it writes the connection file (as the launcher does with
``jupyter_client.connect.write_connection_file``), then starts a process whose last step is
``IPKernelApp.instance(kernel_class=<the class the generated kernelspec's
--kernel-class-name names>)`` on that file. It connects with jupyter_client, runs /help,
a prose cell against the scripted model, interrupts a cell with SIGINT (what EG's
launcher listener does on an interrupt request) and stops the kernel with SIGTERM
(docs/deploy.md#signals). ``KERNEL_ID`` names the journal when no other label is given.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import time
import uuid

import pytest
from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.connect import write_connection_file
from kernel_support import STARTUP_TIMEOUT, Kernel, make_world

from lily_kernel.jupyter.enterprise_gateway import install_enterprise_gateway
from lily_kernel.session.journal import journal_path

# The launcher's last step, as EG 3.x's launch_ipykernel.py takes it: the kernel class comes
# from --kernel-class-name, the namespace is the launcher's emptied module namespace, the
# connection file is the one the launcher wrote (EG binds 0.0.0.0; here 127.0.0.1).
LAUNCH = """
import sys
from ipykernel.kernelapp import IPKernelApp
from traitlets.utils.importstring import import_item
kernel_class = import_item(sys.argv[1])
connection_file = sys.argv[2]
namespace = {k: v for k, v in globals().items() if k.startswith("__")}
app = IPKernelApp.instance(kernel_class=kernel_class, user_ns=namespace,
                           connection_file=connection_file, ip="127.0.0.1")
app.initialize([])
app.start()
"""


class LaunchedKernel(Kernel):
    """A kernel started as EG's launcher starts it, with a jupyter_client client on its file."""

    def __init__(self, world, class_name: str) -> None:
        self.name, self.world = "lily (EG launcher)", world
        self.connection_file = str(world.base / f"kernel-{world.env['KERNEL_ID']}.json")
        write_connection_file(self.connection_file, ip="127.0.0.1")
        self.log = open(world.base / "kernel.log", "w")
        self.proc = subprocess.Popen([sys.executable, "-c", LAUNCH, class_name,
                                      self.connection_file], cwd=str(world.workspace),
                                     env=world.env, stdout=self.log, stderr=subprocess.STDOUT)
        self.kc = BlockingKernelClient(connection_file=self.connection_file)
        self.kc.load_connection_file()
        self.kc.start_channels()
        self.wait_for_ready()

    def wait_for_ready(self) -> None:
        """Ask kernel_info until it is answered; the process, not the heartbeat, says whether
        the kernel died (on a loaded machine a late heartbeat looked like a death)."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            msg_id = self.kc.kernel_info()
            try:
                self.reply(msg_id, timeout=2)
                break
            except queue.Empty:
                assert self.proc.poll() is None, (self.world.base / "kernel.log").read_text()
                assert time.monotonic() < deadline, "the kernel did not answer kernel_info"
        while True:  # the replies to the earlier, unanswered kernel_info requests
            try:
                self.kc.get_shell_msg(timeout=0.5)
            except queue.Empty:
                break
        while True:
            try:
                self.kc.get_iopub_msg(timeout=0.5)
            except queue.Empty:
                return

    def shutdown(self) -> None:
        self.kc.stop_channels()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def launched(tmp_path, ipython_dir, server):
    """A Lily kernel launched from the generated lily_kubernetes spec's class name."""
    specs = install_enterprise_gateway(tmp_path / "specs")
    spec = json.loads((specs[0] / "kernel.json").read_text())
    class_name = spec["argv"][spec["argv"].index("--kernel-class-name") + 1]
    world = make_world(tmp_path / "pod", ipython_dir, KERNEL_ID=str(uuid.uuid4()),
                       OPENAI_BASE_URL=server.url, LILY_MODEL="scripted-test-model",
                       LILY_MAX_RETRIES="0", LILY_TIMEOUT="10", **spec["env"])
    kernel = LaunchedKernel(world, class_name)
    yield kernel
    kernel.shutdown()


def wait_for_output(kernel: LaunchedKernel, msg_id: str, text: str) -> None:
    """Read iopub until the cell ``msg_id`` prints ``text`` (it is then surely running)."""
    while True:
        msg = kernel.kc.get_iopub_msg(timeout=STARTUP_TIMEOUT)
        if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream"
                and text in msg["content"]["text"]):
            return


def test_lily_runs_under_the_launchers_last_step(launched, server, turns):
    help_run = launched.ok("/help")
    assert "/skills" in json.dumps(help_run.displays)

    turns.append({"content": "Hello from the pod."})
    prose = launched.ok("Say hello.")
    assert "Hello from the pod." in json.dumps([m["content"] for m in prose.outputs])
    assert len(server.chat_requests()) == 1

    # EG's interrupt: its launcher's listener sends SIGINT to the kernel's process.
    # stop_on_error=False: the interrupted cell's error must not make ipykernel abort the
    # next request, which can arrive before its abort window closes on a loaded machine.
    msg_id = launched.kc.execute("%%python\nimport time\nprint('started', flush=True)\n"
                                 "for _ in range(600): time.sleep(0.1)", stop_on_error=False)
    wait_for_output(launched, msg_id, "started")
    os.kill(launched.proc.pid, signal.SIGINT)
    reply = launched.reply(msg_id)["content"]
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
    assert launched.ok("%%python\nprint('still here')").stdout.strip() == "still here"

    # The journal is named after the kernel id (no KERNEL_LILY_SESSION, no JPY_SESSION_NAME).
    kernel_id = launched.world.env["KERNEL_ID"]
    journal = journal_path(launched.workspace, kernel_id)
    assert [p.name for p in journal.parent.iterdir()] == [journal.name]
    first = json.loads(journal.read_text().splitlines()[0])
    assert first["event"] == "session_created" and first["label"] == kernel_id

    # EG's (and Kubernetes') stop: SIGTERM ends the session in the journal and exits 0.
    os.kill(launched.proc.pid, signal.SIGTERM)
    assert launched.proc.wait(timeout=30) == 0, (launched.world.base / "kernel.log").read_text()
    last = json.loads(journal.read_text().splitlines()[-1])
    assert last["event"] == "session_ended" and last["reason"] == "SIGTERM"
