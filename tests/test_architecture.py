"""The import rules of docs/architecture.md#import-rules, checked on the code itself.

The modules are found with ``pkgutil.walk_packages`` and their imports read from
the AST (top-level and inside functions), so a new module is covered without
editing this file. The runtime checks import the core in a fresh interpreter
and look at ``sys.modules``.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import pkgutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import lily_kernel

JUPYTER = frozenset({"IPython", "ipykernel", "ipywidgets", "jupyter_client", "jupyter_core", "zmq",
                     "nbformat", "nbclient", "comm", "traitlets", "tornado", "jupyter_server"})
# The faces: the only modules that may import Jupyter (docs/architecture.md#rooms).
FACES = ("lily_kernel.jupyter", "lily_kernel.acp", "lily_kernel.cli", "lily_kernel.__main__",
         "lily")
TESTING = "lily_kernel.testing"
# The rooms of the core from the bottom up; a room may import the rooms below it.
# (docs/architecture.md#layers). redaction.py, safejson.py and errors.py are below everything.
LAYERS = ("redaction", "errors", "safejson", "settings", "skills", "typed", "tools", "agent",
          "session", "commands")
# The imports that go up the layers, each one a known debt of the layout
# (docs/architecture.md#known-back-edges): none today. A new one fails the test; so
# would an entry that no longer exists (delete it here and in the docs).
KNOWN_BACK_EDGES: frozenset[tuple[str, str]] = frozenset()

# Module cycles accepted on purpose: none.
KNOWN_CYCLES: list[list[str]] = []


@cache
def modules() -> dict[str, Path]:
    """Every module of lily_kernel and lily, by name."""
    found = {"lily_kernel": Path(lily_kernel.__file__)}
    for info in pkgutil.walk_packages(lily_kernel.__path__, "lily_kernel."):
        found[info.name] = Path(importlib.util.find_spec(info.name).origin)
    found["lily"] = Path(importlib.util.find_spec("lily").origin)
    return found


def _type_only(tree: ast.AST) -> set[int]:
    """ids of the import statements under ``if TYPE_CHECKING:`` (read by type checkers only)."""
    return {id(sub) for node in ast.walk(tree) if isinstance(node, ast.If)
            and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
            for stmt in node.body for sub in ast.walk(stmt)}


def imports_of(name: str, type_only: bool = True) -> list[tuple[str, int, int]]:
    """(imported module, line, relative level) for every import statement in module ``name``;
    without ``type_only``, those under ``if TYPE_CHECKING:`` do not count (they never run)."""
    path = modules()[name]
    out = []
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skip = set() if type_only else _type_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            # 'from lily_kernel.typed import actions' imports the module lily_kernel.typed.actions
            subs = [f"{base}.{alias.name}" for alias in node.names
                    if f"{base}.{alias.name}" in modules()]
            if len(subs) < len(node.names):
                out.append((base, node.lineno, node.level))
            out += [(sub, node.lineno, node.level) for sub in subs]
    return out


def internal_edges() -> set[tuple[str, str]]:
    """(importer, imported) over lily_kernel's own modules, as they run: an import under
    ``if TYPE_CHECKING:`` (a type hint's name) is not an edge (docs/architecture.md#layers)."""
    return {(name, target) for name in modules() for target, _, _ in imports_of(name, False)
            if target in modules() and target != name}


def is_face(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FACES)


def room(name: str) -> str:
    parts = name.split(".")
    return parts[1] if parts[0] == "lily_kernel" and len(parts) > 1 else parts[0]


def test_the_walk_finds_every_room():
    rooms = {room(n) for n in modules()}
    assert {"skills", "commands", "session", "agent", "tools", "settings", "typed", "jupyter",
            "acp", "testing", "cli", "errors", "redaction", "safejson"} <= rooms


def test_imports_inside_the_package_are_absolute():
    relative = [f"{n}:{line}" for n in modules() for _, line, level in imports_of(n) if level]
    assert relative == []


def test_no_jupyter_import_outside_the_faces():
    found = [f"{n}:{line} imports {target}" for n in modules() if not is_face(n)
             for target, line, _ in imports_of(n) if target.split(".")[0] in JUPYTER]
    assert found == [], "\n".join(found)


# The ACP face's two ways into Jupyter, both inside functions
# (docs/front-ends.md#notebook-tools-through-a-jupyter-server): the Jupyter server that
# started `lily acp` (its runtime file, a kernel's channels) and the probe that runs inside
# that notebook's kernel.
ACP_JUPYTER = {"lily_kernel.acp.notebook_server": {"jupyter_core", "tornado"},
               "lily_kernel.acp.kernel_probe": {"IPython"}}


def _top_level_lines(name: str) -> set[int]:
    tree = ast.parse(modules()[name].read_text(encoding="utf-8"))
    return {node.lineno for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))}


def test_the_acp_face_needs_no_jupyter():
    """`lily acp` runs where no Jupyter is (Zed, JetBrains): the face may import the core and
    the ACP SDK, nothing of the Jupyter face, and of Jupyter only what reaches a Jupyter
    server that started it, inside the functions that do (docs/front-ends.md#acp)."""
    found = [f"{n}:{line} imports {target}" for n in modules() if n.startswith("lily_kernel.acp")
             for target, line, _ in imports_of(n)
             if (target.split(".")[0] in JUPYTER
                 and (target.split(".")[0] not in ACP_JUPYTER.get(n, ())
                      or line in _top_level_lines(n)))
             or target.startswith("lily_kernel.jupyter")]
    assert found == [], "\n".join(found)


def test_the_core_imports_no_face_and_no_test_support():
    found = [f"{a} imports {b}" for a, b in internal_edges()
             if not is_face(a) and not a.startswith(TESTING)
             and (is_face(b) or b.startswith(TESTING))]
    assert found == [], "\n".join(found)


def test_test_support_stands_alone():
    """ScriptedServer is what skill authors test with: it needs nothing of Lily."""
    found = [f"{a} imports {b}" for a, b in internal_edges()
             if a.startswith(TESTING) and not b.startswith(TESTING)]
    assert found == [], "\n".join(found)


def test_rooms_follow_the_declared_layers():
    edges = {(a, b) for a, b in internal_edges() if room(a) in LAYERS and room(b) in LAYERS}
    up = {(a, b) for a, b in edges if LAYERS.index(room(b)) > LAYERS.index(room(a))}
    new = sorted(up - KNOWN_BACK_EDGES)
    assert new == [], "imports that go up the layers (docs/architecture.md#layers):\n" + \
        "\n".join(f"{a} -> {b}" for a, b in new)
    gone = sorted(KNOWN_BACK_EDGES - up)
    assert gone == [], "no longer imported; delete from KNOWN_BACK_EDGES and the docs: " + str(gone)


def test_no_module_import_cycles():
    """Between modules there is no cycle at all, counting imports inside functions too."""
    graph: dict[str, set[str]] = {}
    for a, b in internal_edges():
        graph.setdefault(a, set()).add(b)
    cycles = [c for c in _strongly_connected(graph) if len(c) > 1 and c not in KNOWN_CYCLES]
    assert cycles == [], cycles


def test_the_module_sizes_table_lists_exactly_the_long_modules():
    """docs/architecture.md#module-sizes names every module over 400 lines, and no other."""
    doc = (Path(__file__).parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = doc.split("## Module sizes", 1)[1].split("\n## ", 1)[0]
    listed = {row.split("`")[1] for row in section.splitlines() if row.startswith("| `")}
    root = Path(lily_kernel.__file__).parent
    long = {path.relative_to(root).as_posix() for path in modules().values()
            if path.is_relative_to(root) and len(path.read_text(encoding="utf-8").splitlines()) > 400}
    assert listed == long, {"undocumented": sorted(long - listed), "stale": sorted(listed - long)}


def test_every_exception_outside_errors_py_is_named_in_the_docs():
    """docs/architecture.md#errors: an exception class defined outside errors.py is either
    in the hierarchy there or named, with its module, among those kept from readers."""
    doc = (Path(__file__).parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = doc.split("## Errors", 1)[1].split("\n## ", 1)[0]
    missing = []
    for name, path in modules().items():
        if name == "lily_kernel.errors":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                    getattr(b, "id", getattr(b, "attr", "")).endswith(("Error", "Exception",
                                                                      "Timeout", "Exit"))
                    for b in node.bases):
                short = name.removeprefix("lily_kernel.")
                if f"`{short}.{node.name}`" not in section:
                    missing.append(f"{short}.{node.name}")
    assert missing == [], missing


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_core_imports_nothing_from_jupyter_at_run_time():
    core = sorted(n for n in modules() if not is_face(n) or n == "lily_kernel.cli")
    code = ("import sys\n" + "".join(f"import {m}\n" for m in core)
            + f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(JUPYTER)!r})))")
    assert _run(code) == "[]"


def test_openai_and_pydantic_are_imported_only_on_use():
    """A session start and commands (a tool_dispatch one too) load neither: ~0.2 s each."""
    code = ("import sys\nimport lily_kernel.agent.loop\n"
            "from lily_kernel.session.session import Session\n"
            "from lily_kernel.commands import router\n"
            "from lily_kernel.commands.runner import Runner\n"
            "s = Session(journal=False)\n"
            "for cell in ('/skills', '/help', '/todos'):\n"
            "    list(Runner(lambda: s).command(cell))\n"
            "router.execute(s, router.parse('/plan ship it'))  # resolved; no model to send it to\n"
            "print('openai' in sys.modules, 'pydantic' in sys.modules)")
    assert _run(code) == "False False"


#: What ``%load_ext lily`` must not import: each loads on the first cell that needs it
#: (Markdown sanitising, the model client, tool schemas, widgets, MCP, typed skills).
LOAD_EXT_DEFERRED = ("markdown_it", "pydantic", "openai", "ipywidgets", "mcp",
                     "lily_kernel.typed.actions")


def test_load_ext_imports_only_what_the_first_cell_needs(tmp_path):
    """`%load_ext lily` in a plain IPython shell loads none of the deferred packages; a /help
    cell then works without them, and a Markdown sanitiser call brings markdown_it in."""
    code = ("import sys, io, contextlib\n"
            "from IPython.core.interactiveshell import InteractiveShell\n"
            "shell = InteractiveShell.instance()\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    shell.run_line_magic('load_ext', 'lily')\n"
            f"names = {LOAD_EXT_DEFERRED!r}\n"
            "loaded = lambda: sorted(n for n in names if n in sys.modules)\n"
            "print(loaded())\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    shell.run_cell('/help')\n"
            "print('/skills' in out.getvalue())\n"
            "from lily_kernel.commands import sanitize\n"
            "print(sanitize.markdown('*hi* <b>x</b>'), 'markdown_it' in sys.modules)\n")
    env = {**os.environ, "HOME": str(tmp_path), "IPYTHONDIR": str(tmp_path / "ipy"),
           "LILY_DATA_DIR": str(tmp_path / "data"), "XDG_DATA_HOME": str(tmp_path / "xdg")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "[]", lines
    assert lines[1] == "True", out.stdout
    assert lines[2].endswith("True") and "<b>" not in lines[2], lines[2]

def test_the_mcp_sdk_is_imported_only_once_a_server_is_configured(tmp_path):
    """Importing Lily (the kernel's modules, ``%load_ext lily``'s package), a session start
    and /mcp, /help load no ``mcp``; a server that starts does (docs/mcp.md#the-client)."""
    code = ("import sys\nimport lily, lily_kernel.jupyter.kernel, lily_kernel.cli\n"
            "from lily_kernel.session.session import Session\n"
            "from lily_kernel.commands.runner import Runner\n"
            "s = Session(sys.argv[1], journal=False)\n"
            "for cell in ('/mcp', '/help'):\n    list(Runner(lambda: s).command(cell))\n"
            "print('mcp' in sys.modules)\n")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "HOME": str(tmp_path)}
    def run() -> str:
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                             text=True, env=env)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()
    assert run() == "False"
    (tmp_path / "lily.toml").write_text('[mcp.servers.off]\ncommand = "x"\ndisabled = true\n')
    assert run() == "False"  # disabled (and an untrusted workspace's servers) start nothing
    (tmp_path / "config" / "lily").mkdir(parents=True)
    (tmp_path / "config" / "lily" / "lily.toml").write_text(
        '[mcp.servers.on]\ncommand = "/nonexistent/server"\n')
    assert run() == "True"


# -- the one gate (docs/architecture.md#one-calls-walk-through-the-gate) ----------------------

GATE = "lily_kernel.tools.gate"
#: What decides whether a call runs, or runs a tool: only the gate calls these (the mode's
#: table, files that run by themselves, a tool's invocation); ``invoke`` is defined in
#: tools/tool_registry.py and called by the gate's ``run`` alone.
DECISIONS = {("gate", "table"), ("autorun", "reason"), (None, "invoke"), (None, "verdict"),
             (None, "model_refusal")}


def _calls(name: str) -> list[tuple[str | None, str, int]]:
    """(the object's name or None, the called name, line) of every call in module ``name``."""
    tree = ast.parse(modules()[name].read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                out.append((None, func.id, node.lineno))
            elif isinstance(func, ast.Attribute):
                owner = func.value.id if isinstance(func.value, ast.Name) else None
                out.append((owner, func.attr, node.lineno))
    return out


def test_one_gate_decides_every_call():
    """No module but tools/gate.py makes a permission decision or runs a tool past it: none
    calls the mode's table, ``autorun.reason``, a ``verdict``, ``model_refusal`` or
    ``invoke`` (docs/permissions.md#the-gate)."""
    found = [f"{n}:{line} calls {owner + '.' if owner else ''}{called}"
             for n in modules() if n != GATE
             for owner, called, line in _calls(n)
             if (owner, called) in DECISIONS or (None, called) in DECISIONS]
    assert found == [], "\n".join(found)
    from lily_kernel.agent import pending
    from lily_kernel.settings.permissions import Permissions
    assert not hasattr(pending, "verdict") and not hasattr(Permissions, "verdict")


#: Each route a call comes by, and the module where it asks the gate.
ROUTES = {"MODEL": "lily_kernel.agent.request", "CONFIRM": "lily_kernel.agent.pending",
          "ACP": "lily_kernel.acp.acp_turns", "DISPATCH": "lily_kernel.commands.router"}


def test_every_route_passes_the_gate():
    """The model's call, /confirm and a card's button, an ACP permission reply and a
    tool_dispatch skill each reach ``gate.decide`` with their route (a replay's calls come
    by these routes, and the session's ``replay`` tells the gate what they may do)."""
    for route, name in ROUTES.items():
        source = modules()[name].read_text(encoding="utf-8")
        assert f"Route.{route}" in source, (route, name)
    for name in ("lily_kernel.agent.request", "lily_kernel.agent.pending",
                 "lily_kernel.commands.router"):
        assert any(owner == "gate" and called == "decide" for owner, called, _ in _calls(name)), name
    replay = modules()["lily_kernel.jupyter.replay_notebook"].read_text(encoding="utf-8")
    assert "session.replay = " in replay


def test_every_path_and_name_the_architecture_page_gives_exists():
    """docs/architecture.md names only modules, folders and names that exist: a path
    (``agent/loop.py``, ``tools/mcp/``; a bare ``x.py`` in a room's row is in that room), a
    module's name (``agent/pending.decide``, ``pending.find``) and a class's
    (``Session.show``)."""
    doc = (Path(__file__).parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [token for token, ok in _named(doc) if not ok]
    assert missing == [], missing


def _members(tree: ast.AST) -> dict[str, set[str]]:
    """class name -> the names its body defines, over one module's tree."""
    out: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            names = out.setdefault(node.name, set())
            for sub in node.body:
                names |= _defined(sub)
    return out


def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return set()


def _named(doc: str) -> list[tuple[str, bool]]:
    """Each path or dotted name in backquotes that points into Lily, and whether it exists."""
    import re
    repo = Path(__file__).parents[1]
    pkg = repo / "lily_kernel"
    rooms = {p.name for p in pkg.iterdir() if p.is_dir() and not p.name.startswith("_")}
    stems: dict[str, list[Path]] = {}
    classes: dict[str, set[str]] = {}
    for path in pkg.rglob("*.py"):
        stems.setdefault(path.stem, []).append(path)
        for cls, names in _members(ast.parse(path.read_text(encoding="utf-8"))).items():
            classes.setdefault(cls, set()).update(names)
    out = []
    for line in doc.splitlines():
        row = re.match(r"\| `(\w+)/`", line)
        room = row.group(1) if row else None
        for token in re.findall(r"`([^`\s]+)`", line):
            t = token.removeprefix("lily_kernel/")
            if re.fullmatch(r"(\w+/)+", t):
                out.append((token, (pkg / t).is_dir() or (repo / t).is_dir()))
                continue
            if re.fullmatch(r"(\w+/)*\w+\.py", t):
                if "/" not in t:
                    where = list((pkg / room).rglob(t)) if room else [pkg / t, repo / t]
                    where.append(repo / "scripts" / t)
                else:
                    where = [pkg / t if t.split("/")[0] in rooms else repo / t]
                out.append((token, any(p.exists() for p in where)))
                continue
            dotted = re.fullmatch(r"((?:\w+/)+\w+|\w+(?:\.\w+)*)\.(\w+)", t)
            if not dotted:
                continue
            module, name = dotted.groups()
            if "/" in module:
                path = pkg / f"{module}.py"
            elif "." in module and module.split(".")[0] in rooms:
                path = pkg / (module.replace(".", "/") + ".py")
            elif module.islower() and len(stems.get(module, [])) == 1:
                path = stems[module][0]
            elif module in classes:
                out.append((token, name in classes[module]))
                continue
            else:
                continue
            if not path.exists():
                out.append((token, False))
                continue
            text = path.read_text(encoding="utf-8")
            top = set().union(*(_defined(node) for node in ast.parse(text).body))
            out.append((token, name in top or f"class {name}" in text))  # a probe's source
    return out
