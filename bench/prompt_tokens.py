"""Prompt tokens of "Say hello." in the Lily kernel (docs/agent.md#a-lean-prompt).

    .venv/bin/python bench/prompt_tokens.py [--tree DIR]

Starts the real Lily kernel (jupyter_client) in a fresh workspace with the
bundled skills and persona, pointed at a ScriptedServer on 127.0.0.1, sends the
cell "Say hello." and reads what the server received: the system prompt and
the tool schemas (the notebook tools included), counted with OpenAI's
``o200k_base`` when ``bpe-openai`` is installed, and with the scripted
server's own count (JSON bytes / 4) always. ``--tree DIR`` measures another
tree (e.g. ``git archive main`` unpacked in DIR): the kernel imports
``lily_kernel`` from there.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

from jupyter_client.manager import start_new_kernel

from lily_kernel.testing.messages import prompt_tokens
from lily_kernel.testing.server import ScriptedServer


def counter():
    try:
        import bpe_openai
        enc = bpe_openai.get_encoding("o200k_base")
        return "o200k_base", lambda text: len(enc.encode_ordinary(text))
    except ImportError:
        return "bytes/4", lambda text: -(-len(text.encode()) // 4)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", help="a source tree whose lily_kernel the kernel runs")
    args = ap.parse_args()
    cwd = tempfile.mkdtemp(prefix="lily-bench-")
    with ScriptedServer(["Hello!"]) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LILY_"))}
        env.update(OPENAI_BASE_URL=server.url, HOME=cwd, LILY_DATA_DIR=cwd)
        if args.tree:
            env["PYTHONPATH"] = os.path.abspath(args.tree)
        km, kc = start_new_kernel(kernel_name="lily", cwd=cwd, env=env, startup_timeout=60)
        try:
            reply = kc.execute_interactive("Say hello.", timeout=60, output_hook=lambda m: None)
            assert reply["content"]["status"] == "ok", reply["content"]
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
        request = server.chat_requests()[-1]
    name, count = counter()
    system = request["messages"][0]["content"]
    tools = request.get("tools") or []
    tool_tokens = count(json.dumps(tools, ensure_ascii=False)) if tools else 0
    whole = count(json.dumps(request["messages"], ensure_ascii=False)) + tool_tokens
    print(f"lily_kernel from {args.tree or 'this tree'}; counted with {name}")
    index = ""
    if "## Skills" in system:
        index = system[system.find("## Skills"):system.find("## Rules")]
    rest = count(system.replace(index, ""))
    print(f"system prompt {count(system):,} tokens (skills index {count(index):,}, persona and "
          f"rules {rest:,}) · {len(tools)} tools {tool_tokens:,} tokens "
          f"({tool_tokens // max(len(tools), 1)} a tool) · whole prompt {whole:,} tokens "
          f"(scripted server's count {prompt_tokens(request):,})")
    print("tools:", ", ".join(t["function"]["name"] for t in tools))
    cap = request.get("max_completion_tokens") or request.get("max_tokens")
    print(f"completion cap sent: {cap}")


if __name__ == "__main__":
    main()
