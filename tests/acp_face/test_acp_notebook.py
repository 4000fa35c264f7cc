"""Lily's notebook tools through a Jupyter server (docs/front-ends.md#notebook-tools-through-a-jupyter-server):
a real `jupyter server` on 127.0.0.1 with a real python3 kernel holding variables and a
failed cell, and `lily acp` finding that server the way jupyter-ai's launch does (the
runtime file `jpserver-<pid>.json` of its parent process), driven with the ACP SDK's
client against the scripted model. The model's requests show what reached it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from acp.schema import ResourceContentBlock
from acp_support import (
    Recorder,
    World,
    acp_session,
    execute,
    free_port,
    help_text,
    prompt,
    run,
    settle,
    stop_server,
)

from lily_kernel.testing import ScriptedServer

BIN = Path(sys.executable).parent
TOKEN = "lily-nb-" + uuid.uuid4().hex
SECRET = "sk-live-" + uuid.uuid4().hex  # a value the model must never see
CELLS = ["data = [3, 1, 2]\nprices = {'apple': 1.5, 'pear': 2.25}",
         f"api_key = {SECRET!r}",
         "print('hello from the notebook')",
         "def half(x):\n    return x / 0\n\nhalf(len(data))"]


class NotebookServer:
    """`jupyter server` (Lily's environment's) with one notebook whose python3 kernel ran
    :data:`CELLS` (the last one fails), as a user's would have."""

    def __init__(self, base: Path, root: Path) -> None:
        self.root, self.port = root, free_port()
        self.runtime = base / "jrt"
        self.env = {**{k: v for k, v in os.environ.items()
                       if not k.startswith(("JUPYTER", "OPENAI", "LILY", "VIRTUAL_ENV"))},
                    "HOME": str(base / "home"), "JUPYTER_CONFIG_DIR": str(base / "jcfg"),
                    "JUPYTER_DATA_DIR": str(base / "jdata"),
                    "JUPYTER_RUNTIME_DIR": str(self.runtime)}
        self.log = open(base / "jupyter.log", "ab")  # closed in stop()
        self.proc = subprocess.Popen(
            [str(BIN / "jupyter"), "server", "--no-browser", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={self.port}", f"--IdentityProvider.token={TOKEN}",
             f"--ServerApp.root_dir={root}", *(["--allow-root"] if os.geteuid() == 0 else [])],
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT, cwd=root)
        deadline = time.monotonic() + 90
        while True:
            assert self.proc.poll() is None, "jupyter server exited"
            try:
                self.call("GET", "api/status")
                break
            except OSError:
                assert time.monotonic() < deadline, "jupyter server did not start"
                time.sleep(0.3)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/{path}", method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            data = r.read()
        return json.loads(data) if data else None

    def open_notebook(self, path: str, cells: list[str]) -> str:
        """A session (the notebook open in JupyterLab) whose kernel ran ``cells``; its id."""
        session = self.call("POST", "api/sessions", {"path": path, "name": path,
                                                     "type": "notebook",
                                                     "kernel": {"name": "python3"}})
        kernel = session["kernel"]["id"]
        for code in cells:
            self.execute(kernel, code)
        return str(kernel)

    def execute(self, kernel: str, code: str, **content: Any) -> dict[str, Any]:
        """Run ``code`` as a notebook runs a cell; the execute_reply's content."""
        return execute(self.port, TOKEN, kernel, code, **content)

    def as_parent_of_this_process(self) -> None:
        """Lily's client here is pytest, not the server: its runtime file is copied to
        pytest's pid, so `lily acp` (pytest's child) finds it exactly as it finds the
        runtime file of the server that launched it under jupyter-ai."""
        own = self.runtime / f"jpserver-{self.proc.pid}.json"
        deadline = time.monotonic() + 30
        while not own.is_file():
            assert time.monotonic() < deadline, "the server wrote no runtime file"
            time.sleep(0.2)
        shutil.copy(own, self.runtime / f"jpserver-{os.getpid()}.json")

    def stop(self) -> None:
        stop_server(self.proc, self.log)


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


@pytest.fixture
def jupyter(tmp_path, world):
    server = NotebookServer(tmp_path, world.workspace)
    try:
        server.as_parent_of_this_process()
        yield server
    finally:
        server.stop()


class NotebookWorld(World):
    """`lily acp` started with the server's runtime folder, as a child of the server's is."""

    runtime: Path

    def env(self, server: ScriptedServer | None) -> dict[str, str]:
        return {**super().env(server), "JUPYTER_RUNTIME_DIR": str(self.runtime)}


def _lily_world(world: World, jupyter: NotebookServer) -> NotebookWorld:
    world.__class__ = NotebookWorld
    world.runtime = jupyter.runtime  # type: ignore[attr-defined]
    return world  # type: ignore[return-value]


def _calls(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"id": f"call_{i}", "name": name, "arguments": args}
                           for i, (name, args) in enumerate(calls)]}


def _tool_answers(requests: list[dict[str, Any]]) -> dict[str, str]:
    return {m["tool_call_id"]: str(m["content"]) for r in requests for m in r["messages"]
            if m.get("role") == "tool"}


def test_the_notebook_tools_read_the_kernel_of_the_notebook_in_the_chats_folder(world, jupyter):
    kernel = jupyter.open_notebook("analysis.ipynb", CELLS)
    (world.workspace / "notes.txt").write_text("a file, not a variable\n")
    lily = _lily_world(world, jupyter)
    script = [_calls(("list_variables", {}), ("inspect_variable", {"name": "prices"}),
                     ("inspect_variable", {"name": "api_key"}), ("last_error", {}),
                     ("read_cells", {"last": 2}), ("propose_cell", {"code": "print(sum(data))"}),
                     ("inspect_variable", {"name": "notes.txt"})),
              {"content": "Your notebook has data and prices."}]

    async def go():
        async with acp_session(lily, script) as (client, conn, sid, server, _):
            helped = await help_text(client, conn, sid)
            reply = await conn.prompt(session_id=sid, prompt=prompt("what is in my notebook?"))
            await settle()
            return helped, reply, client, server.chat_requests()

    helped, reply, client, requests = run(go())
    assert "work through the Jupyter server" in helped and "no notebook kernel" not in helped
    assert reply.stop_reason == "end_turn"
    offered = {t["function"]["name"] for t in requests[0]["tools"]}
    assert {"list_variables", "inspect_variable", "last_error", "read_cells", "run_python",
            "propose_cell"} <= offered
    answers = _tool_answers(requests)
    assert "data: list[3]" in answers["call_0"] and "prices: dict[2]" in answers["call_0"]
    assert "1 hidden (their names look like secrets)" in answers["call_0"]
    assert "half" not in answers["call_0"]  # functions are left out, as in the Lily kernel
    assert "'apple': 1.5" in answers["call_1"] and "dict of length 2" in answers["call_1"]
    assert "looks like a secret" in answers["call_2"]
    assert "cell [4]" in answers["call_3"] and "ZeroDivisionError" in answers["call_3"]
    assert "half(len(data))" in answers["call_3"]
    assert "hello from the notebook" in answers["call_4"] and "cell [3]" in answers["call_4"]
    assert "api_key" not in answers["call_4"]  # cells 3 and 4 only
    # no tool showed the secret's value (a cell's source is shown as written, as in the
    # Lily kernel: read_cells(last=3) would show cell 2's assignment)
    assert SECRET not in json.dumps(requests)
    assert "Your notebook has data and prices." in client.text()
    assert "nothing ran" in answers["call_5"]  # the proposal is shown in the chat
    assert "Proposed cells" in client.text() and "print(sum(data))" in client.text()
    assert 'read(path="notes.txt")' in answers["call_6"]  # a file's name, told from a variable's
    # silent requests: the notebook's execution count did not move
    assert jupyter.execute(kernel, "", silent=True, store_history=False)["execution_count"] == 4
    assert jupyter.execute(kernel, "1")["execution_count"] == 5


@pytest.mark.parametrize("choice", ["once", "deny"])
def test_run_python_asks_through_request_permission_and_runs_in_the_notebooks_kernel(
        world, jupyter, choice):
    kernel = jupyter.open_notebook("analysis.ipynb", CELLS[:1])
    lily = _lily_world(world, jupyter)
    code = "total = sum(data)\nprint('total is', total)"
    script = [_calls(("run_python", {"code": code})), {"content": "Ran it."}]

    async def go():
        client = Recorder([choice])
        with ScriptedServer(script) as server:
            async with lily.lily(client, server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                reply = await conn.prompt(session_id=new.session_id,
                                          prompt=prompt("add up the data"))
                if choice == "deny":  # a declined call ends the turn; the next one tells the model
                    await conn.prompt(session_id=new.session_id, prompt=prompt("ok?"))
            return reply, client, server.chat_requests()

    reply, client, requests = run(go())
    assert reply.stop_reason == "end_turn"
    (call, options) = client.asked[0]
    assert [o.option_id for o in options] == ["once", "deny"]  # never "always" for run_python
    assert "sum(data)" in json.dumps(call.raw_input)
    answer = _tool_answers(requests)["call_0"]
    seen = jupyter.execute(kernel, "", user_expressions={"t": "globals().get('total')"})
    if choice == "once":
        assert "The code ran without an error." in answer and "total is 6" in answer
        assert seen["user_expressions"]["t"]["data"]["text/plain"] == "6"
    else:
        assert "declined by the user" in answer
        assert seen["user_expressions"]["t"]["data"]["text/plain"] == "None"


def test_the_attached_notebook_is_the_one_read_and_share_values_false_is_kept(world, jupyter):
    (world.workspace / "lily.toml").write_text("[notebook]\nshare_values = false\n")
    jupyter.open_notebook("other.ipynb", ["prices = {'fig': 9.5}"])
    sub = world.workspace / "sub"
    sub.mkdir()
    jupyter.open_notebook("sub/analysis.ipynb", CELLS[:1])
    jupyter.open_notebook("third.ipynb", ["prices = ['kiwi']"])  # the latest in the folder
    lily = _lily_world(world, jupyter)
    script = [_calls(("inspect_variable", {"name": "prices"}), ("list_variables", {})),
              {"content": "Read."},
              {"tool_calls": [{"id": "call_again", "name": "inspect_variable",
                               "arguments": {"name": "prices"}}]},
              {"content": "Read again."}]

    async def go():
        async with acp_session(lily, script) as (_, conn, sid, server, _):
            blocks = [*prompt("look at this notebook"),
                      ResourceContentBlock(type="resource_link", name="analysis.ipynb",
                                           uri=(sub / "analysis.ipynb").as_uri())]
            await conn.prompt(session_id=sid, prompt=blocks)
            await conn.prompt(session_id=sid, prompt=prompt("and now?"))
            return server.chat_requests()

    answers = _tool_answers(run(go()))
    assert "dict of length 2" in answers["call_0"]  # sub/analysis.ipynb's prices, not other's
    assert "values are not shared" in answers["call_0"] and "apple" not in answers["call_0"]
    assert "fig" not in json.dumps(answers)
    assert "data: list[3]" in answers["call_1"]
    # no attachment: the most recently active of the notebooks in the chat's folder, named
    assert answers["call_again"].startswith("(from third.ipynb: the most recently active of 2")
    assert "list of length 1" in answers["call_again"] and "kiwi" not in answers["call_again"]


def test_attack_no_code_of_the_notebooks_objects_runs_and_nothing_is_left_in_the_kernel(
        world, jupyter, tmp_path):
    """The model controls the tool's arguments and the notebook holds hostile objects: no
    __repr__ or __getattr__ of the notebook's runs, a name cannot break out of the request,
    and the probe leaves no name in the user's namespace nor a module in sys.modules."""
    mark = tmp_path / "ran.txt"
    trap = (f"class Trap:\n    def __repr__(self):\n        open({str(mark)!r}, 'a').write('repr')\n"
            f"        return 'trap'\n    def __getattr__(self, name):\n"
            f"        open({str(mark)!r}, 'a').write('getattr')\n\ntrap = Trap()\nvalues = [trap]")
    kernel = jupyter.open_notebook("analysis.ipynb", [trap])
    names = "sorted(k for k in globals() if not k.startswith('_'))"
    modules = "sorted(m for m in __import__('sys').modules if 'lily' in m)"
    before = jupyter.execute(kernel, "", user_expressions={"n": names, "m": modules})
    escape = f"x')\"; open({str(mark)!r}, 'a').write('escaped') #"
    lily = _lily_world(world, jupyter)
    script = [_calls(("inspect_variable", {"name": "trap"}), ("inspect_variable", {"name": "values"}),
                     ("list_variables", {"include_callables": True}),
                     ("inspect_variable", {"name": escape}), ("read_cells", {})),
              {"content": "Looked."}]

    async def go():
        with ScriptedServer(script) as server:
            async with lily.lily(Recorder(), server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                await conn.prompt(session_id=new.session_id, prompt=prompt("look"))
            return server.chat_requests()

    answers = _tool_answers(run(go()))
    after = jupyter.execute(kernel, "", user_expressions={"n": names, "m": modules})
    assert not mark.exists(), mark.read_text()
    assert "its repr is not run" in answers["call_0"]
    assert "<__main__.Trap object>" in answers["call_1"]
    assert "trap: Trap" in answers["call_2"] and "Trap: type" in answers["call_2"]
    assert "no variable named" in answers["call_3"]
    assert "class Trap" in answers["call_4"]
    for key in ("n", "m"):
        assert after["user_expressions"][key] == before["user_expressions"][key]
    assert "lily" not in before["user_expressions"]["m"]["data"]["text/plain"]


def test_cancel_while_run_python_runs_interrupts_the_notebooks_kernel(world, jupyter):
    import asyncio
    kernel = jupyter.open_notebook("analysis.ipynb", CELLS[:1])
    lily = _lily_world(world, jupyter)
    slow = "import time\nfor _ in range(600):\n    time.sleep(0.1)\nprint('finished')"
    script = [_calls(("run_python", {"code": slow})), {"content": "Still here."}]

    async def go():
        client = Recorder(["once"])
        with ScriptedServer(script) as server:
            async with lily.lily(client, server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                turn = asyncio.create_task(conn.prompt(session_id=new.session_id,
                                                       prompt=prompt("run the slow thing")))
                while not client.asked:
                    await asyncio.sleep(0.05)
                await asyncio.sleep(2)  # the code runs in the kernel now
                await conn.cancel(session_id=new.session_id)
                reply = await turn
                after = await conn.prompt(session_id=new.session_id, prompt=prompt("there?"))
            return reply, after, client

    started = time.monotonic()
    reply, after, client = run(go())
    assert reply.stop_reason == "cancelled" and after.stop_reason == "end_turn"
    assert time.monotonic() - started < 50  # the code had 60 s to run
    took = time.monotonic()
    assert jupyter.execute(kernel, "1")["status"] == "ok"  # the kernel was interrupted
    assert time.monotonic() - took < 10
    assert "Still here." in client.text()


def test_without_a_jupyter_server_the_notebook_tools_are_not_offered(world):
    """Zed and JetBrains start `lily acp` themselves: no runtime file of a parent, no tools."""
    async def go():
        async with acp_session(world, [{"content": "Hello."}]) as (client, conn, sid, server, _):
            helped = await help_text(client, conn, sid)
            await conn.prompt(session_id=sid, prompt=prompt("hi"))
            return helped, server.chat_requests()

    helped, requests = run(go())
    offered = {t["function"]["name"] for t in requests[0].get("tools", [])}
    assert not offered & {"list_variables", "inspect_variable", "last_error", "read_cells",
                          "run_python", "propose_cell"}
    line = next(line for line in helped.splitlines() if "notebook tools" in line)
    assert "no Jupyter server started `lily acp`" in line


def test_a_kernel_busy_running_a_cell_is_not_waited_for(world, jupyter):
    import threading
    kernel = jupyter.open_notebook("analysis.ipynb", CELLS[:1])
    cell = threading.Thread(target=jupyter.execute, args=(kernel, "import time\ntime.sleep(40)"))
    cell.start()
    lily = _lily_world(world, jupyter)
    script = [_calls(("list_variables", {})), {"content": "Later, then."}]

    async def go():
        with ScriptedServer(script) as server:
            async with lily.lily(Recorder(), server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                time.sleep(1)  # the cell runs
                started = time.monotonic()
                await conn.prompt(session_id=new.session_id, prompt=prompt("what is there?"))
                took = time.monotonic() - started
            return took, server.chat_requests()

    try:
        took, requests = run(go())
    finally:
        jupyter.call("POST", f"api/kernels/{kernel}/interrupt")
        cell.join(30)
    assert "busy running a cell" in _tool_answers(requests)["call_0"]
    assert took < 15  # the cell had 35 s to go


def test_a_failed_run_python_is_what_last_error_reports_next(world, jupyter):
    jupyter.open_notebook("analysis.ipynb", CELLS)  # cell 4 failed before
    lily = _lily_world(world, jupyter)
    script = [_calls(("run_python", {"code": "missing_name + 1"})),
              {"tool_calls": [{"id": "call_err", "name": "last_error", "arguments": {}}]},
              {"content": "It failed."}]

    async def go():
        with ScriptedServer(script) as server:
            async with lily.lily(Recorder(["once"]), server) as (conn, _):
                new = await conn.new_session(cwd=str(world.workspace), mcp_servers=[])
                await conn.prompt(session_id=new.session_id, prompt=prompt("try it"))
            return server.chat_requests()

    answers = _tool_answers(run(go()))
    assert "raised NameError" in answers["call_0"]
    error = answers["call_err"]  # not cell 4's ZeroDivisionError: the run came later
    assert "The last failed cell: run_python code" in error and "missing_name + 1" in error
    assert "NameError" in error and "ZeroDivisionError" not in error
