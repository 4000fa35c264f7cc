"""The sandbox in a real Lily kernel (docs/sandbox.md): ``ShellNotebook.run_sandboxed`` and
``run_python_sandboxed`` through ``notebook_tools.answer`` compute on the
kernel's DataFrame, change nothing of it, and reach none of the kernel's sockets; the
kernel answers after each attack. Each test checks the child ran (it printed MARK) first.
"""
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kernel_support import Kernel, make_world

from lily_kernel.tools import sandbox

pytestmark = pytest.mark.skipif(sandbox.unavailable() is not None,
                                reason=f"no sandbox here: {sandbox.unavailable()}")
MARK = "SANDBOX-CHILD-RAN"

SETUP = """%%python
import json, os, pandas as pd
from lily_kernel.jupyter.notebook import ShellNotebook
from lily_kernel.tools import notebook_tools, sandbox as _sandbox
_nb = ShellNotebook(get_ipython(), None, "%%python")
df = pd.DataFrame({"x": range(200_000), "y": [i % 7 for i in range(200_000)]})

def _sandboxed(code, seconds=20):
    r = _nb.run_sandboxed(code, _sandbox.Limits(seconds=seconds))
    print(json.dumps({"text": r.output, "error": r.error and [r.error.ename, r.error.evalue],
                      "shown": r.display.stdout}))
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory, ipython_dir) -> Iterator[Kernel]:
    base = tmp_path_factory.mktemp("sandbox-kernel")
    (base / "tmp").mkdir()
    world = make_world(base, ipython_dir, TMPDIR=str(base / "tmp"),  # to count scratch folders
                       OPENAI_API_KEY="sk-sandbox-kernel-test", LILY_OUTBOX_TOKEN="tok-test",
                       LILY_SANDBOX="on")  # kernel_support turns it off by default
    (base / "outside").mkdir()
    started = Kernel("lily", world)
    assert started.run(SETUP).status == "ok"
    yield started
    started.shutdown()


def sandboxed(kernel: Kernel, code: str, seconds: float = 20) -> dict:
    run = kernel.run(f"%%python\n_sandboxed({f'print({MARK!r})' + chr(10) + code!r}, {seconds})",
                     timeout=seconds + 30)
    assert run.status == "ok", run.messages
    result = json.loads(run.stdout)
    assert result["text"].startswith(MARK) or result["error"][0] in ("TimeoutError",
                                                                    "SandboxError"), result
    return result


def py(kernel: Kernel, code: str) -> str:
    run = kernel.run(f"%%python\n{code}")
    assert run.status == "ok", run.messages
    return run.stdout


def test_the_child_computes_on_the_kernels_dataframe(kernel):
    result = sandboxed(kernel, "print(int(df.x.sum()))\nint(df.groupby('y').x.count().max())")
    assert result["error"] is None
    assert result["text"].splitlines()[1:] == ["19999900000", "28572"]


def test_what_the_child_changes_never_reaches_the_kernel(kernel):
    result = sandboxed(kernel, "df['z'] = 1\ndf.drop(index=range(10), inplace=True)\n"
                               "del df\nimport os; os.environ['LEAK'] = '1'\nnew_name = 5\n")
    assert result["error"] is None
    assert py(kernel, "print(list(df.columns), len(df), 'new_name' in dir(), "
                      "'LEAK' in os.environ)") == "['x', 'y'] 200000 False False\n"


def test_run_python_sandboxed_through_answer_says_it_ran_in_the_sandbox(kernel):
    out = py(kernel, "r = notebook_tools.answer(_nb, notebook_tools.SANDBOXED, {'code': "
                     "'print(df.y.max())\\nundefined'}, True)\nprint(r.text)")
    assert out.startswith("The code ran in the sandbox")
    assert "raised NameError" in out and "6" in out
    assert "The line that raised (line 2): undefined" in out
    assert "Traceback" not in out  # the exception and its line say it; no library frames


def test_a_column_the_frame_lacks_is_answered_with_the_columns_it_has(kernel):
    """A small model guesses column names (data['fare'] for Fare): the KeyError's result
    names the frame's columns and the closest, wherever the code ran; the user's own line
    stays the exception's."""
    code = "t = df.rename(columns={'x': 'Fare'})\nprint(t['fare'].mean())"
    out = py(kernel, "r = notebook_tools.answer(_nb, notebook_tools.SANDBOXED, {'code': "
                     f"{code!r}}}, True)\nprint(r.text)")
    assert "raised KeyError: 'fare'" in out
    assert ("The line that raised (line 2): print(t['fare'].mean())\n"
            "t has no column 'fare'. Did you mean 'Fare'? Its 2 columns: 'Fare', 'y'.") in out
    direct = py(kernel, "import types\n_nb.events = types.SimpleNamespace(error=None)\n"
                        f"print(_nb.run({code!r}).error)")  # the card's path: the same hint
    assert "hint=\"t has no column 'fare'. Did you mean 'Fare'?" in direct
    lists = py(kernel, "r = notebook_tools.answer(_nb, notebook_tools.SANDBOXED, {'code': "
                       "\"df[['x', 'wind_speed']]\"}, True)\nprint(r.text)")
    assert "df has no column 'wind_speed'. Its 2 columns: 'x', 'y'." in lists
    other = py(kernel, "r = notebook_tools.answer(_nb, notebook_tools.SANDBOXED, {'code': "
                       "\"{}['k']\"}, True)\nprint(r.text)")
    assert "raised KeyError: 'k'" in other and "column" not in other  # no frame on the line


def test_replayed_runs_define_their_names_and_show_nothing(kernel):
    """run_sandboxed(replay=…): the earlier runs first, silently; one that raises or exits
    ends only itself; the figures they drew are not the run's; nothing reaches the kernel."""
    replay = ["print('NOISE')\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\nk = 5",
              "import sys\nk = 6\nsys.exit(3)", "undefined_name", "k += 1\ndisplay(k)"]
    out = py(kernel, "r = _nb.run_sandboxed('print(\"SAW\", k)', replay="
                     f"{replay!r})\nprint(r.output, '|', r.error, '|', len(r.display.outputs))")
    assert out.strip() == "SAW 7 | None | 0", out
    assert py(kernel, "print('k' in globals())").strip() == "False"


def test_the_kernels_own_zeromq_ports_are_out_of_reach(kernel):
    ports = json.loads(py(kernel, "import ipykernel, json\nc = json.load(open("
                              "ipykernel.get_connection_file()))\nprint(json.dumps("
                              "[c[k] for k in c if k.endswith('_port')]))"))
    assert len(ports) == 5
    result = sandboxed(kernel, f"import socket\nfor port in {ports!r}:\n    try:\n"
                               "        socket.create_connection(('127.0.0.1', port), 1)\n"
                               "        print('CONNECTED', port)\n"
                               "    except OSError as exc:\n        print('refused', exc.errno)\n")
    assert "CONNECTED" not in result["text"]
    assert result["text"].count("refused") == 5
    assert py(kernel, "print('alive')") == "alive\n"


def test_the_connection_file_and_its_key_cannot_be_read(kernel):
    path = py(kernel, "import ipykernel\nprint(ipykernel.get_connection_file())").strip()
    result = sandboxed(kernel, f"print(open({path!r}).read())")
    assert result["error"][0] == "PermissionError"
    assert '"key"' not in result["text"]


def test_an_interrupt_during_a_run_kills_the_child_and_the_kernel_goes_on(kernel):
    import threading
    timer = threading.Timer(2.0, kernel.km.interrupt_kernel)
    timer.start()
    run = kernel.run("%%python\n_sandboxed('while True: pass', 60)", timeout=60)
    timer.join()
    assert run.status == "error"
    assert "KeyboardInterrupt" in json.dumps(run.reply, default=str)
    assert py(kernel, "import glob, tempfile\n"
                      "print(glob.glob(tempfile.gettempdir() + '/lily-sandbox-*'))") == "[]\n"
    assert py(kernel, "try:\n    os.waitpid(-1, os.WNOHANG)\n"
                      "    print('a child is left')\nexcept ChildProcessError:\n"
                      "    print('no child')") == "no child\n"


def test_a_figure_drawn_in_the_child_is_described_for_the_model(kernel):
    result = sandboxed(kernel, "import matplotlib.pyplot as plt\n"
                               "plt.bar(['a', 'b'], [3, 5])\nplt.title('counts')")
    assert result["error"] is None
    assert "counts" in result["text"] and "2 bars" in result["text"]


def test_the_kernel_registers_run_python_sandboxed_owner_only_for_the_gate(kernel):
    out = py(kernel, "import lily\ntool = lily.session().tools.get('run_python_sandboxed')\n"
                     "print(tool.owner_only, tool.ask, tool.annotations.get('readOnlyHint'))\n"
                     "print(lily.session().tools.get('run_python').ask)")
    assert out == "True False True\nTrue\n"


def test_the_sandbox_turned_off_refuses_with_the_reason_and_runs_nothing(kernel):
    out = py(kernel, "from lily_kernel.errors import ToolError\n"
                     "os.environ['LILY_SANDBOX'] = 'off'\ntry:\n"
                     "    notebook_tools.answer(_nb, notebook_tools.SANDBOXED, "
                     "{'code': 'print(1)'}, True)\nexcept ToolError as exc:\n    print(exc)\n"
                     "finally:\n    del os.environ['LILY_SANDBOX']")
    assert out == "the sandbox is unavailable here (LILY_SANDBOX=off turned it off); nothing ran\n"


def test_no_write_from_the_kernels_child_by_pandas_open_or_a_program(kernel):
    outside = kernel.workspace.parent / "outside"
    result = sandboxed(kernel, f"""
import os, subprocess
for name, act in [('to_csv', lambda: df.head().to_csv('out.csv')),
                  ('to_csv-outside', lambda: df.head().to_csv({str(outside / 'o.csv')!r})),
                  ('open', lambda: open({str(outside / 'f.txt')!r}, 'w')),
                  ('subprocess', lambda: subprocess.run(['touch', {str(outside / 's')!r}])),
                  ('system', lambda: os.system('touch {outside / 'x'}'))]:
    try:
        act()
        print(name, 'DONE')
    except OSError as exc:
        print(name, 'refused', type(exc).__name__)
""")
    lines = result["text"].splitlines()[1:]
    assert lines[:4] == ["to_csv refused PermissionError", "to_csv-outside refused PermissionError",
                         "open refused PermissionError", "subprocess refused PermissionError"]
    assert lines[4] in ("system refused PermissionError", "system DONE")  # status 127: no shell
    assert list(outside.iterdir()) == []
    assert not (kernel.workspace / "out.csv").exists()


def test_the_kernels_keys_are_not_in_the_childs_environment(kernel):
    assert py(kernel, "print(os.environ.get('OPENAI_API_KEY'))") == "sk-sandbox-kernel-test\n"
    result = sandboxed(kernel, "import os\nprint(sorted(k for k in os.environ if 'KEY' in k "
                               "or 'TOKEN' in k or k.startswith('LILY')))\n"
                               "try:\n    open('/proc/self/environ').read()\n"
                               "except OSError as exc:\n    print(type(exc).__name__)")
    assert result["text"].splitlines()[1:] == ["[]", "PermissionError"]
    assert "sk-sandbox-kernel-test" not in result["text"]
