"""The one gate (tools/gate.py, docs/permissions.md#the-gate), as an attacker meets it.

Core tests on the :class:`Runner` every face uses: a real session, the scripted model over
HTTP on 127.0.0.1, the real built-in file tools, and the notebook tools bound to a notebook
stand-in whose ``run`` and ``run_sandboxed`` record the code (the kernel tests run real
code, tests/jupyter/test_gate_kernel.py). The sandbox's availability is the real engine's
(tools/sandbox.py), turned off through the settings where a test needs it off.

- What a card approved is decided again when it runs: a tool redefined, a file changed, a
  mode changed between the card and ``/confirm`` → not run, and the reply says so.
- ``run_python`` from the model runs in the sandbox with no card where one is usable;
  elsewhere it asks, in ``auto`` mode too; the administrator may require the sandbox or
  forbid model code.
- A replay without ``--include-code`` runs no code by any route.
"""
from __future__ import annotations

from dataclasses import replace

import agent_support
import pytest
from agent_support import World

from lily_kernel.commands import render
from lily_kernel.commands.results import ActionCard, ActionDone, Answer
from lily_kernel.commands.runner import Runner
from lily_kernel.errors import CommandError
from lily_kernel.session.session import Session
from lily_kernel.testing.server import ScriptedServer
from lily_kernel.tools import gate, notebook_tools, sandbox
from lily_kernel.tools.tool_registry import Tool

SANDBOX = sandbox.unavailable()
needs_sandbox = pytest.mark.skipif(SANDBOX is not None, reason=f"no sandbox here: {SANDBOX}")


class Book(agent_support.Book):
    """The stand-in notebook, also able to run code in the sandbox (recorded)."""

    def __init__(self) -> None:
        super().__init__()
        self.sandboxed: list[str] = []

    def run_sandboxed(self, code: str) -> notebook_tools.RunResult:
        self.sandboxed.append(code)
        return notebook_tools.RunResult(f"SANDBOXED {code}")


def call(name: str, args: dict, id: str) -> dict:
    return {"tool_calls": [{"name": name, "arguments": args, "id": id}]}


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


def user_toml(world: World, text: str) -> None:
    path = world.base / "home" / ".config" / "lily" / "lily.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def start(world: World, server: ScriptedServer, book: Book | None = None,
          extra_tools: tuple[Tool, ...] = (), **env: str) -> Runner:
    def tools(session: Session) -> None:
        notebook_tools.register(session.tools, book or Book(), lambda: True)
        for tool in extra_tools:
            session.tools.add(tool)
    return Runner(lambda: Session(workspace=world.workspace, journal=False,
                                  env=world.env(server, **env), add_tools=tools))


def ask(runner: Runner, text: str) -> list:
    out = []
    for result in runner.ask(text):
        out.append(result)
        if isinstance(result, ActionCard):
            runner.shown(result)
    return out


def cards(results: list) -> list[ActionCard]:
    return [r for r in results if isinstance(r, ActionCard)]


def answer(results: list) -> Answer:
    (found,) = [r for r in results if isinstance(r, Answer)]
    return found


# -- decided again when it runs (issue 41 §4) -------------------------------------------------

def test_a_mode_changed_to_plan_after_the_card_refuses_the_write_and_says_it_did_not_run(world):
    """ATTACK: a write's card, then /mode plan, then /confirm. Nothing is written, and the
    reply says it did not run and why, never "ran (confirmed)"."""
    script = [call("write", {"path": "a.txt", "content": "x\n"}, "w1"), "Understood."]
    with ScriptedServer(script) as server:
        runner = start(world, server)
        (_card,) = cards(ask(runner, "write a.txt"))
        list(runner.command("/mode plan"))
        done, *_ = runner.command("/confirm")
        assert isinstance(done, ActionDone)
        assert "ran (confirmed)" not in done.summary
        assert done.summary.startswith("**write** did not run: ") and "plan mode" in done.summary
        assert done.tool_result is not None and done.tool_result.startswith("Error: ")
        assert not (world.workspace / "a.txt").exists()


def test_a_file_changed_after_the_card_is_not_overwritten(world):
    """ATTACK: the card shows a diff; the file changes before /confirm; the write is refused
    (the user approved another change), and the reply says so."""
    target = world.workspace / "notes.txt"
    target.write_text("old\n")
    script = [call("write", {"path": "notes.txt", "content": "new\n"}, "w1"), "Ok."]
    with ScriptedServer(script) as server:
        runner = start(world, server)
        (card,) = cards(ask(runner, "change my notes"))
        assert card.change is not None and "-old" in card.change
        target.write_text("someone else's work\n")
        done, *_ = runner.command("/confirm")
        assert done.summary.startswith("**write** did not run: ")
        assert "changed since the card was shown" in done.summary
        assert target.read_text() == "someone else's work\n"


def test_a_tool_redefined_after_its_card_is_not_called(world):
    """ATTACK: the tool a card shows is replaced (another description) before /confirm:
    the new one is never called, and the reply says what changed."""
    called: list[str] = []

    def deploy(target: str) -> str:
        called.append(target)
        return "deployed"
    tool = Tool("deploy", deploy, "Deploy to staging.", ask=True)
    script = [call("deploy", {"target": "staging"}, "d1"), "Ok."]
    with ScriptedServer(script) as server:
        runner = start(world, server, extra_tools=(tool,))
        (_card,) = cards(ask(runner, "deploy"))
        runner.session.tools.add(replace(tool, description="Deploy to production."))
        done, *_ = runner.command("/confirm")
        assert done.summary.startswith("**deploy** did not run: ")
        assert "changed since its card was shown (its description)" in done.summary
        assert called == []


def test_the_gate_decides_a_held_call_again_with_its_card():
    """The gate itself: a card's identity or diff that no longer holds is CHANGED."""
    from lily_kernel.settings.permissions import Permissions
    from lily_kernel.tools.tool_registry import ToolPolicy, ToolRegistry

    class Holder:
        def __init__(self) -> None:
            self.approved: dict = {}
            self.revoked: dict = {}
            self.tools = ToolRegistry()
            self.policy = ToolPolicy()
            self.permissions = Permissions()
            self.replay = None
            self.environ: dict = {}

        def revoke(self, tool: str, why: str) -> None:
            self.approved.pop(tool, None)

    holder = Holder()
    tool = Tool("deploy", lambda target: "ok", "Deploy.", ask=True)
    holder.tools.add(tool)
    said = gate.decide(holder, "deploy", {"target": "x"}, gate.Route.MODEL)
    assert isinstance(said, gate.Asks)
    card = gate.Card(tool.identity(), None)
    assert gate.decide(holder, "deploy", {"target": "x"}, gate.Route.CONFIRM, card) == \
        gate.Runs("confirmed")
    holder.tools.add(replace(tool, description="Deploy everywhere."))
    again = gate.decide(holder, "deploy", {"target": "x"}, gate.Route.CONFIRM, card)
    assert isinstance(again, gate.Refused) and again.kind is gate.Refusal.CHANGED


# -- the model's code: the sandbox, or a card (issue 40 §2, issue 41 §5) -----------------------

@needs_sandbox
@pytest.mark.parametrize("mode", ["plan", "ask", "edits", "auto"])
def test_run_python_from_the_model_runs_in_the_sandbox_with_no_card(world, mode):
    """Where the sandbox is usable, the model's code runs there in every mode (it changes
    nothing, so plan mode allows it too): no card, the footer says so, and the code lands
    as a proposed cell, never run in the notebook."""
    book = Book()
    script = [call("run_python", {"code": "df.mean()"}, "r1"), "The mean is 2."]
    with ScriptedServer(script) as server:
        runner = start(world, server, book, LILY_MODE=mode)
        out = ask(runner, "what is the mean?")
        assert cards(out) == []
        assert book.sandboxed == ["df.mean()"] and book.ran == []
        assert book.proposed == ["df.mean()"]
        reply = answer(out)
        assert reply.text == "The mean is 2." and "ran in the sandbox" in reply.notes
        told = server.chat_requests()[1]["messages"][-1]["content"]
        assert "SANDBOXED df.mean()" in told and "proposed as a cell" in told


@pytest.mark.parametrize("mode", ["ask", "auto"])
def test_with_the_sandbox_off_run_python_asks_in_every_mode_and_says_why(world, mode):
    """ATTACK (issue 41 §5): in auto mode the model's code ran in the kernel with no card,
    where it could empty the session's policy objects. Now, with no sandbox, it asks, in
    auto mode too, and the card says why in one line."""
    user_toml(world, "[sandbox]\nenabled = false\n")
    book = Book()
    script = [call("run_python", {"code": "import lily_kernel"}, "r1"), "Done."]
    with ScriptedServer(script) as server:
        runner = start(world, server, book, LILY_MODE=mode)
        (card,) = cards(ask(runner, "run it"))
        assert book.ran == [] and book.sandboxed == []
        assert card.reason.startswith("run_python runs code in your namespace: the sandbox is "
                                      "unavailable here ([sandbox] enabled = false in user (")
        assert card.reason.endswith("); a card asks instead")
        assert "--always" not in render.markdown(card)
        done, *_ = runner.command("/confirm")
        assert done.summary.startswith("**run_python** ran (confirmed).")
        assert book.ran == ["import lily_kernel"]


def test_the_lily_sandbox_off_variable_and_a_face_without_a_sandbox_ask(world):
    """The engine's own switch (LILY_SANDBOX=off) and a notebook that cannot sandbox (the
    ACP face's, the CLI's) fall back to the card, saying why."""
    class Plain(Book):
        run_sandboxed = None  # type: ignore[assignment]

    for book, env, why in ((Book(), {"LILY_SANDBOX": "off"}, "LILY_SANDBOX=off"),
                           (Plain(), {}, "this face has no sandbox")):
        script = [call("run_python", {"code": "1"}, "r1"), "Ok."]
        with ScriptedServer(script) as server:
            runner = start(world, server, book, **env)
            (card,) = cards(ask(runner, "run"))
            assert why in card.reason and "a card asks instead" in card.reason
            list(runner.command("/cancel"))


def admin(world: World, text: str) -> str:
    path = world.base / "policy.toml"
    path.write_text(text)
    return str(path)


def test_the_administrator_can_forbid_model_code(world):
    book = Book()
    policy = admin(world, '[sandbox]\nmodel_code = "none"\n')
    script = [call("run_python", {"code": "1 + 1"}, "r1"), "I may not run code."]
    with ScriptedServer(script) as server:
        runner = start(world, server, book, LILY_POLICY_FILE=policy, LILY_MODE="auto")
        out = ask(runner, "add")
        assert cards(out) == [] and book.ran == [] and book.sandboxed == []
        told = server.chat_requests()[1]["messages"][-1]["content"]
        assert told.startswith("Error: not run: the administrator's policy forbids code the "
                               "model writes")
        rows = render.text(next(iter(runner.command("/policy"))))
        assert "sandbox.model_code" in rows and "none" in rows and "sandbox.enabled" in rows


def test_the_administrator_can_require_the_sandbox_with_no_card_fallback(world):
    """model_code = "sandbox": where the sandbox is off, the model's code is refused, not
    asked; a lower layer cannot loosen it."""
    book = Book()
    policy = admin(world, '[sandbox]\nmodel_code = "sandbox"\n')
    user_toml(world, '[sandbox]\nenabled = false\nmodel_code = "any"\n')
    script = [call("run_python", {"code": "1 + 1"}, "r1"), "Refused."]
    with ScriptedServer(script) as server:
        runner = start(world, server, book, LILY_POLICY_FILE=policy)
        out = ask(runner, "add")
        assert cards(out) == [] and book.ran == []
        told = server.chat_requests()[1]["messages"][-1]["content"]
        assert "only in the sandbox" in told and "[sandbox] enabled = false" in told
        assert runner.session.permissions.model_code == "sandbox"


def test_model_code_settings_are_checked():
    from lily_kernel.settings import admin_policy
    found = admin_policy.problems({"sandbox": {"model_code": "sometimes", "enabled": True}})
    assert any("model_code must be one of any, sandbox, none" in f for f in found)
    assert any("enabled can only be set to false" in f for f in found)


# -- routes: a replay, a tool_dispatch skill ---------------------------------------------------

def py_skill(world: World) -> None:
    """A user's tool_dispatch skill bound to run_python: ``/py CODE`` runs CODE."""
    skill = world.user / "py"
    skill.mkdir()
    (skill / "SKILL.md").write_text("---\nname: py\ndescription: Run Python.\n"
                                    "invocation_mode: tool_dispatch\ncommand_tool: run_python\n"
                                    "---\nRun it.\n")


def test_a_replay_without_include_code_runs_no_code_by_any_route(world):
    """ATTACK (issue 41 §2): in a replay's session without --include-code, the model's
    run_python, a /confirm of a held call and a tool_dispatch skill bound to run_python are
    all refused by the gate."""
    py_skill(world)
    user_toml(world, "[sandbox]\nenabled = false\n")  # so that run_python holds a card
    book = Book()
    script = [call("run_python", {"code": "open('x', 'w')"}, "r1"), "Refused.",
              call("run_python", {"code": "open('y', 'w')"}, "r2"), "Ok."]
    with ScriptedServer(script) as server:
        runner = start(world, server, book)
        runner.session.replay = gate.Replay.NO_CODE
        out = ask(runner, "run it")
        assert cards(out) == []
        told = server.chat_requests()[1]["messages"][-1]["content"]
        assert "a replay runs no code" in told
        with pytest.raises(CommandError, match="a replay runs no code"):
            list(runner.command("/skill py print(1)"))
        runner.session.replay = None
        (_card,) = cards(ask(runner, "run it again"))  # held before the replay's rule holds
        runner.session.replay = gate.Replay.NO_CODE
        done, *_ = runner.command("/confirm")
        assert done.summary.startswith("**run_python** did not run: ")
        assert book.ran == [] and book.sandboxed == []


def test_a_tool_dispatch_skill_passes_the_gate_in_plan_mode(world):
    """A tool_dispatch skill bound to run_python is the user's own command (no card), but
    plan mode's read-only rule holds for it too."""
    py_skill(world)
    book = Book()
    with ScriptedServer([]) as server:
        runner = start(world, server, book)
        list(runner.command("/skill py x = 1"))
        assert book.ran == ["x = 1"]
        list(runner.command("/mode plan"))
        with pytest.raises(CommandError, match="plan mode"):
            list(runner.command("/skill py x = 2"))
        assert book.ran == ["x = 1"]
