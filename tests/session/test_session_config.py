"""How a session recovers from bad configuration, and where it reads the API key.

- A bad model setting from the environment blocks the agent until an explicit,
  valid /model replaces it.
- An unreadable lily.toml blocks the agent even after /model (its [tools]
  deny list would otherwise be silently lost: fail closed) until the file is
  fixed and /new starts a session that reads it again.
- A session given env= reads OPENAI_API_KEY from it, not from the process.
- An answer cut at the model's length limit says so.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import run_command

from lily_kernel.agent import loop
from lily_kernel.agent.model_client import NO_KEY
from lily_kernel.errors import AgentError
from lily_kernel.session.session import Session

pytestmark = pytest.mark.usefixtures("no_machine_model")






def session_for(ws: Path, **env: str) -> Session:
    (ws / "skills").mkdir(parents=True, exist_ok=True)
    (ws / "user").mkdir(exist_ok=True)
    base = {"SKILLS_WORKSPACE_DIR": str(ws / "skills"), "SKILLS_USER_DIR": str(ws / "user"),
            "LILY_MAX_RETRIES": "0", "LILY_TIMEOUT": "5"}
    return Session(workspace=ws, env={**base, **env}, journal=False)


def test_bad_model_setting_blocks_until_model_fixes_it(tmp_path, server):
    session = session_for(tmp_path, OPENAI_BASE_URL=server.url, LILY_TEMPERATURE="9")
    with pytest.raises(AgentError, match="temperature"):
        loop.run(session, "hi")
    assert server.chat_requests() == []
    run_command(session, "/model temperature=0.5")
    server.add({"content": "fine now"})
    assert loop.run(session, "hi").text == "fine now"


def test_broken_lily_toml_fails_closed_until_fixed_and_new(tmp_path, server):
    toml = tmp_path / "lily.toml"
    toml.write_text('[tools]\ndeny = ["write"\n')  # unterminated: the deny list is unreadable
    session = session_for(tmp_path, OPENAI_BASE_URL=server.url)
    run_command(session, "/model temperature=0.5")  # does not lift a file error
    with pytest.raises(AgentError, match="lily.toml"):
        loop.run(session, "hi")
    assert server.chat_requests() == []
    toml.write_text('[tools]\ndeny = ["write"]\n')
    run_command(session, "/new")
    assert "write" in session.policy.deny
    server.add({"content": "ok"})
    assert loop.run(session, "hi").text == "ok"
    offered = [t["function"]["name"] for t in server.chat_requests()[-1]["tools"]]
    assert "write" not in offered and "read" in offered


def test_session_env_key_is_the_one_sent(tmp_path, server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-process-key")
    session = session_for(tmp_path, OPENAI_BASE_URL=server.url, OPENAI_API_KEY="sk-session-key")
    server.add({"content": "ok"})
    loop.run(session, "hi")
    assert session.model_clients.get(session.model_config, session.environ).api_key == "sk-session-key"


def test_default_session_reads_the_live_process_key(tmp_path, server, monkeypatch):
    monkeypatch.setenv("SKILLS_WORKSPACE_DIR", str(tmp_path))
    (tmp_path / "user").mkdir()
    monkeypatch.setenv("SKILLS_USER_DIR", str(tmp_path / "user"))
    session = Session(workspace=tmp_path, journal=False)
    with pytest.raises(AgentError, match="OPENAI_API_KEY"):
        loop.run(session, "hi")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)  # as %env would, after the session began
    run_command(session, f"/model base_url={server.url} max_retries=0")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-set-later")
    server.add({"content": "ok"})
    loop.run(session, "hi")
    assert session.model_clients.get(session.model_config, session.environ).api_key == "sk-set-later"
    assert NO_KEY != "sk-set-later"


def test_answer_cut_at_length_limit_says_so(tmp_path, server):
    session = session_for(tmp_path, OPENAI_BASE_URL=server.url)
    server.add({"content": "The first half of", "finish_reason": "length"})
    reply = loop.run(session, "a long answer please")
    assert reply.text.startswith("The first half of")
    assert "length limit" in reply.text
    assert "length limit" in session.conversation[-1]["content"]
