"""Attack suite, files (issue 8): a hostile model drives a real session's file tools.

Every test runs Lily's real agent loop against :class:`ScriptedServer` on 127.0.0.1,
scripted as an attacker would: write Lily's own configuration, state, contacts, persona
and skills, and a git repository's hooks and config; race symlinks and hard links against reads and writes; read FIFOs, devices,
sockets and huge files; write past the cap. What must hold is docs/trust-boundary.md.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
from agent_support import World, run_command

from lily_kernel.agent import loop
from lily_kernel.commands.results import ToolOutput

pytestmark = pytest.mark.usefixtures("no_machine_model")

FORGED = "FORGED-BY-THE-MODEL"


class EditsWorld(World):
    """These attacks test the file boundary itself, so writes run without a card (edits
    mode, docs/permissions.md#modes); files that run by themselves still ask."""

    def env(self, server, **extra: str) -> dict[str, str]:
        return super().env(server, **{"LILY_MODE": "edits", **extra})


@pytest.fixture
def world(tmp_path) -> World:
    return EditsWorld(tmp_path)


def call(name: str, args: dict, id: str) -> dict:
    return {"name": name, "arguments": args, "id": id}


def attack(server, session, *tool_calls: dict) -> dict[str, str]:
    """One model turn making ``tool_calls``, then a final answer; the results by call id."""
    server.add({"tool_calls": list(tool_calls)}, "done")
    reply = loop.run(session, "attack")
    assert reply.text == "done"
    last = server.chat_requests()[-1]["messages"]
    return {m["tool_call_id"]: m["content"] for m in last if m.get("role") == "tool"}


def run_bounded(fn, seconds: float = 20.0):
    """Run ``fn`` in a thread; fail (instead of hanging the suite) if it does not return."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"blocked for more than {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


# -- protected paths ---------------------------------------------------------------------

def _protected_world(world: World, server):
    """A workspace with every protected file in place, and the session over it."""
    ws = world.workspace
    (ws / "lily.toml").write_text("[tools]\ndeny = ['write_nothing']\n", encoding="utf-8")
    (ws / "contacts.yaml").write_text("alice:\n  actor: https://alice.example/users/a\n")
    (ws / "persona").mkdir()
    (ws / "persona" / "SOUL.md").write_text("SOUL-ORIGINAL\n")
    (ws / "own_persona").mkdir()
    (ws / "own_persona" / "SOUL.md").write_text("OWN-SOUL-ORIGINAL\n")
    skill = world.skills / "alpha"
    skill.mkdir()
    (skill / "SKILL.md").write_text("---\nsummary: Alpha.\n---\nALPHA-ORIGINAL\n")
    agents = ws / ".agents" / "skills" / "delta"  # the Agent Skills folder (docs/loader.md#roots)
    agents.mkdir(parents=True)
    (agents / "SKILL.md").write_text("---\nsummary: Delta.\n---\nDELTA-ORIGINAL\n")
    vendor = ws / "vendor" / "skills" / "beta"
    vendor.mkdir(parents=True)
    (vendor / "SKILL.md").write_text("---\nsummary: Beta.\n---\nBETA-ORIGINAL\n")
    for git in (ws / ".git", ws / "vendor" / "lib" / ".git"):  # the workspace's and a clone's
        (git / "hooks").mkdir(parents=True)
        (git / "config").write_text('[remote "origin"]\n\turl = https://u:GIT-TOKEN@x.example/r\n')
        (git / "HEAD").write_text("ref: refs/heads/main\n")
    session = world.session(server, journal=True, LILY_PERSONA_DIR=str(ws / "own_persona"),
                            SKILLS_BUNDLED_DIR=str(ws / "vendor" / "skills"))
    session.config  # noqa: B018 - creates .lily/config.sqlite
    session.outbox  # noqa: B018 - creates .lily/outbox.sqlite
    return session


PROTECTED = {  # path the model names -> the file whose bytes must not change
    "lily.toml": "lily.toml",
    "./lily.toml": "lily.toml",
    "LILY.TOML": None,  # refused by name even on a case-sensitive disk; nothing created
    "lily.toml/": "lily.toml",
    "contacts.yaml": "contacts.yaml",
    ".lily/config.sqlite": ".lily/config.sqlite",
    ".lily//outbox.sqlite": ".lily/outbox.sqlite",
    ".lily/journal/forged.jsonl": None,
    "persona/SOUL.md": "persona/SOUL.md",
    "persona/agents/evil/SOUL.md": None,
    "own_persona/SOUL.md": "own_persona/SOUL.md",  # LILY_PERSONA_DIR inside the workspace
    "skills/alpha/SKILL.md": "skills/alpha/SKILL.md",
    "skills/new-skill/SKILL.md": None,  # a NEW skill folder
    "skills\\evil\\SKILL.md": None,
    ".agents/skills/delta/SKILL.md": ".agents/skills/delta/SKILL.md",  # other agents' roots
    ".agents/skills/new-skill/SKILL.md": None,
    ".AGENTS/Skills/evil/SKILL.md": None,
    ".claude/skills/new-skill/SKILL.md": None,
    "vendor/skills/beta/SKILL.md": "vendor/skills/beta/SKILL.md",  # SKILLS_BUNDLED_DIR inside
    "vendor/skills/gamma/SKILL.md": None,
    "vendor": None,  # would take the place of a folder holding a skill root
    ".git/config": ".git/config",  # may hold a remote's credentials
    ".git/HEAD": ".git/HEAD",
    ".git/hooks/pre-commit": None,  # a hook: code git would run later
    ".GIT/hooks/post-checkout": None,
    "./.git//config": ".git/config",
    ".git": None,
    "vendor/lib/.git/config": "vendor/lib/.git/config",  # a nested clone's, at any depth
    "vendor/lib/.git/hooks/pre-push": None,
    "notes/.git/hooks/pre-commit": None,  # a .git that does not exist yet
}


@pytest.mark.parametrize("path", list(PROTECTED))
def test_a_model_cannot_write_read_or_list_a_protected_path(world, server, path):
    session = _protected_world(world, server)
    ws = world.workspace
    before = {p.relative_to(ws).as_posix(): p.read_bytes()
              for p in ws.rglob("*") if p.is_file() and ".lily/journal" not in p.as_posix()}
    journal = session.journal.path.read_bytes()
    results = attack(server, session,
                     call("write", {"path": path, "content": FORGED}, "w"),
                     call("read", {"path": path}, "r"),
                     call("list", {"path": path}, "l"))
    assert results["w"].startswith("Error:") and "tools cannot write" in results["w"], results
    assert results["r"].startswith("Error:"), results
    if path != "vendor":  # an ordinary folder that merely holds a skill root may be listed
        assert results["l"].startswith("Error:"), results
    after = {p.relative_to(ws).as_posix(): p.read_bytes()
             for p in ws.rglob("*") if p.is_file() and ".lily/journal" not in p.as_posix()}
    assert after == before  # no protected file changed, none was created
    assert session.journal.path.read_bytes().startswith(journal)  # only Lily appended
    assert not list((ws / ".lily" / "journal").glob("forged*"))
    shown = json.dumps(results)
    for original in ("write_nothing", "alice.example", "SOUL-ORIGINAL", "ALPHA-ORIGINAL",
                     "BETA-ORIGINAL", "DELTA-ORIGINAL", "SQLite format", "GIT-TOKEN", "refs/heads"):
        assert original not in shown, (original, results)


def test_protected_paths_that_do_not_exist_yet_cannot_be_created(world, server):
    """A fresh workspace: no lily.toml, no .lily/, no persona/ -- the names alone protect."""
    session = world.session(server)  # no journal: nothing under .lily/ yet
    world.skills.rmdir()
    paths = ["lily.toml", "contacts.yaml", ".lily/config.sqlite", ".LILY/journal/x.jsonl",
             "persona/SOUL.md", "skills/new/SKILL.md", "Contacts.yaml", ".git/hooks/pre-commit",
             ".git", "lib/.git/config", ".agents/skills/new/SKILL.md",
             ".claude/skills/new/SKILL.md"]
    results = attack(server, session, *[call("write", {"path": p, "content": FORGED}, p)
                                        for p in paths])
    assert all(r.startswith("Error:") and "tools cannot write" in r for r in results.values())
    assert list(world.workspace.iterdir()) == []


def test_the_refusal_names_the_rule(world, server):
    session = _protected_world(world, server)
    results = attack(server, session,
                     call("write", {"path": "lily.toml", "content": FORGED}, "toml"),
                     call("write", {"path": ".lily/config.sqlite", "content": FORGED}, "reg"),
                     call("write", {"path": "skills/new/SKILL.md", "content": FORGED}, "skill"),
                     call("write", {"path": ".git/hooks/pre-commit", "content": FORGED}, "hook"),
                     call("read", {"path": ".git"}, "git"))
    assert results["toml"] == "Error: lily.toml is Lily's configuration; tools cannot write it"
    assert ".lily/" in results["reg"] and "Config Registry" in results["reg"]
    assert "skills/" in results["skill"] and "skill root" in results["skill"]
    assert results["hook"] == ("Error: '.git/hooks/pre-commit' is inside .git/, the repository's "
                               "own data; tools cannot write it")
    assert results["git"] == "Error: .git/ is the repository's own data; tools cannot read it"


def test_listing_the_workspace_hides_protected_paths(world, server):
    session = _protected_world(world, server)
    (world.workspace / "notes.md").write_text("mine\n")
    results = attack(server, session, call("list", {"path": "."}, "l"))
    names = results["l"].splitlines()
    assert "notes.md" in names and "vendor/" in names
    for hidden in (".lily/", "lily.toml", "contacts.yaml", "persona/", "own_persona/", "skills/",
                   ".git/"):
        assert hidden not in names, names
    vendor = attack(server, session, call("list", {"path": "vendor"}, "v"))["v"]
    assert "skills/" not in vendor.splitlines()
    lib = attack(server, session, call("list", {"path": "vendor/lib"}, "lib"))["lib"]
    assert ".git/" not in lib.splitlines()


def test_protected_hard_link_and_symlink_aliases_are_refused(world, server):
    session = _protected_world(world, server)
    ws = world.workspace
    os.link(ws / "lily.toml", ws / "alias.toml")
    (ws / "state").symlink_to(ws / ".lily", target_is_directory=True)
    original = (ws / "lily.toml").read_bytes()
    results = attack(server, session,
                     call("write", {"path": "alias.toml", "content": FORGED}, "hl"),
                     call("read", {"path": "alias.toml"}, "hlr"),
                     call("write", {"path": "state/config.sqlite", "content": FORGED}, "sl"))
    assert all(r.startswith("Error:") for r in results.values()), results
    assert (ws / "lily.toml").read_bytes() == original == (ws / "alias.toml").read_bytes()


def test_new_rereads_the_protected_set_and_caps(world, server):
    session = world.session(server)
    (world.workspace / "big.txt").write_text("x" * 500)
    assert "cut here" not in attack(server, session, call("read", {"path": "big.txt"}, "r"))["r"]
    (world.workspace / "lily.toml").write_text("[limits]\nread_bytes = 100\n")
    session.renew()
    result = attack(server, session, call("read", {"path": "big.txt"}, "r"))["r"]
    assert result.startswith("x" * 100 + "\n[… cut here") and "read_bytes" in result


# -- races ------------------------------------------------------------------------------

class Swapper:
    """A thread that keeps swapping workspace entries between a harmless and a hostile form."""

    def __init__(self, ws: Path, outside: Path) -> None:
        self.ws, self.outside = ws, outside
        self.stop = threading.Event()
        self.swaps = 0
        (ws / "d").mkdir()
        (ws / "d" / "f.txt").write_text("INSIDE\n")
        (ws / "t.txt").write_text("INSIDE\n")
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        ws, out = self.ws, self.outside
        kinds = ("symlink", "file", "hardlink", "file")
        i = 0
        while not self.stop.is_set():
            kind = kinds[i % len(kinds)]
            i += 1
            tmp = ws / f".swap{i}"
            if kind == "symlink":
                os.symlink(out / "secret.txt", tmp)
            elif kind == "hardlink":
                os.link(out / "secret.txt", tmp)
            else:
                tmp.write_text("INSIDE\n")
            os.replace(tmp, ws / "t.txt")  # the name always exists: reads never just miss
            # a folder component: the real folder <-> a symlink to the outside folder
            d, fresh = ws / "d", ws / f".dir{i}"
            try:  # a folder component: a real folder <-> a symlink to the outside folder
                if kind == "symlink":
                    if d.is_dir() and not d.is_symlink():
                        os.rename(d, fresh)
                        shutil.rmtree(fresh)
                    os.symlink(out, d, target_is_directory=True)
                else:
                    fresh.mkdir()
                    (fresh / "f.txt").write_text("INSIDE\n")
                    if d.is_symlink():
                        d.unlink()
                    os.rename(fresh, d)  # fails if a write made a non-empty "d" meanwhile
            except OSError:
                shutil.rmtree(fresh, ignore_errors=True)
            self.swaps += 1

    def __enter__(self) -> Swapper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


def _outside(base: Path) -> Path:
    out = base / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("SECRET-OUTSIDE\n")
    (out / "f.txt").write_text("SECRET-OUTSIDE-DIR\n")
    return out


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


ROUNDS, CALLS_PER_TURN = 6, 60  # through the model: 360 reads and 360 writes, each racing


def test_symlink_swap_race_on_read_and_write_never_escapes(world, server):
    outside = _outside(world.base)
    before = _snapshot(outside)
    session = world.session(server)
    session.approve("write", session.tools.get("write").identity())  # /confirm --always: a write over t.txt runs without a card
    turns = []
    for r in range(ROUNDS):
        turns.append({"tool_calls": [
            call(*(("read", {"path": "t.txt"}) if i % 4 == 0 else
                   ("read", {"path": "d/f.txt"}) if i % 4 == 1 else
                   ("write", {"path": "t.txt", "content": FORGED}) if i % 4 == 2 else
                   ("write", {"path": "d/f.txt", "content": FORGED})), f"c{r}-{i}")
            for i in range(CALLS_PER_TURN)]})
    server.add(*turns, "done")
    with Swapper(world.workspace, outside) as swapper:
        reply = loop.run(session, "race")
    assert reply.text == "done" and swapper.swaps > 10
    results = [m["content"] for m in session.conversation if m.get("role") == "tool"]
    assert len(results) == ROUNDS * CALLS_PER_TURN
    assert not [r for r in results if "SECRET" in r]  # zero escapes on read
    assert _snapshot(outside) == before  # zero escapes on write
    assert any(r.strip() in ("INSIDE", FORGED) for r in results)  # the race ran both ways
    assert any(r.startswith("Error:") for r in results)


def test_symlink_swap_race_many_iterations(world):
    """The same race, 4,000 calls through the session's tools (the loop's own entry point)."""
    outside = _outside(world.base)
    before = _snapshot(outside)
    session = world.session(None)
    read, write = session.tools.get("read"), session.tools.get("write")
    escapes, ok = [], 0
    with Swapper(world.workspace, outside):
        for _ in range(1000):
            for path in ("t.txt", "d/f.txt"):
                try:
                    text = read(path)
                    ok += 1
                    if "SECRET" in text:
                        escapes.append((path, text))
                except Exception:
                    pass
                try:
                    write(path, FORGED)
                except Exception:
                    pass
    assert escapes == [] and _snapshot(outside) == before and ok > 0


# -- not regular files ----------------------------------------------------------------

def test_fifo_device_socket_and_hard_link_are_refused_without_blocking(world, server):
    ws = world.workspace
    outside = _outside(world.base)
    os.mkfifo(ws / "pipe")
    os.link(outside / "secret.txt", ws / "linked.txt")
    sock_path = ws / "sock"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(sock_path))
    except OSError:
        pytest.skip("cannot bind a Unix socket here")
    (ws / "null").symlink_to("/dev/null")
    session = world.session(server)
    calls = [call("read", {"path": "pipe"}, "fifo"),
             call("write", {"path": "pipe", "content": FORGED}, "fifo-w"),
             call("list", {"path": "pipe"}, "fifo-l"),
             call("write", {"path": "pipe/x.txt", "content": FORGED}, "fifo-dir"),
             call("read", {"path": "sock"}, "sock"),
             call("write", {"path": "sock", "content": FORGED}, "sock-w"),
             call("read", {"path": "null"}, "null"),
             call("read", {"path": "linked.txt"}, "hl"),
             call("write", {"path": "linked.txt", "content": FORGED}, "hl-w")]
    try:
        results = run_bounded(lambda: attack(server, session, *calls))
    finally:
        sock.close()
    for key in ("fifo", "fifo-w"):
        assert "FIFO" in results[key] and results[key].startswith("Error:")
    for key in ("fifo-l", "fifo-dir"):
        assert "not a folder" in results[key] and results[key].startswith("Error:")
    assert "socket" in results["sock"] and "socket" in results["sock-w"]
    assert "symlink" in results["null"]
    assert "hard links" in results["hl"] and "hard links" in results["hl-w"]
    assert (outside / "secret.txt").read_text() == "SECRET-OUTSIDE\n"


def test_character_device_is_refused(world, server):
    dev = world.workspace / "null"
    try:
        os.mknod(dev, 0o666 | __import__("stat").S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError):
        pytest.skip("os.mknod needs root (or is not allowed here)")
    session = world.session(server)
    results = run_bounded(lambda: attack(server, session,
                                         call("read", {"path": "null"}, "r"),
                                         call("write", {"path": "null", "content": "x"}, "w")))
    assert "character device" in results["r"] and "character device" in results["w"]


def test_scan_todos_with_a_fifo_in_the_tree_returns(world, server):
    ws = world.workspace
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("# TODO: FIFO-NEIGHBOUR-MARK\n")
    os.mkfifo(ws / "src" / "pipe.py")
    session = world.session(server)
    out = run_bounded(lambda: run_command(session, "/todos"))
    assert isinstance(out, ToolOutput) and "FIFO-NEIGHBOUR-MARK" in out.value
    results = run_bounded(lambda: attack(server, session,
                                         call("scan_todos", {"input": "src"}, "s"),
                                         call("scan_todos", {"input": "src/pipe.py"}, "p")))
    assert "FIFO-NEIGHBOUR-MARK" in results["s"]
    assert results["p"].startswith("Error:") and "FIFO" in results["p"]


# -- caps -------------------------------------------------------------------------------

def test_read_cap_reads_at_most_cap_plus_one_and_says_so(world, server):
    (world.workspace / "lily.toml").write_text("[limits]\nread_bytes = 4096\n")
    big = world.workspace / "huge.bin"
    with open(big, "wb") as fh:
        fh.write(b"A" * 5000)
        fh.truncate(8 * 1024 ** 3)  # 8 GiB, sparse: a whole-file read would never finish
    session = world.session(server)
    t0 = time.monotonic()
    result = attack(server, session, call("read", {"path": "huge.bin"}, "r"))["r"]
    assert time.monotonic() - t0 < 10
    text, marker = result.split("\n", 1)
    assert text == "A" * 4096
    assert marker.startswith("[… cut here") and str(8 * 1024 ** 3) in marker
    assert "read_bytes" in marker


def test_write_cap_refuses_a_larger_write_and_writes_nothing(world, server):
    (world.workspace / "lily.toml").write_text("[limits]\nwrite_bytes = 100\n")
    session = world.session(server)
    results = attack(server, session,
                     call("write", {"path": "big.txt", "content": "é" * 51}, "over"),  # 102 bytes
                     call("write", {"path": "ok.txt", "content": "x" * 100}, "at"))
    assert results["over"].startswith("Error:") and "write_bytes" in results["over"]
    assert "102 bytes" in results["over"]
    assert not (world.workspace / "big.txt").exists()
    assert (world.workspace / "ok.txt").read_text() == "x" * 100
    assert not [p for p in world.workspace.iterdir() if p.name.startswith(".lily-write")]


def test_default_write_cap_stops_a_larger_write(world):
    session = world.session(None)
    assert session.limits.write_bytes == 1024 * 1024
    with pytest.raises(Exception) as info:
        session.tools.get("write")("huge.txt", "x" * (1024 * 1024 + 1))
    assert "write_bytes" in str(info.value)
    assert not (world.workspace / "huge.txt").exists()


# -- places where code runs by itself (issue 15 point 2) ----------------------------------

AUTORUN = {  # path the model names -> words the refusal must hold (the rule it names)
    "lib/python3.11/site-packages/evil.py": "site-packages/",
    "usr/lib/python3/dist-packages/evil.py": "dist-packages/",
    "evil.pth": "*.pth file",
    "deep/er/Evil.PTH": "*.pth file",
    "sitecustomize.py": "sitecustomize.py is a start-up hook",
    "src/usercustomize.py": "usercustomize.py file",
    ".ipython/profile_default/startup/00.py": ".ipython/",
    ".jupyter/jupyter_server_config.py": ".jupyter/",
    ".config/git/config": ".config/",
    "share/jupyter/kernels/x/kernel.json": "kernel.json file",
    "kernels/lily/kernel.json": "kernel.json file",
    "kernels/lily/logo.py": "kernelspec",  # a folder holding kernel.json
    ".venv/bin/python": ".venv/",
    "venv/lib/x.py": "venv/",
    "env/bin/activate": "env/",
    "tools/myenv/bin/activate": "virtual environment",  # a venv under any name (pyvenv.cfg)
    "tools/myenv/pyvenv.cfg": "virtual environment",
    "pyvenv.cfg": "pyvenv.cfg is",  # would make the workspace itself a venv
}


def _autorun_world(world: World) -> None:
    ws = world.workspace
    (ws / "tools" / "myenv" / "bin").mkdir(parents=True)
    (ws / "tools" / "myenv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (ws / "tools" / "myenv" / "bin" / "activate").write_text("ORIGINAL-ACTIVATE\n")
    (ws / "kernels" / "lily").mkdir(parents=True)
    (ws / "kernels" / "lily" / "kernel.json").write_text('{"argv": ["ORIGINAL"]}')
    (ws / ".config" / "git").mkdir(parents=True)
    (ws / ".config" / "git" / "config").write_text("ORIGINAL-CONFIG\n")


@pytest.mark.parametrize("path", list(AUTORUN))
def test_a_model_cannot_reach_places_where_code_runs_by_itself(world, server, path):
    _autorun_world(world)
    session = world.session(server)
    ws = world.workspace
    before = {p.relative_to(ws).as_posix(): p.read_bytes() for p in ws.rglob("*") if p.is_file()}
    results = attack(server, session,
                     call("write", {"path": path, "content": FORGED}, "w"),
                     call("read", {"path": path}, "r"))
    assert results["w"].startswith("Error:") and "tools cannot write" in results["w"], results
    assert AUTORUN[path] in results["w"], results  # the refusal names the rule
    assert results["r"].startswith("Error:"), results
    assert "ORIGINAL" not in json.dumps(results)
    after = {p.relative_to(ws).as_posix(): p.read_bytes() for p in ws.rglob("*") if p.is_file()}
    assert after == before


def test_listing_hides_places_where_code_runs_by_itself(world, server):
    _autorun_world(world)
    (world.workspace / "notes.md").write_text("mine\n")
    (world.workspace / "x.pth").write_text("import os\n")
    session = world.session(server)
    results = attack(server, session, call("list", {"path": "."}, "top"),
                     call("list", {"path": "tools"}, "tools"),
                     call("list", {"path": "tools/myenv"}, "venv"),
                     call("list", {"path": "kernels"}, "kernels"))
    assert results["top"].splitlines() == ["kernels/", "notes.md", "tools/"], results
    assert "lily" not in results["kernels"]
    assert "myenv" not in results["tools"]
    assert "pyvenv.cfg" in results["venv"] and "tools cannot list" in results["venv"]
