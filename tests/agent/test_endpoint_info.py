"""The endpoint's own word on its models and windows (docs/agent.md#the-endpoints-models),
against the scripted server speaking as vLLM, llama.cpp and a plain OpenAI-compatible
endpoint: /model lists the models and marks the one in use, Tab completes them, and the
window comes from the endpoint, then the table, then a guess that says so."""
from __future__ import annotations

import socket

from lily_kernel.agent import endpoint_info
from lily_kernel.commands import completion, render, router
from lily_kernel.session.session import Session
from lily_kernel.testing.server import ScriptedServer


def session_on(tmp_path, url: str, model: str = "local-a") -> Session:
    return Session(tmp_path, env={"HOME": str(tmp_path), "OPENAI_BASE_URL": url,
                                  "LILY_MODEL": model}, journal=False)


def model_text(session: Session) -> str:
    return render.text(router.execute(session, router.parse("/model")))


def test_a_vllm_listing_names_the_models_and_the_window(tmp_path):
    with ScriptedServer(model="local-a", models=["local-b"], max_model_len=32_768) as server:
        session = session_on(tmp_path, server.url)
        shown = model_text(session)
        assert "Models at the endpoint (/model NAME switches): local-a (in use), local-b." in shown
        assert "context window 32,768 (stated by the endpoint)" in shown
        assert session.model_config.context_window == 32_768
        done = completion.complete(session, "/model loc", 10)
        assert done.matches[:2] == ("local-a", "local-b")
        asked = [r["path"] for r in server.requests]
        model_text(session)
        assert [r["path"] for r in server.requests] == asked  # asked once a session


def test_llama_cpp_props_give_the_window(tmp_path):
    props = {"default_generation_settings": {"n_ctx": 4096}}
    with ScriptedServer(model="qwen", props=props) as server:
        session = session_on(tmp_path, server.url, "qwen")
        assert "context window 4,096 (stated by the endpoint)" in model_text(session)


def test_a_window_the_user_set_wins_and_an_unknown_one_is_a_guess_that_says_so(tmp_path):
    with ScriptedServer(model="mystery", props={"n_ctx": 2048}) as server:
        session = session_on(tmp_path, server.url, "mystery")
        session.set_model(context_window="16000")
        assert "context window 16,000 (set)" in model_text(session)
    with ScriptedServer(model="mystery") as server:
        shown = model_text(session_on(tmp_path, server.url, "mystery"))
        assert "context window 8,192 (guessed: the endpoint does not say" in shown


def test_an_endpoint_that_is_not_there_costs_one_refused_connection(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    info = endpoint_info.probe(f"http://127.0.0.1:{port}/v1", None, "m")
    assert info == endpoint_info.EndpointInfo()
