"""The real-model eval harness (bench/eval, `make eval`) stays runnable: two of its tasks run
through real Lily kernels against the scripted server, which answers as a good model would
(one tool call, then the answer; an approval card confirmed with /confirm)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from lily_kernel.testing.server import ScriptedServer

RUN_EVAL = Path(__file__).resolve().parent.parent / "bench" / "eval" / "run_eval.py"


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    """A well-behaved model that reports its usage, as llama-server does."""
    return {**_turn(request), "usage": True}


def _turn(request: dict[str, Any]) -> dict[str, Any]:
    """The task's tool first, then an answer built from its result."""
    messages = request["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    asked = str(messages[last_user]["content"])
    results = [m for m in messages[last_user:] if m["role"] == "tool"]
    if "columns" in asked:
        if not results:
            return {"tool_calls": [{"name": "inspect_variable", "arguments": {"name": "df"},
                                    "id": "c1"}]}
        return {"content": "df has the columns x, y and label."}
    if "Add a column" in asked:
        if not results:
            return {"tool_calls": [{"name": "run_python", "id": "r1",
                                    "arguments": {"code": "df['z'] = df['x'] * 2"}}]}
        return {"content": "Added z = x*2 to df."}
    return {"content": "I cannot help with that."}


def test_the_eval_harness_runs_two_tasks_against_the_scripted_server(tmp_path):
    out = tmp_path / "results.json"
    with ScriptedServer(_answer) as server:
        run = subprocess.run([sys.executable, str(RUN_EVAL), "--base-url", server.url,
                              "--model", "scripted", "--tasks", "columns,add_column",
                              "--timeout", "60", "--json", str(out)],
                             capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "success: 2/2 (100%)" in run.stdout, run.stdout
    data = json.loads(out.read_text())
    by = {r["task"]: r for r in data["results"]}
    assert by["columns"]["tools"] == ["inspect_variable"] and by["columns"]["steps"] == 2
    assert by["add_column"]["tools"] == ["run_python"] and by["add_column"]["cards"] == 1
    for r in by.values():
        assert r["ok"] and r["why"] == ""
        assert r["prompt_tokens"] and r["completion_tokens"]  # the journal's usage
        assert r["ttft"] is not None and r["ttft"] >= 0       # the proxy's timing


def test_a_failing_task_says_why(tmp_path):
    """A model that only chats: the check names what is missing, the rate counts it."""
    with ScriptedServer(lambda request: {"content": "Hello!"}) as server:
        run = subprocess.run([sys.executable, str(RUN_EVAL), "--base-url", server.url,
                              "--model", "scripted", "--tasks", "columns", "--timeout", "60"],
                             capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "success: 0/1 (0%)" in run.stdout
    assert "answer lacks x, y, label" in run.stdout
