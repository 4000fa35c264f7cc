"""lily_kernel.testing.server.ScriptedServer over real HTTP on 127.0.0.1, with the real openai client."""
from __future__ import annotations

import http.client
import json
import threading
import time
from urllib.parse import urlsplit

import openai
import pytest

from lily_kernel.testing import standin
from lily_kernel.testing.server import ScriptedServer
from lily_kernel.testing.standin import demo_responder
from lily_kernel.tools.builtin_tools import register_builtins
from lily_kernel.tools.tool_registry import ToolRegistry

USER = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": name, "description": name,
                                            "parameters": {"type": "object", "properties": {}}}}
         for name in ("load_skill", "scan_todos", "lookup")]


_BASE_CLIENT: list[openai.OpenAI] = []


def client(server: ScriptedServer, **kw) -> openai.OpenAI:
    """An openai client for ``server`` (no retries, 5 s timeout unless given).

    Equivalent to ``openai.OpenAI(base_url=server.url, api_key="test", ...)``;
    derived from one shared client with ``with_options`` because building a
    client (its TLS context) costs tens of milliseconds.
    """
    if not _BASE_CLIENT:
        _BASE_CLIENT.append(openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="test"))
    kw.setdefault("max_retries", 0)
    kw.setdefault("timeout", 5.0)
    return _BASE_CLIENT[0].with_options(base_url=server.url, **kw)


def raw_request(server: ScriptedServer, method: str, path: str, body=None, headers=None):
    """(status, headers, body bytes) of one request made with http.client."""
    parts = urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    try:
        data = None if body is None else (body if isinstance(body, bytes)
                                          else json.dumps(body).encode())
        conn.request(method, path, body=data,
                     headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def chat(c: openai.OpenAI, **kw):
    kw.setdefault("messages", USER)
    return c.chat.completions.create(model="test-model", **kw)


# -- plain answers -------------------------------------------------------------

def test_plain_answer_non_streaming():
    with ScriptedServer([{"content": "Hello, Lily."}]) as server:
        resp = chat(client(server))
    assert resp.object == "chat.completion"
    assert resp.model == "test-model"
    choice = resp.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "Hello, Lily."
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens > 0


def test_plain_answer_streaming_one_chunk_per_word_by_default():
    text = "The quick brown fox jumps."
    with ScriptedServer([{"content": text}, {"content": text, "chunks": 2}]) as server:
        c = client(server)
        chunks = list(chat(c, stream=True))
        pieces = [ch.choices[0].delta.content for ch in chunks
                  if ch.choices and ch.choices[0].delta.content]
        two = [ch.choices[0].delta.content for ch in chat(c, stream=True)
               if ch.choices and ch.choices[0].delta.content]
    assert chunks[0].object == "chat.completion.chunk"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(pieces) == text and len(pieces) == 5
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(ch.usage is None for ch in chunks)  # no include_usage: no usage chunk
    assert "".join(two) == text and len(two) == 2


def test_streaming_usage_chunk_when_requested():
    usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    with ScriptedServer([{"content": "ok", "usage": usage}]) as server:
        chunks = list(chat(client(server), stream=True,
                           stream_options={"include_usage": True}))
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage.model_dump(exclude_none=True) == usage


# -- tool calls ----------------------------------------------------------------

def test_tool_calls_non_streaming():
    script = [{"tool_calls": [{"name": "load_skill", "arguments": {"name": "plan_compiler"}},
                              {"name": "lookup", "arguments": "{not json", "id": "mine"}]},
              {"tool_calls": [{"name": "lookup"}], "content": "Looking.",
               "finish_reason": "length"}]
    with ScriptedServer(script) as server:
        c = client(server)
        first = chat(c, tools=TOOLS)
        second = chat(c, tools=TOOLS)
    msg = first.choices[0].message
    assert msg.content is None and first.choices[0].finish_reason == "tool_calls"
    a, b = msg.tool_calls
    assert (a.id, a.type, a.function.name) == ("call_1", "function", "load_skill")
    assert json.loads(a.function.arguments) == {"name": "plan_compiler"}
    assert (b.id, b.function.name, b.function.arguments) == ("mine", "lookup", "{not json")
    msg2 = second.choices[0].message
    assert msg2.content == "Looking." and second.choices[0].finish_reason == "length"
    assert msg2.tool_calls[0].id == "call_3" and msg2.tool_calls[0].function.arguments == "{}"


def test_tool_calls_streaming_arguments_arrive_in_pieces():
    args = {"name": "plan_compiler", "options": {"depth": 2, "tags": ["a", "b"]}}
    script = [{"content": "Let me check.",
               "tool_calls": [{"name": "load_skill", "arguments": args},
                              {"name": "scan_todos", "arguments": {"input": "."}}]}]
    with ScriptedServer(script) as server:
        chunks = list(chat(client(server), stream=True, tools=TOOLS))
    content, calls, pieces = "", {}, {}
    for ch in chunks:
        delta = ch.choices[0].delta
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            if tc.id is not None:  # the opening delta of a call
                assert tc.type == "function" and tc.function.arguments == ""
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
            else:
                calls[tc.index]["arguments"] += tc.function.arguments
                pieces[tc.index] = pieces.get(tc.index, 0) + 1
    assert content == "Let me check."
    assert [calls[i]["name"] for i in sorted(calls)] == ["load_skill", "scan_todos"]
    assert json.loads(calls[0]["arguments"]) == args
    assert json.loads(calls[1]["arguments"]) == {"input": "."}
    assert all(2 <= n <= 3 for n in pieces.values())
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_openai_stream_helper_accumulates_the_stream():
    with ScriptedServer([{"content": "Hi there.",
                          "tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]}]) as server:
        with client(server).chat.completions.stream(model="m", messages=USER,
                                                    tools=TOOLS) as stream:
            final = stream.get_final_completion()
    msg = final.choices[0].message
    assert msg.content == "Hi there."
    assert msg.tool_calls[0].function.name == "lookup"
    assert json.loads(msg.tool_calls[0].function.arguments) == {"q": "x"}


# -- recording -----------------------------------------------------------------

def test_requests_recorded_in_order_with_authorization_redacted():
    with ScriptedServer(["one", "two"]) as server:
        c = client(server, api_key="sk-secret")
        chat(c, messages=[{"role": "user", "content": "first"}])
        c.models.list()
        chat(c, messages=[{"role": "user", "content": "second"}], stream=True).close()
    assert [(r["method"], r["path"]) for r in server.requests] == [
        ("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
        ("POST", "/v1/chat/completions")]
    assert [m["messages"][0]["content"] for m in server.chat_requests()] == ["first", "second"]
    assert server.chat_requests()[1]["stream"] is True
    assert server.requests[1]["json"] is None
    for record in server.requests:
        auth = {k: v for k, v in record["headers"].items() if k.lower() == "authorization"}
        assert list(auth.values()) == ["<redacted>"]
    assert "sk-secret" not in json.dumps(server.requests)


def test_add_remaining_and_bad_turns():
    server = ScriptedServer()
    assert server.remaining() == 0
    server.add({"content": "a"}, "b")
    assert server.remaining() == 2
    with pytest.raises(ValueError, match="conent"):
        server.add({"conent": "typo"})
    with pytest.raises(ValueError, match="tool_calls"):
        ScriptedServer([{"tool_calls": [{"arguments": {}}]}])
    with pytest.raises(RuntimeError, match="start"):
        _ = server.url
    with server:
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/v1")
        assert chat(client(server)).choices[0].message.content == "a"
        assert server.remaining() == 1
    with pytest.raises(TypeError):
        ScriptedServer(demo_responder).add("x")


def test_path_without_v1_prefix():
    with ScriptedServer(["ok"]) as server:
        status, _, body = raw_request(server, "POST", "/chat/completions",
                                      {"model": "m", "messages": USER})
    assert status == 200
    assert json.loads(body)["choices"][0]["message"]["content"] == "ok"


# -- errors, retries, broken responses -------------------------------------------

def test_status_500_then_success_with_one_retry():
    with ScriptedServer([{"status": 500}, {"content": "ok"}]) as server:
        resp = chat(client(server, max_retries=1))
    assert resp.choices[0].message.content == "ok"
    assert len(server.chat_requests()) == 2
    assert server.remaining() == 0


def test_status_429_with_retry_after():
    with ScriptedServer([{"status": 429, "retry_after": 0.8}, {"content": "ok"},
                         {"status": 429, "retry_after": 2, "error_message": "slow down"}]
                        ) as server:
        start = time.monotonic()
        resp = chat(client(server, max_retries=1))
        elapsed = time.monotonic() - start
        status, headers, body = raw_request(server, "POST", "/v1/chat/completions",
                                            {"model": "m", "messages": USER})
    assert resp.choices[0].message.content == "ok"
    assert elapsed >= 0.75  # the client waited the 0.8 s Retry-After (its own backoff is <= 0.5 s)
    assert server.requests[1]["headers"].get("x-stainless-retry-count") == "1"
    assert status == 429 and headers["Retry-After"] == "2"
    error = json.loads(body)["error"]
    assert error == {"message": "slow down", "type": "rate_limit_error", "param": None,
                     "code": "rate_limit_exceeded"}


def test_error_status_raises_the_matching_openai_error():
    with ScriptedServer([{"status": 503}, {"status": 401}]) as server:
        c = client(server)
        with pytest.raises(openai.InternalServerError) as err:
            chat(c, stream=True)
        with pytest.raises(openai.AuthenticationError):
            chat(c)
    assert err.value.status_code == 503


def test_raw_malformed_json_makes_the_client_raise():
    with ScriptedServer([{"raw": '{"id": "x", "choices": [tr'},
                         {"raw": 'data: {"broken\n\n'}]) as server:
        c = client(server)
        with pytest.raises(ValueError):
            chat(c)
        with pytest.raises(ValueError):
            list(chat(c, stream=True))


def test_raw_stream_payload_is_sent_verbatim():
    payload = ('data: {"id":"r","object":"chat.completion.chunk","created":0,"model":"m",'
               '"choices":[{"index":0,"delta":{"content":"raw!"},"finish_reason":"stop"}]}\n\n'
               'data: [DONE]\n\n')
    with ScriptedServer([{"raw": payload}]) as server:
        chunks = list(chat(client(server), stream=True))
    assert [ch.choices[0].delta.content for ch in chunks] == ["raw!"]


def test_truncated_stream_raises_before_finishing():
    with ScriptedServer([{"content": "one two three four five six", "truncate": True}]) as server:
        received = []
        with pytest.raises((openai.APIConnectionError, openai.APIError)):
            for ch in chat(client(server), stream=True):
                received.append(ch)
    assert received, "the first half of the stream arrives"
    assert all(ch.choices[0].finish_reason is None for ch in received)
    text = "".join(ch.choices[0].delta.content or "" for ch in received)
    assert text and text != "one two three four five six"


def test_truncated_non_streaming_body_raises():
    with ScriptedServer([{"content": "cut short", "truncate": True}]) as server:
        with pytest.raises(openai.APIConnectionError):
            chat(client(server))


def test_delay_longer_than_client_timeout():
    with ScriptedServer([{"content": "late", "delay": 3}]) as server:
        start = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            chat(client(server, timeout=0.3))
        assert time.monotonic() - start < 2
    assert time.monotonic() - start < 2.5  # stop() did not wait for the delay


def test_expect_match_and_mismatch():
    script = [{"expect": {"contains": "plan_compiler"}, "content": "followed"},
              {"expect": {"contains": "SKILL BODY"}, "content": "never sent"},
              {"content": "next"}]
    with ScriptedServer(script) as server:
        c = client(server)
        ok = chat(c, messages=[{"role": "user", "content": "go"},
                               {"role": "tool", "tool_call_id": "call_1",
                                "content": [{"type": "text", "text": "# plan_compiler"}]}])
        with pytest.raises(openai.BadRequestError) as err:
            chat(c, messages=[{"role": "user", "content": "something else"}])
        remaining = server.remaining()
        assert chat(c).choices[0].message.content == "next"
    assert ok.choices[0].message.content == "followed"
    message = err.value.body["message"] if isinstance(err.value.body, dict) else str(err.value)
    assert "'SKILL BODY'" in message and "'something else'" in message and "user" in message
    assert err.value.status_code == 400
    assert remaining == 1  # the mismatch used up its own turn, nothing more


def test_exhausted_script_is_a_500_with_a_count():
    with ScriptedServer(["only"]) as server:
        c = client(server)
        chat(c)
        with pytest.raises(openai.InternalServerError, match="script exhausted"):
            chat(c)
        status, _, body = raw_request(server, "POST", "/v1/chat/completions",
                                      {"model": "m", "messages": USER})
    assert status == 500
    assert json.loads(body)["error"]["message"] == \
        "scripted server: script exhausted (3 requests so far)"


def test_bad_request_bodies_do_not_consume_turns():
    with ScriptedServer(["kept"]) as server:
        assert raw_request(server, "POST", "/v1/chat/completions", b"{nope")[0] == 400
        assert raw_request(server, "POST", "/v1/chat/completions", {"model": "m"})[0] == 400
        assert server.remaining() == 1
        assert server.requests[0]["json"] is None


# -- responders ----------------------------------------------------------------

def test_callable_responder_gets_the_request():
    seen = []

    def responder(request):
        seen.append(request)
        if request["messages"][-1]["role"] == "tool":
            return {"content": f"tool said {request['messages'][-1]['content']}"}
        return {"tool_calls": [{"name": "lookup", "arguments": {"q": len(seen)}}]}

    with ScriptedServer(responder) as server:
        c = client(server)
        first = chat(c, tools=TOOLS)
        call = first.choices[0].message.tool_calls[0]
        messages = USER + [first.choices[0].message.model_dump(exclude_none=True),
                           {"role": "tool", "tool_call_id": call.id, "content": "42"}]
        second = chat(c, messages=messages, tools=TOOLS)
        assert server.remaining() == 0
    assert json.loads(call.function.arguments) == {"q": 1}
    assert second.choices[0].message.content == "tool said 42"
    assert seen[0]["tools"] == TOOLS and seen == server.chat_requests()


def test_responder_errors_become_500s():
    def broken(request):
        raise KeyError("oops")

    with ScriptedServer(broken) as server:
        with pytest.raises(openai.InternalServerError, match="KeyError"):
            chat(client(server))
    with ScriptedServer(lambda request: {"bogus": 1}) as server:
        with pytest.raises(openai.InternalServerError, match="bogus"):
            chat(client(server))


def test_demo_responder_rules():
    def demo_responder(request):  # every answer reports usage; the rules are the rest
        turn = standin.demo_responder(request)
        assert turn.pop("usage") is True
        return turn

    def req(messages, tools=("load_skill", "scan_todos")):
        return {"model": "m", "messages": messages,
                "tools": [{"type": "function", "function": {"name": t}} for t in tools]}

    plan = [{"role": "user", "content": "Please plan the migration"}]
    assert demo_responder(req(plan)) == {
        "tool_calls": [{"name": "load_skill", "arguments": {"name": "plan_compiler"}}]}
    # No load_skill tool: plain echo.
    echo = demo_responder(req(plan, tools=()))["content"]
    assert echo.startswith("[scripted model] You said: Please plan the migration.")
    assert "OPENAI_API_KEY" in echo and "OPENAI_BASE_URL" in echo
    assert len(demo_responder(req([{"role": "user", "content": "x" * 500}]))["content"]) < 400

    after = plan + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "load_skill", "arguments": '{"name": "plan_compiler"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "# plan_compiler skill ..."}]
    text = demo_responder(req(after))["content"]
    assert text.startswith("[scripted model] ")
    assert "plan_compiler" in text and "followed" in text
    assert "# Plan\n\n## Objective\nPlease plan the migration" in text

    todo = [{"role": "user", "content": "any TODO left?"}]
    assert demo_responder(req(todo)) == {
        "tool_calls": [{"name": "scan_todos", "arguments": {"input": "."}}]}
    table = ("**2 markers** under `.`:\n\n| file | line | marker | note |\n"
             "| --- | ---: | --- | --- |\n| `a.py` | 1 | TODO | x |\n| `b.py` | 9 | FIXME | y |")
    done = todo + [{"role": "assistant", "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "scan_todos",
                                                      "arguments": '{"input": "."}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": table}]
    assert demo_responder(req(done)) == {"content": "[scripted model] I found 2 markers."}


def test_demo_responder_end_to_end_with_the_real_scan_todos(tmp_path):
    (tmp_path / "a.py").write_text("x = 1  # TODO: tidy\n# FIXME later\n")
    (tmp_path / "b.md").write_text("- XXX check this\n")
    registry = ToolRegistry()
    register_builtins(registry, tmp_path)
    tools = [{"type": "function", "function": {"name": name, "parameters": params}}
             for name, params in (("load_skill", {"type": "object", "properties": {}}),
                                  ("scan_todos", dict(registry.get("scan_todos").parameters)))]
    messages: list = [{"role": "user", "content": "what todo items are there?"}]
    with ScriptedServer(demo_responder) as server:
        c = client(server)
        for _ in range(4):  # a minimal agent loop
            msg = chat(c, messages=messages, tools=tools).choices[0].message
            messages.append(msg.model_dump(exclude_none=True))
            if not msg.tool_calls:
                break
            for call in msg.tool_calls:
                result = registry.get(call.function.name)(**json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    assert messages[-1]["content"] == "[scripted model] I found 3 markers."
    assert len(server.chat_requests()) == 2


# -- other endpoints, shutdown ---------------------------------------------------

def test_models_endpoint_lists_the_model():
    with ScriptedServer(model="lily-scripted") as server:
        models = client(server).models.list()
    assert [m.id for m in models.data] == ["lily-scripted"]


def test_unknown_path_is_an_openai_style_404():
    with ScriptedServer(["unused"]) as server:
        for method, path in (("GET", "/v1/nothing"), ("POST", "/v1/completions"),
                             ("POST", "/v1/models")):
            status, headers, body = raw_request(server, method, path, {"x": 1})
            assert status == 404, path
            assert headers["Content-Type"] == "application/json"
            error = json.loads(body)["error"]
            assert path in error["message"]
            assert {"message", "type", "code"} <= set(error)
        with pytest.raises(openai.NotFoundError):
            client(server).embeddings.create(model="m", input="x")
        assert server.remaining() == 1


def test_stop_is_prompt_during_a_slow_stream():
    server = ScriptedServer([{"content": "slow " * 50, "chunk_delay": 0.5}]).start()
    stream = chat(client(server, timeout=10), stream=True)
    first = next(iter(stream))
    assert first.choices[0].delta.role == "assistant"
    start = time.monotonic()
    server.stop()
    assert time.monotonic() - start < 1.0
    with pytest.raises(openai.APIError):  # the client sees the stream cut, quickly
        for _ in stream:
            pass
    assert time.monotonic() - start < 1.5
    server.stop()  # idempotent


def test_turns_are_consumed_once_under_concurrency():
    n = 12
    with ScriptedServer([f"answer {i}" for i in range(n)]) as server:
        c = client(server)
        answers, lock = [], threading.Lock()

        def worker():
            text = chat(c).choices[0].message.content
            with lock:
                answers.append(text)

        threads = [threading.Thread(target=worker) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert server.remaining() == 0
    assert sorted(answers) == sorted(f"answer {i}" for i in range(n))
