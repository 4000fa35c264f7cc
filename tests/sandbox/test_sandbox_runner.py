"""The sandbox's runner (docs/sandbox.md#what-the-code-gets): the child computes on the
namespace as it was, returns its output, last value, exception and figures, and the parent
keeps nothing of it — no changed name, no process, no descriptor, no scratch folder."""
from __future__ import annotations

import os

import pytest
from sandbox_support import MARK, children, needs_sandbox, open_fds

from lily_kernel.tools import sandbox, sandboxed_code

pytestmark = needs_sandbox


def test_the_child_computes_on_the_namespace_and_the_parent_keeps_its_own(run):
    ns = {"rows": [1, 2, 3], "table": {"a": 1}}
    result = run("rows.append(4)\ntable.clear()\nnew = 1\nprint(sum(rows))\nlen(rows)", ns)
    assert result.status is sandbox.Status.DONE and result.error is None
    assert result.output.splitlines() == [MARK, "10", "4"]
    assert ns == {"rows": [1, 2, 3], "table": {"a": 1}}


def test_an_exception_comes_back_with_its_type_message_and_failing_line(run):
    result = run("x = 1\ny = undefined_name + x\n")
    assert result.error is not None
    assert (result.error.ename, result.error.line) == ("NameError", 3)  # MARK is line 1
    assert result.error.line_text == "y = undefined_name + x"
    assert "name 'undefined_name' is not defined" in result.error.evalue
    assert 'File "<run_python code>", line 3' in result.error.traceback
    assert "sandbox.py" not in result.error.traceback


def test_a_syntax_error_names_its_line(world):
    result = sandboxed_code.run_code("x = 1\ny = (1,\n", {}, workspace=world.workspace)
    assert result.status is sandbox.Status.DONE
    assert result.error is not None and result.error.ename == "SyntaxError"
    assert result.error.line == 2


def test_the_scratch_folder_is_writable_and_removed_after(run, world):
    result = run("import os, tempfile\np = os.path.join(tempfile.gettempdir(), 'out.csv')\n"
                 "open(p, 'w').write('a,b')\nprint(open(p).read(), os.environ['TMPDIR'] == "
                 "os.path.dirname(p))")
    assert result.error is None, result.error
    assert result.output.splitlines()[1] == "a,b True"
    assert world.leftovers() == []


def test_workspace_files_are_read_by_name(run):
    result = run("print(open('data.csv').read().splitlines()[1])")
    assert result.output.splitlines()[1] == "1,2"


def test_a_figure_comes_back_described_and_as_png(run):
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot  # a notebook that plots has it loaded
    result = run("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 5, 9], label='y')\nplt.title('growth')\n")
    assert result.error is None, result.error
    assert len(result.figures) == 1
    assert "growth" in result.figures[0].text and "3 points" in result.figures[0].text
    assert result.figures[0].png is not None and result.figures[0].png.startswith(b"\x89PNG")
    assert "growth" in result.output


def test_a_run_leaves_no_process_no_descriptor_and_no_scratch_folder(run, world):
    run("print('warm-up')")
    fds, kids = open_fds(), children()
    for _ in range(5):
        assert run("import threading\nx = sum(range(1000))").error is None
    assert (open_fds(), children(), world.leftovers()) == (fds, kids, [])


def test_the_sandbox_turned_off_gives_the_reason():
    assert sandbox.unavailable({"LILY_SANDBOX": "off"}) == \
        "LILY_SANDBOX=off turned it off"
    assert sandbox.unavailable({"LILY_SANDBOX": "on"}) is None


def test_this_machine_has_the_landlock_abi_the_sandbox_needs():
    from lily_kernel.tools import confinement
    assert confinement.landlock_abi() >= confinement.MIN_ABI
    assert os.uname().sysname == "Linux"


def test_a_notebook_that_cannot_sandbox_refuses_run_python_sandboxed():
    from lily_kernel.errors import ToolError
    from lily_kernel.tools import notebook_tools

    class Plain:  # a face without run_sandboxed (lily acp's kernel probe)
        def run(self, code):
            raise AssertionError("must not run outside the sandbox")

    with pytest.raises(ToolError, match="cannot run code in the sandbox"):
        notebook_tools.answer(Plain(), notebook_tools.SANDBOXED, {"code": "1"}, True)  # type: ignore[arg-type]


def test_what_the_code_displays_comes_back_bounded(world):
    from contextlib import nullcontext
    ns: dict = {"shown": []}
    code = ("for n in range(20):\n    shown.append({'text/plain': 'x' * 1_000_000, "
            "'image/png': 'A' * 10_000_000, 'text/html': '<b>'})")
    result = sandboxed_code.run_code(code, ns, workspace=world.workspace,
                              displays=lambda: nullcontext(ns["shown"]))
    assert result.status is sandbox.Status.DONE, result.detail
    assert len(result.displays) == 2 * sandboxed_code.FIGURES
    assert all(set(d) == {"text/plain"} and len(d["text/plain"]) == sandboxed_code.OUTPUT_CHARS
               for d in result.displays)
    assert ns["shown"] == []
