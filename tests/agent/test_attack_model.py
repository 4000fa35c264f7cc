"""A hostile model endpoint against a real session: caps, the total deadline, secrets.

Every test drives the real agent loop and the real ``openai`` client over HTTP to a
:class:`ScriptedServer` on 127.0.0.1 that misbehaves on purpose (an endless or
dripping stream, a 126 MB answer, an error body echoing the request headers). See
docs/limits-and-secrets.md.
"""
from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

import openai  # noqa: F401  imported up front so its import time is not counted in a deadline
import pytest
from agent_support import World, assert_consistent, run_command

from lily_kernel import redaction
from lily_kernel.agent import loop
from lily_kernel.commands import render, router
from lily_kernel.errors import AgentError, CommandError
from lily_kernel.session import journal
from lily_kernel.testing.streams import gzip_line

pytestmark = pytest.mark.usefixtures("no_machine_model")

KEY = "sk-attack-0123456789abcdefSECRET"
URL_PASSWORD = "pw-IN-URL-7f3a9c"


@pytest.fixture
def world(tmp_path) -> World:
    return World(tmp_path)


def limits(world: World, **values: int) -> None:
    """The caps in the user's lily.toml: a workspace's may only lower them
    (docs/permissions.md#layers), and answer_chars=10,000,000 raises one."""
    rows = "\n".join(f"{k} = {v}" for k, v in values.items())
    user = world.base / "home" / ".config" / "lily"
    user.mkdir(parents=True, exist_ok=True)
    (user / "lily.toml").write_text(f"[limits]\n{rows}\n", encoding="utf-8")


def one_line_failure(session, text: str = "the question") -> str:
    with pytest.raises(AgentError) as info:
        loop.run(session, text)
    line = info.value.line()
    assert line.startswith("Error: ") and "\n" not in line and "Traceback" not in line, line
    return line


# -- caps ---------------------------------------------------------------------------------

def test_a_126_mb_answer_is_cut_at_the_cap_and_never_read_whole(world, server):
    limits(world, answer_chars=5000)
    session = world.session(server, journal=True)
    server.add({"content": "head ", "stream_chars": 126_000_000})
    shown: list[str] = []
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    started = time.monotonic()
    reply = loop.run(session, "say a lot", on_text=shown.append)
    assert time.monotonic() - started < 5  # Lily stopped reading; 126 MB would take longer
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grown < 64 * 1024, f"peak memory grew by {grown} KiB"
    kept = session.conversation[-1]["content"]
    assert kept.startswith("head x") and "[limits] answer_chars" in kept
    assert len(kept) < 5000 + 200 and reply.text == kept
    assert sum(map(len, shown)) == 5000  # the live display is bounded too
    journal = session.journal.path.read_bytes()
    assert len(journal) < 100_000
    assert_consistent(session.conversation)
    server.add("recovered")
    assert loop.run(session, "next").text == "recovered"


def test_a_gzip_bomb_of_one_300_mb_line_is_never_decompressed(world, server):
    """0.3 MB on the wire, 300 MB as one SSE line: Lily asks for no compression, refuses a
    compressed answer and never buffers the line (docs/limits-and-secrets.md#caps)."""
    session = world.session(server, journal=True)
    gzip_line(300_000_000)  # made before the request: making it is no part of the deadline
    server.add({"gzip_line": 300_000_000})
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    line = one_line_failure(session, "compress it")
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grown < 64 * 1024, f"peak memory grew by {grown} KiB"
    assert "compressed" in line and "not decompressed" in line
    assert server.requests[0]["headers"].get("Accept-Encoding") == "identity"
    server.add("recovered")
    assert loop.run(session, "next").text == "recovered"


def test_a_line_past_the_cap_stops_the_read_before_it_is_buffered():
    from lily_kernel.agent.deadline import (
        MAX_LINE_BYTES,
        DeadlineTransport,
        StreamRefused,
        _Bounded,
    )
    sent: list[int] = []

    def body():
        yield b"data: {}\n\n"
        for _ in range(10_000):  # 10 GB if it were all read
            sent.append(1)
            yield b"x" * (1 << 20)

    stream = _Bounded(body(), DeadlineTransport(), None)
    with pytest.raises(StreamRefused, match="longer than"):
        for _ in stream:
            pass
    assert len(sent) <= MAX_LINE_BYTES // (1 << 20) + 1


def test_a_flood_of_tool_calls_runs_at_most_the_cap_per_step(world, server):
    """100 calls in one step: 16 run (the default cap), the rest are answered, not run."""
    for i in range(100):  # a file each: identical calls would not run again anyway
        (world.workspace / f"notes{i}.md").write_text("n\n")
    session = world.session(server)
    calls = [{"name": "read", "arguments": {"path": f"notes{i}.md"}, "id": f"c{i}"}
             for i in range(100)]
    server.add({"tool_calls": calls}, "done")
    reply = loop.run(session, "flood")
    assert reply.text == "done"
    results = [m["content"] for m in server.chat_requests()[-1]["messages"]
               if m.get("role") == "tool"]
    assert len(results) == 100  # every call has its answer
    assert results[:16] == ["n\n"] * 16
    assert all(r.startswith("Error: not run: too many calls") for r in results[16:])
    assert "tool_calls_per_step" in results[16]
    assert_consistent(session.conversation)


def test_the_conversation_cap_stops_a_request_that_grows_without_end(world, server):
    for i in range(5):  # a file each: identical calls would not run again anyway
        (world.workspace / f"big{i}.txt").write_text("y" * 40_000)
    limits(world, conversation_chars=100_000)
    session = world.session(server)
    step = {"tool_calls": [{"name": "read", "arguments": {"path": f"big{i}.txt"},
                            "id": f"b{i}"} for i in range(5)]}
    server.add(step, "done")
    loop.run(session, "grow")
    results = [m["content"] for m in server.chat_requests()[-1]["messages"]
               if m.get("role") == "tool"]
    ran = [r for r in results if r.startswith("y")]
    assert 2 <= len(ran) < 5 and "too many calls" in results[-1]
    assert sum(map(len, ran)) <= 100_000 + 40_000


@pytest.mark.parametrize("toml, words", [
    ("[model]\ntimeout = 1e10\n", "timeout must be"),
    ("[model]\nmax_retries = 100000000000000000000\n", "max_retries must be"),
    ("[limits]\nread_bytes = 100000000000000\n", "read_bytes must be at most"),
    ("[limits]\ntool_calls_per_step = 100000\n", "tool_calls_per_step must be at most"),
])
def test_a_huge_number_in_lily_toml_is_one_config_line(world, server, toml, words):
    (world.workspace / "lily.toml").write_text(toml)
    session = world.session(server)
    line = one_line_failure(session)
    assert words in line
    assert server.requests == []


def test_a_huge_timeout_from_the_environment_or_model_is_one_line(world, server):
    session = world.session(server, LILY_TIMEOUT="1e10")
    assert "timeout must be" in one_line_failure(session)
    with pytest.raises(CommandError) as info:
        run_command(session, "/model timeout=1e300")
    assert "timeout must be" in info.value.line()


def test_a_tool_result_is_cut_and_the_user_is_told(world, server):
    limits(world, tool_result_chars=1000)
    session = world.session(server)
    session.tools.register(lambda: "y" * 1_000_000, name="flood", description="a big result")
    server.add({"tool_calls": [{"name": "flood", "arguments": {}}]}, "done")
    reply = loop.run(session, "flood me")
    result = next(m for m in session.conversation if m["role"] == "tool")["content"]
    assert result.startswith("y" * 1000) and "y" * 1001 not in result
    assert "[limits] tool_result_chars" in result  # the model sees the marker
    sent = server.chat_requests()[-1]["messages"]
    assert max(len(m["content"]) for m in sent if m["role"] == "tool") < 2000
    assert reply.text.startswith("done") and "1 tool result was cut at 1,000" in reply.text
    assert session.conversation[-1]["content"] == "done"  # the note is for the user only


def test_a_journal_record_over_the_cap_is_replaced_by_a_readable_marker(world, server):
    limits(world, journal_record_bytes=4096, answer_chars=50_000)
    session = world.session(server, journal=True)
    server.add("z" * 40_000)
    loop.run(session, "long")
    raw = session.journal.path.read_bytes().splitlines()
    assert max(map(len, raw)) <= 4096
    records = list(journal.read(session.journal.path))
    cut = [r for r in records if r.get("cut")]
    assert len(cut) == 1 and cut[0]["event"] == "message" and cut[0]["bytes"] > 40_000
    assert cut[0]["session_id"] == session.session_id and cut[0]["head"].startswith("{")


# -- the total deadline ------------------------------------------------------------------

@pytest.mark.parametrize("turn", [
    {"content": "forever ", "endless": True, "chunk_delay": 0.1, "max_duration": 15},
    {"content": "drip ", "endless": True, "drip": 0.2, "max_duration": 15},
    {"content": "slow start", "drip": 0.2, "max_duration": 15},
], ids=["endless", "drip-endless", "drip"])
def test_a_stream_that_never_ends_stops_at_the_deadline(world, server, turn):
    limits(world, answer_chars=10_000_000)  # so the deadline, not the answer cap, ends it
    session = world.session(server, LILY_TIMEOUT="1.5", LILY_MAX_RETRIES="2")
    server.add(turn)
    started = time.monotonic()
    line = one_line_failure(session)
    elapsed = time.monotonic() - started
    # the line says the deadline ended it; the time only shows it did not wait for the
    # stream's 15 s (a loaded machine adds seconds, never ten)
    assert "did not answer within 1.5 s" in line and "deadline" in line
    assert elapsed < 1.5 + 5, elapsed
    assert session.conversation == []  # nothing of the partial answer was kept
    server.add("after")
    assert loop.run(session, "again").text == "after"
    assert_consistent(session.conversation)


def test_the_deadline_covers_the_retries(world, server):
    session = world.session(server, LILY_TIMEOUT="1.5", LILY_MAX_RETRIES="5")
    server.add(*[{"delay": 1.0, "status": 503}] * 6)
    started = time.monotonic()
    line = one_line_failure(session)
    assert "did not answer within 1.5 s" in line
    assert time.monotonic() - started < 1.5 + 4  # six attempts would take 6 s and more


# -- secrets -------------------------------------------------------------------------------

def test_an_error_body_echoing_the_key_is_masked(world, server):
    session = world.session(server, journal=True, OPENAI_API_KEY=KEY)
    server.add({"status": 400, "echo_headers": True, "error_message": "nope"})
    line = one_line_failure(session)
    assert "Bearer ***" in line or "***" in line
    assert KEY not in line
    assert KEY not in session.journal.path.read_text(encoding="utf-8")


def test_userinfo_in_a_model_url_is_never_shown_nor_journaled(world, server):
    session = world.session(server, journal=True, OPENAI_API_KEY=KEY)
    secret_url = server.url.replace("http://", f"http://lily:{URL_PASSWORD}@")
    result = run_command(session, f"/model base_url={secret_url}")
    assert URL_PASSWORD not in render.text(result)
    assert URL_PASSWORD not in render.text(run_command(session, "/model"))
    server.add({"status": 500})
    line = one_line_failure(session)
    assert URL_PASSWORD not in line
    records = list(journal.read(session.journal.path))
    changed = [r for r in records if r["event"] == "model_changed"]
    assert changed and "http://***@127.0.0.1" in json.dumps(changed)
    no_secret_on_disk(world.base, URL_PASSWORD, KEY)


def no_secret_on_disk(root: Path, *needles: str) -> None:
    """No file under ``root`` (workspace, HOME, journal, history) holds any needle."""
    for folder, _, files in os.walk(root):
        for name in files:
            data = (Path(folder) / name).read_bytes()
            for needle in needles:
                assert needle.encode() not in data, f"{needle!r} found in {folder}/{name}"


def test_a_tool_error_carrying_the_key_is_masked_in_the_journal(world, server):
    session = world.session(server, journal=True, OPENAI_API_KEY=KEY)

    def leak():
        raise RuntimeError(f"auth failed for {KEY} at http://u:{URL_PASSWORD}@h/x")
    session.tools.register(leak, name="leak", description="fails")
    server.add({"tool_calls": [{"name": "leak", "arguments": {}}]}, "ok")
    loop.run(session, "go")
    no_secret_on_disk(world.base, URL_PASSWORD, KEY)


def test_a_command_error_never_shows_a_live_secret(world, monkeypatch):
    monkeypatch.setenv("LILY_OUTBOX_TOKEN", "tok-live-9876543210")
    assert CommandError("refused tok-live-9876543210 at https://a:b@h/").line() == \
        "Error: refused *** at https://***@h/"


# -- redaction is linear -------------------------------------------------------------------

@pytest.mark.parametrize("line", [
    "/x " + "a" * 80_000,
    "/x " + "a://" * 20_000,
    "/x " + "http://u:p@" * 7_300,
    "/x " + "://" + "@" * 80_000,
    "/x " + "key=" * 20_000,
    "/model " + "base_url=http://" + "a" * 80_000,
    "/x " + "Authorization: Basic " * 4_000,
    "/x Bearer " + "Bearer" * 13_000,
], ids=["word", "schemes", "userinfos", "ats", "keys", "model", "auth", "bearers"])
def test_redaction_of_80_kb_hostile_lines_still_masks_the_key(line, monkeypatch):
    """How long these take, against ordinary prose of the same length, is measured by
    ``bench/limits.py redaction``; a regex that backtracked would keep this test running."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    for hostile in (line, f"{line} {KEY}", f"{KEY} {line}"):
        journaled = redaction.redact(router.redact(hostile))  # as Session.record_command stores it
        masked = redaction.redact(hostile)
        assert KEY not in journaled and KEY not in masked
        assert len(masked) <= len(hostile) and len(journaled) <= len(hostile)


def test_redaction_masks_what_it_must():
    env = {"OPENAI_API_KEY": KEY}
    assert redaction.redact(f"x {KEY} http://u:p@ss@h:1/v1?q=a@b", env) == \
        "x *** http://***@h:1/v1?q=a@b"
    assert redaction.redact("mail me: a@b.c, see https://h/p@x", env) == \
        "mail me: a@b.c, see https://h/p@x"
    assert redaction.redact("short", {"OPENAI_API_KEY": "abc"}) == "short"
    assert redaction.redact("Authorization: Basic bGlseTpwdy1rZXJuZWw=; Bearer sk-abcdefgh1234") \
        == "Authorization: Basic ***; Bearer ***"
    assert redaction.redact('{"authorization": "Bearer abcdefghijkl"}') == '{"authorization": "Bearer ***"}'
    prose = "Basic understanding: a Token exchange, Authorization is granted."
    assert redaction.redact(prose) == prose
