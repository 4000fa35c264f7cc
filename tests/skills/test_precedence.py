"""docs/loader.md#precedence: workspace > user > bundled, eligibility after precedence, no fallback,
and results that never depend on the order the OS lists a folder in."""
from __future__ import annotations

import itertools
import random

import pytest

import lily_kernel.skills.loader
from lily_kernel.skills.paths import SOURCES

# every root alone, every pair, and all of them at once
SUBSETS = [combo for n in (1, 2) for combo in itertools.combinations(SOURCES, n)] + [SOURCES]
assert len(SUBSETS) == 8 + 28 + 1


@pytest.mark.parametrize("present", SUBSETS, ids=["+".join(s) for s in SUBSETS])
def test_precedence_in_every_combination(env, present):
    for source in present:
        env.write_skill(env.root_dir(source), "shared", f"summary: from {source}",
                        body=f"# body from {source}\n")
    snap = env.snapshot()
    winner_source = present[0]  # SOURCES is ordered highest precedence first
    skill = snap.get("shared")
    assert skill.source == winner_source
    assert skill.summary == f"from {winner_source}"
    assert skill.body == f"# body from {winner_source}\n"
    assert skill.path == str(env.root_dir(winner_source) / "shared")

    shadowed = [d for d in snap.diagnostics if d.kind == "shadowed"]
    assert [d.source for d in shadowed] == list(present[1:])
    for d in shadowed:
        assert d.skill == "shared"
        assert d.path == str(env.root_dir(d.source) / "shared")
        assert winner_source in d.reason  # names the winner ...
        assert str(env.root_dir(winner_source) / "shared") in d.reason  # ... and where it is
    assert len(snap.skills) == 1


def test_precedence_order_is_workspace_user_bundled():
    # docs/loader.md#roots: project, then user, then bundled; Lily's own folder first at each level
    # and Lily's example skills last, when SKILLS_EXAMPLES turns them on
    assert SOURCES == ("workspace", "workspace-agents", "workspace-claude",
                       "user", "user-agents", "user-openclaw", "bundled", "examples")


def test_distinct_names_from_all_roots_are_merged(env):
    env.write_skill(env.ws_skills, "w_only", "summary: w")
    env.write_skill(env.user_skills, "u_only", "summary: u")
    env.write_skill(env.bundled_skills, "b_only", "summary: b")
    snap = env.snapshot()
    assert [(s.name, s.source) for s in snap.skills] == [
        ("b_only", "bundled"), ("u_only", "user"), ("w_only", "workspace")]


def test_no_fallback_when_the_winner_is_ineligible(env):
    env.write_skill(env.ws_skills, "tool", "summary: ws copy\neligibility:\n  os: [win32]")
    env.write_skill(env.user_skills, "tool", "summary: user copy")
    env.write_skill(env.bundled_skills, "tool", "summary: bundled copy")
    snap = env.snapshot()
    assert snap.get("tool") is None  # the eligible lower copies are NOT used
    d = env.diag(snap, "ineligible", "tool")
    assert d.source == "workspace" and "win32" in d.reason
    assert sorted(x.source for x in snap.diagnostics if x.kind == "shadowed") == ["bundled", "user"]


@pytest.mark.parametrize(("source", "frontmatter", "reason"), [
    ("user", "summary: [broken", "invalid YAML"),
    ("workspace", None, "SKILL.md is missing"),  # a folder without its SKILL.md
    ("workspace", "command: help", "built-in"),  # an alias colliding with a built-in
], ids=["malformed", "no-skill-md", "builtin-alias"])
def test_no_fallback_when_the_winner_is_a_skill_error(env, source, frontmatter, reason):
    if frontmatter is None:
        (env.root_dir(source) / "tool").mkdir()
    else:
        env.write_skill(env.root_dir(source), "tool", frontmatter)
    env.write_skill(env.bundled_skills, "tool", "summary: fine")
    snap = env.snapshot()
    assert snap.get("tool") is None
    d = env.diag(snap, "skill_error", "tool")
    assert d.source == source and reason in d.reason
    assert env.diag(snap, "shadowed", "tool").source == "bundled"


def test_eligibility_is_checked_after_precedence(env):
    # An ineligible LOWER copy does not matter: only the winner is checked.
    env.write_skill(env.ws_skills, "tool", "summary: eligible winner")
    env.write_skill(env.bundled_skills, "tool", "summary: bad\neligibility:\n  os: [win32]")
    env.write_skill(env.user_skills, "tool", "summary: [also broken")
    snap = env.snapshot()
    assert snap.get("tool").summary == "eligible winner"
    assert not [d for d in snap.diagnostics if d.kind in ("ineligible", "skill_error")]
    assert len([d for d in snap.diagnostics if d.kind == "shadowed"]) == 2


def _shuffling_scandir(real, mode):
    class Listing:
        def __init__(self, entries):
            self._entries = entries

        def __iter__(self):
            return iter(self._entries)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def close(self):
            pass

    def fake(path="."):
        with real(path) as it:
            entries = list(it)
        if mode == "reversed":
            entries.sort(key=lambda e: e.name, reverse=True)
        else:
            random.Random(mode).shuffle(entries)
        calls.append(path)
        return Listing(entries)

    calls: list = []
    fake.calls = calls
    return fake


def _build_world(env):
    names = ["delta", "alpha", "charlie", "bravo", "echo", "a-b", "a_b", "zz", "m1", "m10", "m2"]
    for i, name in enumerate(names):
        env.write_skill(env.ws_skills, name, f"summary: ws {name}\ncommand: c{i}")
    for name in ["alpha", "foxtrot", "echo", "golf"]:
        env.write_skill(env.user_skills, name, f"summary: user {name}")
    for name in ["alpha", "hotel", "golf", "bravo", "india"]:
        env.write_skill(env.bundled_skills, name, f"summary: bundled {name}")
    env.write_skill(env.ws_skills, "broken", "summary: [x")
    env.write_skill(env.ws_skills, "inel", "eligibility:\n  os: [win32]")
    (env.ws_skills / "nofile").mkdir()
    env.write_skill(env.user_skills, "dup1", "command: same")
    env.write_skill(env.bundled_skills, "dup2", "command: same")
    env.write_skill(env.bundled_skills, "extra", "summary: e\nodd_key: 1")


def _fingerprint(snap):
    return ([(s.name, s.source, s.path, s.summary, s.text) for s in snap.skills],
            snap.hash, snap.diagnostics, dict(snap.aliases), dict(snap.alias_clashes))


@pytest.mark.parametrize("mode", ["reversed", 1, 2, 3, 4])
def test_listing_order_does_not_change_the_snapshot(env, monkeypatch, mode):
    _build_world(env)
    baseline = _fingerprint(env.snapshot())
    fake = _shuffling_scandir(lily_kernel.skills.loader.os.scandir, mode)
    monkeypatch.setattr(lily_kernel.skills.loader.os, "scandir", fake)
    shuffled = _fingerprint(env.snapshot())
    monkeypatch.undo()
    assert fake.calls, "the loader did not list the roots through os.scandir"
    assert shuffled == baseline
    names = [n for n, *_ in baseline[0]]
    assert names == sorted(names)


def test_same_files_give_the_same_hash_and_different_content_a_different_one(env):
    env.write_skill(env.ws_skills, "one", "summary: a")
    h1 = env.snapshot().hash
    assert env.snapshot().hash == h1
    env.write_skill(env.ws_skills, "one", "summary: b")
    h2 = env.snapshot().hash
    assert h2 != h1
    env.write_skill(env.ws_skills, "one", "summary: a")
    assert env.snapshot().hash == h1


def test_no_fallback_when_the_winner_is_a_symlink_leading_outside_its_root(env, tmp_path):
    env.write_skill(tmp_path / "outside", "tool", "summary: outside")
    (env.ws_skills / "tool").symlink_to(tmp_path / "outside" / "tool", target_is_directory=True)
    env.write_skill(env.bundled_skills, "tool", "summary: bundled")
    snap = env.snapshot()
    assert snap.get("tool") is None
    d = env.diag(snap, "skill_error", "tool")
    assert d.source == "workspace" and "outside its root" in d.reason
    assert env.diag(snap, "shadowed", "tool").source == "bundled"
