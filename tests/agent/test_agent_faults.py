"""Endpoint and configuration faults through the real HTTP path (docs/agent.md).

Each fault ends the request with an :class:`AgentError` whose message is one
clear line, and the SAME session answers the next request correctly, with a
consistent conversation. The real ``openai`` client talks to a
:class:`ScriptedServer` on 127.0.0.1 with its own retries and timeouts (kept
small so the whole file runs in a few seconds).
"""
from __future__ import annotations

import socket
from pathlib import Path

import openai  # noqa: F401  imported up front so its import time is not counted as a timeout
import pytest
from agent_support import assert_consistent, run_command

from lily_kernel.agent import loop
from lily_kernel.errors import AgentError, CommandError
from lily_kernel.session.session import Session
from lily_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.usefixtures("no_machine_model")


def make_session(workspace: Path, base_url: str | None, **extra: str) -> Session:
    env = {"SKILLS_WORKSPACE_DIR": str(workspace / "skills"),
           "SKILLS_USER_DIR": str(workspace.parent / "user_skills"),
           "HOME": str(workspace.parent / "home"), "LILY_MAX_RETRIES": "0", "LILY_TIMEOUT": "5"}
    if base_url:
        env["OPENAI_BASE_URL"] = base_url
    env.update(extra)
    return Session(workspace=workspace, env=env, journal=False)


def fails(session: Session, text: str = "the question") -> str:
    """Run a request that must fail; return its one-line message."""
    with pytest.raises(AgentError) as info:
        loop.run(session, text)
    message = str(info.value)
    assert message and "\n" not in message and "Traceback" not in message, message
    assert info.value.line() == f"Error: {message}"
    return message


def answers_next(session: Session, server: ScriptedServer, text: str = "recovered") -> None:
    """The same session answers the next request, and what it sent is consistent."""
    server.add({"expect": {"contains": "next question"}, "content": text})
    before = len(server.chat_requests())
    reply = loop.run(session, "next question")
    assert reply.text == text
    assert len(server.chat_requests()) == before + 1
    sent = server.chat_requests()[-1]["messages"]
    assert sent[0]["role"] == "system" and sent[-1] == {"role": "user", "content": "next question"}
    assert_consistent(sent[1:])
    assert session.conversation[-2:] == [{"role": "user", "content": "next question"},
                                         {"role": "assistant", "content": text}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- endpoint faults --------------------------------------------------------------------

def test_timeout(workspace, server):
    session = make_session(workspace, server.url)
    session.set_model(timeout="0.5", max_retries="0")
    server.add({"delay": 2, "content": "too late"})
    message = fails(session)  # it gave up: waiting the 2 s would have answered "too late"
    assert "did not answer within 0.5 s" in message and server.url.rstrip("/") in message
    assert session.conversation == []
    session.set_model(timeout="5")
    answers_next(session, server)


def test_timeout_mid_stream(workspace, server):
    session = make_session(workspace, server.url)
    session.set_model(timeout="0.5", max_retries="0")
    server.add({"content": "one two three four", "chunks": 4, "chunk_delay": 1.5})
    message = fails(session)
    assert "0.5 s" in message
    assert session.conversation == []
    answers_next(session, server)


def test_429_after_retries(workspace, server):
    session = make_session(workspace, server.url, LILY_MAX_RETRIES="2")
    server.add(*[{"status": 429, "retry_after": 0.01}] * 3)
    message = fails(session)
    assert "HTTP 429" in message and "rate limit" in message and "2 retries" in message
    assert len(server.chat_requests()) == 3  # the first try and two retries
    assert session.conversation == []
    answers_next(session, server)


# What a LiteLLM proxy answers when every deployment of the model is cooling down.
LITELLM_429 = ('{"error": {"message": "No deployments available for selected model, Try again '
               'in 60 seconds. Passed model=gpt-4o-mini. pre-call-checks=False, '
               'cooldown_list=[\'c9d48646f355\']", "type": "None", "param": "None", '
               '"code": "429"}}')


def test_429_shows_the_servers_reason_in_one_line(workspace, server):
    session = make_session(workspace, server.url)  # LILY_MAX_RETRIES=0
    server.add({"status": 429, "raw": LITELLM_429})
    message = fails(session)
    assert message.startswith("the model endpoint is rate limiting (HTTP 429): No deployments "
                              "available for selected model, Try again in 60 seconds.")
    assert "cooldown_list" in message and message.endswith("; try again later")
    assert "retries" not in message and "retry" not in message.split(":")[0]
    assert len(server.chat_requests()) == 1
    answers_next(session, server)


def test_a_long_429_reason_is_bounded(workspace, server):
    session = make_session(workspace, server.url)
    server.add({"status": 429, "error_message": "cooling down " + "x" * 5000 + "\nsecond line"})
    message = fails(session)
    assert "cooling down" in message and "second line" not in message
    assert len(message) < 500


@pytest.mark.parametrize("retries, wording", [("0", "(HTTP 503): "),
                                              ("1", "(HTTP 503, still after 1 retry): ")])
def test_retry_wording_follows_max_retries(workspace, server, retries, wording):
    session = make_session(workspace, server.url, LILY_MAX_RETRIES=retries)
    server.add(*[{"status": 503, "retry_after": 0.01, "error_message": "down"}] * 2)
    assert wording + "down" in fails(session)


def test_timeout_wording_without_retries(workspace, server):
    session = make_session(workspace, server.url)
    session.set_model(timeout="0.3")
    server.add({"delay": 1, "content": "too late"})
    assert "within 0.3 s (tried once)" in fails(session)


@pytest.mark.parametrize("status", [500, 503])
def test_5xx_after_retries(workspace, server, status):
    session = make_session(workspace, server.url, LILY_MAX_RETRIES="1")
    server.add(*[{"status": status, "retry_after": 0.01,
                  "error_message": f"upstream broke ({status})"}] * 2)
    message = fails(session)
    assert f"HTTP {status}, still after 1 retry)" in message
    assert f"upstream broke ({status})" in message
    assert len(server.chat_requests()) == 2
    answers_next(session, server)


@pytest.mark.parametrize("status", [500, 503, 429])
def test_a_retry_that_gets_a_good_turn_succeeds(workspace, server, status):
    session = make_session(workspace, server.url, LILY_MAX_RETRIES="1")
    server.add({"status": status, "retry_after": 0.01}, "fine after a retry")
    reply = loop.run(session, "q")
    assert reply.text == "fine after a retry"
    assert len(server.chat_requests()) == 2
    assert [m["role"] for m in session.conversation] == ["user", "assistant"]


NO_FINISH = ('data: {"id": "x", "object": "chat.completion.chunk", "created": 0, '
             '"model": "m", "choices": [{"index": 0, "delta": {"content": "half"}, '
             '"finish_reason": null}]}\n\ndata: [DONE]\n\n')


@pytest.mark.parametrize(("raw", "reason"), [
    ("data: {not json\n\n", "malformed response"),
    ('data: {"error": {"message": "BROKEN-BODY"}}\n\n', "malformed response"),
    (NO_FINISH, "ended early"),  # a stream cut before its finish_reason
], ids=["bad-json", "error-object", "no-finish"])
def test_a_broken_body_fails_and_keeps_nothing(workspace, server, raw, reason):
    session = make_session(workspace, server.url)
    server.add({"raw": raw})
    message = fails(session)
    assert reason in message
    assert session.conversation == []
    answers_next(session, server)


def test_truncated_stream(workspace, server):
    session = make_session(workspace, server.url)
    shown: list[str] = []
    server.add({"content": "PARTIAL " * 40, "truncate": True})
    with pytest.raises(AgentError) as info:
        loop.run(session, "q", on_text=shown.append)
    message = str(info.value)
    assert "\n" not in message
    assert "ended early" in message and "cannot reach" not in message  # it was reached
    assert "PARTIAL" in "".join(shown)  # some text had streamed ...
    assert session.conversation == []  # ... and none of it is kept
    answers_next(session, server)


def test_invalid_tool_call_arguments(workspace, server):
    """Arguments that are not JSON even after the repairs are answered with an error the
    model can act on (the tool's real signature); the request goes on
    (docs/agent.md#loop-hygiene)."""
    session = make_session(workspace, server.url)
    server.add({"tool_calls": [{"name": "list", "arguments": '{"path": ', "id": "bad"}]},
               "fixed it")
    reply = loop.run(session, "the question")
    assert reply.text == "fixed it" and "list" not in reply.tools_used  # it never ran
    result = results_by_id(session.conversation)["bad"]
    assert result.startswith("Error: not run: invalid JSON arguments for tool 'list'")
    assert 'list(path: string = ".")' in result and '"name": "list"' in result
    call = next(m for m in session.conversation if m.get("tool_calls"))["tool_calls"][0]
    assert call["function"]["arguments"] == "{}"  # what is sent back is valid JSON
    assert_consistent(session.conversation)
    answers_next(session, server)


def test_invalid_tool_call_arguments_after_a_good_step(workspace, server):
    session = make_session(workspace, server.url)
    server.add({"tool_calls": [{"name": "list", "arguments": {}, "id": "good"}]},
               {"tool_calls": [{"name": "list", "arguments": "[1, 2]", "id": "bad"}]},
               "an answer")
    assert loop.run(session, "the question").text == "an answer"
    results = results_by_id(session.conversation)
    assert "not a JSON object" in results["bad"] and results["bad"].startswith("Error: not run")
    ids = [c["id"] for m in session.conversation for c in m.get("tool_calls") or []]
    assert ids == ["good", "bad"]
    assert_consistent(session.conversation)
    answers_next(session, server)


def results_by_id(messages: list[dict]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in messages if m.get("role") == "tool"}


def test_connection_refused_then_model_command(workspace, server):
    dead = f"http://127.0.0.1:{free_port()}/v1"
    session = make_session(workspace, dead)
    message = fails(session)
    assert "cannot reach the model endpoint" in message and dead in message
    assert "refused" in message.lower()
    run_command(session, f"/model base_url={server.url}")
    answers_next(session, server)


def test_no_key_and_no_endpoint(workspace, server):
    session = make_session(workspace, None)
    message = fails(session)
    assert "OPENAI_API_KEY" in message and "OPENAI_BASE_URL" in message
    assert server.requests == []
    run_command(session, f"/model base_url={server.url}")
    answers_next(session, server)


def test_broken_lily_toml_names_the_file(workspace, server):
    (workspace / "lily.toml").write_text("[model\nmodel = 'x'\n", encoding="utf-8")
    session = make_session(workspace, server.url)
    message = fails(session)
    assert str(workspace / "lily.toml") in message
    assert server.requests == []
    # commands still work in that session
    assert run_command(session, "/skills").snapshot is session.snapshot


def test_bad_lily_toml_model_value_names_the_setting(workspace, server):
    (workspace / "lily.toml").write_text("[model]\ntemperature = 7\n", encoding="utf-8")
    session = make_session(workspace, server.url)
    message = fails(session)
    assert "temperature" in message
    assert server.requests == []


def test_broken_lily_toml_fixed_then_new_session_answers(workspace, server):
    config = workspace / "lily.toml"
    config.write_text("[model\n", encoding="utf-8")
    session = make_session(workspace, server.url)
    fails(session)
    config.write_text("[model]\nmodel = 'fixed-model'\n", encoding="utf-8")
    run_command(session, "/new")
    answers_next(session, server)
    assert server.chat_requests()[-1]["model"] == "fixed-model"


def test_endpoint_error_after_a_tool_step_keeps_the_completed_step(workspace, server):
    session = make_session(workspace, server.url)
    server.add({"tool_calls": [{"name": "list", "arguments": {}, "id": "done-step"}]},
               {"status": 500})
    message = fails(session)
    assert "HTTP 500" in message
    assert [m["role"] for m in session.conversation] == ["user", "assistant", "tool"]
    assert_consistent(session.conversation)
    answers_next(session, server)


def test_http_400_is_reported_with_the_endpoint_message(workspace, server):
    session = make_session(workspace, server.url)
    server.add({"status": 400, "error_message": "context too long (BAD-REQUEST-MARK)"})
    message = fails(session)
    assert "HTTP 400" in message and "BAD-REQUEST-MARK" in message
    answers_next(session, server)


def test_model_command_with_a_bad_value_is_a_command_error(workspace, server):
    session = make_session(workspace, server.url)
    with pytest.raises(CommandError, match="temperature"):
        run_command(session, "/model temperature=hot")
    answers_next(session, server)
