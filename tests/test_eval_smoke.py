"""The real-model eval harness (bench/eval, `make eval`) stays runnable: two of its tasks run
through real Lily kernels against the scripted server, which answers as a good model would
(one tool call, then the answer; an approval card confirmed with /confirm); the DABench
suite runs against a tiny local repository shaped like the benchmark's, with no network."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from eval_support import commit_all

from lily_kernel.testing.server import ScriptedServer
from lily_kernel.tools import sandbox

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


#: The model's run_python runs in the sandbox with no card where the sandbox works here;
#: elsewhere it asks, and the harness confirms (tools/gate.py, docs/sandbox.md).
CARDS = 0 if sandbox.unavailable() is None else 1

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
    assert by["add_column"]["tools"] == ["run_python"] and by["add_column"]["cards"] == CARDS
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


# -- the DABench suite (bench/eval/dabench.py) against a tiny local repository ---------------

DATA = "examples/DA-Agent/data"


def _fake_dabench(root: Path) -> tuple[Path, str]:
    """A git repository shaped like InfiAgent's at DATA: three questions (one below the
    slice's id 150), their labels and one table; returns it and its commit."""
    repo = root / "dabench-repo"
    data = repo / DATA
    (data / "da-dev-tables").mkdir(parents=True)
    (data / "da-dev-tables" / "nums.csv").write_text("x,y\n1,10\n2,20\n3,60\n", encoding="utf-8")
    questions = [
        {"id": 7, "question": "Not in the slice.", "constraints": "", "format": "@a[v]",
         "file_name": "nums.csv", "level": "easy"},
        {"id": 150, "question": "What is the mean of x?", "constraints": "Use pandas.",
         "format": "@mean_x[value] rounded to two decimals.", "file_name": "nums.csv",
         "level": "easy"},
        {"id": 151, "question": "What is the largest y?", "constraints": "",
         "format": "@max_y[value], an integer.", "file_name": "nums.csv", "level": "hard"},
    ]
    labels = [{"id": 7, "common_answers": [["a", "1"]]},
              {"id": 150, "common_answers": [["mean_x", "2.00"]]},
              {"id": 151, "common_answers": [["max_y", "60"]]}]
    (data / "da-dev-questions.jsonl").write_text(
        "".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    (data / "da-dev-labels.jsonl").write_text(
        "".join(json.dumps(a) + "\n" for a in labels), encoding="utf-8")
    return repo, commit_all(repo, "data")


def _analyst(request: dict[str, Any]) -> dict[str, Any]:
    """Reads the table with run_python for the mean (the card confirmed), answers the other
    in prose; the benchmark's reformat request gets the template answer."""
    messages = request["messages"]
    last = str(messages[-1].get("content") or "")
    if "Please give your answer:" in last:  # the benchmark's reformat step
        said = str(messages[-2]["content"])
        return {"content": "@max_y[60]" if "sixty" in said else said, "usage": True}
    asked = str(next(m["content"] for m in messages if m["role"] == "user"))
    if "mean of x" in asked:
        if messages[-1]["role"] != "tool":
            code = "import pandas as pd\nprint(round(pd.read_csv('nums.csv')['x'].mean(), 2))"
            return {"tool_calls": [{"name": "run_python", "id": "r1",
                                    "arguments": {"code": code}}], "usage": True}
        value = last.split("--- output ---\n")[-1].split()[0]
        return {"content": f"@mean_x[{float(value):.2f}]", "usage": True}
    return {"content": "The largest y is sixty.", "usage": True}


def test_the_dabench_suite_runs_and_scores_with_the_benchmarks_rules(tmp_path):
    repo, commit = _fake_dabench(tmp_path)
    out = tmp_path / "dabench.json"
    env = {**os.environ, "DABENCH_REPO": str(repo), "DABENCH_COMMIT": commit,
           "LILY_EVAL_CACHE": str(tmp_path / "cache")}
    with ScriptedServer(_analyst) as server:
        run = subprocess.run([sys.executable, str(RUN_EVAL), "--suite", "dabench",
                              "--base-url", server.url, "--model", "scripted",
                              "--timeout", "120", "--json", str(out)],
                             capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 tasks" in run.stdout  # id 7 is below the slice
    assert "ABQ strict 1/2 (50%), after reformat 2/2 (100%)" in run.stdout, run.stdout
    data = json.loads(out.read_text())
    by = {r["task"]: r for r in data["results"]}
    assert by["dabench-150"]["ok"] and by["dabench-150"]["tools"] == ["run_python"]
    assert by["dabench-150"]["cards"] == CARDS  # sandboxed; else it asked and was confirmed
    assert by["dabench-151"]["why"].startswith("no @max_y[")
    assert data["dabench"]["strict"]["abq_slice"] == 0.5
    responses = (tmp_path / "dabench-responses.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in responses] == [150, 151]
    # taken into the eval cache at that commit, never into the checkout
    assert (tmp_path / "cache" / "dabench" / commit[:12] / "da-dev-tables" / "nums.csv").exists()


def test_the_closed_form_rules_are_the_benchmarks():
    sys.path.insert(0, str(RUN_EVAL.parent))
    import dabench
    assert dabench.extract_format("@a[1.0] and @b[x, y]") == (["a", "b"], ["1.0", "x, y"])
    assert dabench.is_equal("2.00", "2.0") and dabench.is_equal("abc", "abc")
    assert not dabench.is_equal(None, "1") and not dabench.is_equal("2.01", "2.00")
    assert dabench.correctness({"a": "1", "b": "2"}, "@a[1.0000000001] @b[3]") == \
        {"a": True, "b": False}
    rows = [{"a": True}, {"a": True, "b": False}, None]
    s = dabench.scores(rows)
    assert (s["abq"], s["abq_slice"], s["proportional"], s["by_sub_question"]) == \
        (0.5, 0.3333, 0.75, 0.6667)
