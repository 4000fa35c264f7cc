"""docs/session.md#state: the session model, and two sessions that share no mutable state."""
from __future__ import annotations

import time

from agent_support import run_command, skill_request

from lily_kernel.session.journal import journal_path
from lily_kernel.session.journal import read as read_journal
from lily_kernel.session.session import Session


def test_session_fields(env):
    before = time.time()
    session = env.session()
    state = session.state()
    assert len(session.session_id) == 32
    assert before <= state["created_at"] <= time.time()
    assert state["active_agent"] == "default"
    assert state["snapshot_version"] == 1 and state["reload_count"] == 0
    assert state["conversation"] == [] and state["command_history"] == []
    assert set(state["model_config"]) >= {"model", "temperature", "reasoning_effort",
                                          "verbosity", "base_url"}


def test_model_from_environment(env):
    session = env.session(LILY_MODEL="local-llama", OPENAI_BASE_URL="http://127.0.0.1:9/v1",
                          OPENAI_API_KEY="sk-should-never-be-stored")
    assert session.model_config.model == "local-llama"
    assert session.model_config.base_url == "http://127.0.0.1:9/v1"
    assert "sk-should-never-be-stored" not in repr(session.state())
    assert "sk-should-never-be-stored" not in session.journal.path.read_text()


def test_two_sessions_share_no_mutable_state(env):
    env.write_skill(env.ws_skills, "alpha", "summary: a")
    a = env.session()
    b = env.session()

    assert a.session_id != b.session_id
    # distinct containers
    assert a.tools is not b.tools
    assert a.conversation is not b.conversation
    assert a.command_history is not b.command_history
    assert a.journal is not b.journal and a.journal.path != b.journal.path

    # tools registered in one are not in the other
    @a.tools.register(name="only_in_a")
    def only_in_a() -> str:
        return "a"

    assert "only_in_a" in a.tools and "only_in_a" not in b.tools

    # snapshot: a reload in one leaves the other alone
    env.write_skill(env.ws_skills, "beta", "summary: b")
    run_command(a, "/reload_skills")
    assert a.snapshot.version == 2 and a.snapshot.get("beta") is not None
    assert b.snapshot.version == 1 and b.snapshot.get("beta") is None
    assert b.reload_count == 0

    # conversation
    a.add_message({"role": "user", "content": "to a"})
    assert b.conversation == []

    # model config
    run_command(a, "/model model-a temperature=1.5")
    assert b.model_config.model != "model-a" and b.model_config.temperature == 0.0

    # agent
    run_command(a, "/agent reviewer")
    assert a.active_agent == "reviewer" and b.active_agent == "default"
    assert b.persona.agent == "default"

    # command history
    assert len(a.command_history) == 3 and b.command_history == []
    run_command(b, "/skills")
    assert [h["command"] for h in b.command_history] == ["/skills"]
    assert len(a.command_history) == 3

    # journal files
    a_events = [r["event"] for r in read_journal(a.journal.path)]
    b_events = [r["event"] for r in read_journal(b.journal.path)]
    assert "skills_reloaded" in a_events and "skills_reloaded" not in b_events
    assert "message" in a_events and "message" not in b_events
    assert {r["session_id"] for r in read_journal(b.journal.path)} == {b.session_id}


def test_two_sessions_over_different_workspaces_see_their_own_skills(tmp_path):
    sessions = []
    for name in ("one", "two"):
        ws = tmp_path / name
        (ws / "skills" / f"only_{name}").mkdir(parents=True)
        (ws / "skills" / f"only_{name}" / "SKILL.md").write_text(f"---\nsummary: {name}\n---\n")
        (tmp_path / "empty").mkdir(exist_ok=True)
        env = {"SKILLS_WORKSPACE_DIR": str(ws / "skills"),
               "SKILLS_USER_DIR": str(tmp_path / "empty"),
               "SKILLS_BUNDLED_DIR": str(tmp_path / "empty"), "HOME": str(tmp_path)}
        sessions.append(Session(workspace=ws, env=env, journal=False))
    assert sessions[0].snapshot.names() == ["only_one"]
    assert sessions[1].snapshot.names() == ["only_two"]
    # each session's file tools are confined to its own workspace
    (tmp_path / "one" / "f.txt").write_text("in one")
    assert sessions[0].tools.get("read")("f.txt") == "in one"
    assert "cannot read" in _tool_error(sessions[1].tools.get("read"), "f.txt")


def _tool_error(tool, *args) -> str:
    from lily_kernel.errors import ToolError
    try:
        tool(*args)
    except ToolError as exc:
        return str(exc)
    raise AssertionError("no ToolError")


def test_session_does_not_touch_the_real_home(env, monkeypatch):
    monkeypatch.setenv("HOME", str(env.base / "home"))
    before = sorted((env.base / "home").rglob("*"))  # the fixture's empty skill folders
    env.session()
    # only the journal key, in the user's data folder (docs/logs.md#authenticity)
    data = env.base / "home" / ".local" / "share" / "lily"
    assert sorted((env.base / "home").rglob("*")) == sorted(
        [*before, data.parent.parent, data.parent, data, data / "journal.key"])


def test_journal_records_the_lifecycle(env):
    session = env.session()
    run_command(session, "/reload_skills")
    run_command(session, "/agent reviewer")
    run_command(session, "/model m2")
    session.add_message({"role": "user", "content": "hello"})
    first_id = session.session_id
    run_command(session, "/new")
    events = [(r["event"], r["session_id"]) for r in read_journal(session.journal.path)]
    # /new starts a fresh journal file named after the new session
    old = [e for e in read_journal(journal_path(env.workspace, f"session-{first_id[:12]}"))]
    names = [r["event"] for r in old]
    assert names[0] == "session_created"
    assert "skills_reloaded" in names and "agent_switched" in names and "model_changed" in names
    assert "message" in names and names[-1] == "session_ended"
    assert events[0] == ("session_created", session.session_id)
    assert session.journal.path.parent == env.workspace / ".lily" / "journal"


def test_labelled_session_journal_name(env):
    session = Session(workspace=env.workspace, env=env.session_env(), host=env.host,
                      label="My Notebook.ipynb")
    assert session.journal.path == journal_path(env.workspace, "My Notebook.ipynb")
    assert session.journal.path.name.startswith("My_Notebook.ipynb-")
    assert session.journal.path.is_file()


def test_journal_disabled(env):
    session = env.session(journal=False)
    run_command(session, "/skills")
    assert session.journal.path is None
    assert not (env.workspace / ".lily").exists()


def test_a_command_line_is_redacted_once_where_it_is_stored(env, monkeypatch):
    """docs/limits-and-secrets.md#secrets: `Session.record_command` redacts the line once;
    the command history and the journal keep that text, without the live key, the URL's
    password or a secret-looking value, and the journal does not redact it again."""
    from lily_kernel import redaction
    key = "sk-live-record-0123456789"
    env.write_skill(env.ws_skills, "plan_compiler")  # prompt_rewrite: a request, no model here
    session = env.session(OPENAI_API_KEY=key)
    calls: list[object] = []
    real = redaction.redact

    def counted(text: object, *args: object, **kwargs: object) -> str:
        calls.append(text)
        return real(text, *args, **kwargs)  # type: ignore[arg-type]
    monkeypatch.setattr(redaction, "redact", counted)
    skill_request(session, f"/skill plan_compiler ship {key} via http://me:pw-0123@h/ token=t0k3n")
    assert len(calls) == 1, calls
    stored = session.command_history[-1]["command"]
    assert stored == "/skill plan_compiler ship *** via http://***@h/ token=***"
    journaled = [r for r in read_journal(session.journal.path) if r.get("event") == "command"]
    assert journaled[-1]["command"] == stored
    for secret in (key, "pw-0123", "t0k3n"):
        assert secret not in session.journal.path.read_text()
