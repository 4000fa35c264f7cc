"""The benchmark's own DA-Agent beside Lily: `make eval SUITE=dabench-peer`.

InfiAgent-DABench ships its agent (``pipeline/``: a ReAct loop whose one tool runs code in an
ipykernel) and its driver (``pipeline/activities/eval.py``). This runs them, unchanged, on the
questions Lily's dabench suite asks (:func:`dabench.questions`) against the same endpoint,
and judges their answers with the benchmark's own ``eval_closed_form.py``. Nothing of
InfiAgent's is in this repository: at eval time :func:`source` takes ``pipeline/`` and
``examples/DA-Agent/`` from ``DABENCH_REPO`` at the pinned commit into the eval cache
(``$LILY_EVAL_CACHE/dabench-peer/<commit>``), and :func:`venv` builds their virtual
environment there once (``peer-venv``: ``setup.py``'s ``install_requires`` from PyPI, plus
what their code imports undeclared, ``tenacity``, and what their Dockerfile's sandbox has,
scipy, scikit-learn, seaborn). Their ``setup.py`` cannot be installed as it stands (it reads a
``README.md`` the commit lacks), so the package is imported from the copy (``PYTHONPATH``).

How each question runs (:func:`answer`), as ``eval.py`` runs the dev set: a scratch folder
holding ``data/da-dev-questions.jsonl`` (that one question's line), its table and their
``configs/``; ``eval.py --llm MODEL --config_path agent.yaml`` in it, in the peer venv, in a
process group of its own (killed after ``timeout``); its ``results_MODEL.json`` is the answer.
``agent.yaml`` is their local-model config (``react_agent_llama_async.yaml``) with the
served model's name. The prompt is theirs: the question and its constraints, not the answer's
format (the benchmark's reformat step brings that in).

The endpoint, without a change to their code: their local-model client
(``LlamaOpenAIClient``) posts to ``http://0.0.0.0:9729/v1``, set in its ``__init__``, and
sends no sampling parameter. A :class:`proxy.Proxy` listens on 127.0.0.1:9729 (:data:`PORT`),
forwards to the given base URL, times each step, and fills in what the request leaves out:
temperature 0.2, top_p 1.0, frequency_penalty 0 (``README_eval.md``: "for all the models on
the validation set") and max_tokens 1024 (the config's ``llm.params``). One peer run at a time.

Two settings for a stand-in of their code (the smoke test's, tests/test_eval_peer.py):
``DABENCH_PEER_PYTHON`` names an interpreter to run it with instead of building the venv,
``DABENCH_PEER_PORT`` where the proxy listens instead of 9729 (their client posts to 9729).

Scoring: the answers go through :func:`dabench.report` (Lily's strict and after-reformat ABQ,
the same reformat step on the same model, the same table), and ``<stem>-responses.jsonl`` and
``<stem>-reformatted.jsonl`` through their ``eval_closed_form.py`` (:func:`judge`), whose
"Accuracy by Question" is over the questions with a non-empty answer.
"""
from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dabench
import fetch
from proxy import Proxy

TAKEN = ("pipeline", "examples/DA-Agent/eval_closed_form.py", "examples/DA-Agent/utils")
CONFIG = "pipeline/configs/agent_configs/react_agent_llama_async.yaml"
DRIVER = "pipeline/activities/eval.py"
JUDGE = "examples/DA-Agent/eval_closed_form.py"
PORT = 9729  # LlamaOpenAIClient's api_base, http://0.0.0.0:9729/v1, fixed in its __init__
SENT = {"temperature": 0.2, "top_p": 1.0, "frequency_penalty": 0.0, "max_tokens": 1024}
UNDECLARED = ["tenacity"]                                # llm/client/*.py import it
KERNEL = ["scipy", "scikit-learn", "seaborn", "matplotlib"]  # as Lily's kernel, and their Dockerfile


def source(repo: str | None = None, commit: str | None = None) -> Path:
    """``pipeline/`` and ``examples/DA-Agent``'s judge at ``commit``, in the eval cache."""
    commit = commit or os.environ.get("DABENCH_COMMIT") or dabench.PINNED
    target = fetch.cache_dir() / "dabench-peer" / commit[:12]
    if (target / "complete").exists():
        return target
    where = Path(repo or os.environ.get("DABENCH_REPO") or dabench._clone())
    git = ["git", "-C", str(where)] if (where / ".git").exists() else \
        ["git", f"--git-dir={where}"]
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    archive = subprocess.run([*git, "archive", "--format=tar", commit, *TAKEN],
                             capture_output=True, check=False)
    if archive.returncode:
        raise SystemExit(f"Error: {where} at {commit[:12]} has no {', '.join(TAKEN)}: "
                         f"{archive.stderr.decode().strip()[:200]}; point DABENCH_REPO at a "
                         "whole copy of the benchmark's repository")
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    (target / "complete").write_text(commit + "\n")
    return target


def requirements(src: Path) -> list[str]:
    """``install_requires`` of their ``setup.py`` (read, not run), and what they import
    undeclared, and the kernel's analysis libraries."""
    tree = ast.parse((src / "pipeline" / "setup.py").read_text(encoding="utf-8"))
    declared = next((ast.literal_eval(k.value) for node in ast.walk(tree)
                     if isinstance(node, ast.Call) for k in node.keywords
                     if k.arg == "install_requires"), None)
    if not isinstance(declared, list):
        raise SystemExit(f"Error: no install_requires in {src / 'pipeline' / 'setup.py'}")
    return list(dict.fromkeys([str(r) for r in declared] + UNDECLARED + KERNEL))


def venv(src: Path, python: str = sys.executable, log: Callable[[str], None] = print) -> Path:
    """Their virtual environment (``$LILY_EVAL_CACHE/peer-venv``), built once from PyPI for
    these requirements; returns its python."""
    reqs = requirements(src)
    root = fetch.cache_dir() / "peer-venv"
    stamp = root / "lily-peer.json"
    digest = hashlib.sha256("\n".join(reqs).encode()).hexdigest()[:16]
    bin_python = root / "bin" / "python"
    if stamp.exists() and json.loads(stamp.read_text()).get("requirements") == digest:
        return bin_python
    log(f"building the DA-Agent's virtual environment in {root} ({len(reqs)} requirements)")
    shutil.rmtree(root, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(root)], check=True)
    subprocess.run([str(bin_python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
                   check=True)
    done = subprocess.run([str(bin_python), "-m", "pip", "install", "--quiet", *reqs],
                          check=False)
    if done.returncode:
        raise SystemExit(f"Error: pip could not install the DA-Agent's requirements into "
                         f"{root}; see pip's message above, then run again")
    stamp.write_text(json.dumps({"requirements": digest, "list": reqs}) + "\n")
    return bin_python


def agent_config(src: Path, model: str, dest: Path) -> Path:
    """Their local-model agent config with the served model's name."""
    text = (src / CONFIG).read_text(encoding="utf-8")
    named, n = re.subn(r"(?m)^(  model_name:).*$", lambda m: f"{m.group(1)} {model}", text,
                       count=1)
    if n != 1:
        raise SystemExit(f"Error: no llm model_name in {src / CONFIG}")
    dest.write_text(named, encoding="utf-8")
    return dest


@dataclass
class Answer:
    id: int
    response: str
    seconds: float
    steps: int             # model calls through the proxy
    tokens_in: int | None
    tokens_out: int | None
    why: str = ""          # "" when eval.py finished; else what stopped it


def _raw_questions(data: Path) -> dict[int, str]:
    return {json.loads(line)["id"]: line for line in
            (data / dabench.QUESTIONS).read_text(encoding="utf-8").splitlines() if line.strip()}


def answer(q: dabench.Question, line: str, data: Path, src: Path, python: Path, model: str,
           proxy: Proxy, work: Path, timeout: float) -> Answer:
    """One question through their ``eval.py`` in a scratch folder of its own."""
    shutil.rmtree(work, ignore_errors=True)
    tables = work / "data" / "da-dev-tables"
    tables.mkdir(parents=True)
    (work / "data" / dabench.QUESTIONS).write_text(line + "\n", encoding="utf-8")
    shutil.copyfile(data / dabench.TABLES / q.file_name, tables / q.file_name)
    (work / "configs").symlink_to(src / "pipeline" / "configs")
    config = agent_config(src, model, work / "agent.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PYTHON"))}
    env["PYTHONPATH"] = str(src / "pipeline" / "src")
    env["HOME"] = str(work / "home")  # their kernel's IPython and matplotlib files go there
    (work / "home").mkdir()
    label = re.sub(r"[^\w.-]", "_", model)  # eval.py names its results file after --llm
    proxy.task = str(q.id)
    started = time.monotonic()
    with (work / "eval.log").open("wb") as log:
        proc = subprocess.Popen([str(python), str(src / DRIVER), "--llm", label,
                                 "--config_path", str(config)], cwd=work, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:  # their kernels are children of eval.py: the whole group goes
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    seconds = time.monotonic() - started
    steps = proxy.of_task(str(q.id))
    usage = [e.usage or {} for e in steps]
    results = work / f"results_{label}.json"
    response, why = "", ""
    if code is None:
        why = f"timed out after {timeout:.0f} s"
    elif code or not results.exists():
        tail = (work / "eval.log").read_text(encoding="utf-8", errors="replace").strip()
        why = f"eval.py exited {code}: {tail.splitlines()[-1][:160] if tail else ''}"
    else:
        response = str(json.loads(results.read_text())[0].get("response") or "")
    return Answer(q.id, response, seconds, len(steps),
                  sum(u.get("prompt_tokens", 0) for u in usage) if usage else None,
                  sum(u.get("completion_tokens", 0) for u in usage) if usage else None, why)


def judge(src: Path, python: Path, data: Path, responses: Path) -> dict[str, Any]:
    """Their ``eval_closed_form.py`` on a responses file: its three accuracies (fractions),
    and what it printed."""
    with tempfile.TemporaryDirectory(prefix="lily-peer-judge-") as tmp:
        run = subprocess.run([str(python), str(src / JUDGE),
                              "--questions_file_path", str(data / dabench.QUESTIONS),
                              "--labels_file_path", str(data / dabench.LABELS),
                              "--responses_file_path", str(responses)],
                             cwd=tmp, capture_output=True, text=True, check=False)
        if run.returncode:
            return {"error": (run.stderr.strip().splitlines() or ["?"])[-1][:200]}
        found = list(Path(tmp, "eval_outputs").glob("*_evaluation_analysis.json"))
        main = json.loads(found[0].read_text())["main_results"] if found else {}
    return {**main, "printed": run.stdout.splitlines()[:3]}


def run(base_url: str, model: str, questions: list[dabench.Question], data: Path,
        timeout: float, out: Path | None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The DA-Agent on ``questions``: answers, Lily's report of them, their judge's."""
    src = source()
    given = os.environ.get("DABENCH_PEER_PYTHON")
    python = Path(given) if given else venv(src, log=log)
    raw = _raw_questions(data)
    port = int(os.environ.get("DABENCH_PEER_PORT") or PORT)
    try:
        proxy = Proxy(base_url, port=port, defaults=SENT).start()
    except OSError as exc:
        raise SystemExit(f"Error: cannot listen on 127.0.0.1:{port}, where the DA-Agent's "
                         f"client posts ({exc}); stop what holds it (another peer run?)") from None
    answers: list[Answer] = []
    try:
        with tempfile.TemporaryDirectory(prefix="lily-peer-") as tmp:
            for q in questions:
                a = answer(q, raw[q.id], data, src, python, model, proxy, Path(tmp) / str(q.id),
                           timeout)
                answers.append(a)
                dabench.FINAL[dabench.task_name(q)] = a.response
                if out is not None:  # kept as each question ends: a run stopped early keeps it
                    out.parent.mkdir(parents=True, exist_ok=True)
                    with out.with_suffix(".progress.jsonl").open("a") as kept:
                        kept.write(json.dumps({"task": dabench.task_name(q),
                                               "final": a.response, **a.__dict__}) + "\n")
                log(f"dabench-{q.id:<5} {q.level:6} {a.seconds:5.0f}s steps={a.steps} "
                    f"in={a.tokens_in} out={a.tokens_out} {a.why or repr(a.response[-120:])}")
    finally:
        proxy.stop()
        # their sandbox's folders (upload_files, ci_workspace) are under the package itself
        shutil.rmtree(src / "pipeline" / "src" / "infiagent" / "tmp", ignore_errors=True)
    sent = next((e.request_params for e in proxy.exchanges if e.request_params), {})
    summary = dabench.report(questions, base_url, model, out, log)
    theirs: dict[str, Any] = {}
    if out is not None:
        stem = out.with_suffix("")
        for kind in ("responses", "reformatted"):
            theirs[kind] = judge(src, python, data, Path(f"{stem}-{kind}.jsonl"))
            log(f"their eval_closed_form.py on {kind}: "
                f"{'; '.join(theirs[kind].get('printed') or [theirs[kind].get('error', '')])}")
    return {**summary, "peer": "InfiAgent DA-Agent (pipeline/activities/eval.py)",
            "commit": src.name, "sent": sent, "answers": [a.__dict__ for a in answers],
            "eval_closed_form": theirs}
