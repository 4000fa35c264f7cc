"""``jupyter console`` on the Lily kernel, driven through a pseudo-terminal as a person types.

The console asks the kernel ``is_complete`` on every Enter: a ``%%python`` cell
goes on until a blank line and then runs as Python; ``exit`` and ``quit`` end
the console as in IPython, and never reach the model (docs/front-ends.md#jupyter-console).
"""
from __future__ import annotations

import re
import sys
import time

import pexpect
import pytest
from kernel_support import call, make_world, scripted_kernel_world

ANSI = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z]|\][^\x07]*\x07|[()][A-Z0-9]|[=>])")
PROMPT = r"In \[{n}\]: "
MORE = r"\.\.\.: "


class Console:
    """``jupyter console --kernel lily`` in a pty; ``wait`` matches the screen text without colours."""

    def __init__(self, world) -> None:
        env = dict(world.env, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1")
        # the console gives up asking is_complete after 1 s by default; a loaded machine
        # may take longer, and a console that stopped asking would fail for that reason only
        args = ["-m", "jupyter_console", "--kernel", "lily",
                "--ZMQTerminalInteractiveShell.kernel_is_complete_timeout=30"]
        self.child = pexpect.spawn(sys.executable, args,
                                   env=env, cwd=str(world.workspace), encoding="utf-8",
                                   dimensions=(40, 200), timeout=60)
        self.seen = ""

    def wait(self, pattern: str, timeout: float = 60) -> str:
        """Wait for ``pattern`` on the screen; the text read (colours removed) up to then."""
        deadline = time.monotonic() + timeout
        while not re.search(pattern, ANSI.sub("", self.seen)):
            if time.monotonic() > deadline or not self.child.isalive():
                raise AssertionError(f"{pattern!r} not on screen: {ANSI.sub('', self.seen)[-1500:]!r}")
            try:
                self.seen += self.child.read_nonblocking(4096, timeout=0.2)
            except pexpect.TIMEOUT:
                pass
            except pexpect.EOF:
                break
        text = ANSI.sub("", self.seen)
        found = re.search(pattern, text)
        assert found, f"{pattern!r} not on screen: {text[-1500:]!r}"
        # what came after the match in the same read is also kept for the next wait: a cell's
        # output and the next prompt may arrive in one read (dropping it failed a loaded run)
        self.seen = text[found.end():]
        return text

    def type(self, line: str, then: str) -> None:
        """Type ``line`` and Enter, then wait for ``then`` (a prompt) on the screen."""
        self.child.send(line + "\r")
        self.wait(then)

    def exits(self, timeout: float = 30) -> int:
        self.child.expect(pexpect.EOF, timeout=timeout)
        self.child.close()
        return self.child.exitstatus

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


@pytest.fixture
def console(tmp_path, ipython_dir, recorder):
    # a model endpoint that records connections: nothing typed here may reach it
    world = make_world(tmp_path, ipython_dir, OPENAI_BASE_URL=recorder.url,
                       OPENAI_API_KEY="sk-console-test", LILY_MAX_RETRIES="0")
    started = Console(world)
    started.wait(PROMPT.format(n=1))
    yield started
    started.close()


def test_a_python_cell_goes_on_until_a_blank_line_then_runs(console, recorder):
    console.type("%%python", then=MORE)
    console.type("total = 0", then=MORE)
    console.type("for i in range(4):", then=MORE)      # the console indents the block
    console.type("total += i", then=MORE)
    console.type("\x7f" * 4 + "print('total is', total * 7)", then=MORE)  # dedent, go on
    console.type("", then="total is 42")                # a blank line runs the cell
    console.wait(PROMPT.format(n=2))
    console.type("/help", then=PROMPT.format(n=3))      # the next line is a command again
    assert recorder.connections == []
    console.child.send("exit\r")
    assert console.exits() == 0
    assert recorder.connections == []


@pytest.mark.parametrize("word", ["quit", "exit()"])
def test_quit_ends_the_console_without_the_model(console, recorder, word):
    console.child.send(word + "\r")
    assert console.exits() == 0
    assert recorder.connections == []


# -- the agent in a console (docs/front-ends.md#jupyter-console) ---------------------------

@pytest.fixture
def agent_console(tmp_path, ipython_dir, server):
    """A console whose model is the module's scripted server."""
    world = scripted_kernel_world(tmp_path, ipython_dir, server.url)
    world.env["LILY_TIMEOUT"] = "30"
    started = Console(world)
    started.wait(PROMPT.format(n=1))
    yield started
    started.close()


def test_the_console_shows_the_waiting_line_then_streams_the_answer(agent_console, turns):
    turns.append({"delay": 2.5, "content": "STREAMED-ANSWER " + " ".join(
        f"word{i}" for i in range(8)) + " LAST-WORD", "chunks": 10, "chunk_delay": 0.4})
    agent_console.child.send("Answer slowly please\r")
    screen = agent_console.wait(r"waiting for scripted-test-model… \d+ s")  # model silent
    early = agent_console.wait("STREAMED-ANSWER")
    assert "LAST-WORD" not in early  # shown as it arrives, not at the end
    screen += early + agent_console.wait(PROMPT.format(n=2))
    assert re.search(r"LAST-WORD\s+\[no skill · model: scripted-test-model · mode: ask\]", screen), screen
    assert screen.count("STREAMED-ANSWER") == 1, screen  # not printed again at the end


def test_the_console_help_is_a_text_table(agent_console):
    agent_console.child.send("/help\r")
    screen = agent_console.wait(PROMPT.format(n=2))
    assert re.search(r"command\s+what it does", screen), screen
    assert re.search(r"-{4,}  -{4,}", screen), screen
    assert "| ---" not in screen and "**" not in screen


def test_a_card_in_the_console_shows_its_code_without_a_language_line(agent_console, turns):
    turns.append(call("run_python", {"code": "print('CARD-CODE')"}, "console-card"))
    agent_console.child.send("run something\r")
    screen = agent_console.wait(PROMPT.format(n=2))
    assert "Approve run_python" in screen and "    print('CARD-CODE')" in screen, screen
    lines = [line.strip() for line in screen.splitlines()]
    assert "python" not in lines and "json" not in lines and "```" not in screen
