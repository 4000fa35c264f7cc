"""``%load_ext lily`` in a real IPython shell (in-process) and in a real python3 kernel.

After loading, a cell whose first non-blank line starts with ``/`` goes to
Lily's router; every other cell is Python, untouched, even with ``/`` in it.
``%%lily`` / ``%lily`` reach the agent. ``%unload_ext lily`` restores the
shell exactly.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from kernel_support import NO_MODEL_PREFIX, WIDGET_MIME, Kernel, make_world, write_skill

# Python that contains "/" but is not a command: it must run as Python.
PYTHON_WITH_SLASHES = [
    ("10 / 2", "5.0"),
    ("lily_a = 10; lily_b = 4\nlily_a/lily_b", "2.5"),
    ("'/usr/bin'", "'/usr/bin'"),
    ("#/comment\n1 + 1", "2"),
    ("(10\n/ 4)", "2.5"),
    ("x_path = '/tmp' + '/x'\nx_path", "'/tmp/x'"),
    ("  (8 //\n   2)", "4"),
]
UNKNOWN = "Error: unknown command /nope. Run /help for the list of commands."


# -- in-process: a real IPython shell ----------------------------------------------

class Shell:
    """IPython's global test shell, with captured output per cell."""

    def __init__(self, ip) -> None:
        self.ip = ip

    def run(self, code: str):
        from IPython.utils.capture import capture_output
        with capture_output() as captured:
            result = self.ip.run_cell(code)
        return result, captured

    def is_loaded(self) -> bool:
        return getattr(self.ip, "_lily", None) is not None


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    """The in-process shell, in a private world (its Lily session reads os.environ and the cwd)."""
    from IPython.testing.globalipapp import get_ipython
    world = make_world(tmp_path_factory.mktemp("ext-inprocess"))
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith(("OPENAI_", "LILY_", "JPY_"))]:
            mp.delenv(key)
        mp.setenv("SKILLS_USER_DIR", world.env["SKILLS_USER_DIR"])
        mp.setenv("SKILLS_WORKSPACE_DIR", world.env["SKILLS_WORKSPACE_DIR"])
        mp.setenv("HOME", world.env["HOME"])
        mp.chdir(world.workspace)
        ip = get_ipython()
        sh = Shell(ip)
        if sh.is_loaded():  # left over from elsewhere: start clean
            sh.run("%unload_ext lily")
        yield sh
        if "lily" in ip.extension_manager.loaded:
            sh.run("%unload_ext lily")


@pytest.fixture
def loaded(shell):
    if not shell.is_loaded():
        result, _ = shell.run("%load_ext lily")
        assert result.success
    return shell


@pytest.fixture
def unloaded(shell):
    if shell.is_loaded():
        result, _ = shell.run("%unload_ext lily")
        assert result.success
    return shell


def test_without_the_extension_slash_is_ipython_autocall(unloaded):
    result, _ = unloaded.run("/skills")
    assert isinstance(result.error_in_exec, NameError)
    assert "skills" in str(result.error_in_exec)


def test_slash_cells_route_to_lily(loaded):
    result, captured = loaded.run("/skills")
    assert result.success, result.error_in_exec
    assert len(captured.outputs) == 2  # the live filter, then the table
    assert WIDGET_MIME in captured.outputs[0].data
    data = captured.outputs[1].data
    assert set(data) == {"text/html", "text/plain"}
    assert "plan_compiler" in data["text/html"] and "plan_compiler" in data["text/plain"]


def test_unknown_command_is_one_line(loaded):
    result, captured = loaded.run("/nope")
    assert not result.success
    assert str(result.error_in_exec) == UNKNOWN.removeprefix("Error: ")
    assert captured.stdout.strip() == UNKNOWN
    assert "Traceback" not in captured.stdout + captured.stderr


@pytest.mark.parametrize("code, shown", PYTHON_WITH_SLASHES)
def test_python_with_slashes_is_untouched(loaded, code, shown):
    result, captured = loaded.run(code)
    assert result.success, result.error_in_exec
    assert repr(result.result) == shown
    assert captured.outputs == []  # nothing from Lily


@pytest.mark.parametrize("code", ["%lily what is a skill?", "%%lily\nwhat is a skill?",
                                  "%%lily please\nsummarise this"])
def test_lily_magics_reach_the_agent(loaded, code):
    result, captured = loaded.run(code)
    assert not result.success
    line = captured.stdout.strip()
    assert line.startswith(NO_MODEL_PREFIX) and "\n" not in line
    assert "OPENAI_API_KEY" in line and "OPENAI_BASE_URL" in line


def test_lily_magic_help_is_still_ipython_help(loaded):
    # "%lily what is a skill?" is a question for the agent; "%lily?" asks IPython about %lily
    result, captured = loaded.run("%lily?")
    assert result.success and "send one line to the Lily agent" in captured.stdout


@pytest.mark.parametrize("code", ["%lily /help", "%%lily\n/help"])
def test_lily_magics_run_commands(loaded, code):
    result, captured = loaded.run(code)
    assert result.success, result.error_in_exec
    assert [sorted(o.data) for o in captured.outputs] == [["text/markdown", "text/plain"]]
    assert "/reload_skills" in captured.outputs[0].data["text/markdown"]


def test_a_lily_cell_does_not_copy_the_user_namespace(loaded, monkeypatch):
    """IPython's magic-line expansion copies the whole user namespace, which grows with every
    cell (``_iN``): a command or prose cell, whose ``%%lily`` call has an empty line, skips it."""
    calls = []
    expand = loaded.ip.var_expand
    monkeypatch.setattr(loaded.ip, "var_expand", lambda *a, **k: calls.append(a) or expand(*a, **k))
    for code in ("/help", "%lily /help", "%%lily\n/help"):
        result, _ = loaded.run(code)
        assert result.success, (code, result.error_in_exec)
    assert calls == []


def test_a_tool_you_declare_read_only_runs_in_plan_mode_and_no_other(loaded):
    from lily_kernel.tools import gate
    result, _ = loaded.run("import lily\n@lily.tool(read_only=True)\ndef peek() -> str:\n"
                           "    return 'x'\n@lily.tool\ndef poke() -> str:\n    return 'y'")
    assert result.success, result.error_in_exec
    import lily
    session = lily.session()
    loaded.run("/mode plan")
    try:
        peek, poke = session.tools.get("peek"), session.tools.get("poke")
        assert peek is not None and poke is not None
        assert isinstance(gate.decide(session, "peek", {}, gate.Route.MODEL), gate.Runs)
        assert isinstance(gate.decide(session, "poke", {}, gate.Route.MODEL), gate.Refused)
    finally:
        loaded.run("/mode ask")

def test_the_lily_magics_expand_their_line_as_ipython_does(loaded, monkeypatch):
    from lily_kernel.jupyter import integration
    seen: list[str] = []
    monkeypatch.setattr(integration.Integration, "run", lambda self, text: seen.append(text))
    loaded.run("lily_x = 41")
    loaded.run("%lily top {lily_x} $lily_x $$lily_x {{lily_x}} /not/a/path")
    loaded.run("%%lily cell {lily_x + 1}\nbody {lily_x}")
    loaded.run("def lily_f():\n    lily_y = 2\n"
               "    get_ipython().run_line_magic('lily', 'in {lily_y} $lily_x')\nlily_f()")
    assert seen == ["top 41 41 $lily_x {lily_x} /not/a/path", "cell 42\nbody {lily_x}\n",
                    "in 2 41"]


def test_no_skill_alias_takes_a_built_in_name(loaded):
    """The face gives the session the built-in command names; the skills room does not know
    them (docs/loader.md#exclusion). A skill aliased /skills is excluded with the reason, and
    /skill names it; without the names it would reach the agent instead."""
    folder = write_skill(Path(os.environ["SKILLS_WORKSPACE_DIR"]), "sneaky",
                         "summary: s\ncommand: skills")
    try:
        result, _ = loaded.run("/reload_skills")
        assert result.success, result.error_in_exec
        result, captured = loaded.run("/skill sneaky")
        assert not result.success
        line = captured.stdout.strip()
        assert line.startswith("Error: skill 'sneaky' is excluded"), line
        assert "'command' /skills collides with the built-in command /skills" in line
    finally:
        shutil.rmtree(folder)
        loaded.run("/reload_skills")


def test_loading_twice_is_harmless(loaded):
    import lily
    integration = loaded.ip._lily
    result, captured = loaded.run("%load_ext lily")
    assert result.success and "already loaded" in captured.stdout
    lily.load_ipython_extension(loaded.ip)  # a direct second call, bypassing IPython's guard
    assert loaded.ip._lily is integration
    assert loaded.ip.input_transformers_cleanup.count(integration.transform) == 1
    result, captured = loaded.run("/help")
    assert result.success and len(captured.outputs) == 1


def test_unload_restores_the_shell(shell):
    ip = shell.ip
    if shell.is_loaded():
        shell.run("%unload_ext lily")
    before = (list(ip.input_transformers_cleanup), ip.custom_exceptions, ip.CustomTB,
              set(ip.magics_manager.magics["line"]), set(ip.magics_manager.magics["cell"]))

    result, captured = shell.run("%load_ext lily")
    assert result.success
    # one line on success: what works now
    assert captured.stdout == ("Lily is loaded: /help lists the commands; %%lily sends a cell "
                               "to the agent.\n")
    assert "lily" in ip.magics_manager.magics["line"] and "lily" in ip.magics_manager.magics["cell"]
    assert len(ip.input_transformers_cleanup) == len(before[0]) + 1

    assert shell.run("%unload_ext lily")[0].success
    after = (list(ip.input_transformers_cleanup), ip.custom_exceptions, ip.CustomTB,
             set(ip.magics_manager.magics["line"]), set(ip.magics_manager.magics["cell"]))
    assert after == before
    assert not shell.is_loaded()
    result, _ = shell.run("/skills")
    assert isinstance(result.error_in_exec, NameError)
    result, captured = shell.run("%lily hello")
    assert type(result.error_in_exec).__name__ == "UsageError"
    result, _ = shell.run("%%lily\nhello")
    assert type(result.error_in_exec).__name__ == "UsageError"

    # and it loads again, with a new session
    assert shell.run("%load_ext lily")[0].success
    result, captured = shell.run("/help")
    assert result.success and len(captured.outputs) == 1


def test_each_load_has_its_own_session(shell):
    import lily
    if not shell.is_loaded():
        shell.run("%load_ext lily")
    first = lily.session().session_id
    shell.run("%reload_ext lily")
    assert shell.is_loaded()
    assert lily.session().session_id != first


# -- in a real python3 kernel -------------------------------------------------------

@pytest.fixture(scope="module")
def py3(tmp_path_factory, ipython_dir):
    kernel = Kernel("python3", make_world(tmp_path_factory.mktemp("ext-py3"), ipython_dir))
    yield kernel
    kernel.shutdown()


def _one_line(run) -> str:
    line = run.error_line()
    assert [m["msg_type"] for m in run.outputs] == ["error"]
    return line


def test_python3_kernel_extension(py3):
    # without the extension: IPython's autocall
    before = py3.run("/skills")
    assert before.status == "error" and before.errors[0]["ename"] == "NameError"
    assert "skills" in before.errors[0]["evalue"]

    assert py3.ok("%load_ext lily").stdout.startswith("Lily is loaded: /help")
    run = py3.ok("/skills")
    live, data = run.displays
    assert live[WIDGET_MIME]["model_id"] in {m["content"]["comm_id"] for m in run.of_type("comm_open")}
    assert "plan_compiler" in data["text/html"] and WIDGET_MIME not in data

    assert _one_line(py3.run("/nope")) == UNKNOWN
    assert _one_line(py3.run("/skill")) == "Error: /skill requires a skill name."

    for code, shown in PYTHON_WITH_SLASHES:
        assert py3.ok(code).result == {"text/plain": shown}, code

    for code in ("%lily what is a skill?", "%%lily\nwhat is a skill?"):
        line = py3.run(code).error_line()
        assert line.startswith(NO_MODEL_PREFIX) and "OPENAI_API_KEY" in line, line
    assert "/reload_skills" in py3.ok("%lily /help").displays[0]["text/markdown"]

    # plain prose is Python in a python3 kernel: the extension leaves it alone
    prose = py3.run("Tell me about skills.")
    assert prose.status == "error" and prose.errors[0]["ename"] == "SyntaxError"

    # loading twice is harmless
    assert "already loaded" in py3.ok("%load_ext lily").stdout
    assert len(py3.ok("/help").displays) == 1

    # a failed command stops "run all"
    first, second = py3.kc.execute("/nope"), py3.kc.execute("6 * 7")
    assert py3.reply(first)["content"]["status"] == "error"
    assert py3.reply(second)["content"]["status"] == "aborted"

    # unloading restores the kernel
    py3.ok("%unload_ext lily")
    after = py3.run("/skills")
    assert after.status == "error" and after.errors[0]["ename"] == "NameError"
    gone = py3.run("%lily hello")
    assert gone.status == "error" and gone.reply["ename"] == "UsageError"
    assert py3.ok("10 / 2").result == {"text/plain": "5.0"}
    err = py3.run("1 / 0")  # Python errors have their usual traceback again
    assert err.errors[0]["ename"] == "ZeroDivisionError" and len(err.errors[0]["traceback"]) > 1


def test_extension_commands_never_contact_the_model_endpoint(start_kernel, recorder):
    """The same rule as the Lily kernel's, in the other face: under %load_ext lily in a
    python3 kernel, no command cell opens a connection to the model endpoint."""
    from test_kernel import MODEL_FREE_COMMANDS
    kernel = start_kernel("python3", OPENAI_BASE_URL=recorder.url,
                          OPENAI_API_KEY="sk-lily-test-secret-ext")
    kernel.ok("%load_ext lily")
    outcomes = {code: kernel.run(code).status for code in MODEL_FREE_COMMANDS}
    assert outcomes["/help"] == "ok" and outcomes["/skills"] == "ok" and outcomes["/nope"] == "error"
    time.sleep(0.2)
    assert recorder.connections == [], "a command cell opened a connection to the model endpoint"
    kernel.ok("import socket\n"
              f"socket.create_connection(('127.0.0.1', {recorder.port}), timeout=5).close()")
    assert recorder.wait_for(1)
