"""Run the eval suite (bench/eval/tasks.py) through the real Lily kernel against a model.

    python bench/eval/run_eval.py --serve 1.5b            # what `make eval` runs
    python bench/eval/run_eval.py --base-url URL --model NAME [--tasks a,b] [--json FILE]

``--serve 1.5b|0.5b|135m`` fetches that GGUF and llama.cpp's ``llama-server`` if missing
(bench/eval/fetch.py, cached outside the repository), serves it on 127.0.0.1 on a free port
(``--jinja``, ``-t`` threads, ``-c`` context) for the run, and stops it at the end, however the
run ends. Otherwise ``--base-url`` (or ``LILY_EVAL_BASE_URL``, with ``LILY_EVAL_MODEL`` and,
for a hosted model, ``OPENAI_API_KEY``) names any OpenAI-compatible endpoint.

Each task runs in a fresh kernel (kernelspec ``lily``) in a fresh workspace: files, setup
cells, the prompt, then ``/confirm`` for each approval card. What happened is read from
Lily's journal (``lily logs show --json``: answers, tool calls, errors, tokens), the time to
first token and the model steps from a timing proxy between the kernel and the endpoint.
Sampling is Lily's own: the suite sets no temperature and no max_tokens.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dabench
import fetch
from proxy import Proxy
from tasks import ANSWERED, ANSWERED_HELD_OUT, BY_NAME, HELD_OUT, TASKS, Call, Outcome, Task

CARD = re.compile(r"card `([0-9a-f]{8})`")
TEXT_CALL = re.compile(r'"(name|function)"\s*:\s*"|<tool_call>|<tools>|<function=|\[TOOL_CALLS\]')
MAX_CONFIRMS = 6  # run_python may be tried again (3 raised runs a request), then succeed
_INHERITED = ("OPENAI_", "SKILLS_", "LILY_", "JPY_")


@dataclass
class Result:
    task: str
    ok: bool
    why: str
    tools: list[str]
    steps: int
    prompt_tokens: int | None
    completion_tokens: int | None
    ttft: float | None          # seconds to the first token of the task's first model call
    first_prompt_tokens: int | None
    seconds: float
    cards: int
    answer: str
    ran_proposed: bool = False  # the suite ran the cell Lily proposed, as the user would
    model_said: list[str] = field(default_factory=list)  # per step: text or tool names


# -- the kernel ----------------------------------------------------------------------------

class EvalKernel:
    """One Lily kernel in its own workspace, driven through jupyter_client."""

    def __init__(self, base: Path, base_url: str, model: str, timeout: float,
                 kernel_name: str = "lily", extra: dict[str, str] | None = None) -> None:
        from jupyter_client.manager import start_new_kernel
        self.workspace = base / "ws"
        dirs = {d: base / d for d in ("home", "ipython", "user_skills")}
        for d in [self.workspace / "skills", *dirs.values()]:
            d.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(_INHERITED)}
        env.update({"HOME": str(dirs["home"]), "IPYTHONDIR": str(dirs["ipython"]),
                    "SKILLS_USER_DIR": str(dirs["user_skills"]),
                    "SKILLS_WORKSPACE_DIR": str(self.workspace / "skills"),
                    "OPENAI_BASE_URL": base_url, "LILY_MODEL": model,
                    "LILY_TIMEOUT": str(int(timeout)), "LILY_MAX_RETRIES": "0",
                    "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY", "sk-local-eval"),
                    "PYDEVD_DISABLE_FILE_VALIDATION": "1"})
        env.update(extra or {})  # --set: a setting measured (LILY_TEMPERATURE=0)
        self.env = env
        self.proposed: str | None = None
        self._log = (base / "kernel.log").open("wb")  # the kernel's own stderr, not the report's
        self.km, self.kc = start_new_kernel(kernel_name=kernel_name, cwd=str(self.workspace),
                                            env=env, startup_timeout=120, stdout=self._log,
                                            stderr=self._log)

    def run(self, code: str, timeout: float) -> tuple[str, list[dict[str, Any]]]:
        """Run one cell: its status and the outputs it showed (``proposed``: the cell it put
        below, if any)."""
        messages: list[dict[str, Any]] = []
        self.proposed = None
        try:
            reply = self.kc.execute_interactive(code, output_hook=messages.append,
                                                timeout=timeout, allow_stdin=False)
        except TimeoutError:
            self.km.interrupt_kernel()
            with contextlib.suppress(Exception):
                self.kc.get_shell_msg(timeout=30)
            return "timeout", messages
        for p in reply["content"].get("payload") or []:
            if p.get("source") == "set_next_input" and p.get("text"):
                self.proposed = p["text"]
        return reply["content"]["status"], messages

    def python(self, code: str) -> str:
        _, messages = self.run("%%python\n" + code, 60)
        return "".join(m["content"].get("text", "") for m in messages
                       if m["msg_type"] == "stream" and m["content"].get("name") == "stdout")

    def shutdown(self) -> None:
        try:
            self.kc.stop_channels()
        finally:
            self.km.shutdown_kernel(now=True)
            self._log.close()


def cards_in(messages: list[dict[str, Any]]) -> list[str]:
    found: list[str] = []
    for m in messages:
        if m["msg_type"] in ("display_data", "update_display_data"):
            md = m["content"].get("data", {}).get("text/markdown", "")
            found += [c for c in CARD.findall(md) if c not in found]
    return found


def journal(workspace: Path, prompt: str) -> dict[str, Any]:
    """The task's turns as Lily journaled them (``lily logs show --json``), from the prompt on."""
    lily = [sys.executable, "-m", "lily_kernel.cli"]
    listing = subprocess.run([*lily, "logs", "--workspace", str(workspace), "--json"],
                             capture_output=True, text=True, timeout=60)
    sessions = json.loads(listing.stdout or "[]")
    if not sessions:
        return {"answers": [], "calls": [], "errors": ["no journal"], "tokens_in": None,
                "tokens_out": None}
    shown = subprocess.run([*lily, "logs", "show", sessions[0]["id"], "--workspace",
                            str(workspace), "--json"], capture_output=True, text=True, timeout=60)
    turns = json.loads(shown.stdout)["turns"]
    start = next((i for i, t in enumerate(turns) if t["text"].strip() == prompt.strip()), 0)
    out: dict[str, Any] = {"answers": [], "calls": [], "errors": [], "tokens_in": None,
                           "tokens_out": None}
    for t in turns[start:]:
        out["answers"] += t["answers"]
        out["calls"] += [Call(c["name"], c["arguments"], c["result"]) for c in t["tool_calls"]]
        out["errors"] += t["errors"]
        for key in ("tokens_in", "tokens_out"):
            if t[key] is not None:
                out[key] = (out[key] or 0) + t[key]
    return out


def run_task(task: Task, proxy: Proxy, model: str, root: Path, timeout: float,
             extra: dict[str, str] | None = None) -> Result:
    base = root / task.name
    shutil.rmtree(base, ignore_errors=True)
    proxy.task = "setup:" + task.name
    kernel = EvalKernel(base, proxy.url, model, timeout, extra=extra)
    started = time.monotonic()
    cards = 0
    ran_proposed = False
    j: dict[str, Any] = {"answers": [], "calls": [], "errors": [], "tokens_in": None,
                         "tokens_out": None}
    outcome = Outcome([], [], [], kernel.workspace, kernel.python)
    why = "harness error"
    try:
        for name, text in task.files.items():
            (kernel.workspace / name).write_text(text, encoding="utf-8")
        for name, source in task.copies.items():
            shutil.copyfile(source, kernel.workspace / name)
        for cell in task.setup:
            kernel.run(cell, 60)
        proxy.task = task.name
        started = time.monotonic()
        status, messages = kernel.run(task.prompt, timeout)
        proposed = kernel.proposed
        seen: list[str] = []
        while status != "timeout" and cards < MAX_CONFIRMS:
            waiting = [c for c in cards_in(messages) if c not in seen]
            if not waiting:
                break
            seen.append(waiting[0])
            cards += 1
            status, messages = kernel.run(f"/confirm {waiting[0]}", timeout)
            proposed = kernel.proposed or proposed
        seconds = time.monotonic() - started
        if task.run_proposed and proposed and status != "timeout":
            kernel.run(proposed, 60)  # the user runs the cell Lily put below
            ran_proposed = True
        proxy.task = "check:" + task.name
        j = journal(kernel.workspace, task.prompt)
        outcome = Outcome(j["answers"], j["calls"], j["errors"], kernel.workspace, kernel.python,
                          cards)
        why = "timed out" if status == "timeout" else (task.check(outcome) or "")
        if why and j["errors"]:
            why += f"; Lily: {j['errors'][-1][:80]}"
    except Exception as exc:
        why = f"harness error: {type(exc).__name__}: {exc}"[:200]
        seconds = time.monotonic() - started
    finally:
        kernel.shutdown()
    steps = proxy.of_task(task.name)
    if why:
        cause = diagnose(outcome, steps)
        why += f" [{cause}]" if cause else ""
    first = steps[0] if steps else None
    return Result(task.name, not why, why, outcome.tools, len(steps), j["tokens_in"],
                  j["tokens_out"], first.first_token if first else None,
                  (first.usage or {}).get("prompt_tokens") if first else None, seconds, cards,
                  outcome.final[:300], ran_proposed,
                  [e.text[:200] if e.text.strip() else f"calls {e.calls}" if e.calls
                   else f"(empty, finish={e.finish})" for e in steps])


def diagnose(outcome: Outcome, steps: list[Any]) -> str:
    """The failure shape the model's steps show (issue 30's kinds), if one does."""
    said = [e for e in steps if e.status == 200]
    if said and said[-1].finish == "length":
        return "answer cut at max_tokens"
    texts = [e.text.strip() for e in said if not e.calls and TEXT_CALL.search(e.text)
             and "response_format" not in (e.request_params or {})]  # not a required call
    if texts:
        whole = all(t[:1] in "{<`[" and t[-1:] in "}>`]" for t in texts)
        return "tool call written as text" if whole else "tool call shown inside prose"
    if said and not said[-1].text.strip() and not said[-1].calls:
        return "empty final answer"
    calls = [tuple(e.calls) for e in said if e.calls]
    if len(calls) >= 3 and len(set(calls)) <= len(calls) // 2:
        return f"repeated calls ({', '.join(calls[-1])})"
    if any(e.status != 200 for e in steps):
        return f"endpoint answered HTTP {next(e.status for e in steps if e.status != 200)}"
    if not outcome.calls and said:
        return "no tool called"
    return ""


# -- serving a local model -----------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """llama-server on 127.0.0.1, stopped (its whole process group) on exit."""

    def __init__(self, which: str, threads: int, ctx: int) -> None:
        self.gguf = fetch.fetch_model(which)
        binary = fetch.build_server()
        self.port = free_port()
        self.log = fetch.cache_dir() / f"llama-server-{which}.log"
        cmd = [str(binary), "-m", str(self.gguf), "--host", "127.0.0.1", "--port", str(self.port),
               "--jinja", "-t", str(threads), "-c", str(ctx), "-np", "1"]
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=self.log.open("wb"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}/v1"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"Error: llama-server exited ({self.proc.returncode}); "
                                 f"see {self.log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise SystemExit(f"Error: llama-server did not become healthy in 300 s; see {self.log}")

    def props(self) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/props", timeout=5) as r:
                data: dict[str, Any] = json.loads(r.read())
                return data
        except (OSError, ValueError):
            return {}

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


# -- report --------------------------------------------------------------------------------

def _fmt(v: Any, spec: str = "") -> str:
    return "-" if v is None else format(v, spec)


def table(results: list[Result]) -> str:
    rows = [("task", "ok", "steps", "tok in", "tok out", "ttft s", "time s", "cards", "tools",
             "why")]
    for r in results:
        rows.append((r.task, "yes" if r.ok else "NO", str(r.steps), _fmt(r.prompt_tokens),
                     _fmt(r.completion_tokens), _fmt(r.ttft, ".1f"), f"{r.seconds:.0f}",
                     str(r.cards), ",".join(r.tools) or "-", r.why or ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " +
                     row[-1])
    return "\n".join(lines)


def markdown(path: Path) -> str:
    """A results file (--json) as the Markdown table bench/README.md keeps."""
    data = json.loads(path.read_text())
    out = [f"{data['model']} at Lily {data['commit']}: **{data['passed']}/{data['total']}**"
           f" ({100 * data['passed'] / max(data['total'], 1):.0f}%)", "",
           "| task | ok | steps | tokens in/out | ttft s | time s | tools | why it failed |",
           "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in data["results"]:
        out.append(f"| {r['task']} | {'yes' if r['ok'] else '**no**'} | {r['steps']} | "
                   f"{_fmt(r['prompt_tokens'])}/{_fmt(r['completion_tokens'])} | "
                   f"{_fmt(r['ttft'], '.1f')} | {r['seconds']:.0f} | "
                   f"{', '.join(r['tools']) or '-'} | {r['why'].replace('|', '/')} |")
    return "\n".join(out)


def _peer(base_url: str, model: str, questions: list[dabench.Question], data: Path,
          timeout: float, out: Path | None) -> int:
    """The benchmark's own DA-Agent on the questions (bench/eval/peer.py)."""
    import peer
    print(f"model {model} at {base_url}; InfiAgent's DA-Agent; {len(questions)} questions",
          flush=True)
    summary = peer.run(base_url, model, questions, data, timeout, out)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"model": model, "base_url": base_url, "suite": "dabench-peer",
                                   "dabench": summary}, indent=2))
    return 0


def _rescore(progress: Path, questions: list[dabench.Question], base_url: str, model: str,
             out: Path | None) -> int:
    """The report of the answers kept in ``progress`` (the last line of a task wins)."""
    for line in progress.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if isinstance(row.get("final"), str):
            dabench.FINAL[row["task"]] = row["final"]
    asked = [q for q in questions if dabench.task_name(q) in dabench.FINAL]
    print(f"{progress}: {len(asked)} of {len(questions)} questions answered", flush=True)
    summary = dabench.report(asked, base_url, model, out)
    if out:
        out.write_text(json.dumps({"model": model, "base_url": base_url, "rescored": str(progress),
                                   "dabench": summary}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Lily's real-model eval suite")
    p.add_argument("--serve", choices=sorted(fetch.MODELS),
                   help="serve this GGUF with llama-server for the run")
    p.add_argument("--base-url", default=os.environ.get("LILY_EVAL_BASE_URL"))
    p.add_argument("--model", default=os.environ.get("LILY_EVAL_MODEL"))
    p.add_argument("--tasks", help="comma-separated task names (default: all)")
    p.add_argument("--held-out", action="store_true",
                   help="run the held-out tasks (tasks.HELD_OUT; with --suite answer, "
                        "tasks.ANSWERED_HELD_OUT) instead of the suite")
    p.add_argument("--suite", choices=["lookup", "answer", "dabench", "dabench-peer"],
                   default="lookup",
                   help="dabench: InfiAgent-DABench dev questions (bench/eval/dabench.py; "
                        "DABENCH_REPO names a local copy of its repository); dabench-peer: "
                        "the same questions through the benchmark's own DA-Agent "
                        "(bench/eval/peer.py)")
    p.add_argument("--from-id", type=int, default=dabench.FROM_ID,
                   help="dabench: questions with id >= this")
    p.add_argument("--limit", type=int, default=dabench.LIMIT,
                   help="dabench: the first N of them by id (0: all)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=8192)
    p.add_argument("--timeout", type=float, default=600,
                   help="seconds per cell (dabench-peer: per question)")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--set", action="append", default=[], metavar="VAR=VALUE",
                   help="an environment variable for every task's kernel, to measure a "
                        "setting (LILY_TEMPERATURE=0); repeatable")
    p.add_argument("--rescore", type=Path, metavar="PROGRESS",
                   help="dabench, dabench-peer: score the final answers a run kept in its "
                        "<json>.progress.jsonl (a run stopped early; runs joined with cat) "
                        "with the benchmark's rules and reformat step, and exit")
    p.add_argument("--list", action="store_true", help="list the tasks and exit")
    p.add_argument("--markdown", type=Path, metavar="JSON",
                   help="print a results file as a Markdown table and exit")
    args = p.parse_args(argv)
    if args.markdown:
        print(markdown(args.markdown))
        return 0
    questions: list[dabench.Question] = []
    if args.suite.startswith("dabench"):
        data = dabench.data_dir()
        questions = dabench.questions(data, args.from_id, args.limit or None)
        suite = dabench.tasks(data, questions)
        if args.tasks:
            chosen = set(args.tasks.split(","))
            suite = [t for t in suite if t.name in chosen or t.name.split("-")[-1] in chosen]
    else:
        suite = (ANSWERED_HELD_OUT if args.held_out else ANSWERED) if args.suite == "answer" \
            else HELD_OUT if args.held_out else TASKS
    if args.rescore:
        if not args.base_url or not questions:
            p.error("--rescore takes a dabench suite and --base-url (the reformat step's model)")
        return _rescore(args.rescore, questions, args.base_url, args.model or "default",
                        args.json)
    if args.list:
        for t in suite:
            print(f"{t.name:16} {t.prompt}")
        return 0
    tasks = [BY_NAME[n] for n in args.tasks.split(",")] if args.tasks and \
        args.suite == "lookup" else suite
    if any("=" not in kv for kv in args.set):
        p.error("--set takes VAR=VALUE")
    extra = dict(kv.split("=", 1) for kv in args.set)
    if not args.serve and not args.base_url:
        p.error("give --serve MODEL, or --base-url (LILY_EVAL_BASE_URL)")
    server = None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so `finally` stops the server
    try:
        if args.serve:
            server = LlamaServer(args.serve, args.threads, args.ctx)
            base_url = server.url
            model = args.model or fetch.MODELS[args.serve][2].removesuffix(".gguf")
            print(f"serving {server.gguf.name} on {base_url} ({' '.join(server.cmd[1:])})",
                  flush=True)
        else:
            base_url, model = args.base_url, args.model or "default"
        if args.suite == "dabench-peer":
            return _peer(base_url, model, [q for q in questions if any(
                t.name == dabench.task_name(q) for t in tasks)], data, args.timeout, args.json)
        proxy = Proxy(base_url).start()
        import lily_kernel  # the Lily the kernels run (PYTHONPATH may name another checkout)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=Path(lily_kernel.__file__).parent).stdout.strip()
        print(f"model {model} at {base_url}; Lily at {commit or '?'}; {len(tasks)} tasks"
              + "".join(f"; {k}={v}" for k, v in extra.items()), flush=True)
        results: list[Result] = []
        with tempfile.TemporaryDirectory(prefix="lily-eval-") as tmp:
            for task in tasks:
                r = run_task(task, proxy, model, Path(tmp), args.timeout, extra)
                results.append(r)
                print(f"{r.task:16} {'ok ' if r.ok else 'FAIL'} steps={r.steps} "
                      f"in={_fmt(r.prompt_tokens)} out={_fmt(r.completion_tokens)} "
                      f"ttft={_fmt(r.ttft, '.1f')}s {r.seconds:.0f}s tools={','.join(r.tools) or '-'}"
                      f"{'  ' + r.why if r.why else ''}", flush=True)
                if args.json:  # kept as each task ends: a run stopped early loses no answer
                    args.json.parent.mkdir(parents=True, exist_ok=True)
                    with args.json.with_suffix(".progress.jsonl").open("a") as kept:
                        kept.write(json.dumps({**asdict(r), "final": dabench.FINAL.get(
                            r.task)}) + "\n")
        proxy.stop()
        passed = sum(r.ok for r in results)
        print()
        print(table(results))
        print(f"\nsuccess: {passed}/{len(results)} ({100 * passed / max(len(results), 1):.0f}%)")
        benchmark = dabench.report(questions, base_url, model, args.json) if questions else None
        if args.json:
            sent = next((e.request_params for e in proxy.exchanges
                         if e.path.endswith("/chat/completions") and e.request_params), {})
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({
                "model": model, "base_url": base_url, "commit": commit, "sent": sent,
                "set": extra, "suite": args.suite, "dabench": benchmark,
                "passed": passed, "total": len(results),
                "results": [asdict(r) for r in results]}, indent=2))
        return 0
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
