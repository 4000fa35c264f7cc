"""The figures tests used to assert as wall-clock limits, each against a floor in the same run.

    .venv/bin/python bench/limits.py redaction [--n 30]   8 lines of 80 KB built to make a regex
                                                          backtrack / 80 KB of ordinary prose
    .venv/bin/python bench/limits.py variables [--n 30]   list_variables over 10,000 names /
                                                          one "name: type" line per name
    .venv/bin/python bench/limits.py typed     [--n 10]   a typed call with odd JSON, to its one
                                                          error line / one Python pass over the text
    .venv/bin/python bench/limits.py interrupt [--n 5]    interrupt → reply of a running /command
                                                          in the Lily kernel / of time.sleep in ipykernel

Tests assert what these paths do (the line is redacted, the listing bounded, the call refused,
the interrupt ends the cell and the kernel lives); how long they take is measured here, where a
busy machine slows both sides alike (docs/testing.md#layout: tests never assert durations).
Rows print as bench/perf.py's do: medians, p10/p90, and the ratio of the medians, the two sides
alternating. ``--tree DIR`` measures another checkout with the same harness.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perf import TREE, row  # perf puts --tree first on the path

KEY = "sk-bench-0123456789abcdef0123456789abcdef"

#: The lines tests/agent/test_attack_model.py redacts: each 80 KB, each a worst case of one rule.
LINES = {
    "word": "/x " + "a" * 80_000,
    "schemes": "/x " + "a://" * 20_000,
    "userinfos": "/x " + "http://u:p@" * 7_300,
    "ats": "/x " + "://" + "@" * 80_000,
    "keys": "/x " + "key=" * 20_000,
    "model": "/model " + "base_url=http://" + "a" * 80_000,
    "auth": "/x " + "Authorization: Basic " * 4_000,
    "bearers": "/x Bearer " + "Bearer" * 13_000,
}

#: The odd JSON values of tests/typed/test_attack_typed.py, each given to the bundled
#: read_receipts skill as its one parameter.
ODD_VALUES = {
    "huge number": "9" * 5000,
    "deep arrays": "[" * 100_000 + "]" * 100_000,
    "deep objects": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "lone surrogate": '"\\ud800"',
    "NaN": "NaN",
    "huge float": "1" + "0" * 5000 + ".5",
}
ODD = {name: '{"read_receipts": ' + value + "}" for name, value in ODD_VALUES.items()}


def alternate(n: int, lily: Callable[[], object], base: Callable[[], object]
              ) -> tuple[list[float], list[float]]:
    """``n`` timings of each, alternating which runs first, after one warm-up of both."""
    lily(), base()
    out: tuple[list[float], list[float]] = ([], [])
    for i in range(n):
        for side, fn in ((0, lily), (1, base)) if i % 2 == 0 else ((1, base), (0, lily)):
            t0 = time.perf_counter()
            fn()
            out[side].append(time.perf_counter() - t0)
    return out


def redaction(n: int) -> None:
    """A hostile command line as the journal keeps it (router.redact, then redaction.redact)
    against an ordinary line of the same length: linear time makes the ratio about 1."""
    import lily_kernel.redaction
    from lily_kernel.commands import router
    env = {"OPENAI_API_KEY": KEY}
    os.environ["OPENAI_API_KEY"] = KEY

    def redact(line: str) -> None:
        router.redact(line)
        lily_kernel.redaction.redact(line, env)
    for name, line in LINES.items():
        words = "/x " + ("the quick brown fox jumps over the lazy dog " * 2_000)
        prose = words[:len(line)]
        row(f"redact 80 KB ({name})", *alternate(n, lambda line=line: redact(line),
                                                  lambda prose=prose: redact(prose)), "prose")


def variables(n: int) -> None:
    """The model's list_variables over a namespace of 10,000 names."""
    from lily_kernel.tools import notebook_tools

    class Book:
        def __init__(self, ns: dict[str, object]) -> None:
            self.ns = ns

        def namespace(self) -> dict[str, object]:
            return self.ns

        def hidden(self) -> dict[str, object]:
            return {}

    ns: dict[str, object] = {f"v{i}": i for i in range(10_000)}
    book = Book(ns)
    row("list_variables, 10,000 names", *alternate(
        n, lambda: notebook_tools.list_variables(book),
        lambda: "\n".join(f"{k}: {type(v).__name__}" for k, v in ns.items())), "name: type lines")


def typed(n: int) -> None:
    """A programmatic typed call whose JSON is odd, to its one error line."""
    from lily_kernel.commands.runner import Runner
    from lily_kernel.errors import CommandError
    from lily_kernel.session.session import Session
    base = Path(tempfile.mkdtemp(prefix="lily-limits-"))
    for folder in (base / "ws" / "skills", base / "user", base / "home"):
        folder.mkdir(parents=True)
    session = Session(workspace=base / "ws", journal=False,
                      env={"SKILLS_WORKSPACE_DIR": str(base / "ws" / "skills"),
                           "SKILLS_USER_DIR": str(base / "user"), "HOME": str(base / "home"),
                           "SKILLS_EXAMPLES": "1"})  # read_receipts is an example skill
    assert session.snapshot.get("read_receipts") is not None, session.snapshot.diagnostics
    runner = Runner(lambda: session)
    for name, text in ODD.items():
        def lily(text: str = text) -> None:
            try:
                list(runner.command(f"/skill read_receipts {text}"))
            except CommandError:
                return
            raise AssertionError("the odd call was accepted")

        def floor(text: str = text) -> None:
            for _ch in text:  # json.loads gives up at depth 1,000: no floor for deep input
                pass
        row(f"typed call, odd JSON ({name})", *alternate(n, lily, floor), "a Python pass over it")


SLOW_SKILL = "---\nsummary: Sleeps.\ninvocation_mode: tool_dispatch\ncommand: slow\ncommand_tool: slow_tool\n---\nSleep.\n"
SLOW_TOOL = ("%%python\nimport lily, time\n@lily.tool\n"
             "def slow_tool(input: str = ''):\n    time.sleep(30)\n    return 'done'")


def interrupt(n: int) -> None:
    """Interrupt → execute_reply: a running Lily command against ipykernel's time.sleep."""
    from jupyter_client.manager import start_new_kernel
    base = Path(tempfile.mkdtemp(prefix="lily-limits-"))
    skills = base / "ws" / "skills"
    for folder in (skills / "slow", base / "user", base / "home"):
        folder.mkdir(parents=True)
    (skills / "slow" / "SKILL.md").write_text(SLOW_SKILL, encoding="utf-8")
    env = {**os.environ, "SKILLS_WORKSPACE_DIR": str(skills), "SKILLS_USER_DIR": str(base / "user"),
           "HOME": str(base / "home"), "XDG_DATA_HOME": str(base / "data"),
           "XDG_CONFIG_HOME": str(base / "config"), "LILY_DATA_DIR": str(base / "lily-data")}
    kernels = {name: start_new_kernel(kernel_name=name, cwd=str(base / "ws"), env=env,
                                      startup_timeout=60) for name in ("lily", "python3")}
    cells = {"lily": "/slow", "python3": "import time; time.sleep(30)"}

    def once(name: str) -> float:
        km, kc = kernels[name]
        msg_id = kc.execute(cells[name], stop_on_error=False)  # the next round runs too
        time.sleep(0.5)  # well inside the 30 s the cell would take
        t0 = time.perf_counter()
        km.interrupt_kernel()
        while True:
            reply = kc.get_shell_msg(timeout=30)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        elapsed = time.perf_counter() - t0
        assert reply["content"]["status"] == "error", reply["content"]
        return elapsed

    try:
        _, lily_kc = kernels["lily"]
        for cell in (SLOW_TOOL, "/reload_skills"):
            reply = lily_kc.execute_interactive(cell, timeout=30, output_hook=lambda msg: None)
            assert reply["content"]["status"] == "ok", reply["content"]
        out: dict[str, list[float]] = {"lily": [], "python3": []}
        for i in range(n):
            for name in ("lily", "python3") if i % 2 == 0 else ("python3", "lily"):
                out[name].append(once(name))
        row("interrupt → reply", out["lily"], out["python3"], "ipykernel")
    finally:
        for km, kc in kernels.values():
            kc.stop_channels()
            km.shutdown_kernel(now=True)


def main() -> None:
    """Run one figure: ``limits.py redaction|variables|typed|interrupt [--n N] [--tree DIR]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("figure", choices=["redaction", "variables", "typed", "interrupt"])
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--tree", default=None, help="another checkout to measure")
    args = parser.parse_args()
    print(f"tree: {TREE}", flush=True)
    defaults = {"redaction": 30, "variables": 30, "typed": 10, "interrupt": 5}
    figures = {"redaction": redaction, "variables": variables, "typed": typed,
               "interrupt": interrupt}
    figures[args.figure](args.n or defaults[args.figure])


if __name__ == "__main__":
    main()
