"""Agent loop overhead against a bare openai client, and the skills index cost.

    .venv/bin/python bench/agent_overhead.py [--requests 200] [--warmup 20] [--skills 100]

1. Per-request overhead. One ScriptedServer on 127.0.0.1 answers every chat
   request with the same plain answer (60 words, streamed one word per chunk).
   Lily: ``loop.run(session, ...)`` on a real Session (bundled skills, default
   persona, journal on), no tool calls, streaming into an ``on_text`` sink; the
   conversation is emptied before each request so every request has the same
   size. Bare: ``openai.OpenAI(...).chat.completions.create(stream=True)`` with
   exactly the body Lily sent (taken from the server's record: messages, tools,
   ``stream_options``, the completion cap),
   reading the stream and joining the text. The two are interleaved, order
   alternating each round, so both see the same machine noise. Prints medians,
   the ratio and the absolute difference, and what Lily's own steps cost
   (system prompt + tool specs, the journal writes).
2. Skills index cost. Characters of ``prompt.skills_index`` per skill for the
   bundled skills and for N generated skills (realistic names, 100-character
   descriptions), against OpenClaw's published estimate for its skills list
   (docs.openclaw.ai/tools/skills, "Token impact"):
   195 + Σ (97 + len(name) + len(description) + len(location)) characters,
   location being the SKILL.md path. For the comparison each skill's
   description is the text Lily indexes (its summary, else its description).

Only ratios are meant to be compared across runs: these machines are shared
and noisy.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openai

from lily_kernel.agent import loop, prompt
from lily_kernel.agent.request import Request
from lily_kernel.session.session import Session
from lily_kernel.testing.server import ScriptedServer

ANSWER = " ".join(["Lily answers plainly and briefly, then names the skill it used."] * 6)
QUESTION = "What can you do for me in this notebook?"


def clean_env(base: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LILY_", "SKILLS_"))}
    (base / "user_skills").mkdir(parents=True, exist_ok=True)
    env.update({"SKILLS_USER_DIR": str(base / "user_skills"), "LILY_MAX_RETRIES": "0"})
    env.update(extra)
    return env


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- 1. per-request overhead -------------------------------------------------------------

def overhead(requests: int, warmup: int) -> None:
    base = Path(tempfile.mkdtemp(prefix="lily-bench-agent-"))
    ws = base / "ws"
    ws.mkdir()
    with ScriptedServer(lambda request: {"content": ANSWER}) as server:
        session = Session(workspace=ws, env=clean_env(base, OPENAI_BASE_URL=server.url))
        sink: list[str] = []

        def lily() -> float:
            session.conversation.clear()
            sink.clear()
            t0 = time.perf_counter()
            reply = loop.run(session, QUESTION, on_text=sink.append)
            elapsed = time.perf_counter() - t0
            assert reply.text == ANSWER and "".join(sink) == ANSWER, reply
            return elapsed

        lily()  # imports openai's client path, builds the client
        sent = server.chat_requests()[-1]
        messages, tools = sent["messages"], sent.get("tools")
        client = openai.OpenAI(base_url=server.url, api_key="lily-no-key", max_retries=0,
                               timeout=60.0)

        def bare() -> float:
            t0 = time.perf_counter()
            parts = []
            for chunk in client.chat.completions.create(**sent):  # every field Lily sent
                if chunk.choices and chunk.choices[0].delta.content:
                    parts.append(chunk.choices[0].delta.content)
            elapsed = time.perf_counter() - t0
            assert "".join(parts) == ANSWER
            return elapsed

        for _ in range(warmup):
            lily(), bare()
        times: dict[str, list[float]] = {"lily": [], "bare": []}
        for i in range(requests):
            order = (("lily", lily), ("bare", bare)) if i % 2 == 0 else (("bare", bare), ("lily", lily))
            for name, fn in order:
                times[name].append(fn())
        assert len(server.chat_requests()) == 1 + 2 * (warmup + requests)

        # Lily's own steps, each timed alone
        n = 2000
        t0 = time.perf_counter()
        for _ in range(n):
            prompt.system_prompt(session.persona, session.snapshot)
            Request(session, None).tool_specs()
        prompt_ms = (time.perf_counter() - t0) / n * 1000
        record = {"role": "assistant", "content": ANSWER}
        t0 = time.perf_counter()
        for _ in range(n):
            session.journal.append({"event": "message", "session_id": session.session_id,
                                    "message": record})
        journal_ms = (time.perf_counter() - t0) / n * 1000

    bare_med = statistics.median(times["bare"]) * 1000
    lily_med = statistics.median(times["lily"]) * 1000
    print(f"1. Per-request overhead: {requests} requests each after {warmup} warm-up, interleaved;")
    print(f"   plain answer of {len(ANSWER.split())} words streamed word by word; "
          f"system prompt {len(messages[0]['content'])} chars, {len(tools or [])} tools offered")
    for name, med in (("bare openai stream", bare_med), ("lily loop.run", lily_med)):
        key = "bare" if name.startswith("bare") else "lily"
        print(f"   {name:<20} median {med:6.2f} ms   p10 {pct(times[key], .1) * 1000:6.2f}   "
              f"p90 {pct(times[key], .9) * 1000:6.2f}")
    print(f"   ratio lily/bare {lily_med / bare_med:.3f}x, difference {lily_med - bare_med:+.2f} ms "
          "per request")
    print(f"   Lily's own steps: system prompt + tool specs {prompt_ms:.3f} ms, "
          f"one journal record {journal_ms:.3f} ms (2 per request)")


# -- 2. skills index cost ------------------------------------------------------------------

TOPICS = ["git", "pdf", "csv", "slack", "jira", "docker", "kubernetes", "postgres", "excel",
          "notion", "github", "s3", "terraform", "pandas", "arxiv", "calendar", "email", "figma",
          "sentry", "grafana"]
ROLES = ["summarizer", "changelog-writer", "reviewer", "migrator", "report-builder"]


def description(i: int, name: str) -> str:
    """A description of exactly 100 characters, like a real skill's one-line what-and-when."""
    topic, role = name.split("-", 1)
    text = (f"Works with {topic} as a {role.replace('-', ' ')}. Use when the user asks for "
            f"{topic} work (case {i:03d}), such as reviews, reports and clean-ups of files")
    text = text[:99].rstrip(" ,")
    return text + "." * (100 - len(text))


def openclaw_chars(skills) -> int:
    return 195 + sum(97 + len(s.name) + len(s.summary) + len(os.path.join(s.path, "SKILL.md"))
                     for s in skills)


def index_figures(label: str, snap) -> None:
    skills = [s for s in snap.skills if s.model_invocable]
    n = len(skills)
    capped = prompt.skills_index(snap)
    full = prompt.skills_index(snap, budget=10**9)
    claw = openclaw_chars(skills)
    header = len(prompt.INDEX_HEADER)
    loc = statistics.mean(len(os.path.join(s.path, "SKILL.md")) for s in skills)
    desc = statistics.mean(len(s.summary) for s in skills)
    name = statistics.mean(len(s.name) for s in skills)
    listed = sum(1 for line in capped.splitlines() if line.startswith("- "))
    print(f"   {label}: {n} skills (mean name {name:.0f}, description {desc:.0f}, "
          f"location {loc:.0f} chars)")
    print(f"     Lily index      total {len(full):6d} chars   per skill {len(full) / n:6.1f}   "
          f"per skill after the {header}-char header {(len(full) - header) / n:6.1f}")
    print(f"     OpenClaw list   total {claw:6d} chars   per skill {claw / n:6.1f}   "
          f"per skill after its 195-char base {(claw - 195) / n:6.1f}")
    print(f"     Lily / OpenClaw {len(full) / claw:.2f}")
    if len(capped) != len(full):
        print(f"     at Lily's default budget ({prompt.INDEX_BUDGET} chars): {listed} of {n} listed, "
              f"{len(capped)} chars including the note")


def index_cost(count: int) -> None:
    base = Path(tempfile.mkdtemp(prefix="lily-bench-index-"))
    print("2. Skills index cost (characters; ~4 per token)")
    bundled = Session(workspace=base, env=clean_env(base), journal=False).snapshot
    index_figures("bundled skills", bundled)

    root = base / "generated"
    names = [f"{t}-{r}" for r in ROLES for t in TOPICS][:count]
    for i, name in enumerate(names):
        folder = root / name
        folder.mkdir(parents=True)
        desc = description(i, name)
        assert len(desc) == 100, (len(desc), desc)
        (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {desc}\n---\n"
                                         f"# {name}\n\nInstructions.\n", encoding="utf-8")
    empty = base / "empty"
    empty.mkdir()
    generated = Session(workspace=base, env=clean_env(base, SKILLS_WORKSPACE_DIR=str(root),
                                                      SKILLS_BUNDLED_DIR=str(empty)),
                        journal=False).snapshot
    assert len(generated.skills) == len(names), generated.diagnostics
    index_figures(f"{len(names)} generated skills", generated)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--skills", type=int, default=100)
    args = ap.parse_args()
    overhead(args.requests, args.warmup)
    print()
    index_cost(args.skills)


if __name__ == "__main__":
    main()
