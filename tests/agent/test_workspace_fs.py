"""The file boundary (tools/workspace_fs.py, tools/protected.py; docs/trust-boundary.md).

Rules one by one against real folders, the /todos scan (notebooks as notebooks, skipped
folders), read_skill_file through the agent loop, and a property test: no generated path
and symlink/hard-link layout ever reads or writes outside the workspace or inside a
protected path.
"""
from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

import pytest
from agent_support import World, run_command
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lily_kernel.agent import loop
from lily_kernel.errors import ToolError
from lily_kernel.settings.limits import Limits
from lily_kernel.tools import workspace_fs
from lily_kernel.tools.workspace_fs import WorkspaceFS, split

pytestmark = pytest.mark.usefixtures("no_machine_model")


def boundary(ws: Path, **limits) -> WorkspaceFS:
    return workspace_fs.for_session(ws, Limits(**limits), (ws / "persona",),
                                    {"HOME": str(ws.parent / "home")})


@pytest.fixture
def ws(tmp_path) -> Path:
    w = tmp_path / "ws"
    w.mkdir()
    return w


# -- paths -------------------------------------------------------------------------------

@pytest.mark.parametrize("bad, word", [
    ("/etc/passwd", "absolute"), ("\\etc", "absolute"), ("~/x", "absolute"),
    ("a/../b", ".."), ("a\\..\\b", ".."), ("..", ".."), ("a\0b", "NUL"),
])
def test_split_refuses_escapes(bad, word):
    with pytest.raises(ToolError, match=word.replace(".", r"\.")):
        split(bad)


def test_split_normalises_dots_slashes_and_backslashes():
    assert split(" ./a//b/./c/ ") == ("a", "b", "c")
    assert split("a\\b") == ("a", "b")


# -- reading and writing ------------------------------------------------------------------

def test_write_creates_folders_replaces_atomically_and_keeps_permissions(ws):
    fs = boundary(ws)
    assert fs.write("a/b/c.txt", "héllo") == len("héllo".encode())
    assert (ws / "a" / "b" / "c.txt").read_text(encoding="utf-8") == "héllo"
    script = ws / "run.sh"
    script.write_text("old")
    script.chmod(0o751)
    inode = script.stat().st_ino
    fs.write("run.sh", "new")
    assert script.read_text() == "new" and stat.S_IMODE(script.stat().st_mode) == 0o751
    assert script.stat().st_ino != inode  # a new file renamed over the old name
    assert not [p for p in ws.rglob(".lily-write-*")]


def test_write_refuses_a_lone_surrogate_and_leaves_nothing(ws):
    with pytest.raises(ToolError, match="surrogate"):
        boundary(ws).write("s.txt", "\ud800")
    assert list(ws.iterdir()) == []


def test_read_of_small_and_binary_files(ws):
    (ws / "t.txt").write_bytes(b"ok\xff")
    assert boundary(ws).read("t.txt") == "ok\ufffd"


def test_read_cut_never_splits_a_character_and_says_so(ws):
    (ws / "u.txt").write_text("é" * 10, encoding="utf-8")  # 20 bytes
    text = boundary(ws, read_bytes=5).read("u.txt")
    body, marker = text.split("\n", 1)
    assert body == "éé" and "20 bytes" in marker and "read_bytes" in marker


def test_read_reads_at_most_cap_plus_one_bytes(ws):
    """/proc/self/io counts the bytes this process read: a whole-file read would show."""
    io = Path("/proc/self/io")
    if not io.exists():
        pytest.skip("needs /proc/self/io")
    with open(ws / "big.bin", "wb") as fh:
        fh.truncate(64 * 1024 * 1024)
    fs = boundary(ws, read_bytes=1000)

    def rchar() -> int:
        return int(dict(line.split(": ") for line in io.read_text().splitlines())["rchar"])

    before = rchar()
    data, size = fs.read_bytes_of("big.bin")
    spent = rchar() - before
    assert len(data) == 1001 and size == 64 * 1024 * 1024
    assert spent < 64 * 1024, spent  # the read itself plus reading /proc/self/io


def test_list_marks_folders_and_hides_protected_entries(ws):
    for d in ("docs", ".lily", "skills", "persona"):
        (ws / d).mkdir()
    for f in ("a.txt", "lily.toml", "contacts.yaml"):
        (ws / f).write_text("x")
    (ws / "link").symlink_to(ws / "docs")
    assert boundary(ws).list(".") == [("a.txt", False), ("docs", True), ("link", False)]


def test_case_and_unicode_spellings_of_protected_names_are_refused(ws):
    fs = boundary(ws)
    for path in (".LILY/x", "Lily.Toml", "SKILLS/x/SKILL.md", "Contacts.YAML",
                 "Persona/SOUL.md", "lily.toml/", "./lily.toml", "skills//new/"):
        with pytest.raises(ToolError, match="tools cannot write"):
            fs.write(path, "x")
    assert list(ws.iterdir()) == []


def test_configured_roots_inside_the_workspace_are_protected(ws):
    env = {"SKILLS_USER_DIR": str(ws / "mine" / "skills"), "HOME": str(ws.parent)}
    fs = workspace_fs.for_session(ws, Limits(), (ws / "people",), env)
    for path in ("mine/skills/new/SKILL.md", "people/SOUL.md", "skills/x/SKILL.md",
                 "persona/SOUL.md", "mine"):
        with pytest.raises(ToolError, match="tools cannot write"):
            fs.write(path, "x")
    fs.write("mine-not/x.txt", "fine")


def test_a_workspace_inside_a_skill_root_is_protected_whole(tmp_path):
    root = tmp_path / "my_skills"
    inner = root / "project"
    inner.mkdir(parents=True)
    fs = workspace_fs.for_session(inner, Limits(), (), {"SKILLS_USER_DIR": str(root)})
    with pytest.raises(ToolError, match="skill root"):
        fs.write("notes.md", "x")
    with pytest.raises(ToolError, match="skill root"):
        fs.list(".")
    assert list(inner.iterdir()) == []


def test_a_skill_root_that_is_a_symlink_is_protected_by_both_names(ws, tmp_path):
    real = ws / "real_skills"
    real.mkdir()
    (ws / "skills").symlink_to(real, target_is_directory=True)
    fs = workspace_fs.for_session(ws, Limits(), (), {"SKILLS_WORKSPACE_DIR": str(ws / "skills")})
    for path in ("skills/x/SKILL.md", "real_skills/x/SKILL.md"):
        with pytest.raises(ToolError, match="tools cannot write"):
            fs.write(path, "x")


def test_a_bind_mount_or_other_alias_of_a_protected_folder_is_refused_by_inode(ws):
    """The inode guard: a protected folder reached under a name the rules do not know."""
    (ws / ".lily").mkdir()
    guard_fs = WorkspaceFS(ws, guard=[ws / ".lily"])  # no name rules, only the inode guard
    with pytest.raises(ToolError, match="protected"):
        guard_fs.write(".lily/x", "x")
    with pytest.raises(ToolError, match="protected"):
        guard_fs.list(".lily")


# -- /todos -------------------------------------------------------------------------------

def notebook(cells: list[dict]) -> str:
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells})


def test_todos_reads_notebooks_as_notebooks_and_skips_what_is_not_the_users_work(tmp_path):
    world = World(tmp_path)
    ws = world.workspace
    (ws / "nb.ipynb").write_text(notebook([
        {"cell_type": "markdown", "metadata": {}, "source": ["# Plan\n", "TODO: MD-MARK\n"]},
        {"cell_type": "code", "metadata": {}, "execution_count": 1,
         "source": "x = 1\n# FIXME: CODE-MARK", "outputs": [
             {"output_type": "stream", "name": "stdout", "text": ["TODO: OUTPUT-MARK\n"]},
             {"output_type": "display_data", "metadata": {},
              "data": {"text/plain": ["HACK: DATA-MARK"]}}]},
        {"cell_type": "raw", "metadata": {}, "source": "TODO: RAW-MARK"}]))
    (ws / "broken.ipynb").write_text("{ not json TODO: BROKEN-MARK")
    skipped = {".ipynb_checkpoints/nb-checkpoint.ipynb": "CHECKPOINT", ".git/x.py": "GIT",
               "node_modules/m/i.js": "NODE", "env1/lib/x.py": "VENV", ".venv/x.py": "DOTVENV",
               "venv/x.py": "VENVNAME", "conda/lib/x.py": "CONDA", "skills/s/SKILL.md": "SKILL",
               "persona/SOUL.md": "PERSONA", ".lily/journal/x.jsonl": "JOURNAL"}
    for rel, mark in skipped.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(f"# TODO: {mark}-MARK\n")
    (ws / "env1" / "pyvenv.cfg").write_text("home = /usr\n")
    (ws / "conda" / "conda-meta").mkdir()
    (ws / "lily.toml").write_text("# TODO: TOML-MARK\n")
    (ws / "contacts.yaml").write_text("# TODO: CONTACTS-MARK\n")
    (ws / "work.py").write_text("# TODO: WORK-MARK\n")
    os.link(ws / "work.py", ws / "twin.py")
    session = world.session(None)
    out = run_command(session, "/todos").value
    assert "MD-MARK" in out and "CODE-MARK" in out and "WORK-MARK" not in out  # hard links
    assert "| `nb.ipynb` cell 1 | 2 | TODO | MD-MARK |" in out
    assert "| `nb.ipynb` cell 2 | 2 | FIXME | CODE-MARK |" in out
    for mark in ["OUTPUT", "DATA", "RAW", "BROKEN", "TOML", "CONTACTS", *skipped.values()]:
        assert f"{mark}-MARK" not in out, (mark, out)
    os.unlink(ws / "twin.py")
    assert "WORK-MARK" in run_command(session, "/todos").value
    assert run_command(session, "/todos nb.ipynb").value.count("-MARK") == 2


def test_todos_counts_markers_in_comments_and_at_line_starts_not_in_prose(tmp_path):
    world = World(tmp_path)
    ws = world.workspace
    (ws / "code.py").write_text(
        'x = 1  # TODO: IN-COMMENT\n'
        '"""Find TODO markers in DOCSTRING-PROSE."""\n'
        'raise ValueError("TODO STRING-PROSE")\n'
        '# note: FIXME(ana) LATER-IN-COMMENT\n')
    (ws / "app.js").write_text("let a = 1; // HACK: JS-COMMENT\n/* XXX BLOCK-COMMENT */\n")
    (ws / "notes.md").write_text("# TODO: HEADING-MARK\n- XXX BULLET-MARK\n"
                                 "1. FIXME NUMBERED-MARK\n- [ ] TODO CHECKBOX-MARK\n"
                                 "Which TODO MD-PROSE are there?\n<!-- TODO: HTML-COMMENT -->\n")
    (ws / "ask.ipynb").write_text(notebook([
        {"cell_type": "code", "metadata": {}, "execution_count": 1, "outputs": [],
         "source": "Which TODO CELL-PROSE are there?"}]))
    out = run_command(world.session(None), "/todos").value
    for mark in ("IN-COMMENT", "LATER-IN-COMMENT", "JS-COMMENT", "BLOCK-COMMENT",
                 "HEADING-MARK", "BULLET-MARK", "NUMBERED-MARK", "CHECKBOX-MARK", "HTML-COMMENT"):
        assert mark in out, (mark, out)
    for prose in ("DOCSTRING-PROSE", "STRING-PROSE", "MD-PROSE", "CELL-PROSE"):
        assert prose not in out, (prose, out)
    assert out.startswith("**9 markers**")


def test_todos_refuses_a_protected_start(tmp_path):
    world = World(tmp_path)
    session = world.session(None)
    for where in ("skills", ".lily", "lily.toml", "./Skills/x"):
        with pytest.raises(ToolError, match="tools cannot read"):
            session.tools.get("scan_todos")(where)


# -- read_skill_file --------------------------------------------------------------------

def test_read_skill_file_goes_through_the_boundary(tmp_path, server):
    world = World(tmp_path)
    folder = world.skills / "alpha"
    (folder / "references").mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nsummary: Alpha.\n---\nALPHA\n")
    (folder / "references" / "big.md").write_text("R" * 300)
    os.mkfifo(folder / "references" / "pipe.md")
    outside = tmp_path / "secret.md"
    outside.write_text("SECRET-MARK")
    os.link(outside, folder / "references" / "linked.md")
    (world.workspace / "lily.toml").write_text("[limits]\nread_bytes = 100\n")
    session = world.session(server)
    server.add({"tool_calls": [
        {"id": "load", "name": "load_skill", "arguments": {"name": "alpha"}},
        {"id": "big", "name": "read_skill_file", "arguments": {"path": "references/big.md"}},
        {"id": "pipe", "name": "read_skill_file", "arguments": {"path": "pipe.md"}},
        {"id": "hl", "name": "read_skill_file", "arguments": {"path": "linked.md"}}]}, "done")
    assert loop.run(session, "go").text == "done"
    results = {m["tool_call_id"]: m["content"] for m in session.conversation
               if m.get("role") == "tool"}
    assert results["big"].startswith("R" * 100 + "\n[… cut here")
    assert results["pipe"].startswith("Error:") and "FIFO" in results["pipe"]
    assert results["hl"].startswith("Error:") and "SECRET" not in results["hl"]


# -- the property: nothing outside, nothing protected --------------------------------------

NAMES = ["docs", "a.txt", "lily.toml", "LILY.TOML", ".lily", ".Lily", "state.txt", "skills",
         "s", "SKILL.md", "persona", "SOUL.md", "contacts.yaml", "..", ".", "", "l1", "l2",
         "l3", "h1", "h2", "new", "outside", "secret.txt"]
TARGETS = ["../outside/secret.txt", "OUTSIDE_ABS", "../outside", "lily.toml", ".lily",
           ".lily/state.txt", "skills", "skills/s/SKILL.md", "docs", "docs/a.txt", "l1", "l2",
           "l3", "../ws/lily.toml", "persona", "/dev/null", "missing"]
SENTINEL = "SENTINEL"

layouts = st.lists(st.tuples(st.sampled_from(["l1", "l2", "l3", "docs/l1", "docs/l2"]),
                             st.sampled_from(TARGETS)), min_size=1, max_size=4)
hardlinks = st.lists(st.tuples(st.sampled_from(["h1", "h2", "docs/h1"]),
                               st.sampled_from(["outside", "lily.toml", "state", "skill"])),
                     max_size=2)
LINKS = ["l1", "l2", "l3", "h1", "h2", "docs"]  # names the layouts use: drawn more often
paths = st.builds(lambda lead, comps, sep, trail: lead + sep.join(comps) + trail,
                  st.sampled_from(["", "", "", "./", "/", "\\"]),
                  st.lists(st.one_of(st.sampled_from(LINKS), st.sampled_from(NAMES)),
                           min_size=0, max_size=4),
                  st.sampled_from(["/", "/", "\\", "//"]), st.sampled_from(["", "", "/"]))
ops = st.lists(st.tuples(st.sampled_from(["read", "write", "list", "scan"]), paths),
               min_size=1, max_size=4)


def _build(base: Path, links, hards) -> tuple[Path, Path]:
    ws, out = base / "ws", base / "outside"
    for d in (ws / "docs", ws / ".lily", ws / "skills" / "s", ws / "persona", out / "sub"):
        d.mkdir(parents=True)
    (ws / "docs" / "a.txt").write_text("inside")
    for rel in ("lily.toml", ".lily/state.txt", "skills/s/SKILL.md", "persona/SOUL.md",
                "contacts.yaml"):
        (ws / rel).write_text(f"{SENTINEL}-protected-{rel}")
    (out / "secret.txt").write_text(f"{SENTINEL}-outside")
    (out / "sub" / "deep.txt").write_text(f"{SENTINEL}-outside-deep")
    sources = {"outside": out / "secret.txt", "lily.toml": ws / "lily.toml",
               "state": ws / ".lily" / "state.txt", "skill": ws / "skills" / "s" / "SKILL.md"}
    for where, target in links:
        if os.path.lexists(ws / where):
            continue
        os.symlink(str(out / "secret.txt") if target == "OUTSIDE_ABS" else target, ws / where)
    for where, source in hards:
        if not os.path.lexists(ws / where):
            os.link(sources[source], ws / where)
    return ws, out


def _guarded(ws: Path, out: Path) -> dict[str, bytes]:
    """Every file outside the workspace or under a protected path, with its bytes."""
    found = {}
    for top in (out, ws / ".lily", ws / "skills", ws / "persona"):
        for p in top.rglob("*"):
            if p.is_file() and not p.is_symlink():
                found[str(p)] = p.read_bytes()
    for name in os.listdir(ws):
        if name.casefold() in ("lily.toml", "contacts.yaml", ".lily", "skills", "persona"):
            p = ws / name
            found[str(p)] = p.read_bytes() if p.is_file() and not p.is_symlink() else b"<dir>"
    return found


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(links=layouts, hards=hardlinks, operations=ops)
@example(links=[("l1", "../outside/secret.txt"), ("l2", "l1")], hards=[],
         operations=[("read", "l1"), ("read", "l2"), ("write", "l2"), ("scan", ".")])
@example(links=[("l1", "../outside"), ("docs/l1", ".lily")], hards=[("h1", "outside")],
         operations=[("read", "l1/secret.txt"), ("write", "docs/l1/state.txt"),
                     ("read", "h1"), ("write", "h1"), ("list", "l1")])
@example(links=[("l3", "skills")], hards=[("h2", "lily.toml")],
         operations=[("write", "l3/s/SKILL.md"), ("read", "h2"), ("write", "h2"),
                     ("write", ".Lily/state.txt"), ("list", "./")])
def test_no_path_or_link_layout_reaches_outside_or_protected(links, hards, operations):
    with tempfile.TemporaryDirectory() as tmp:
        ws, out = _build(Path(tmp), links, hards)
        fs = boundary(ws)
        before = _guarded(ws, out)
        for op, path in operations:
            try:
                if op == "read":
                    shown = fs.read(path)
                elif op == "write":
                    fs.write(path, "WRITTEN")
                    shown = ""
                elif op == "list":
                    shown = json.dumps(fs.list(path))
                    assert not any(n.casefold() in ("lily.toml", ".lily", "skills", "persona",
                                                    "contacts.yaml") for n, _ in fs.list(path)
                                   if path.strip("./\\") == "")
                else:
                    shown = json.dumps(list(fs.scan(path, lambda n: 10_000,
                                                    lambda fd, n: False)), default=repr)
            except ToolError as exc:
                shown = str(exc)
            assert SENTINEL not in shown, (op, path, shown)
        assert _guarded(ws, out) == before, (links, hards, operations)
