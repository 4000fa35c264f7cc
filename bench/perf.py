"""Issue 18's figures, one command a row, each Lily against its baseline in one interleaved run.

    .venv/bin/python bench/perf.py start     [--n 9]        kernel start-to-ready / ipykernel's
    .venv/bin/python bench/perf.py memory    [--n 5]        kernel RSS after start / ipykernel's
    .venv/bin/python bench/perf.py first     [--n 9]        launch → first `/help` result / ipykernel's
                                                            launch → first `pass`
    .venv/bin/python bench/perf.py cell      [--n 200] [--history N]
                                                            `/help` / ipykernel displaying its bundle
                                                            (after N cells: a session that long)
    .venv/bin/python bench/perf.py agent     [--sessions 3] agent request / bare openai stream at
                                                            turns 1, 50 and 200 (100 skills, 20 tools)
    .venv/bin/python bench/perf.py snapshot  [--n 9] [--clock cpu]
                                                            a cold load of 10,000 skills / the
                                                            bare stat+read (issue 31: <= 12x)
    .venv/bin/python bench/perf.py reload    [--n 9] [--clock wall] [--workspace]
                                                            `/reload_skills` of 10,000 skills, one
                                                            changed / the bare stat walk (<= 2x);
                                                            --workspace: the workspace's own,
                                                            trusted (issue 41 §6)
    .venv/bin/python bench/perf.py loadext   [--n 9] [--baseline-python PY]
                                                            `%load_ext lily` CPU / jupyter_ai_magics'
    .venv/bin/python bench/perf.py aa        [--n 200]      the cell harness against itself: the
                                                            same cell, two positions (A/A)
    .venv/bin/python bench/perf.py profile   [--what cell,agent,snapshot,loadext]
                                                            where Lily's own time goes (cProfile)
    .venv/bin/python bench/perf.py start|memory|first|cell|loadext --ab DIR
                                                            and a Lily kernel of checkout DIR in
                                                            the same rounds (before / after)
    .venv/bin/python bench/perf.py snapshot --ab DIR [--n 9] [--clock cpu]
                                                            this checkout's snapshot row and DIR's,
                                                            short child processes alternating

Every figure row prints ``<row>: lily median M (p10 A, p90 B)  base median ...  ratio R``; the
ratio is the median of Lily over the median of the baseline, both taken in the same run with
the two interleaved (kernels: each round in a new random order, no kernel answering
twice in a row, ``kernel_roundtrip.fair_order``; ``aa`` checks that order). ``--tree DIR`` runs another checkout of Lily (the code before a change)
with the same harness: its ``lily_kernel`` comes first on the path, for the kernels too.
Only ratios are meant to be compared across runs: these machines are shared and noisy.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _tree(argv: list[str]) -> Path:
    """The checkout to measure: ``--tree DIR`` or this one; put first on every path."""
    tree = HERE.parent
    if "--tree" in argv:
        tree = Path(argv[argv.index("--tree") + 1]).resolve()
    sys.path.insert(0, str(tree))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])
    return tree


TREE = _tree(sys.argv)

# Every process this harness starts (kernels, `%load_ext` shells) may keep compiled bytecode, as
# any installed package does: this environment sets PYTHONDONTWRITEBYTECODE, which would make
# Lily (run from its source tree) recompile every module at every start while ipykernel and
# jupyter-ai-magics (installed with their .pyc) do not. The cache goes to a temp folder.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ.setdefault("PYTHONPYCACHEPREFIX", os.path.join(tempfile.gettempdir(), "lily-perf-pyc"))


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def row(label: str, lily: list[float], base: list[float], base_name: str,
        unit: str = "ms", scale: float = 1000.0) -> None:
    """Print one figure: medians, p10/p90 of both sides, and the ratio of the medians."""
    def part(values: list[float]) -> str:
        return (f"median {statistics.median(values) * scale:8.2f} {unit} "
                f"(p10 {pct(values, .1) * scale:.2f}, p90 {pct(values, .9) * scale:.2f})")
    ratio = statistics.median(lily) / statistics.median(base)
    diff = (statistics.median(lily) - statistics.median(base)) * scale
    print(f"{label}: lily {part(lily)}  {base_name} {part(base)}  ratio {ratio:.3f}x "
          f"({diff:+.2f} {unit}), n={len(lily)}", flush=True)


# -- kernels -----------------------------------------------------------------------------

def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _ab_env(tree: str | None) -> dict[str, str] | None:
    """The environment of a kernel running checkout ``tree`` (``--ab DIR``) instead of
    this harness's tree; None without one."""
    if tree is None:
        return None
    rest = os.environ["PYTHONPATH"].split(os.pathsep)[1:]  # _tree put TREE first
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(tree).resolve()), *rest])}


def _cpu_s(pid: int) -> float:
    """CPU time the process ``pid`` has used so far, all its threads (ns resolution)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as fh:
            total += int(fh.read().split()[0])
    return total / 1e9


def _start(name: str, cwd: str, env: dict[str, str] | None = None) -> tuple[float, int, float]:
    from jupyter_client.manager import start_new_kernel
    t0 = time.perf_counter()
    km, kc = start_new_kernel(kernel_name=name, cwd=cwd, startup_timeout=60,
                              **({"env": env} if env is not None else {}))
    elapsed = time.perf_counter() - t0
    cpu = _cpu_s(km.provisioner.process.pid)  # its CPU time to ready: robust to load
    time.sleep(0.3)  # let the kernel settle (its IO threads, the first idle)
    rss = _rss_kb(km.provisioner.process.pid)
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    return elapsed, rss, cpu


def kernels(n: int, what: str, ab: str | None = None) -> None:
    """Start-to-ready (launch → kernel_info reply) and RSS after start, alternating; with
    ``ab``, a Lily kernel of that checkout takes its turn in the same rounds."""
    cwd = tempfile.mkdtemp(prefix="lily-perf-")
    sides = {"python3": ("python3", None), "lily": ("lily", None)}
    if ab is not None:
        sides["ab"] = ("lily", _ab_env(ab))
    out: dict[str, list[tuple[float, int, float]]] = {side: [] for side in sides}
    for name, env in sides.values():  # warm the disk cache
        _start(name, cwd, env)
    order = list(sides)
    for i in range(n):
        for side in order[i % len(order):] + order[:i % len(order)]:
            name, env = sides[side]
            out[side].append(_start(name, cwd, env))
    pick, label, unit, scale = ((0, "start-to-ready", "ms", 1000.0) if what == "start" else
                                (1, "memory after start (RSS)", "MB", 1 / 1024))

    def values(side: str, index: int) -> list[float]:
        return [float(sample[index]) for sample in out[side]]
    row(label, values("lily", pick), values("python3", pick), "ipykernel", unit=unit,
        scale=scale)
    if ab is not None:
        row(f"{label} of {ab}", values("ab", pick), values("python3", pick), "ipykernel",
            unit=unit, scale=scale)
        row(f"{label}, this tree / {ab}", values("lily", pick), values("ab", pick), ab,
            unit=unit, scale=scale)
    if what == "start":  # the kernel process's own CPU time to ready: what load hides
        row("CPU time to ready", values("lily", 2), values("python3", 2), "ipykernel")
        if ab is not None:
            row(f"CPU time to ready of {ab}", values("ab", 2), values("python3", 2), "ipykernel")
            row(f"CPU time to ready, this tree / {ab}", values("lily", 2), values("ab", 2), ab)


def _first(name: str, cwd: str, code: str, env: dict[str, str] | None) -> float:
    """Launch → the first cell's reply: what a user waits for before the first result."""
    sys.path.insert(0, str(HERE))
    from jupyter_client.manager import start_new_kernel
    from kernel_roundtrip import round_trip
    t0 = time.perf_counter()
    km, kc = start_new_kernel(kernel_name=name, cwd=cwd, startup_timeout=60,
                              **({"env": env} if env is not None else {}))
    round_trip(kc, code)
    elapsed = time.perf_counter() - t0
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    return elapsed


def first(n: int, ab: str | None = None) -> None:
    """Launch → first result: Lily's first `/help` against ipykernel's first `pass` (and,
    with ``ab``, that checkout's first `/help`), alternating; what start-to-ready does not
    show when work moves from the start to the first cell."""
    cwd = tempfile.mkdtemp(prefix="lily-perf-")
    sides = {"python3": ("python3", "pass", None), "lily": ("lily", "/help", None)}
    if ab is not None:
        sides["ab"] = ("lily", "/help", _ab_env(ab))
    out: dict[str, list[float]] = {side: [] for side in sides}
    for name, code, env in sides.values():  # warm the disk cache
        _first(name, cwd, code, env)
    order = list(sides)
    for i in range(n):
        for side in order[i % len(order):] + order[:i % len(order)]:
            name, code, env = sides[side]
            out[side].append(_first(name, cwd, code, env))
    row("launch to first result (`/help`; ipykernel `pass`)", out["lily"], out["python3"],
        "ipykernel")
    if ab is not None:
        row(f"launch to first `/help`, this tree / {ab}", out["lily"], out["ab"], ab)


HELP_BUNDLE = """\
from IPython.display import display
from lily_kernel.commands import help
from lily_kernel.commands import render
from lily_kernel.session import session
_s = session.Session(journal=False)
B = {"text/plain": render.text(help.commands_page(_s.snapshot)),
     "text/markdown": render.markdown(help.commands_page(_s.snapshot))}
"""


def cell(n: int, ab: str | None = None, history: int = 0) -> None:
    """A command cell against ipykernel displaying the very bundle it displays; with ``ab``,
    a Lily kernel of that checkout runs the same cells in the same rounds. ``history``: each
    kernel first runs that many cells (``pass``, ``%%python pass``), not measured, so the
    figures are those of a session that long (IPython keeps ``_iN`` for every cell)."""
    sys.path.insert(0, str(HERE))
    from jupyter_client.manager import start_new_kernel
    from kernel_roundtrip import fair_order, round_trip
    cwd = tempfile.mkdtemp(prefix="lily-perf-")
    km_py, kc_py = start_new_kernel(kernel_name="python3", cwd=cwd)
    km_lily, kc_lily = start_new_kernel(kernel_name="lily", cwd=cwd)
    started = [(km_py, kc_py), (km_lily, kc_lily)]
    times: dict[str, list[float]] = {"help": [], "same": [], "pass": [], "lpass": [],
                                     "ab_help": [], "ab_lpass": []}
    try:
        round_trip(kc_py, HELP_BUNDLE)
        cases = [("same", kc_py, "display(B, raw=True)"), ("help", kc_lily, "/help"),
                 ("pass", kc_py, "pass"), ("lpass", kc_lily, "%%python\npass")]
        if ab is not None:
            km_ab, kc_ab = start_new_kernel(kernel_name="lily", cwd=cwd, env=_ab_env(ab))
            started.append((km_ab, kc_ab))
            cases += [("ab_help", kc_ab, "/help"), ("ab_lpass", kc_ab, "%%python\npass")]
        for _, kc, code in cases * 10:
            round_trip(kc, code)
        for _, kc, code in [case for case in cases if "pass" in case[2]] * history:
            round_trip(kc, code)
        for label, kc, code in fair_order(cases, n):  # (a random order; no kernel twice in a row)
            elapsed = round_trip(kc, code)
            if label is not None:
                times[label].append(elapsed)
    finally:
        for km, kc in started:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    row("command cell `/help`", times["help"], times["same"], "ipykernel display(same bundle)")
    row("python cell `%%python pass`", times["lpass"], times["pass"], "ipykernel `pass`")
    if ab is not None:
        row(f"command cell `/help` of {ab}", times["ab_help"], times["same"],
            "ipykernel display(same bundle)")
        row(f"command cell `/help`, this tree / {ab}", times["help"], times["ab_help"], ab)
        row(f"python cell `%%python pass`, this tree / {ab}", times["lpass"],
            times["ab_lpass"], ab)


def aa(n: int) -> None:
    """The harness checked against itself: ipykernel's ``display(B)`` measured as two cases on
    one kernel, with a Lily kernel's ``/help`` and ``%%python pass`` between, as ``cell`` runs
    them; first in the order ``cell`` used before (each round forward, then backward), then in
    ``fair_order``'s. The same cell on the same kernel should read 1.000x: what it reads
    instead is the order's own bias."""
    sys.path.insert(0, str(HERE))
    from jupyter_client.manager import start_new_kernel
    from kernel_roundtrip import fair_order, round_trip
    cwd = tempfile.mkdtemp(prefix="lily-perf-")
    km_py, kc_py = start_new_kernel(kernel_name="python3", cwd=cwd)
    km_lily, kc_lily = start_new_kernel(kernel_name="lily", cwd=cwd)
    try:
        round_trip(kc_py, HELP_BUNDLE)
        cases = [("a", kc_py, "display(B, raw=True)"), ("help", kc_lily, "/help"),
                 ("a2", kc_py, "display(B, raw=True)"), ("lpass", kc_lily, "%%python\npass")]
        for _, kc, code in cases * 10:
            round_trip(kc, code)
        for name, steps in (
                ("forward-backward", [case for i in range(n)
                                      for case in (cases if i % 2 == 0 else cases[::-1])]),
                ("fair_order", fair_order(cases, n))):
            times: dict[str, list[float]] = {label: [] for label, _, _ in cases}
            for label, kc, code in steps:
                elapsed = round_trip(kc, code)
                if label is not None:
                    times[label].append(elapsed)
            row(f"A/A `display(B)` 1st case / 3rd case, {name} order", times["a"], times["a2"],
                "the same")
            row(f"command cell `/help`, {name} order", times["help"], times["a"] + times["a2"],
                "ipykernel display(same bundle)")
    finally:
        for km, kc in ((km_py, kc_py), (km_lily, kc_lily)):
            kc.stop_channels()
            km.shutdown_kernel(now=True)


# -- agent -------------------------------------------------------------------------------

ANSWER = " ".join(["Lily answers plainly and briefly, then names the skill it used."] * 6)


def _skills(root: Path, n: int) -> None:
    for i in range(n):
        d = root / f"bench-skill-{i:03d}"
        d.mkdir(parents=True)
        (d / "SKILL.md").write_text(
            f"---\nname: bench-skill-{i:03d}\ndescription: Generated skill {i} for the turn-200 "
            f"benchmark. Use when the user asks for case {i}.\n---\n# Skill {i}\n\nDo it.\n",
            encoding="utf-8")


def _add_tools(session) -> None:
    """Bring the session to 20 tools (its builtins plus trivial ones)."""
    k = 0
    while len(list(session.tools)) < 20:
        def probe(n: int, _k: int = k) -> str:
            """Return a short status line for case ``n``.

            Args:
                n: the case number.
            """
            return f"case {n}: ok ({_k})"
        session.tools.register(probe, name=f"bench_probe_{k}")
        k += 1


def _bench_session(url: str):
    """A real Session in a fresh temp folder: 100 generated skills, 20 tools, journal on."""
    from lily_kernel.session.session import Session
    base = Path(tempfile.mkdtemp(prefix="lily-perf-agent-"))
    (base / "ws").mkdir()
    (base / "user").mkdir()
    _skills(base / "skills", 100)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "LILY_", "SKILLS_"))}
    env.update({"SKILLS_USER_DIR": str(base / "user"), "LILY_MAX_RETRIES": "0",
                "SKILLS_WORKSPACE_DIR": str(base / "skills"),
                "OPENAI_BASE_URL": url, "LILY_DATA_DIR": str(base / "data")})
    return Session(workspace=base / "ws", env=env, add_tools=_add_tools)


def agent(sessions: int, turns: int, marks: tuple[int, ...], window: int) -> None:
    """Per-request overhead as a session grows: every turn is a tool call then an answer.

    Lily: ``agent.run`` on a real Session (100 generated skills, 20 tools, journal on). Bare: the
    very requests Lily sent (every field of their bodies as the server received them: messages,
    tools, ``stream_options``, the completion cap), through a bare ``openai`` client, streamed,
    right after Lily's turn: ``chat.completions.create`` (the documented call), and ``post`` of
    the same body (the client without its per-request transform of typed parameters, which walks
    every message). A turn's figure is Lily's turn time against the bare pair's; the rows pool
    ``window`` turns around each mark over ``sessions`` sessions. Before each timed side a full
    ``gc.collect()`` runs, untimed, and the server forgets the requests it recorded (the harness's
    memory, not Lily's, would otherwise grow with every turn and slow every collection).
    """
    import openai
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    from lily_kernel.agent import loop
    from lily_kernel.testing.server import ScriptedServer

    def respond(request: dict) -> dict:
        last = request["messages"][-1]
        if last["role"] == "user":
            n = len(request["messages"])
            return {"tool_calls": [{"name": "bench_probe_0", "arguments": {"n": n},
                                    "id": f"call_{n}"}]}
        return {"content": ANSWER}

    # per mark: (wall, CPU time of the calling thread) of each turn
    lily_t: dict[int, list[tuple[float, float]]] = {m: [] for m in marks}
    bare_t: dict[int, list[tuple[float, float]]] = {m: [] for m in marks}
    post_t: dict[int, list[tuple[float, float]]] = {m: [] for m in marks}
    near = {t: m for m in marks for t in range(max(1, m - window // 2),
                                                max(1, m - window // 2) + window)}
    with ScriptedServer(respond) as server:
        client = openai.OpenAI(base_url=server.url, api_key="lily-no-key", max_retries=0,
                               timeout=60.0)
        for s in range(sessions):
            session = _bench_session(server.url)
            assert len(session.snapshot.skills) >= 100, session.snapshot.diagnostics[:3]
            sink: list[str] = []

            def lily(turn: int) -> tuple[float, float]:
                sink.clear()
                t0, c0 = time.perf_counter(), time.thread_time()
                reply = loop.run(session, f"Turn {turn}: check case {turn}.", on_text=sink.append)
                elapsed = time.perf_counter() - t0, time.thread_time() - c0
                assert reply.text.startswith(ANSWER), reply.text[:200]
                return elapsed

            def bare(requests: list[dict]) -> tuple[float, float]:
                t0, c0 = time.perf_counter(), time.thread_time()
                for sent in requests:
                    for _chunk in client.chat.completions.create(**sent):
                        pass
                return time.perf_counter() - t0, time.thread_time() - c0

            def post(requests: list[dict]) -> tuple[float, float]:
                t0, c0 = time.perf_counter(), time.thread_time()
                for sent in requests:
                    for _chunk in client.post("/chat/completions", cast_to=ChatCompletion,
                                              body=sent, stream=True,
                                              stream_cls=openai.Stream[ChatCompletionChunk]):
                        pass
                return time.perf_counter() - t0, time.thread_time() - c0

            for turn in range(1, turns + 1):
                with server._lock:  # the record of earlier requests is the harness's memory
                    server.requests.clear()
                if turn not in near:
                    lily(turn)
                    continue
                gc.collect()  # the bare pairs replay what Lily sent, so they run after it
                lt = lily(turn)
                sent = server.chat_requests()
                assert len(sent) == 2, len(sent)
                sides = [(bare_t, bare), (post_t, post)]
                for times, side in (sides if turn % 2 else sides[::-1]):
                    gc.collect()
                    times[near[turn]].append(side(sent))
                lily_t[near[turn]].append(lt)
            print(f"  session {s + 1}: {turns} turns, {len(session.conversation)} messages, "
                  f"{len(sent[-1]['tools'])} tools, last request "
                  f"{len(json.dumps(sent[-1])):,} bytes", flush=True)
    def wall(pairs: list[tuple[float, float]]) -> list[float]:
        return [w for w, _ in pairs]

    def cpu(pairs: list[tuple[float, float]]) -> list[float]:
        return [c for _, c in pairs]
    for m in marks:
        row(f"agent turn {m} (tool call + answer)", wall(lily_t[m]), wall(bare_t[m]), "bare openai")
    # Beside the row: the baseline without openai's per-request transform (Lily's own cost
    # over the same HTTP work), and the CPU time of the calling thread (the in-process
    # server's thread and the other processes' load left out: steadier on a shared machine).
    for m in marks:
        row(f"agent turn {m} vs the same body posted", wall(lily_t[m]), wall(post_t[m]),
            "bare openai post")
    for m in marks:
        row(f"agent turn {m} CPU (calling thread) vs posted", cpu(lily_t[m]), cpu(post_t[m]),
            "bare openai post")


# -- snapshot ----------------------------------------------------------------------------

def bare_stat_read(root: Path) -> int:
    """What any loader pays: list the root, stat and read every SKILL.md."""
    total = 0
    for entry in os.scandir(root):
        path = os.path.join(entry.path, "SKILL.md")
        os.stat(path)
        with open(path, "rb") as fh:
            total += len(fh.read())
    return total


def _snapshot_setup(tmp: str, n: int):
    sys.path.insert(0, str(HERE))
    from snapshot_bench import generate
    root = Path(tmp) / "skills"
    root.mkdir()
    generate(root, n)
    return root, _snapshot_build(tmp, root)


def _snapshot_build(tmp: str, root: Path):
    """The load the snapshot rows time: ``root`` as the workspace root, the user and bundled
    roots absent (in ``tmp``), the built-in tools, the default policy."""
    from lily_kernel.skills.loader import build_snapshot
    from lily_kernel.skills.paths import Root
    try:
        from lily_kernel.tools.builtin_tools import register_builtins
        from lily_kernel.tools.tool_registry import ToolPolicy, ToolRegistry
    except ImportError:  # a checkout (--tree, --ab) from before the rooms of issue 31
        from lily_kernel.agent.builtin_tools import register_builtins  # type: ignore[no-redef]
        from lily_kernel.agent.tools import ToolPolicy, ToolRegistry  # type: ignore[no-redef]
    tools = ToolRegistry()
    register_builtins(tools, Path(tmp))
    roots = tuple(Root(s, root, True) if s == "workspace" else
                  Root(s, Path(tmp) / f"none-{s}", False) for s in ("workspace", "user", "bundled"))
    policy = ToolPolicy()

    def build():
        return build_snapshot(roots, tools, policy)
    return build


def _snapshot_rounds(root: Path, build, n: int, clock: str) -> tuple[list[float], list[float]]:
    """``n`` rounds of the bare stat+read and the build, alternating which goes first, the
    collector run before each (untimed); the snapshot made is freed after the clock stops (a
    session keeps it; freeing it is no part of a load). Returns (builds, reads) in seconds."""
    now = time.process_time if clock == "cpu" else time.perf_counter
    reads, snaps = [], []
    for i in range(n):
        for which in (("read", "snap") if i % 2 == 0 else ("snap", "read")):
            gc.collect()
            t0 = now()
            made = bare_stat_read(root) if which == "read" else build()
            (reads if which == "read" else snaps).append(now() - t0)
            del made  # (freeing the snapshot is not building it: after the clock)
    return snaps, reads


def snapshot(n: int, skills: int, clock: str = "wall") -> None:
    """The whole ``build_snapshot`` against the bare stat+read (:func:`_snapshot_rounds`).
    The bare read keeps nothing of what it read.

    ``clock="cpu"`` times both with this process's CPU time (user + system), which
    other work on a busy machine disturbs far less than the wall clock."""
    with tempfile.TemporaryDirectory() as tmp:
        root, build = _snapshot_setup(tmp, skills)
        snap = build()
        assert len(snap.skills) == skills
        snaps, reads = _snapshot_rounds(root, build, n, clock)
        row(f"snapshot of {skills:,} skills", snaps, reads, "bare stat+read")


# A child of `snapshot --ab`: argv is --tree TREE (perf.py, imported, puts TREE first on the
# path), this bench folder, the skills' root, rounds, clock. Prints (builds, reads) as JSON.
_SNAPSHOT_CHILD = """\
import json, os, sys
sys.path.insert(0, sys.argv[3])
import perf
root = perf.Path(sys.argv[4])
build = perf._snapshot_build(os.path.dirname(root), root)
build(); perf.bare_stat_read(root)  # (warm, as `snapshot` is)
print(json.dumps(perf._snapshot_rounds(root, build, int(sys.argv[5]), sys.argv[6])))
"""


def snapshot_ab(rounds: int, skills: int, clock: str, ab: str, per_child: int = 4) -> None:
    """The snapshot row of this checkout and of checkout ``ab`` (the code before a change) in
    the same minutes: short child processes, one a checkout, alternate (``rounds`` of each,
    ``per_child`` rounds of a bare read and a build in each) on one tree of generated skills,
    so the machine's drift from minute to minute falls on both alike. Prints each checkout's
    row (its builds / the bare reads of its own children), the median of the paired ratios
    (each build / the bare read next to it), and the ratio of the two rows' ratios."""
    sys.path.insert(0, str(HERE))
    from snapshot_bench import generate
    trees = [str(TREE), str(Path(ab).resolve())]
    runs: list[tuple[list[float], list[float]]] = [([], []), ([], [])]  # (builds, reads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "skills"
        root.mkdir()
        generate(root, skills)
        for r in range(rounds):
            for i in (0, 1) if r % 2 == 0 else (1, 0):
                out = subprocess.run(
                    [sys.executable, "-c", _SNAPSHOT_CHILD, "--tree", trees[i], str(HERE),
                     str(root), str(per_child), clock], capture_output=True, text=True,
                    check=True, env={**os.environ, "PYTHONPATH": trees[i]}).stdout
                snaps, reads = json.loads(out.splitlines()[-1])
                runs[i][0].extend(snaps)
                runs[i][1].extend(reads)
    ratios = []
    for name, (snaps, reads) in zip(("this checkout", f"checkout {trees[1]}"), runs, strict=True):
        row(f"snapshot of {skills:,} skills, {name}", snaps, reads, "bare stat+read")
        paired = [s / b for s, b in zip(snaps, reads, strict=True)]
        print(f"  paired: median of each build / the bare read beside it "
              f"{statistics.median(paired):.3f}x (p10 {pct(paired, .1):.3f}, "
              f"p90 {pct(paired, .9):.3f})", flush=True)
        ratios.append(statistics.median(snaps) / statistics.median(reads))
    print(f"this checkout's ratio / that of {trees[1]}: {ratios[0] / ratios[1]:.3f}", flush=True)


def bare_stat(root: Path) -> None:
    """What any reload pays: list the root and ``stat`` every SKILL.md."""
    for entry in os.scandir(root):
        os.stat(os.path.join(entry.path, "SKILL.md"))


def reload(n: int, skills: int, clock: str = "cpu", workspace: bool = False) -> None:
    """``/reload_skills`` in a session over ``skills`` generated skills, one of them changed
    before each (a different one each round, then 2.1 s left for its change to settle, as
    after an edit: docs/loader.md#reloads), against the bare stat walk, alternating which
    goes first. The command runs through the router, as a cell would run it, journal on.
    Each reload must read exactly the changed file (counted on ``skill_md.read``) and see
    its new text. A checkout before issue 31 (``--tree``) keeps nothing: each reload is
    a whole load.

    ``workspace``: the skills are the workspace's own ``skills/`` (no SKILLS_WORKSPACE_DIR),
    which the user trusted with ``/trust`` and ``/trust --yes`` before the rounds
    (docs/trust-boundary.md#what-asks-again). A checkout before issue 41 §6 revokes the
    trust at the first change and hashes every file at every reload: its reloads list every
    skill as untrusted, so only the time is compared there."""
    from lily_kernel.commands import router
    from lily_kernel.commands.table import BUILTIN_NAMES
    from lily_kernel.session.session import Session
    from lily_kernel.skills import loader
    sys.path.insert(0, str(HERE))
    from snapshot_bench import generate
    now = time.process_time if clock == "cpu" else time.perf_counter
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "skills"
        root.mkdir()
        generate(root, skills)
        env = {**os.environ, "SKILLS_WORKSPACE_DIR": str(root), "HOME": tmp,
               "SKILLS_USER_DIR": str(Path(tmp) / "none-user"),
               "SKILLS_BUNDLED_DIR": str(Path(tmp) / "none-bundled"),
               "LILY_DATA_DIR": str(Path(tmp) / "data")}
        Path(env["SKILLS_USER_DIR"]).mkdir()
        Path(env["SKILLS_BUNDLED_DIR"]).mkdir()
        if workspace:  # the workspace's own folder: loads once trusted
            del env["SKILLS_WORKSPACE_DIR"]
        time.sleep(2.1)  # the tree was written before the session (SETTLED_NS)
        session = Session(workspace=Path(tmp), env=env, reserved_commands=BUILTIN_NAMES)
        checked = True
        if workspace:
            for cell in ("/trust", "/trust --yes"):
                router.execute(session, router.parse(cell))
            import importlib.util
            checked = importlib.util.find_spec("lily_kernel.skills.trust_review") is not None
            if not checked:
                print("# this tree revokes the trust at the first change: no check of what "
                      "each reload read or loaded", flush=True)
            time.sleep(2.1)  # the trust record settles too (it is cached by its stat)
        assert len(session.snapshot.skills) == skills, session.snapshot.diagnostics[:3]
        command = router.parse("/reload_skills")
        assert command is not None
        skill_md = getattr(loader, "skill_md", None)  # (None before issue 31)
        reads: list[str] = []
        real = skill_md.read if skill_md is not None else None
        if skill_md is not None:
            def counted(path: str):  # type: ignore[no-untyped-def]
                reads.append(path)
                return real(path)  # type: ignore[misc]
            skill_md.read = counted
        walks, reloads = [], []
        for i in range(n):
            md = root / f"skill-{i % skills:05d}" / "SKILL.md"
            md.write_text(md.read_text() + f"\nEdited {i}.\n")
            time.sleep(2.1)
            reads.clear()
            for which in (("walk", "reload") if i % 2 == 0 else ("reload", "walk")):
                gc.collect()
                t0 = now()
                if which == "walk":
                    bare_stat(root)
                else:
                    router.execute(session, command)
                (walks if which == "walk" else reloads).append(now() - t0)
            if not checked:
                continue
            assert session.snapshot.get(md.parent.name).text.endswith(f"Edited {i}.\n")
            if skill_md is not None:
                assert reads == [str(md.parent)], reads[:3]
        if skill_md is not None:
            skill_md.read = real
        where = "workspace (trusted) " if workspace else ""
        row(f"/reload_skills of {skills:,} {where}skills, one changed", reloads, walks,
            "bare stat walk")
        paired = [r / w for r, w in zip(reloads, walks, strict=True)]
        print(f"  paired: median of each reload / the stat walk beside it "
              f"{statistics.median(paired):.3f}x (p10 {pct(paired, .1):.3f}, "
              f"p90 {pct(paired, .9):.3f})", flush=True)


# -- %load_ext ---------------------------------------------------------------------------

LOAD = """\
import sys, time
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
import io, contextlib
with contextlib.redirect_stdout(io.StringIO()):
    t0 = time.process_time(); w0 = time.perf_counter()
    shell.run_line_magic("load_ext", sys.argv[1])
    cpu = time.process_time() - t0; wall = time.perf_counter() - w0
print(cpu, wall, len(sys.modules))
"""


def _load(python: str, ext: str, env: dict[str, str]) -> tuple[float, float, int]:
    out = subprocess.run([python, "-c", LOAD, ext], capture_output=True, text=True, env=env,
                         cwd=tempfile.gettempdir(), check=True).stdout.split()
    return float(out[-3]), float(out[-2]), int(out[-1])


def loadext(n: int, baseline_python: str | None, ab: str | None = None) -> None:
    """CPU time of ``%load_ext lily`` in a fresh IPython, against jupyter_ai_magics'; with
    ``ab``, Lily of that checkout loads in the same rounds."""
    env = dict(os.environ)
    home = tempfile.mkdtemp(prefix="lily-perf-home-")
    env.update({"HOME": home, "IPYTHONDIR": os.path.join(home, ".ipython")})
    lily_py = sys.executable
    lily: list[tuple[float, float, int]] = []
    base: list[tuple[float, float, int]] = []
    other: list[tuple[float, float, int]] = []
    ab_env = {**(_ab_env(ab) or {}), "HOME": home, "IPYTHONDIR": env["IPYTHONDIR"]}
    _load(lily_py, "lily", env)
    if ab is not None:
        _load(lily_py, "lily", ab_env)
    if baseline_python:
        benv = {k: v for k, v in env.items() if k != "PYTHONPATH"}
        _load(baseline_python, "jupyter_ai_magics", benv)
    for _ in range(n):
        lily.append(_load(lily_py, "lily", env))
        if ab is not None:
            other.append(_load(lily_py, "lily", ab_env))
        if baseline_python:
            base.append(_load(baseline_python, "jupyter_ai_magics", benv))
    print(f"  lily: {statistics.median([m for *_, m in lily]):.0f} modules after load")
    if other:
        print(f"  lily of {ab}: {statistics.median([m for *_, m in other]):.0f} modules")
    if base:
        print(f"  jupyter_ai_magics: {statistics.median([m for *_, m in base]):.0f} modules")
        row("%load_ext CPU time", [c for c, *_ in lily], [c for c, *_ in base], "jupyter_ai_magics")
        row("%load_ext wall time", [w for _, w, _ in lily], [w for _, w, _ in base],
            "jupyter_ai_magics")
        if other:
            row(f"%load_ext CPU time of {ab}", [c for c, *_ in other], [c for c, *_ in base],
                "jupyter_ai_magics")
    else:
        cpu = [c for c, *_ in lily]
        print(f"%load_ext CPU time: lily median {statistics.median(cpu) * 1000:.1f} ms "
              f"(p10 {pct(cpu, .1) * 1000:.1f}, p90 {pct(cpu, .9) * 1000:.1f}); "
              "no --baseline-python given")
    if other:
        row(f"%load_ext CPU time, this tree / {ab}", [c for c, *_ in lily],
            [c for c, *_ in other], ab)


# -- profile -----------------------------------------------------------------------------

def _report(prof: cProfile.Profile, label: str, total: float, top: int = 15) -> None:
    """Lily's own functions by self time, and Lily's share of the profiled time."""
    stats = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    own = 0.0
    for (file, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if "lily_kernel" in file or file.endswith("lily/__init__.py"):
            own += tt
            rows.append((tt, ct, nc, f"{file.split('lily_kernel/')[-1]}:{line} {func}"))
    rows.sort(reverse=True)
    print(f"== {label}: profiled {total * 1000:.1f} ms; Lily's own code (self time) "
          f"{own * 1000:.1f} ms = {own / total:.0%}")
    # What building a request costs inside openai (its transform of typed parameters walks
    # every message; then the body's JSON): paid for the way Lily calls the client.
    build = sum(ct for (file, _line, func), (_cc, _nc, _tt, ct, _callers)
                in stats.stats.items()  # type: ignore[attr-defined]
                if "openai" in file and func in ("maybe_transform", "_build_request"))
    if build:
        print(f"   openai building the requests (maybe_transform + _build_request, cumulative): "
              f"{build * 1000:.1f} ms")
    print(f"   {'self ms':>8} {'cum ms':>8} {'calls':>7}  function")
    for tt, ct, nc, name in rows[:top]:
        print(f"   {tt * 1000:8.2f} {ct * 1000:8.2f} {nc:7d}  {name}")


def profile(what: list[str]) -> None:
    """cProfile each path in-process and print where Lily's own time goes."""
    if "cell" in what:
        from IPython.testing.globalipapp import start_ipython
        shell = start_ipython()
        import contextlib
        with contextlib.redirect_stdout(io.StringIO()):
            shell.run_line_magic("load_ext", "lily")
            for _ in range(20):
                shell.run_cell("/help", store_history=True)
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            for _ in range(200):
                shell.run_cell("/help", store_history=True)
            prof.disable()
            total = time.perf_counter() - t0
        _report(prof, "200 `/help` cells in an IPython shell (%load_ext lily)", total)
    if "snapshot" in what:
        with tempfile.TemporaryDirectory() as tmp:
            _root, build = _snapshot_setup(tmp, 10000)
            build()
            gc.collect()
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            build()
            prof.disable()
            _report(prof, "one snapshot of 10,000 skills", time.perf_counter() - t0)
    if "loadext" in what:
        out = subprocess.run(
            [sys.executable, "-c", LOAD.replace(
                'shell.run_line_magic("load_ext", sys.argv[1])',
                'import cProfile, pstats; p = cProfile.Profile(); p.enable(); '
                'shell.run_line_magic("load_ext", sys.argv[1]); p.disable()') +
             "pstats.Stats(p).sort_stats('cumulative').print_stats(25)\n", "lily"],
            capture_output=True, text=True, check=True).stdout
        print("== %load_ext lily, cumulative")
        print("\n".join(line for line in out.splitlines()[:60] if line.strip()))
    if "agent" in what:
        import openai  # noqa: F401  (imported before the profile: not Lily's time)

        from lily_kernel.agent import loop
        from lily_kernel.testing.server import ScriptedServer

        def respond(request: dict) -> dict:
            if request["messages"][-1]["role"] == "user":
                return {"tool_calls": [{"name": "bench_probe_0", "arguments": {"n": 1}}]}
            return {"content": ANSWER}
        with ScriptedServer(respond) as server:
            session = _bench_session(server.url)
            done = 0
            for turns in (1, 50, 200):  # turn 1: the conversation emptied before each request
                for t in range(20 if turns == 1 else turns - 10 - done):
                    if turns == 1:
                        session.conversation.clear()
                    loop.run(session, f"turn {t}")
                    with server._lock:  # the harness's record, not Lily's memory
                        server.requests.clear()
                gc.collect()
                prof = cProfile.Profile()
                t0 = time.perf_counter()
                prof.enable()
                for t in range(10):
                    if turns == 1:
                        session.conversation.clear()
                    loop.run(session, f"turn {turns + t}")
                prof.disable()
                done = turns
                _report(prof, f"10 agent requests at turn {turns} (tool call + answer each; "
                        "HTTP included, the server's thread not profiled)",
                        time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("figure", choices=["start", "memory", "cell", "agent", "snapshot", "reload",
                                       "loadext", "profile", "first", "aa"])
    ap.add_argument("--tree", help="another checkout of Lily to measure (default: this one)")
    ap.add_argument("--n", type=int, default=None, help="repetitions (each side)")
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--skills", type=int, default=10000)
    ap.add_argument("--baseline-python", help="a python with jupyter-ai-magics installed")
    ap.add_argument("--what", default="cell,agent,snapshot,loadext")
    ap.add_argument("--ab", metavar="DIR", help="start, memory, first, cell, loadext, snapshot: Lily "
                    "of checkout DIR (the code before a change) alternates in the same rounds "
                    "(snapshot: --n rounds of short child processes, one a checkout)")
    ap.add_argument("--history", type=int, default=0, help="cell: each kernel first runs this "
                    "many cells, unmeasured (a session that long)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default=None,
                    help="snapshot, reload: time with the wall clock or this process's CPU "
                    "time (default: snapshot wall, reload cpu)")
    ap.add_argument("--workspace", action="store_true", help="reload: the skills are the "
                    "workspace's own skills/, trusted with /trust (issue 41 §6)")
    args = ap.parse_args()
    print(f"# bench/perf.py {args.figure}: tree {TREE}, load {os.getloadavg()[0]:.1f}",
          flush=True)
    if args.figure in ("start", "memory"):
        kernels(args.n or (9 if args.figure == "start" else 5), args.figure, args.ab)
    elif args.figure == "cell":
        cell(args.n or 200, args.ab, args.history)
    elif args.figure == "first":
        first(args.n or 9, args.ab)
    elif args.figure == "aa":
        aa(args.n or 200)
    elif args.figure == "reload":
        reload(args.n or 9, args.skills, "wall" if args.clock == "wall" else "cpu",
               args.workspace)
    elif args.figure == "agent":
        marks = tuple(m for m in (1, 50, 200) if m <= args.turns)
        agent(args.sessions, args.turns, marks, args.window)
    elif args.figure == "snapshot":
        args.clock = args.clock or "wall"
        if args.clock == "cpu":
            print("# clock: this process's CPU time (user + system)", flush=True)
        if args.ab:
            snapshot_ab(args.n or 9, args.skills, args.clock, args.ab)
        else:
            snapshot(args.n or 9, args.skills, args.clock)
    elif args.figure == "loadext":
        loadext(args.n or 9, args.baseline_python, args.ab)
    else:
        profile(args.what.split(","))


if __name__ == "__main__":
    main()
