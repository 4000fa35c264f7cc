"""docs/loader.md#reloads: a session keeps what each SKILL.md parsed into, and a reload reads
again only the files whose lstat changed (type, device, inode, size, mtime, ctime); a kept
skill's verdict (exclusion, eligibility) holds while what it was decided against is unchanged.

Which files a load reads is seen through the loader's one read of a SKILL.md
(``skill_md.read``), wrapped to record each folder it is called for."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from agent_support import run_command

from lily_kernel.commands.table import BUILTIN_NAMES
from lily_kernel.skills import loader, skill_md
from lily_kernel.skills.eligibility import Host
from lily_kernel.skills.loader import SkillCache, build_snapshot
from lily_kernel.tools.tool_registry import ToolPolicy


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """The skill folders (names) each SKILL.md read is for, in order."""
    seen: list[str] = []
    real = skill_md.read

    def recording(path: str):
        seen.append(Path(path).name)
        return real(path)
    monkeypatch.setattr(skill_md, "read", recording)
    return seen


@pytest.fixture
def settled(monkeypatch) -> None:
    """Files written before a load count as settled (the 2 s window is its own test)."""
    monkeypatch.setattr(loader, "SETTLED_NS", 0)


def _load(env, cache: SkillCache):
    return build_snapshot(env.roots(), env.tools_for(env.workspace), ToolPolicy(),
                          host=env.host, cache=cache)


def test_reload_skills_reads_again_only_the_changed_skill(env, reads, settled):
    for i in range(30):
        env.write_skill(env.ws_skills, f"skill-{i:02d}", f"summary: number {i}")
    env.write_skill(env.user_skills, "broken", "summary: [unclosed")
    session = env.session()
    assert len(reads) == 31
    before = session.snapshot
    reads.clear()
    env.write_skill(env.ws_skills, "skill-07", "summary: number seven, edited")
    run_command(session, "/reload_skills")
    assert reads == ["skill-07"]
    after = session.snapshot
    assert after.get("skill-07").summary == "number seven, edited"
    assert after.hash != before.hash and after.version == 2
    # The others are the very skills parsed before, and the broken one keeps its reason.
    assert all(after.get(s.name) is s for s in before.skills if s.name != "skill-07")
    assert env.diag(after, "skill_error", "broken") == env.diag(before, "skill_error", "broken")
    reads.clear()
    run_command(session, "/new")  # a new session in the same kernel keeps what was parsed
    assert reads == []
    assert session.snapshot.hash == after.hash


def test_a_reload_sees_each_kind_of_change(env, reads, settled):
    """A change of size, of mtime, of inode, or of content alone (size and mtime put
    back, as `cp -p` over the file leaves them: only ctime tells) is read again."""
    names = ("size", "mtime", "inode", "content")
    for name in names:
        env.write_skill(env.ws_skills, name, "summary: first")
    cache = SkillCache()
    _load(env, cache)
    reads.clear()
    md = {name: env.ws_skills / name / "SKILL.md" for name in names}
    md["size"].write_text(md["size"].read_text() + "\nMore.\n")
    st = md["mtime"].stat()
    os.utime(md["mtime"], ns=(st.st_atime_ns, st.st_mtime_ns - 1_000_000_000))
    st = md["inode"].stat()
    fresh = md["inode"].with_name("new.md")
    fresh.write_text(md["inode"].read_text().replace("first", "other"))  # the same size
    os.utime(fresh, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(fresh, md["inode"])
    st = md["content"].stat()
    md["content"].write_text(md["content"].read_text().replace("first", "again"))
    os.utime(md["content"], ns=(st.st_atime_ns, st.st_mtime_ns))
    snap = _load(env, cache)
    assert sorted(reads) == sorted(names)
    assert [snap.get(n).summary for n in names] == ["first", "first", "other", "again"]
    reads.clear()
    _load(env, cache)
    assert reads == []


def test_what_changed_within_two_seconds_is_read_at_every_load(env, reads):
    """A file is kept only once its ctime and mtime are 2 s old (SETTLED_NS): a second
    change in the same timestamp tick, same size and mtime, is never missed."""
    assert loader.SETTLED_NS == 2_000_000_000
    env.write_skill(env.ws_skills, "fresh", "summary: v1")
    cache = SkillCache()
    assert _load(env, cache).get("fresh").summary == "v1"
    md = env.ws_skills / "fresh" / "SKILL.md"
    st = md.stat()
    md.write_text(md.read_text().replace("v1", "v2"))
    os.utime(md, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _load(env, cache).get("fresh").summary == "v2"
    assert reads == ["fresh", "fresh"] and len(cache) == 0


def test_the_cache_keeps_only_the_files_of_the_last_load(env, reads, settled):
    for name in ("a", "b", "c", "d"):
        env.write_skill(env.user_skills, name, f"summary: {name}")
    cache = SkillCache()
    _load(env, cache)
    assert len(cache) == 4
    shutil.rmtree(env.user_skills / "a")
    shutil.rmtree(env.user_skills / "b")
    env.write_skill(env.ws_skills, "c", "summary: the workspace's c")  # shadows the user's
    reads.clear()
    snap = _load(env, cache)
    assert reads == ["c"] and snap.names() == ["c", "d"]
    assert snap.get("c").summary == "the workspace's c"
    assert len(cache) == 2  # the workspace's c and the user's d


def test_a_cached_skill_md_swapped_for_a_link_out_or_a_fifo_is_refused(env, tmp_path, settled):
    """Attack: after a load kept them, SKILL.md becomes a symlink to a file outside its
    folder (the same bytes, even the same inode), or a FIFO. The next load refuses both,
    as a first load would."""
    env.write_skill(env.ws_skills, "linked", "summary: inside")
    env.write_skill(env.ws_skills, "piped", "summary: inside")
    cache = SkillCache()
    assert _load(env, cache).names() == ["linked", "piped"]
    outside = tmp_path / "outside.md"
    os.replace(env.ws_skills / "linked" / "SKILL.md", outside)  # the very inode, moved out
    (env.ws_skills / "linked" / "SKILL.md").symlink_to(outside)
    os.unlink(env.ws_skills / "piped" / "SKILL.md")
    os.mkfifo(env.ws_skills / "piped" / "SKILL.md")
    snap = _load(env, cache)
    assert snap.names() == []
    assert env.diag(snap, "skill_error", "linked").reason == (
        f"SKILL.md is a symlink to {outside}, outside the skill folder")
    assert env.diag(snap, "skill_error", "piped").reason == "SKILL.md is missing"


def test_a_symlinked_skill_md_inside_its_folder_is_read_at_every_load(env, reads, settled):
    """Its lstat is the link's, which a change of the file it points to leaves alone."""
    folder = env.ws_skills / "linked"
    folder.mkdir()
    (folder / "real.md").write_text("---\nsummary: v1\n---\nBody.\n")
    (folder / "SKILL.md").symlink_to(folder / "real.md")
    cache = SkillCache()
    assert _load(env, cache).get("linked").summary == "v1"
    (folder / "real.md").write_text("---\nsummary: v2\n---\nBody.\n")
    assert _load(env, cache).get("linked").summary == "v2"
    assert reads == ["linked", "linked"]


@pytest.fixture
def judged(monkeypatch) -> list[str]:
    """The skills (names) each load decides a verdict for, in order."""
    seen: list[str] = []
    real = loader._verdict

    def recording(skill, *args, **kwargs):
        seen.append(skill.name)
        return real(skill, *args, **kwargs)
    monkeypatch.setattr(loader, "_verdict", recording)
    return seen


def test_a_kept_verdict_is_decided_again_when_what_it_depends_on_changes(env, judged, settled):
    """The verdict of an unchanged skill is kept while the tools (the registry and its
    version), the policy, the host (platform, environment, PATH) and the reserved names are
    as they were; a change of any of them, even of the host's environment in place, decides
    every verdict again. A skill that looks a binary up on PATH is decided at every load:
    a binary installed on the same PATH makes it eligible."""
    env.write_skill(env.ws_skills, "plain", "summary: plain")
    env.write_skill(env.ws_skills, "reads", "summary: reads\nrequires_tools: [read]")
    env.write_skill(env.ws_skills, "needs-env", "summary: e\neligibility:\n  env: [LATER_VAR]")
    env.write_skill(env.ws_skills, "needs-bin", "summary: b\neligibility:\n  binaries: [laterbin]")
    env.write_skill(env.ws_skills, "late", "invocation_mode: tool_dispatch\ncommand_tool: late_tool")
    env.write_skill(env.ws_skills, "aliased", "summary: a\ncommand: later")
    everyone = ["aliased", "late", "needs-bin", "needs-env", "plain", "reads"]
    cache, tools = SkillCache(), env.tools_for(env.workspace)
    host_env = dict(env.host_env)
    host = Host("linux", host_env, str(env.bin))

    def load(policy: ToolPolicy | None = None, reserved: frozenset[str] = BUILTIN_NAMES):
        judged.clear()
        return build_snapshot(env.roots(), tools, policy or ToolPolicy(), host=host,
                              reserved=reserved, cache=cache)

    assert load().names() == ["aliased", "plain", "reads"] and judged == everyone
    assert load().names() == ["aliased", "plain", "reads"] and judged == ["needs-bin"]

    host_env["LATER_VAR"] = "1"  # the session's mapping, changed in place
    assert load().names() == ["aliased", "needs-env", "plain", "reads"] and judged == everyone
    env.make_bin(env.bin, "laterbin")  # the same PATH
    assert load().get("needs-bin") is not None and judged == ["needs-bin"]

    snap = load(ToolPolicy(deny=frozenset({"read"})))
    assert "'read' is denied" in env.diag(snap, "ineligible", "reads").reason
    assert judged == everyone
    assert load().get("reads") is not None and judged == everyone

    @tools.register(name="late_tool")
    def late_tool(input: str = "") -> str:
        return "ran"
    assert load().get("late") is not None and judged == everyone

    snap = load(reserved=BUILTIN_NAMES | {"later"})
    assert "collides with the built-in command /later" in env.diag(
        snap, "skill_error", "aliased").reason
    assert judged == everyone
    assert load().aliases["later"] == "aliased" and judged == everyone
    assert load().names() == everyone and judged == ["needs-bin"]
