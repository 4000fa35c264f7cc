"""A hostile model against the notebook tools of a real Lily kernel (issue 15 points 4 and 5).

Point 4, secrets never reach the model: the live API key held in variables, printed in
outputs and raised in errors is masked in every notebook tool result and tool error (what
the ScriptedServer received, the journal and the screen); IPython's own names and
secret-looking names are refused by inspect_variable; a secret set with ``%env`` /
``os.environ[...] =`` is masked in ``In``, ``_ih`` and history.sqlite before the cell is
stored. Point 5, user code is bounded: list_variables runs none of it, and inspect_variable
answers at once on objects whose ``__repr__``, ``__len__`` and ``__class__`` loop forever
swallowing every exception; the kernel keeps answering.
"""
from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from kernel_support import scripted_kernel, tool_result

KEY = "sk-live-notebook-KEY-0a1b2c3d4e5f"
NEW = "sk-typed-in-a-cell-99887766"

EVIL = '''
import time as _t
_calls = []
class Evil:
    """Every special method loops forever, swallowing everything sent to stop it."""
    def _trap(self, *a):
        _calls.append(1)
        while True:
            try:
                while True:
                    try:
                        _t.sleep(0.01)
                    except BaseException:
                        continue
            except BaseException:
                pass
    __repr__ = __str__ = __len__ = __iter__ = __hash__ = _trap
    @property
    def __class__(self):
        return self._trap()
    shape = property(_trap)
evil = Evil()
evil_list = [Evil()]
class Sub(list):
    __len__ = Evil._trap
sub = Sub([1])
'''


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, ipython_dir, server):
    base = tmp_path_factory.mktemp("attack-notebook")
    with scripted_kernel(base, ipython_dir, server.url, "lily") as k:
        yield k


def py(kernel, code: str):
    return kernel.run(f"%%python\n{code}")


def test_secrets_never_reach_the_model_from_notebook_tools(kernel, server, turns):
    py(kernel, f"import os\nos.environ['OPENAI_API_KEY'] = {KEY!r}")
    py(kernel, "holder = {'k': os.environ['OPENAI_API_KEY']}\nprint('out', holder['k'])")
    py(kernel, "raise ValueError('bad ' + os.environ['OPENAI_API_KEY'])")
    turns.extend([{"tool_calls": [
        {"name": "inspect_variable", "arguments": {"name": "holder"}, "id": "a1"},
        {"name": "read_cells", "arguments": {"last": 5}, "id": "a2"},
        {"name": "last_error", "arguments": {}, "id": "a3"},
        {"name": "list_variables", "arguments": {}, "id": "a4"},
        {"name": "inspect_variable", "arguments": {"name": "_"}, "id": "r1"},
        {"name": "inspect_variable", "arguments": {"name": "_oh"}, "id": "r2"},
        {"name": "inspect_variable", "arguments": {"name": "Out"}, "id": "r3"},
        {"name": "inspect_variable", "arguments": {"name": "get_ipython"}, "id": "r4"},
        {"name": "inspect_variable", "arguments": {"name": "_2"}, "id": "r5"},
        {"name": "inspect_variable", "arguments": {"name": "my_token"}, "id": "r6"},
        {"name": "inspect_variable", "arguments": {"name": f"no-{KEY}"}, "id": "e1"},
    ]}, "done"])
    assert kernel.run("look at everything").status == "ok"
    results = {i: tool_result(server, i) for i in
               ("a1", "a2", "a3", "a4", "r1", "r2", "r3", "r4", "r5", "r6", "e1")}
    sent = "\n".join(str(m) for r in server.chat_requests() for m in r["messages"]
                     if m.get("role") in ("tool", "user", "system"))  # not the model's own call
    assert KEY not in sent
    assert "***" in results["a1"] and "***" in results["a2"] and "***" in results["a3"]
    for refused in ("r1", "r2", "r3", "r4", "r5"):
        assert results[refused].startswith("Error:") and "IPython" in results[refused]
    assert results["r6"].startswith("Error:") and "secret" in results["r6"]
    assert results["e1"].startswith("Error:") and KEY not in results["e1"]
    journal = "".join(p.read_text() for p in
                      (kernel.world.workspace / ".lily" / "journal").glob("*.jsonl"))
    assert KEY not in journal


def test_env_assignments_are_masked_before_the_cell_is_stored(kernel):
    kernel.ok(f"%%python\n%env MY_SERVICE_TOKEN={NEW}")
    kernel.ok(f"%%python\nimport os\nos.environ['GITHUB_TOKEN'] = '{NEW}-b'")
    kernel.ok(f"%%python\n%set_env DB_PASSWORD {NEW}-c")
    shown = kernel.ok("%%python\nprint(repr(In[-4:]), repr(_ih[-4:]))").stdout
    assert NEW not in shown and "MY_SERVICE_TOKEN=***" in shown
    assert kernel.ok("%%python\nprint(os.environ['GITHUB_TOKEN'])").stdout.strip() == f"{NEW}-b"
    kernel.ok("%%python\nget_ipython().history_manager.writeout_cache()")
    databases = list(Path(kernel.world.env["IPYTHONDIR"]).rglob("history.sqlite"))
    with sqlite3.connect(databases[0]) as db:
        rows = db.execute("SELECT source, source_raw FROM history").fetchall()
    assert rows and not any(NEW in (a or "") + (b or "") for a, b in rows)


def test_user_code_that_swallows_every_exception_never_runs(kernel, server, turns):
    py(kernel, EVIL)
    turns.extend([{"tool_calls": [
        {"name": "list_variables", "arguments": {"include_callables": True}, "id": "v1"},
        {"name": "inspect_variable", "arguments": {"name": "evil"}, "id": "v2"},
        {"name": "inspect_variable", "arguments": {"name": "evil_list"}, "id": "v3"},
        {"name": "inspect_variable", "arguments": {"name": "sub"}, "id": "v4"},
    ]}, "done"])
    started = time.monotonic()
    assert kernel.run("inspect the traps", timeout=60).status == "ok"
    assert time.monotonic() - started < 15  # two model round trips; no 1 s bound was hit
    listed, evil, evil_list, sub = (tool_result(server, i) for i in ("v1", "v2", "v3", "v4"))
    assert "evil: Evil" in listed and "sub: Sub" in listed
    assert "__main__.Evil" in evil and "repr is not run" in evil
    assert "<__main__.Evil object>" in evil_list
    assert "__main__.Sub" in sub
    assert kernel.ok("%%python\nprint(len(_calls))").stdout.strip() == "0"  # none ran
    assert kernel.ok("%%python\nprint(1 + 1)").stdout.strip() == "2"
