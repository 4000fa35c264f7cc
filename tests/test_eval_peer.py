"""The DA-Agent peer of the DABench suite (bench/eval/peer.py, `run_eval --suite dabench-peer`)
stays runnable: against a tiny local repository shaped like InfiAgent's, whose `pipeline/`
driver and judge are small stand-ins with the same command lines and files as theirs
(`activities/eval.py`, `eval_closed_form.py`), run by this interpreter instead of the peer's
own virtual environment, and the scripted server as the model. No network, no real model."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from eval_support import commit_all

from lily_kernel.testing.server import ScriptedServer

RUN_EVAL = Path(__file__).resolve().parent.parent / "bench" / "eval" / "run_eval.py"
DATA = "examples/DA-Agent/data"

# Their eval.py's contract: in the working folder, data/da-dev-questions.jsonl and
# data/da-dev-tables/<file>; --llm and --config_path; results_<llm>.json. Their client posts
# to a fixed local port (the stand-in reads it from the environment, theirs cannot).
DRIVER = '''
import argparse, json, os, re, urllib.request
p = argparse.ArgumentParser(); p.add_argument("--llm"); p.add_argument("--config_path")
a = p.parse_args()
model = re.search(r"(?m)^  model_name: (.*)$", open(a.config_path).read()).group(1)
assert os.path.isfile("configs/tool_configs/sandbox.yaml")
results = []
for line in open("./data/da-dev-questions.jsonl"):
    q = json.loads(line)
    if q["id"] == 151:
        raise SystemExit("the agent failed")
    rows = open(os.path.join("data/da-dev-tables", q["file_name"])).read().split()[1:]
    body = {"model": model, "messages": [{"role": "user", "content":
            "Question: " + q["question"] + "\\n" + q["constraints"] + "\\n" + ";".join(rows)}]}
    req = urllib.request.Request("http://127.0.0.1:%s/v1/chat/completions"
                                 % os.environ["DABENCH_PEER_PORT"],
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    said = json.loads(urllib.request.urlopen(req).read())["choices"][0]["message"]["content"]
    results.append({"id": q["id"], "response": "Final Answer: " + said})
json.dump(results, open("results_%s.json" % a.llm, "w"))
'''
# eval_closed_form.py's contract: its three flags, eval_outputs/<stem>_evaluation_analysis.json
# in the working folder, "Accuracy by Question: …" printed; questions with no response left out.
JUDGE = '''
import argparse, json, os, re
p = argparse.ArgumentParser()
for f in ("--questions_file_path", "--labels_file_path", "--responses_file_path"):
    p.add_argument(f)
a = p.parse_args()
labels = {r["id"]: dict(r["common_answers"]) for r in map(json.loads, open(a.labels_file_path))}
given = [r for r in map(json.loads, open(a.responses_file_path)) if r["response"]]
right = sum(all(dict(re.findall(r"@(\\w+)\\[(.*?)\\]", r["response"])).get(k) == v
                for k, v in labels[r["id"]].items()) for r in given)
abq = round(right / len(given), 4) if given else 0
print(f"Accuracy by Question: {abq:.2%}")
os.makedirs("eval_outputs", exist_ok=True)
stem = os.path.splitext(os.path.basename(a.responses_file_path))[0]
json.dump({"main_results": {"Accuracy by Question": abq}},
          open(f"eval_outputs/{stem}_evaluation_analysis.json", "w"))
'''


def _fake_infiagent(root: Path) -> tuple[Path, str]:
    """A git repository shaped like InfiAgent's: the dev set (two questions in the slice, one
    below it), a stand-in pipeline and judge; returns it and its commit."""
    repo = root / "infiagent-repo"
    files = {
        f"{DATA}/da-dev-tables/nums.csv": "x,y\n1,10\n2,20\n3,60\n",
        f"{DATA}/da-dev-questions.jsonl": "".join(json.dumps(q) + "\n" for q in [
            {"id": 7, "question": "Not in the slice.", "constraints": "", "format": "@a[v]",
             "file_name": "nums.csv", "level": "easy", "concepts": ["x"]},
            {"id": 150, "question": "What is the mean of x?", "constraints": "Use pandas.",
             "format": "@mean_x[value] rounded to two decimals.", "file_name": "nums.csv",
             "level": "easy", "concepts": ["Summary Statistics"]},
            {"id": 151, "question": "What is the largest y?", "constraints": "",
             "format": "@max_y[value]", "file_name": "nums.csv", "level": "hard",
             "concepts": ["Summary Statistics"]}]),
        f"{DATA}/da-dev-labels.jsonl": "".join(json.dumps(a) + "\n" for a in [
            {"id": 7, "common_answers": [["a", "1"]]},
            {"id": 150, "common_answers": [["mean_x", "2.00"]]},
            {"id": 151, "common_answers": [["max_y", "60"]]}]),
        "pipeline/setup.py": "from setuptools import setup\nsetup(install_requires=[])\n",
        "pipeline/configs/agent_configs/react_agent_llama_async.yaml":
            "llm:\n  model_name: meta-llama/Llama-2-7b-hf\n  class_name: LlamaOpenAIClient\n",
        "pipeline/configs/tool_configs/sandbox.yaml": "name: python_code_sandbox\n",
        "pipeline/activities/eval.py": DRIVER,
        "examples/DA-Agent/eval_closed_form.py": JUDGE,
        "examples/DA-Agent/utils/utils.py": "",
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    return repo, commit_all(repo, "dev set and pipeline")


def _model(request: dict[str, Any]) -> dict[str, Any]:
    """Answers the mean in prose from the table the driver read; the benchmark's reformat
    request gets the template answer."""
    last = str(request["messages"][-1]["content"])
    if "Please give your answer:" in last:
        return {"content": "@mean_x[2.00]" if "2.0" in str(request["messages"][-2]["content"])
                else "no idea", "usage": True}
    if "1,10;2,20;3,60" not in last:  # the driver read the table in its work folder
        return {"content": "no table", "usage": True}
    return {"content": "The mean of x is 2.0.", "usage": True}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_peer_runs_their_driver_and_their_judge_on_lilys_slice(tmp_path):
    repo, commit = _fake_infiagent(tmp_path)
    out = tmp_path / "peer.json"
    env = {**os.environ, "DABENCH_REPO": str(repo), "DABENCH_COMMIT": commit,
           "LILY_EVAL_CACHE": str(tmp_path / "cache"), "DABENCH_PEER_PYTHON": sys.executable,
           "DABENCH_PEER_PORT": str(_free_port())}
    with ScriptedServer(_model) as server:
        run = subprocess.run([sys.executable, str(RUN_EVAL), "--suite", "dabench-peer",
                              "--base-url", server.url, "--model", "org/served-model",
                              "--timeout", "60", "--json", str(out)],
                             capture_output=True, text=True, timeout=120, env=env)
        sent = server.chat_requests()
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 questions" in run.stdout  # id 7 is below the slice, as in Lily's suite
    assert "ABQ strict 0/2 (0%), after reformat 1/2 (50%)" in run.stdout, run.stdout
    # the agent's step: the served model's name from their config, the sampling filled in
    assert sent[0]["model"] == "org/served-model"
    assert {k: sent[0][k] for k in ("temperature", "top_p", "frequency_penalty",
                                    "max_tokens")} == \
        {"temperature": 0.2, "top_p": 1.0, "frequency_penalty": 0.0, "max_tokens": 1024}
    assert sent[1]["temperature"] == 0  # the reformat step: as Lily's suite sends it
    data = json.loads(out.read_text())["dabench"]
    by = {a["id"]: a for a in data["answers"]}
    assert by[150]["response"] == "Final Answer: The mean of x is 2.0." and by[150]["steps"] == 1
    assert by[151]["response"] == "" and by[151]["why"].startswith("eval.py exited 1")
    assert data["strict"]["abq_slice"] == 0 and data["after_reformat"]["abq_slice"] == 0.5
    # their judge, on the answered questions: strict 0 of 1, after reformat 1 of 1
    assert data["eval_closed_form"]["responses"]["Accuracy by Question"] == 0
    assert data["eval_closed_form"]["reformatted"]["Accuracy by Question"] == 1
    assert [json.loads(x)["id"] for x in (tmp_path / "peer-responses.jsonl").read_text()
            .splitlines()] == [150, 151]
    # each answer was kept as its question ended, and a kept run can be scored again alone
    kept = [json.loads(x) for x in (tmp_path / "peer.progress.jsonl").read_text().splitlines()]
    assert [(k["task"], k["final"]) for k in kept] == \
        [("dabench-150", "Final Answer: The mean of x is 2.0."), ("dabench-151", "")]
    with ScriptedServer(_model) as server:
        again = subprocess.run([sys.executable, str(RUN_EVAL), "--suite", "dabench",
                                "--base-url", server.url, "--model", "org/served-model",
                                "--rescore", str(tmp_path / "peer.progress.jsonl")],
                               capture_output=True, text=True, timeout=120, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2 of 2 questions answered" in again.stdout
    assert "ABQ strict 0/2 (0%), after reformat 1/2 (50%)" in again.stdout, again.stdout
    # their code was taken into the eval cache at that commit, never into the checkout
    assert (tmp_path / "cache" / "dabench-peer" / commit[:12] / "pipeline" / "activities"
            / "eval.py").exists()
