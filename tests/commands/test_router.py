"""docs/commands.md: the deterministic command router."""
from __future__ import annotations

import json
import shutil

import pytest
from agent_support import run_command, skill_request

from lily_kernel.commands import render, router
from lily_kernel.commands.results import (
    AgentList,
    HelpPage,
    ModelInfo,
    Notice,
    SkillRequest,
    SkillTable,
    ToolOutput,
)
from lily_kernel.commands.table import BUILTINS, is_command
from lily_kernel.errors import CommandError
from lily_kernel.session.journal import read as read_journal


def error_line(session, cell) -> str:
    with pytest.raises(CommandError) as info:
        run_command(session, cell)
    line = info.value.line()
    assert "\n" not in line and "Traceback" not in line
    return line


@pytest.fixture
def session(env):
    env.write_skill(env.ws_skills, "alpha", "summary: Alpha does A.\ncommand: al\n"
                                            "requires_tools: [read]", body="# Alpha\n\nALPHA RULES\n")
    shutil.copytree(env.repo_skills / "todo_scan", env.bundled_skills / "todo_scan")
    return env.session()


# -- parsing -----------------------------------------------------------------------

def test_parse_splits_arguments_and_body():
    cmd = router.parse("/skill alpha some args here\nline two\n\nline four\n")
    assert (cmd.name, cmd.args, cmd.body) == ("skill", "alpha some args here",
                                              "line two\n\nline four")
    assert cmd.input == "alpha some args here\nline two\n\nline four"


def test_parse_first_non_blank_line_decides():
    assert router.parse("\n   \n  /skills --all  \nbody").name == "skills"
    assert router.parse("\n   \n  /skills --all  \nbody").args == "--all"
    assert router.parse("hello\n/skills") is None
    assert router.parse("") is None and router.parse("   \n\n") is None
    assert is_command("/help") and not is_command("what is /help?")


def test_parse_without_arguments():
    cmd = router.parse("/reload_skills")
    assert (cmd.name, cmd.args, cmd.body, cmd.input) == ("reload_skills", "", "", "")


def test_not_a_command_is_refused_by_run(session):
    with pytest.raises(CommandError):
        run_command(session, "please plan my week")


# -- exact error messages -------------------------------------------------------------

def test_skill_without_name(session):
    assert error_line(session, "/skill") == "Error: /skill requires a skill name."
    assert error_line(session, "/skill   ") == "Error: /skill requires a skill name."


def test_unknown_command(session):
    assert error_line(session, "/foo") == \
        "Error: unknown command /foo. Run /help for the list of commands."
    assert error_line(session, "/foo bar baz\nbody") == \
        "Error: unknown command /foo. Run /help for the list of commands."


def test_unknown_skill_names_the_snapshot_version(session):
    run_command(session, "/reload_skills")
    run_command(session, "/reload_skills")
    assert error_line(session, "/skill x") == \
        "Error: no skill named 'x' in this session's snapshot (version 3)."


@pytest.mark.parametrize("cell", ["/skil alpha", "/skill_ alpha", "/Skills", "/SKILLS",
                                  "/hel", "/helpme", "/reload", "/agents", "/a", "/alp",
                                  "/al_", "/new2", "/ skills"])
def test_no_prefix_or_fuzzy_matching(session, cell):
    line = error_line(session, cell)
    assert line.startswith("Error: unknown command /")
    assert "did you mean" not in line.lower()


def test_skill_names_match_exactly(session):
    for name in ("alph", "Alpha", "alpha_", "ALPHA"):
        assert error_line(session, f"/skill {name}") == \
            f"Error: no skill named '{name}' in this session's snapshot (version 1)."


def test_excluded_skill_error_says_why(env):
    env.write_skill(env.ws_skills, "winonly", "eligibility:\n  os: [win32]")
    session = env.session()
    line = error_line(session, "/skill winonly")
    assert "winonly" in line and "excluded" in line and "win32" in line


# -- /skill: prompt_rewrite and tool_dispatch ---------------------------------------------

def test_prompt_rewrite_returns_a_request_with_body_and_input(session):
    req = skill_request(session, "/skill alpha Plan the launch\nwith these notes")
    assert isinstance(req, SkillRequest)
    assert req.skill is session.snapshot.get("alpha")
    assert req.input == "Plan the launch\nwith these notes"
    assert "ALPHA RULES" in req.prompt and "Plan the launch\nwith these notes" in req.prompt
    assert req.prompt.index("ALPHA RULES") < req.prompt.index("Plan the launch")
    assert session.conversation == []  # the router never talks to a model


def test_alias_is_the_same_as_skill(session):
    via_alias = skill_request(session, "/al the input")
    via_skill = skill_request(session, "/skill alpha the input")
    assert via_alias == via_skill


def _todo_workspace(env):
    (env.workspace / "src").mkdir()
    (env.workspace / "src" / "app.py").write_text(
        "x = 1\n# TODO: handle errors\ny = 2  # FIXME(me): off by one\n")
    (env.workspace / "notes.md").write_text("Nothing here.\nXXX check the numbers\n")
    (env.workspace / ".git").mkdir()
    (env.workspace / ".git" / "HEAD").write_text("TODO: not scanned\n")
    (env.workspace / "blob.bin").write_bytes(b"\0\0TODO: binary\n")


def test_tool_dispatch_calls_the_real_tool(env, session):
    _todo_workspace(env)
    out = run_command(session, "/todos")
    assert isinstance(out, ToolOutput)
    assert (out.skill, out.tool) == ("todo_scan", "scan_todos")
    text = render.text(out)
    assert "3 markers" in text
    assert "| `src/app.py` | 2 | TODO | handle errors |" in text
    assert "| `src/app.py` | 3 | FIXME | off by one |" in text
    assert "| `notes.md` | 2 | XXX | check the numbers |" in text
    assert ".git" not in text and "blob.bin" not in text
    assert text.index("notes.md") < text.index("src/app.py")  # path order
    assert session.conversation == []


def test_tool_dispatch_passes_the_input(env, session):
    _todo_workspace(env)
    out = run_command(session, "/skill todo_scan src")
    assert "notes.md" not in out.value and "src/app.py" in out.value
    assert "under `src`" in out.value


def test_tool_dispatch_tool_error_is_a_cell_error(env, session):
    line = error_line(session, "/todos ../outside")
    assert line.startswith("Error: scan_todos:") and ".." in line


def test_tool_dispatch_tool_crash_is_a_cell_error_not_a_traceback(env):
    tools = env.tools_for(env.workspace)

    @tools.register(name="crashy")
    def crashy(input: str = "") -> str:
        raise ZeroDivisionError("boom")

    env.write_skill(env.ws_skills, "crash", "invocation_mode: tool_dispatch\ncommand_tool: crashy")
    from lily_kernel.session.session import Session
    session = Session(workspace=env.workspace, env=env.session_env(), tools=tools,
                      host=env.host, journal=False)
    line = error_line(session, "/skill crash")
    assert "crashy" in line and "ZeroDivisionError" in line and "boom" in line


def test_tool_dispatch_returns_non_string_values(env):
    tools = env.tools_for(env.workspace)
    seen = []

    @tools.register(name="echo_json")
    def echo_json(input: str = "") -> dict:
        seen.append(input)
        return {"got": input, "n": 2}

    env.write_skill(env.ws_skills, "echo", "invocation_mode: tool_dispatch\ncommand_tool: echo_json")
    from lily_kernel.session.session import Session
    session = Session(workspace=env.workspace, env=env.session_env(), tools=tools,
                      host=env.host, journal=False)
    out = run_command(session, "/skill echo a b\nc")
    assert out.value == {"got": "a b\nc", "n": 2} and seen == ["a b\nc"]
    assert json.loads(render.text(out)) == {"got": "a b\nc", "n": 2}


# -- /help -----------------------------------------------------------------------------

def test_help_lists_every_builtin(session):
    page = run_command(session, "/help")
    assert isinstance(page, HelpPage)
    for cmd in BUILTINS:
        assert f"`{cmd.usage}`" in page.markdown
    assert {c.name for c in BUILTINS} >= {
        "skills", "skill", "help", "agent", "reload_skills", "reload_persona", "new", "model"}
    assert "`/al`" in page.markdown and "`/todos`" in page.markdown


def test_help_for_a_skill_shows_its_metadata(env):
    env.write_skill(env.ws_skills, "pdf-processing", """name: pdf-processing
description: Extracts text and tables from PDF files. Use when the user has a PDF.
summary: PDF extraction
command: pdf
requires_tools: [read, write]
eligibility:
  os: [linux]
  env: [PRESENT_VAR]
  binaries: [fakebin]
license: Apache-2.0
compatibility: Requires poppler
metadata:
  author: example-org
  version: "1.0"
allowed-tools: Bash(pdftotext:*) Read
disable-model-invocation: true""")
    session = env.session()
    md = run_command(session, "/help pdf-processing").markdown
    for part in ("PDF extraction", "prompt_rewrite", "`/pdf`", "`read`", "`write`",
                 "os: linux", "env: PRESENT_VAR", "binaries: fakebin",
                 "Extracts text and tables", "Apache-2.0", "Requires poppler",
                 "metadata.author", "example-org", "metadata.version",
                 "`Bash(pdftotext:*)`", "grants nothing", "disable-model-invocation",
                 "workspace"):
        assert part in md, part
    assert run_command(session, "/help /pdf") == run_command(session, "/help pdf-processing")
    assert run_command(session, "/help pdf") == run_command(session, "/help pdf-processing")


def test_help_for_a_builtin_and_for_unknown_topics(session):
    assert "/skills [--all]" in run_command(session, "/help /skills").markdown
    assert "/reload_skills" in run_command(session, "/help reload_skills").markdown
    assert error_line(session, "/help /nope") == \
        "Error: unknown command /nope. Run /help for the list of commands."
    assert error_line(session, "/help nope") == \
        "Error: no skill named 'nope' in this session's snapshot (version 1)."


def test_disable_model_invocation_skill_still_runs_by_command(env):
    env.write_skill(env.ws_skills, "owner_only", "disable-model-invocation: true\ncommand: own",
                    body="OWNER BODY\n")
    session = env.session()
    assert session.snapshot.get("owner_only").model_invocable is False
    assert "OWNER BODY" in skill_request(session, "/own").prompt
    assert "OWNER BODY" in skill_request(session, "/skill owner_only").prompt
    assert "no (disable-model-invocation)" in run_command(session, "/help owner_only").markdown


# -- /agent ----------------------------------------------------------------------------

def test_agent_lists_and_marks_the_active_one(session):
    result = run_command(session, "/agent")
    assert isinstance(result, AgentList)
    assert result.active == "default" and "reviewer" in result.agents
    assert "* default" in render.text(result)


def test_agent_switch_keeps_snapshot_conversation_and_model(session):
    session.add_message({"role": "user", "content": "keep me"})
    run_command(session, "/model m1 temperature=0.2")
    snap, model, sid = session.snapshot, session.model_config, session.session_id
    old_persona = session.persona.system_text()
    result = run_command(session, "/agent reviewer")
    assert result.switched and result.active == "reviewer"
    assert session.active_agent == "reviewer"
    assert session.persona.agent == "reviewer"
    assert session.persona.system_text() != old_persona
    assert "reviewer" in session.persona.system_text()
    assert session.snapshot is snap and session.model_config == model
    assert session.session_id == sid and session.reload_count == 0
    assert session.conversation == [{"role": "user", "content": "keep me"}]
    assert "* reviewer" in render.text(run_command(session, "/agent"))
    run_command(session, "/agent default")
    assert session.persona.system_text() == old_persona


def test_agent_unknown(session):
    assert error_line(session, "/agent nope") == \
        "Error: no agent named 'nope'. Run /agent for the list of agents."
    assert error_line(session, "/agent ../../etc") .startswith("Error: no agent named")
    assert session.active_agent == "default"


# -- /model ------------------------------------------------------------------------------

def test_model_show(session):
    info = run_command(session, "/model")
    assert isinstance(info, ModelInfo) and info.changed == ()
    assert info.config["model"] == session.model_config.model
    assert set(info.config) >= {"model", "temperature", "reasoning_effort", "verbosity", "base_url"}
    assert "api_key" not in json.dumps(info.config).lower()


def test_model_change(session):
    sid, snap = session.session_id, session.snapshot
    info = run_command(session, "/model my-model temperature=0.3")
    assert info.changed == ("model", "temperature")
    assert session.model_config.model == "my-model"
    assert session.model_config.temperature == 0.3
    run_command(session, "/model reasoning_effort=high verbosity=low base_url=http://localhost:8000/v1")
    cfg = session.model_config
    assert (cfg.model, cfg.temperature, cfg.reasoning_effort, cfg.verbosity, cfg.base_url) == (
        "my-model", 0.3, "high", "low", "http://localhost:8000/v1")
    run_command(session, "/model temperature=none")
    assert session.model_config.temperature is None
    assert session.session_id == sid and session.snapshot is snap


@pytest.mark.parametrize("cell, fragment", [
    ("/model temperature=hot", "temperature must be a number"),
    ("/model temperature=3", "between 0 and 2"),
    ("/model temperature=-0.1", "between 0 and 2"),
    ("/model reasoning_effort=extreme", "reasoning_effort must be one of"),
    ("/model verbosity=loud", "verbosity must be one of"),
    ("/model base_url=ftp://x", "base_url must start with http"),
    ("/model timeout=0", "timeout must be a number of seconds above 0"),
    ("/model max_retries=-1", "max_retries"),
    ("/model colour=blue", "unknown model setting 'colour'"),
    ("/model a b", "one model name"),
])
def test_model_bad_values(session, cell, fragment):
    before = session.model_config
    line = error_line(session, cell)
    assert line.startswith("Error: ") and fragment in line
    assert session.model_config == before


@pytest.mark.parametrize("key", ["api_key", "API_KEY", "openai_api_key", "token", "key"])
def test_model_refuses_api_keys_and_never_journals_them(session, key):
    secret = "sk-SECRET-1234567890abcdef"
    line = error_line(session, f"/model gpt-x {key}={secret}")
    assert "OPENAI_API_KEY" in line and secret not in line
    assert session.model_config.model != "gpt-x"
    run_command(session, "/model")
    raw = session.journal.path.read_text()
    assert secret not in raw
    assert all(secret not in json.dumps(r) for r in session.command_history)
    assert any(r.get("command", "").startswith("/model gpt-x") for r in read_journal(
        session.journal.path))


# -- /new, /reload_persona -----------------------------------------------------------------

def test_new_session(env, session):
    run_command(session, "/reload_skills")
    run_command(session, "/model other temperature=1")
    run_command(session, "/agent reviewer")
    session.add_message({"role": "user", "content": "old"})
    old_id = session.session_id
    env.write_skill(env.ws_skills, "fresh", "summary: new on disk")
    notice = run_command(session, "/new")
    assert isinstance(notice, Notice)
    assert session.session_id != old_id
    assert session.snapshot.version == 1 and session.snapshot.get("fresh") is not None
    assert session.conversation == [] and session.reload_count == 0
    assert session.active_agent == "default"
    assert session.model_config.model != "other"
    assert session.session_id[:12] in render.text(notice)
    assert "version 1" in render.text(notice)


def test_reload_persona_rereads_edited_files(env):
    persona = env.workspace / "persona"
    persona.mkdir()
    (persona / "SOUL.md").write_text("Soul version one.")
    from lily_kernel.settings import workspace_trust
    workspace_trust.trust(env.workspace, env.session_env())  # a workspace's persona/ needs it
    session = env.session()
    assert "Soul version one." in session.persona.system_text()
    (persona / "SOUL.md").write_text("Soul version two.")
    assert "Soul version one." in session.persona.system_text()  # not re-read implicitly
    notice = run_command(session, "/reload_persona")
    assert "SOUL.md" in render.text(notice)
    assert "Soul version two." in session.persona.system_text()
    assert "Soul version one." not in session.persona.system_text()


@pytest.mark.parametrize("cell", ["/reload_skills now", "/new please", "/reload_persona x"])
def test_commands_without_arguments_refuse_them(session, cell):
    assert "takes no arguments" in error_line(session, cell)


def test_confirm_and_cancel_with_nothing_pending(session):
    assert error_line(session, "/confirm") == "Error: nothing is waiting for confirmation."
    assert error_line(session, "/cancel") == "Error: nothing is waiting for confirmation."


def test_command_history_records_every_command(session):
    run_command(session, "/skills")
    with pytest.raises(CommandError):
        run_command(session, "/nope")
    hist = [(h["command"], h["ok"]) for h in session.command_history]
    assert hist == [("/skills", True), ("/nope", False)]


def test_every_builtin_result_renders(session):
    for cell in ("/skills", "/skills --all", "/help", "/help alpha", "/agent", "/model",
                 "/skill alpha x", "/todos", "/reload_skills", "/reload_persona"):
        result = skill_request(session, cell) if cell.startswith("/skill ") else \
            run_command(session, cell)
        assert render.text(result).strip() and render.markdown(result).strip()
    assert isinstance(run_command(session, "/skills"), SkillTable)


def test_each_command_is_logged_at_debug_level_on_the_lily_kernel_logger(session, caplog):
    """Diagnostics go through `logging` (docs/architecture.md#logging), not prints: a command
    leaves one debug record on a child of the ``lily_kernel`` logger, nothing above debug."""
    with caplog.at_level("DEBUG", logger="lily_kernel"):
        run_command(session, "/help")
    records = [r for r in caplog.records if r.name.startswith("lily_kernel")]
    assert [(r.name, r.levelname, r.getMessage()) for r in records] == [
        ("lily_kernel.commands.router", "DEBUG", "command /help")]


def test_an_alias_of_a_skill_excluded_by_an_error_says_which_and_why(env):
    """Issue 34 §6: /profile of a skill whose YAML failed said only "unknown command"."""
    (env.ws_skills / "profiler").mkdir(parents=True)
    (env.ws_skills / "profiler" / "SKILL.md").write_text(
        "---\nname: profiler\ndescription: d\ncommand: profile\nsummary: [unclosed\n---\nBody\n")
    session = env.session()
    assert session.snapshot.exclusion("profiler") is not None
    with pytest.raises(CommandError) as info:
        run_command(session, "/profile")
    line = info.value.line()
    assert "/profile is the command of skill 'profiler', which is excluded:" in line, line
    assert "/reload_skills" in line
    with pytest.raises(CommandError) as other:
        run_command(session, "/nothing_here")
    assert "unknown command /nothing_here" in other.value.line()
