"""The context budget (docs/agent.md#context-budget) against a ScriptedServer that enforces a
context window: it answers HTTP 400 with llama.cpp's or OpenAI's context-length message when a
prompt is too long, and counts every prompt it receives (``prompt_sizes``).

Real sessions, the real loop and the real ``openai`` client over HTTP on 127.0.0.1.
"""
from __future__ import annotations

import json

import pytest
from agent_support import World, assert_consistent, run_command

from lily_kernel.agent import budget, tokens
from lily_kernel.agent.request import offered_tools
from lily_kernel.commands.results import Answer
from lily_kernel.commands.runner import Runner
from lily_kernel.errors import CommandError, ConfigError
from lily_kernel.settings.model_settings import ModelConfig
from lily_kernel.testing.server import ScriptedServer

pytestmark = pytest.mark.usefixtures("no_machine_model")

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango uniform victor whiskey xray ")


def chatty(request: dict) -> dict:
    """A model that answers every request at length (about 600 characters)."""
    last = request["messages"][-1]
    if last["role"] == "user":
        return {"content": f"Answer to {last['content'][:20]!r}: " + WORDS * 3}
    return {"content": "done"}


def answers(runner: Runner, text: str) -> Answer:
    out = [r for r in runner.ask(text) if isinstance(r, Answer)]
    assert len(out) == 1
    return out[0]


@pytest.mark.parametrize("style", ["llama.cpp", "openai"])
def test_a_200_turn_session_keeps_working_in_a_4096_token_window(tmp_path, style):
    world = World(tmp_path)
    with ScriptedServer(chatty, context_window=4096, context_style=style) as server:
        session = world.session(server, journal=True, LILY_CONTEXT_WINDOW="4096")
        runner = Runner(lambda: session)
        footers = []
        for i in range(200):
            answer = answers(runner, f"Question {i}: " + WORDS)
            assert answer.text.startswith(f"Answer to 'Question {i}:")
            footers.append(answer.footer())
        sizes = server.prompt_sizes
        assert len(sizes) == 200  # no request was refused and retried
        assert max(sizes) <= 4096 - 1024  # every prompt fits beside the answer's room
        assert len(session.conversation) == 400  # the session keeps everything
        assert_consistent(session.conversation)
    assert "earlier turn" not in footers[0]
    assert "earlier turns not sent" in footers[-1]
    dropped = int(footers[-1].split(" earlier turns not sent")[0].rsplit("· ", 1)[1])
    assert 150 < dropped < 199
    sent = server.chat_requests()[-1]
    assert sent["messages"][0]["role"] == "system"
    assert sent["messages"][-1]["content"].startswith("Question 199:")
    assert sent["max_tokens"] == 1024  # max_tokens, at most a quarter of a 4,096 window
    records = [json.loads(line) for line in session.journal.path.read_text().splitlines()]
    fitted = [r for r in records if r["event"] == "context_fitted"]
    assert fitted and fitted[-1]["turns_not_sent"] == dropped


def test_max_tokens_is_sent_and_an_endpoint_that_refuses_the_name_gets_the_other(tmp_path):
    world = World(tmp_path)
    with ScriptedServer(["one", "two"], reject_params=["max_tokens"]) as server:
        session = world.session(server, LILY_MAX_TOKENS="300")
        assert answers(Runner(lambda: session), "hi").text == "one"
        answers(Runner(lambda: session), "again")
        sent = server.chat_requests()
        assert "max_tokens" in sent[0] and "max_completion_tokens" not in sent[0]
        assert sent[1]["max_completion_tokens"] == 300  # asked again with the other name
        assert sent[2]["max_completion_tokens"] == 300  # and from then on


@pytest.mark.parametrize("style", ["llama.cpp", "openai"])
def test_a_window_learned_from_the_endpoints_error_then_the_request_is_retried(tmp_path, style):
    world = World(tmp_path)
    with ScriptedServer(chatty, context_window=3000, context_style=style) as server:
        session = world.session(server, journal=True, LILY_MODEL="scripted-model")
        assert budget.window_of(session.model_config) == 8192  # believes the default
        runner = Runner(lambda: session)
        for i in range(30):
            answers(runner, f"Question {i}: " + WORDS)
        assert session.model_config.context_window == 3000  # learned from the error
        assert len(server.prompt_sizes) == 31  # one refusal, retried, then every one fitted
        last = server.chat_requests()[-1]
        assert server.prompt_sizes[-1] + last["max_tokens"] <= 3000
    records = [json.loads(line) for line in session.journal.path.read_text().splitlines()]
    assert any(r["event"] == "context_window_learned" and r["context_window"] == 3000
               for r in records)


def test_a_tiny_window_gives_one_line_of_advice_and_the_session_lives_on(tmp_path):
    world = World(tmp_path)
    with ScriptedServer(chatty) as server:
        session = world.session(server, LILY_CONTEXT_WINDOW="300")
        runner = Runner(lambda: session)
        with pytest.raises(CommandError) as failed:
            answers(runner, "Say hello.")
        line = str(failed.value)
        assert "\n" not in line
        assert "does not fit the model's context window" in line
        for advice in ("/model context_window=", "/new", "[tools] offer"):
            assert advice in line
        assert server.prompt_sizes == []  # nothing too long was sent
        run_command(session, "/model context_window=8192")
        assert answers(runner, "Say hello.").text.startswith("Answer to 'Say hello.'")


def test_tool_results_are_shortened_before_turns_are_dropped_and_calls_keep_results(tmp_path):
    world = World(tmp_path)
    (world.workspace / "big.txt").write_text("line of data\n" * 180, encoding="utf-8")
    script = [{"tool_calls": [{"name": "read", "arguments": {"path": "big.txt"}}]},
              "read it"] + ["ok"] * 6
    with ScriptedServer(script, context_window=4096) as server:
        session = world.session(server, LILY_CONTEXT_WINDOW="4096", LILY_MODEL="scripted-model")
        runner = Runner(lambda: session)
        first = answers(runner, "read big.txt")
        assert "shortened" not in first.footer()  # this request's own result is sent whole
        second = answers(runner, "and now? " + WORDS * 20)
        assert "1 tool result shortened" in second.footer()
        assert "earlier turn" not in second.footer()  # shortening was enough
        sent = server.chat_requests()[-1]["messages"]
        result = next(m for m in sent if m["role"] == "tool")
        assert "[… shortened:" in result["content"]
        assert_consistent(sent[1:])
        assert session.conversation[2]["content"] == "line of data\n" * 180  # kept whole


def test_the_loaded_skills_body_and_the_request_are_never_dropped(tmp_path):
    world = World(tmp_path)
    folder = world.skills / "big_skill"
    folder.mkdir(parents=True)
    body = "Follow these steps carefully. " * 100
    (folder / "SKILL.md").write_text(f"---\nname: big_skill\ndescription: A big one.\n---\n{body}",
                                     encoding="utf-8")
    load = {"tool_calls": [{"name": "load_skill", "arguments": {"name": "big_skill"}}]}
    script = [*["ok"] * 12, load, "used it"]
    with ScriptedServer(script, context_window=4096) as server:
        session = world.session(server, LILY_CONTEXT_WINDOW="4096", LILY_MODEL="scripted-model")
        runner = Runner(lambda: session)
        for i in range(12):
            answers(runner, f"Question {i}: " + WORDS * 2)
        last = answers(runner, "use big_skill please")
        assert "earlier turns not sent" in last.footer()
        sent = server.chat_requests()[-1]["messages"]
        assert sent[0]["role"] == "system"
        assert body.strip() in [m for m in sent if m["role"] == "tool"][-1]["content"]
        assert any(m["role"] == "user" and m["content"] == "use big_skill please" for m in sent)
        assert max(server.prompt_sizes) <= 4096


def test_model_shows_the_token_count_of_each_part(tmp_path):
    world = World(tmp_path)
    session = world.session(None, OPENAI_BASE_URL="http://127.0.0.1:9/v1",
                            LILY_MODEL="scripted-model")
    info = run_command(session, "/model")
    parts = info.parts
    for key in ("system", "skills index", "tools"):
        assert parts[key] > 0
    assert parts["context_window"] == 8192 and parts["window_from"] == "default"
    from lily_kernel.commands import render
    text = render.text(info)
    assert f"system {parts['system']:,}" in text and f"tools {parts['tools']:,}" in text


# -- the pieces ------------------------------------------------------------------------

def test_config_reads_context_window_and_max_tokens():
    config = ModelConfig().changed(context_window="32,768", max_tokens="512")
    assert (config.context_window, config.max_tokens) == (32768, 512)
    for bad in ("0", "-5", "lots", "²"):
        with pytest.raises(ConfigError):
            ModelConfig().changed(context_window=bad)
    # "none" is the default again: 1,024 for a local endpoint, 4,096 for any other
    config = config.changed(max_tokens="none")
    assert config.max_tokens is None and config.answer_tokens() == 4_096
    local = config.changed(base_url="http://127.0.0.1:8080/v1")
    assert local.answer_tokens() == 1_024 and local.changed(max_tokens="300").answer_tokens() == 300
    for url, is_local in [("http://localhost:11434/v1", True), ("http://[::1]:8000/v1", True),
                          ("http://127.3.2.1/v1", True), ("http://10.0.0.5:8000/v1", False),
                          ("https://api.openai.com/v1", False),
                          ("http://localhost.example.com/v1", False)]:
        assert ModelConfig(base_url=url).answer_tokens() == (1_024 if is_local else 4_096), url


def test_the_built_in_window_table():
    assert budget.known_window("gpt-4o-mini") == 128_000
    assert budget.known_window("gpt-4") == 8_192
    assert budget.known_window("HuggingFaceTB/SmolLM2-135M-Instruct") == 8_192
    assert budget.known_window("meta-llama-3.1-8b-instruct") == 131_072
    assert budget.known_window("llama3.1:8b") == 131_072
    assert budget.known_window("scripted-model") is None
    assert budget.window_of(ModelConfig(model="scripted-model")) == 8_192


def test_the_estimate_is_conservative_and_counts_are_cached_per_message():
    count = tokens.Counter("scripted-model")
    assert count.method == "estimate"
    text = "The quick brown fox jumps over the lazy dog. " * 20
    assert count.text(text) >= len(text) / 4  # at least one token per 4 bytes
    message = {"role": "user", "content": text}
    first = count.message(message)
    message["content"] = "changed"  # a committed message never changes: the cache holds
    assert count.message(message) == first
    count.calibrate(100, 150)
    assert count.text(text) > len(text) / 3 * 1.5


def test_context_length_messages_are_read():
    from lily_kernel.agent.model_client import context_exceeded
    llama = context_exceeded("request (4130 tokens) exceeds the available context size "
                             "(4096 tokens), try increasing it")
    assert (llama.window, llama.requested) == (4096, 4130)
    openai_ = context_exceeded("This model's maximum context length is 8192 tokens. However, "
                               "you requested 9000 tokens (5000 in the messages, 4000 in the "
                               "completion).")
    assert (openai_.window, openai_.requested) == (8192, 5000)
    assert context_exceeded("something else") is None



# -- a lean prompt ---------------------------------------------------------------------

def offered(session) -> list[str]:
    return [s["function"]["name"] for s in offered_tools(session)]


def test_skill_tools_are_offered_only_when_they_can_be_used(tmp_path):
    world = World(tmp_path)
    empty = tmp_path / "no_bundled"
    empty.mkdir()
    plain = world.skills / "plain"
    plain.mkdir(parents=True)
    (plain / "SKILL.md").write_text("---\nname: plain\ndescription: Plain.\n---\nDo it.\n",
                                    encoding="utf-8")
    session = world.session(None, SKILLS_BUNDLED_DIR=str(empty))
    names = offered(session)
    assert "load_skill" in names and "read" in names
    for unusable in ("read_skill_file", "propose_action", "read_config"):
        assert unusable not in names  # no references/, no typed skill
    (plain / "references").mkdir()
    assert "read_skill_file" in offered(world.session(None, SKILLS_BUNDLED_DIR=str(empty)))
    assert "propose_action" in offered(world.session(None))  # the bundled typed skills


def test_tools_offer_narrows_what_the_model_is_offered(tmp_path):
    world = World(tmp_path)
    (world.workspace / "lily.toml").write_text('[tools]\noffer = ["read"]\n', encoding="utf-8")
    session = world.session(None)
    assert offered(session) == ["load_skill", "read"]
    assert session.policy.unavailable_reason(session.tools, "write") is None  # still allowed
    assert offered(world.session(None, LILY_TOOLS_OFFER="list")) == ["load_skill", "list"]


def test_schemas_are_short_and_the_system_prompt_lean(tmp_path):
    from lily_kernel.agent import prompt
    from lily_kernel.tools import offering
    assert offering.brief("First line\nwraps (docs/agent.md#tools).\n\nDetails.") == "First line wraps."
    spec = offering.spec("t", "Does it.", {"type": "object", "properties": {}, "required": []})
    assert "required" not in spec["function"]["parameters"]
    session = World(tmp_path).session(None, LILY_MODEL="scripted-model")
    count = session.budget.counter("scripted-model")
    system = "\n\n".join([session.persona.system_text(), prompt.RULES])
    assert count.text(system) <= 400  # the bundled persona and rules, even estimated
    specs = offered_tools(session)
    assert count.tools(specs) / len(specs) <= 80  # estimated (bytes / 3): about 60 in o200k


def test_an_openai_model_is_counted_with_its_own_tokenizer():
    pytest.importorskip("bpe_openai")
    count = tokens.Counter("gpt-4o-mini")
    assert count.method == "o200k_base" and count.exact
    assert count.text("Say hello.") == 3
    assert tokens.Counter("gpt-4").method == "cl100k_base"


# -- /compact ----------------------------------------------------------------------------

def test_compact_replaces_the_turns_that_no_longer_fit_with_the_models_summary(tmp_path):
    world = World(tmp_path)

    def model(request: dict) -> dict:
        if request["messages"][0]["content"].startswith("Summarise the conversation"):
            assert "user: Question" in request["messages"][1]["content"]
            return {"content": "- The user asked questions 0 to 9 about the alphabet."}
        return chatty(request)

    with ScriptedServer(model, context_window=4096) as server:
        session = world.session(server, journal=True, LILY_CONTEXT_WINDOW="4096",
                                LILY_MODEL="scripted-model")
        runner = Runner(lambda: session)
        nothing = list(runner.command("/compact"))
        assert "Nothing to compact" in nothing[0].markdown and server.prompt_sizes == []
        for i in range(20):
            last = answers(runner, f"Question {i}: " + WORDS)
        left_out = int(last.footer().split(" earlier turns not sent")[0].rsplit("· ", 1)[1])
        shown = list(runner.command("/compact"))
        assert len(shown) == 1 and isinstance(shown[0], Answer)
        replaced = int(shown[0].text.split("**Summary of ")[1].split(" ")[0])
        assert left_out <= replaced < 20  # what the next request would leave out
        assert "questions 0 to 9" in shown[0].text
        assert session.conversation[0]["content"].startswith("(/compact)")
        assert session.conversation[1]["content"].startswith("- The user asked")
        assert_consistent(session.conversation)
        after = answers(runner, "Question 20: " + WORDS)
        sent = server.chat_requests()[-1]["messages"]
        assert "earlier turn" not in after.footer()  # the summary and the rest fit
        assert sent[2]["content"].startswith("- The user asked")
    records = [json.loads(line) for line in session.journal.path.read_text().splitlines()]
    assert any(r["event"] == "conversation_compacted" for r in records)


@pytest.mark.parametrize("message", [
    "request (99999999999999 tokens) exceeds the available context size "
    "(99999999999999 tokens)",
    "This model's maximum context length is 0 tokens. However, your messages resulted in "
    "99999999999 tokens.",
])
def test_attack_a_hostile_context_error_never_breaks_the_session(tmp_path, message):
    """ATTACK: an endpoint names absurd sizes in its context-length errors."""
    world = World(tmp_path)
    script = [{"status": 400, "error_message": message}] * 2 + ["fine"]
    with ScriptedServer(script) as server:
        session = world.session(server, LILY_MODEL="scripted-model")
        runner = Runner(lambda: session)
        with pytest.raises(CommandError) as failed:
            answers(runner, "hello")
        assert "\n" not in str(failed.value) and "/new" in str(failed.value)
        assert session.model_config.context_window is None  # nothing absurd was learned
        assert session.budget.counter("scripted-model").scale <= tokens.MAX_SCALE
        assert answers(runner, "hello again").text == "fine"  # the session lives on
