"""docs/architecture.md#one-cell: the one walk every face takes through the core."""
from __future__ import annotations

import shutil

import pytest

from lily_kernel.commands import router, table
from lily_kernel.commands.results import Answer, Notice, SkillTable
from lily_kernel.commands.runner import Runner
from lily_kernel.errors import CommandError
from lily_kernel.testing import ScriptedServer


def test_a_command_cell_is_parsed_once(env, monkeypatch):
    runner = Runner(lambda: env.session(journal=False))
    calls = []
    parse = router.parse
    monkeypatch.setattr(router, "parse", lambda cell: calls.append(cell) or parse(cell))
    assert table.is_command("\n  /skills --all\n")  # the faces' check parses nothing
    assert calls == []
    results = list(runner.command("\n  /skills --all\n"))
    assert len(calls) == 1
    assert len(results) == 1 and isinstance(results[0], SkillTable) and results[0].show_all


def test_is_command_agrees_with_parse():
    for cell in ("/skills", "  \n /help x", "\n\n", "", "plain", " x /y", "\t/new", "%lily /x"):
        assert table.is_command(cell) == (router.parse(cell) is not None), cell


def test_a_loader_error_is_recovered_by_reload_skills_in_the_core(env):
    missing = env.base / "not-yet"
    runner = Runner(lambda: env.session(journal=False, SKILLS_WORKSPACE_DIR=str(missing)))
    assert runner.session_error is not None and not runner.ready
    with pytest.raises(CommandError) as info:
        list(runner.command("/skills"))
    assert info.value.line().startswith("Error: Lily could not load its skills: ")
    assert "/reload_skills" in info.value.line()
    missing.mkdir()
    (done,) = runner.command("/reload_skills")
    assert isinstance(done, Notice) and done.markdown.startswith("Skills loaded: snapshot version 1")
    assert runner.ready
    assert isinstance(next(iter(runner.command("/skills"))), SkillTable)


def test_a_skill_request_runs_through_the_agent_in_the_core(env):
    shutil.copytree(env.repo_skills / "plan_compiler", env.ws_skills / "plan_compiler")
    script = [{"expect": {"contains": "ship v2"}, "content": "THE PLAN"}]
    with ScriptedServer(script) as server:
        runner = Runner(lambda: env.session(journal=False, OPENAI_BASE_URL=server.url,
                                            OPENAI_API_KEY="sk-test"))
        (answer,) = runner.command("/plan ship v2")
        assert server.remaining() == 0
    assert isinstance(answer, Answer) and answer.text == "THE PLAN"
    assert answer.skill == "plan_compiler"


def test_a_live_display_is_made_only_for_the_agent_and_always_closed(env):
    made = []

    class Live:
        def __init__(self):
            self.pieces, self.closed = [], False
            made.append(self)

        def write(self, piece):
            self.pieces.append(piece)

        def event(self, kind, data):
            pass

        def close(self):
            self.closed = True

    script = ["streamed answer", {"status": 500, "retry_after": 0.01}]
    with ScriptedServer(script) as server:
        runner = Runner(lambda: env.session(journal=False, OPENAI_BASE_URL=server.url,
                                            OPENAI_API_KEY="sk-test", LILY_MAX_RETRIES="0"))
        list(runner.command("/skills", live=Live))
        assert made == []  # a command that does not reach the model shows nothing live
        (answer,) = runner.ask("hello", live=Live)
        assert "".join(made[0].pieces) == answer.text == "streamed answer" and made[0].closed
        with pytest.raises(CommandError):
            list(runner.ask("again", live=Live))
        assert made[1].closed  # closed on failure too
