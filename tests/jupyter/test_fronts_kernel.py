"""What other front-ends need from the kernel (docs/front-ends.md), checked on real kernels.

``is_complete`` for ``%%python`` cells (a console's Enter), ``exit``/``quit``
as IPython's, and a gateway's ``KERNEL_WORKING_DIR`` and ``KERNEL_LILY_SESSION``.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from kernel_support import make_world

from lily_kernel.session.journal import journal_path


@pytest.mark.parametrize("code, reply", [
    ("%%python", {"status": "incomplete", "indent": ""}),
    ("  %%python", {"status": "incomplete", "indent": ""}),
    ("%%python\n", {"status": "complete"}),  # a blank line at once: an empty cell
    ("%%python\nx = 1", {"status": "incomplete", "indent": ""}),
    ("%%python\nx = 1\n", {"status": "complete"}),
    ("%%python\nfor i in range(3):", {"status": "incomplete", "indent": "    "}),
    ("%%python\nfor i in range(3):\n    print(i)", {"status": "incomplete", "indent": "    "}),
    ("%%python\nfor i in range(3):\n    print(i)\n    ", {"status": "complete"}),
    ("%%python\nx = (1,\n\n", {"status": "incomplete", "indent": ""}),  # inside a bracket
    ("%%python\ns = '''a\n\n", {"status": "incomplete", "indent": ""}),  # inside a string
    ("%%python\n1 +", {"status": "invalid"}),
    ("exit", {"status": "complete"}),
])
def test_is_complete_of_python_cells(lily, code, reply):
    assert lily.is_complete(code) == reply


@pytest.mark.parametrize("word", ["exit", "quit", "exit()", " quit() "])
def test_exit_and_quit_are_ipythons(start_kernel, recorder, word):
    kernel = start_kernel(OPENAI_BASE_URL=recorder.url, OPENAI_API_KEY="sk-test")
    run = kernel.ok(word)
    assert run.reply["payload"] == [{"source": "ask_exit", "keepkernel": False}]
    assert recorder.connections == []


@pytest.mark.parametrize("prose", ["exit the loop early?", "quit smoking", "Exit"])
def test_other_words_stay_prose(lily, prose):
    run = lily.run(prose)
    assert run.status == "error" and run.error_line().startswith("Error: no model is configured")


# -- a gateway's conventions ------------------------------------------------------------

def gateway_world(tmp_path, ipython_dir, target: Path | str, **extra: str):
    """A world whose kernel starts elsewhere (as under a gateway) with KERNEL_WORKING_DIR."""
    world = make_world(tmp_path / "gw", ipython_dir, KERNEL_WORKING_DIR=str(target), **extra)
    del world.env["SKILLS_WORKSPACE_DIR"]  # the workspace's own skills/ folder is the one used
    return world


def test_kernel_working_dir_is_the_workspace(start_kernel, tmp_path, ipython_dir):
    target = tmp_path / "notebooks"
    skill = target / "skills" / "local_notes"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: local_notes\ndescription: Notes kept here.\n"
                                    "---\nBody.\n")
    kernel = start_kernel(world=gateway_world(tmp_path, ipython_dir, target,
                                              KERNEL_LILY_SESSION="team/analysis.ipynb"))
    state = json.loads(kernel.ok("%%python\nimport json, os, lily\n"
                                 "print(json.dumps([os.getcwd(), str(lily.session().workspace)]))"
                                 ).stdout)
    assert state == [str(target), str(target)]
    # found in the workspace (listed, and not loaded until the user trusts it)
    assert "local_notes" in json.dumps(kernel.ok("/skills --all").displays)
    journal = journal_path(target, "team/analysis.ipynb")
    assert journal.is_file(), list(target.rglob("*"))
    assert not (kernel.workspace / ".lily").exists()  # nothing where the kernel was started


def test_kernel_lily_session_wins_over_jpy_session_name(start_kernel):
    kernel = start_kernel(KERNEL_LILY_SESSION="chosen", JPY_SESSION_NAME="/srv/other.ipynb")
    kernel.ok("/help")
    assert journal_path(kernel.workspace, "chosen").is_file()


def test_a_missing_kernel_working_dir_leaves_the_kernel_where_it_started(
        start_kernel, tmp_path, ipython_dir):
    """Issue 23 point 8: not silently: the first cell's output says where the workspace is
    (the kernel's log says it too), and later cells do not repeat it."""
    world = gateway_world(tmp_path, ipython_dir, tmp_path / "not-on-this-host")
    kernel = start_kernel(world=world)
    first = kernel.ok("%%python\nimport os\nprint(os.getcwd())")
    assert first.stdout.strip() == str(world.workspace)
    notice = "".join(m["content"]["text"] for m in first.of_type("stream")
                     if m["content"]["name"] == "stderr")
    assert "KERNEL_WORKING_DIR is not a folder on the kernel's host" in notice
    assert str(tmp_path / "not-on-this-host") in notice
    assert f"the kernel stays in {world.workspace}" in notice
    assert f"the workspace is {world.workspace}" in notice
    later = kernel.ok("/help")
    assert not later.of_type("stream")
    assert (world.workspace / ".lily" / "journal").is_dir()
    assert not (tmp_path / "not-on-this-host").exists()



# -- papermill's shutdown: kernel_info, then jupyter_client's interrupt -------------------

def test_an_interrupt_right_after_kernel_info_is_not_logged(tmp_path, ipython_dir):
    """papermill asks kernel_info, then shuts the kernel down, and jupyter_client interrupts
    before every shutdown. That SIGINT used to land in the reply's handler now and then
    ("KeyboardInterrupt caught in kernel" on papermill's terminal); repeated here often."""
    from jupyter_client.manager import KernelManager
    world = make_world(tmp_path, ipython_dir)
    log = tmp_path / "kernel.log"
    km = KernelManager(kernel_name="lily")
    with open(log, "w") as err:
        km.start_kernel(cwd=str(world.workspace), env=world.env, stderr=err)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        for _ in range(150):
            kc.kernel_info(reply=True, timeout=30)
            km.interrupt_kernel()
        run = kc.execute_interactive("%%python\nprint('still here')", timeout=30,
                                     output_hook=lambda msg: None)
        assert run["content"]["status"] == "ok"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert "KeyboardInterrupt" not in log.read_text()
