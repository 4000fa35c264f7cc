"""The session's model configuration: defaults < lily.toml [model] < environment < /model.

Precedence is checked on the session and on what actually reaches a
ScriptedServer on 127.0.0.1 (the request's ``model`` and ``temperature``). Bad
values are refused with a message naming the setting; API keys are refused by
``/model`` and ``lily.toml`` and never reach the journal.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import run_command

from lily_kernel.agent import loop
from lily_kernel.commands import render
from lily_kernel.errors import AgentError, CommandError, ConfigError
from lily_kernel.session import journal
from lily_kernel.session.session import Session
from lily_kernel.settings import workspace_trust
from lily_kernel.settings.model_settings import DEFAULT_MODEL, DEFAULT_TEMPERATURE, ModelConfig
from lily_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.usefixtures("no_machine_model")

SECRET = "sk-lily-config-SECRET-55aa"


def make_session(workspace: Path, toml: str | None = None, journal: bool = False,
                 trusted: bool = False, **env: str) -> Session:
    if toml is not None:
        (workspace / "lily.toml").write_text(toml, encoding="utf-8")
    full = {"SKILLS_WORKSPACE_DIR": str(workspace / "skills"),
            "SKILLS_USER_DIR": str(workspace.parent / "user_skills"),
            "HOME": str(workspace.parent / "home"), **env}
    if trusted:  # docs/trust-boundary.md#workspace-trust: as /trust records it
        workspace_trust.trust(workspace, full)
    return Session(workspace=workspace, env=full, journal=journal)


# -- precedence -------------------------------------------------------------------------

def test_defaults(workspace):
    config = make_session(workspace).model_config
    assert config == ModelConfig()
    assert (config.model, config.temperature, config.base_url, config.timeout,
            config.max_retries) == (DEFAULT_MODEL, DEFAULT_TEMPERATURE, None, 60.0, 2)


@pytest.mark.parametrize("trusted", [True, False])
def test_lily_toml_over_defaults(workspace, trusted):
    config = make_session(workspace, "[model]\nmodel = 'file-model'\ntemperature = 0.3\n"
                                     "reasoning_effort = 'low'\ntimeout = 7\n"
                                     "base_url = 'http://127.0.0.1:1/v1'\n",
                          trusted=trusted).model_config
    # An untrusted workspace's endpoint is withheld (it would receive OPENAI_API_KEY).
    assert (config.model, config.temperature, config.reasoning_effort, config.timeout,
            config.base_url, config.max_retries) == \
        ("file-model", 0.3, "low", 7.0, "http://127.0.0.1:1/v1" if trusted else None, 2)


def test_environment_over_lily_toml(workspace):
    config = make_session(workspace, "[model]\nmodel = 'file-model'\ntemperature = 0.3\n"
                                     "reasoning_effort = 'low'\nbase_url = 'http://127.0.0.1:1/v1'\n",
                          LILY_MODEL="env-model", LILY_TEMPERATURE="0.9",
                          OPENAI_BASE_URL="http://127.0.0.1:2/v1", LILY_MAX_RETRIES="0",
                          LILY_TIMEOUT="3").model_config
    assert (config.model, config.temperature, config.reasoning_effort, config.base_url,
            config.max_retries, config.timeout) == \
        ("env-model", 0.9, "low", "http://127.0.0.1:2/v1", 0, 3.0)


def test_empty_environment_variable_does_not_override(workspace):
    config = make_session(workspace, "[model]\nmodel = 'file-model'\n", LILY_MODEL="").model_config
    assert config.model == "file-model"


def test_model_command_over_environment_and_what_the_endpoint_sees(workspace):
    with ScriptedServer() as server:
        session = make_session(workspace, "[model]\nmodel = 'file-model'\ntemperature = 0.3\n"
                                          "reasoning_effort = 'low'\n",
                               LILY_MODEL="env-model", OPENAI_BASE_URL=server.url,
                               LILY_MAX_RETRIES="0")
        server.add("a", "b")
        loop.run(session, "q1")
        run_command(session, "/model cmd-model temperature=1.1")
        loop.run(session, "q2")
        first, second = server.chat_requests()
        url = server.url
    assert (first["model"], first["temperature"], first["reasoning_effort"]) == \
        ("env-model", 0.3, "low")
    assert (second["model"], second["temperature"], second["reasoning_effort"]) == \
        ("cmd-model", 1.1, "low")
    assert session.model_config.base_url == url  # untouched by /model


def test_model_command_changes_only_what_it_names(workspace):
    session = make_session(workspace, LILY_TEMPERATURE="0.2", LILY_TIMEOUT="9")
    before = session.model_config
    run_command(session, "/model verbosity=high")
    after = session.model_config
    assert after.verbosity == "high"
    assert {k: v for k, v in after.as_dict().items() if k != "verbosity"} == \
        {k: v for k, v in before.as_dict().items() if k != "verbosity"}
    run_command(session, "/model temperature=none")
    assert session.model_config.temperature is None  # not sent: the server's default
    run_command(session, "/model temperature=default")
    assert session.model_config.temperature == DEFAULT_TEMPERATURE


def test_new_session_resets_model_command_changes(workspace):
    session = make_session(workspace, "[model]\nmodel = 'file-model'\n")
    run_command(session, "/model other")
    assert session.model_config.model == "other"
    run_command(session, "/new")
    assert session.model_config.model == "file-model"


# -- bad values -------------------------------------------------------------------------

BAD = [
    ("temperature", "abc"), ("temperature", "-0.1"), ("temperature", "2.5"), ("temperature", "nan"),
    ("timeout", "0"), ("timeout", "-1"), ("timeout", "soon"), ("timeout", "nan"), ("timeout", "inf"),
    ("max_retries", "-1"), ("max_retries", "1.5"), ("max_retries", "many"), ("max_retries", ""),
    ("reasoning_effort", "extreme"), ("verbosity", "loud"),
    ("base_url", "ftp://example.invalid"), ("base_url", "127.0.0.1:8000"),
    ("model", ""),
]


@pytest.mark.parametrize("key, raw", BAD)
def test_bad_values_are_refused_naming_the_setting(key, raw):
    with pytest.raises(ConfigError) as info:
        ModelConfig().changed(**{key: raw})
    assert key in str(info.value)


@pytest.mark.parametrize("key, raw", [b for b in BAD if b[1] and " " not in b[1]])
def test_model_command_refuses_bad_values(workspace, key, raw):
    session = make_session(workspace)
    before = session.model_config
    with pytest.raises(CommandError) as info:
        run_command(session, f"/model {key}={raw}")
    assert key in str(info.value) and "\n" not in str(info.value)
    assert session.model_config == before


def test_unknown_setting_is_refused():
    with pytest.raises(ConfigError, match="unknown model setting 'temprature'"):
        ModelConfig().changed(temprature="0.5")


@pytest.mark.parametrize("var, raw, setting", [("LILY_TEMPERATURE", "hot", "temperature"),
                                               ("LILY_TIMEOUT", "-3", "timeout"),
                                               ("LILY_MAX_RETRIES", "x", "max_retries"),
                                               ("LILY_REASONING_EFFORT", "max", "reasoning_effort"),
                                               ("OPENAI_BASE_URL", "localhost", "base_url")])
def test_bad_environment_value_fails_requests_naming_the_setting(workspace, var, raw, setting):
    session = make_session(workspace, **{var: raw})
    assert session.config_error and setting in session.config_error
    with pytest.raises(AgentError) as info:
        loop.run(session, "q")
    assert setting in str(info.value)


@pytest.mark.parametrize("toml, setting", [("[model]\ntemperature = 5\n", "temperature"),
                                           ("[model]\ntemperature = true\n", "temperature"),
                                           ("[model]\nverbosity = 'shouty'\n", "verbosity"),
                                           ("[model]\ncolour = 'red'\n", "colour")])
def test_bad_lily_toml_values(workspace, toml, setting):
    session = make_session(workspace, toml)
    assert session.config_error and setting in session.config_error
    with pytest.raises(AgentError, match=setting):
        loop.run(session, "q")


@pytest.mark.parametrize("toml, table", [("model = 'x'\n", "[model]"), ("tools = 3\n", "[tools]")])
def test_a_table_that_is_not_a_table_names_the_file(workspace, toml, table):
    session = make_session(workspace, toml)
    assert str(workspace / "lily.toml") in session.config_error and table in session.config_error


# -- API keys ---------------------------------------------------------------------------

@pytest.mark.parametrize("token", [f"api_key={SECRET}", f"key={SECRET}", f"token={SECRET}",
                                   f"OPENAI_API_KEY={SECRET}", f"gpt-x API_KEY={SECRET}"])
def test_model_command_refuses_api_keys_and_never_journals_them(workspace, token):
    session = make_session(workspace, journal=True)
    before = session.model_config
    with pytest.raises(CommandError) as info:
        run_command(session, f"/model {token}")
    assert "OPENAI_API_KEY" in str(info.value)
    assert session.model_config == before
    assert SECRET not in session.journal.path.read_text(encoding="utf-8")
    assert SECRET not in str(session.state())
    commands = [r for r in journal.read(session.journal.path) if r.get("event") == "command"]
    assert commands and not commands[-1]["ok"]


def test_lily_toml_refuses_api_keys(workspace):
    session = make_session(workspace, f"[model]\napi_key = '{SECRET}'\n", journal=True)
    assert "OPENAI_API_KEY" in session.config_error
    with pytest.raises(AgentError, match="OPENAI_API_KEY"):
        loop.run(session, "q")
    assert SECRET not in session.journal.path.read_text(encoding="utf-8")
    assert SECRET not in str(session.state())
    assert SECRET not in session.config_error


def test_config_never_holds_the_key(workspace):
    session = make_session(workspace, OPENAI_API_KEY=SECRET, journal=True)
    assert SECRET not in str(session.model_config.as_dict())
    run_command(session, "/model other-model temperature=0.5")
    assert SECRET not in session.journal.path.read_text(encoding="utf-8")


# -- set_model from Python: numbers and None, as a notebook passes them -----------------

def test_set_model_takes_numbers_from_python(workspace):
    session = make_session(workspace)
    config = session.set_model(timeout=20, temperature=0.5, max_retries=0)
    assert (config.timeout, config.temperature, config.max_retries) == (20.0, 0.5, 0)
    assert session.set_model(temperature=None).temperature is None


@pytest.mark.parametrize("values, message", [
    ({"timeout": True}, "timeout must be text or a number, not True"),
    ({"max_retries": 1.5}, "max_retries must be a whole number"),
    ({"temperature": 3}, "temperature must be between 0 and 2"),
    ({"timeout": None}, "timeout cannot be None"),
    ({"model": ["a"]}, "model must be text or a number"),
])
def test_set_model_refuses_bad_python_values_clearly(workspace, values, message):
    session = make_session(workspace)
    before = session.model_config
    with pytest.raises(ConfigError, match=message):
        session.set_model(**values)
    assert session.model_config == before


# -- temperature: a low one by default, refused like stream_options (issue 30) -------------------

def test_a_low_temperature_is_sent_by_default_and_none_sends_none(workspace):
    with ScriptedServer() as server:
        session = make_session(workspace, OPENAI_BASE_URL=server.url, LILY_MAX_RETRIES="0")
        server.add("a", "b", "c")
        loop.run(session, "q1")
        run_command(session, "/model temperature=none")
        loop.run(session, "q2")
        run_command(session, "/model temperature=0")
        loop.run(session, "q3")
        first, second, third = server.chat_requests()
    assert first["temperature"] == DEFAULT_TEMPERATURE == 0.0
    assert "temperature" not in second  # the server's own default
    assert third["temperature"] == 0


def test_an_endpoint_that_refuses_temperature_is_asked_again_without_it_from_then_on(workspace):
    with ScriptedServer(["FIRST", "SECOND"], reject_params=["temperature"]) as server:
        session = make_session(workspace, OPENAI_BASE_URL=server.url, LILY_MAX_RETRIES="0")
        assert "temperature 0.0" in render.text(run_command(session, "/model"))
        assert loop.run(session, "q1").text == "FIRST"
        refused, retried = server.chat_requests()[:2]
        assert refused["temperature"] == 0 and "temperature" not in retried
        assert retried["stream_options"] == {"include_usage": True}  # only that one is dropped
        assert loop.run(session, "q2").text == "SECOND"
        assert len(server.chat_requests()) == 3  # remembered: asked once, without it
        assert "temperature" not in server.chat_requests()[-1]
        shown = render.text(run_command(session, "/model"))
    assert "temperature not sent (the endpoint refused it)" in shown
    assert "Sent with every request:" in shown


def test_model_shows_what_every_request_sends(workspace):
    with ScriptedServer() as server:
        session = make_session(workspace, "[model]\ntemperature = 0.7\nmax_tokens = 900\n",
                               OPENAI_BASE_URL=server.url)
        line = next(x for x in render.text(run_command(session, "/model")).splitlines()
                    if x.startswith("Sent with every request:"))
    assert "temperature 0.7" in line and "max_tokens 900" in line
    assert 'stream_options {"include_usage": true}' in line
    changed = render.text(run_command(session, "/model temperature=none"))
    assert "temperature not sent (the server's default)" in changed


# -- vision: true, false or auto (a model known to take images; docs/agent.md#images) ----

@pytest.mark.parametrize("model, sees", [
    ("gpt-4o-mini", True), ("gpt-4.1", True), ("gpt-5-nano", True), ("o4-mini", True),
    ("claude-sonnet-4-5", True), ("gemini-2.5-flash", True), ("openrouter/openai/gpt-4o", True),
    ("llava:13b", True), ("llama3.2-vision:11b", True), ("Qwen2.5-VL-7B-Instruct", True),
    ("pixtral-12b", True), ("moondream", True),
    ("o3-mini", False), ("gpt-4o-audio-preview", False), ("text-embedding-3-small", False),
    ("qwen2.5-coder:7b", False), ("llama3.1:8b", False), ("scripted-test-model", False),
    ("", False),
])
def test_known_models_see_images_unless_vision_says_otherwise(model, sees):
    config = ModelConfig(model=model)
    assert config.vision is None and config.sees_images() is sees
    assert config.changed(vision="true").sees_images() is True
    assert config.changed(vision="false").sees_images() is False
    assert config.changed(vision="true").changed(vision="auto").sees_images() is sees


def test_vision_is_true_false_or_auto_from_every_source(workspace):
    session = make_session(workspace, "[model]\nmodel = 'llama3.1:8b'\nvision = true\n")
    assert session.model_config.vision is True and session.model_config.sees_images()
    assert make_session(workspace, "[model]\nvision = 'auto'\n").model_config.vision is None
    assert make_session(workspace, None, LILY_VISION="0").model_config.sees_images() is False
    with pytest.raises(ConfigError, match="vision must be true, false or auto, not 'maybe'"):
        ModelConfig().changed(vision="maybe")
    shown = render.text(run_command(make_session(workspace, "[model]\nvision = 'auto'\n"),
                                    "/model scripted-x"))
    assert "auto (off: not a model known to take images)" in shown
    shown = render.text(run_command(make_session(workspace, "[model]\nvision = 'auto'\n"),
                                    "/model gpt-4o"))
    assert "auto (on: a model known to take images)" in shown
